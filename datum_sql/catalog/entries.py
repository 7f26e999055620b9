"""What the catalog knows about a table: metadata only, never data.

Entries persist as JSON: every dataclass field except the in-process ones (``persistent``,
``obj``), with the schema as base64 Arrow IPC.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

import pyarrow as pa

from datum_sql.redaction import protect, redact, reveal

#: Fields that live only in this process.
_IN_PROCESS = ("persistent", "obj")

E = TypeVar("E", bound="_Entry")


def schema_to_text(schema: pa.Schema | None) -> str | None:
    if schema is None:
        return None
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_text(text: str | None) -> pa.Schema | None:
    if text is None:
        return None
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


class _Entry:
    """JSON round trip, display and a secret-free repr shared by every entry kind."""

    kind: ClassVar[str]
    name: str

    def __post_init__(self) -> None:
        # Secret option values are held wrapped: vars(entry) and reprs never show them.
        options = getattr(self, "options", None)
        if options is not None:
            self.options = protect(options)

    def to_json(self) -> dict[str, Any]:
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _IN_PROCESS}  # type: ignore[arg-type]
        doc["schema"] = schema_to_text(doc.get("schema"))
        if "options" in doc:
            doc["options"] = reveal(doc["options"])  # the catalog file is owner-only
        return doc

    @classmethod
    def from_json(cls: type[E], doc: dict[str, Any]) -> E:
        known = {f.name for f in fields(cls)} - set(_IN_PROCESS)  # type: ignore[arg-type]
        values = {k: v for k, v in doc.items() if k in known}
        values["schema"] = schema_from_text(doc.get("schema"))
        if "include" in values:
            values["include"] = [tuple(x) for x in values["include"]]
        return cls(**values)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        for key in ("connector", "event_time", "query"):
            if hasattr(self, key):
                out[key] = getattr(self, key) or ""
        schema = getattr(self, "schema", None)
        out["columns"] = ", ".join(f"{f.name} {f.type}" for f in schema) if schema else ""
        if hasattr(self, "options"):
            out["options"] = redact(self.options)  # type: ignore[attr-defined]
        out["persistent"] = getattr(self, "persistent", True)
        return out

    def __repr__(self) -> str:
        options = redact(getattr(self, "options", {}))
        return f"{type(self).__name__}(name={self.name!r}, connector={getattr(self, 'connector', None)!r}, options={options!r})"


@dataclass(repr=False)
class SourceEntry(_Entry):
    """A source table: where rows come from and how their event time is read."""

    name: str
    connector: str
    options: dict[str, Any] = field(default_factory=dict)
    schema: pa.Schema | None = None
    event_time: str | None = None
    #: Bounded out-of-orderness in microseconds (the ``WATERMARK ... - INTERVAL``).
    watermark_delay_us: int | None = None
    format: str | None = None
    encode: str | None = None
    #: Connector metadata columns asked for with ``INCLUDE`` (kind, column name).
    include: list[tuple[str, str]] = field(default_factory=list)
    #: The late output named by the source (a sink name), if any.
    late_output: str | None = None
    #: True when the source ends by itself (a file, a table): it can be a lookup table.
    bounded: bool = False
    #: False for Python-registered in-memory data, which cannot outlive the process.
    persistent: bool = True
    obj: Any = field(default=None, compare=False)

    kind: ClassVar[str] = "source"


@dataclass(repr=False)
class SinkEntry(_Entry):
    """A sink table: where a query's rows go."""

    name: str
    connector: str
    options: dict[str, Any] = field(default_factory=dict)
    #: Declared columns, when the DDL lists them.
    schema: pa.Schema | None = None
    format: str | None = None
    encode: str | None = None
    #: ``CREATE SINK ... AS SELECT``: the query that feeds it.
    query: str | None = None
    persistent: bool = True
    obj: Any = field(default=None, compare=False)

    kind: ClassVar[str] = "sink"


@dataclass(repr=False)
class ViewEntry(_Entry):
    """A view: a named query that later queries read as a stream (by running it). A
    materialized view's current result is also maintained by the context, for ``ctx.sql``;
    a plain one (``CREATE VIEW``) runs only inside the queries that read it.

    Persistent (restarted from its checkpoints by the next Context on the same state_dir)
    unless it reads a table that is not: Python-registered data dies with its process.
    """

    name: str
    query: str
    schema: pa.Schema | None = None
    #: Every table the view depends on: the views it reads (nested ones too) and their
    #: sources; none of them can be dropped or replaced while the view exists.
    reads: list[str] = field(default_factory=list)
    #: The state limit the view was created with (its restarts keep it).
    state_limit_rows: int | None = None
    persistent: bool = True
    #: False for ``CREATE VIEW``: no query maintains it.
    materialized: bool = True

    kind: ClassVar[str] = "materialized view"


Entry = SourceEntry | SinkEntry | ViewEntry
