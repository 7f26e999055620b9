"""What the catalog knows about a table: metadata only, never data."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from datum_sql.types import redact


def schema_to_text(schema: pa.Schema | None) -> str | None:
    if schema is None:
        return None
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_text(text: str | None) -> pa.Schema | None:
    if text is None:
        return None
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@dataclass
class SourceEntry:
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
    obj: Any = field(default=None, repr=False, compare=False)

    kind = "source"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "connector": self.connector,
            "options": self.options,
            "schema": schema_to_text(self.schema),
            "event_time": self.event_time,
            "watermark_delay_us": self.watermark_delay_us,
            "format": self.format,
            "encode": self.encode,
            "include": [list(x) for x in self.include],
            "late_output": self.late_output,
            "bounded": self.bounded,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SourceEntry:
        return cls(
            name=doc["name"],
            connector=doc["connector"],
            options=doc.get("options", {}),
            schema=schema_from_text(doc.get("schema")),
            event_time=doc.get("event_time"),
            watermark_delay_us=doc.get("watermark_delay_us"),
            format=doc.get("format"),
            encode=doc.get("encode"),
            include=[tuple(x) for x in doc.get("include", [])],  # type: ignore[misc]
            late_output=doc.get("late_output"),
            bounded=bool(doc.get("bounded", False)),
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "connector": self.connector,
            "columns": ", ".join(f"{f.name} {f.type}" for f in self.schema) if self.schema else "",
            "event_time": self.event_time or "",
            "options": redact(self.options),
            "persistent": self.persistent,
        }

    def __repr__(self) -> str:
        return f"SourceEntry(name={self.name!r}, connector={self.connector!r}, options={redact(self.options)!r})"


@dataclass
class SinkEntry:
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
    obj: Any = field(default=None, repr=False, compare=False)

    kind = "sink"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "connector": self.connector,
            "options": self.options,
            "schema": schema_to_text(self.schema),
            "format": self.format,
            "encode": self.encode,
            "query": self.query,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SinkEntry:
        return cls(
            name=doc["name"],
            connector=doc["connector"],
            options=doc.get("options", {}),
            schema=schema_from_text(doc.get("schema")),
            format=doc.get("format"),
            encode=doc.get("encode"),
            query=doc.get("query"),
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "connector": self.connector,
            "columns": ", ".join(f"{f.name} {f.type}" for f in self.schema) if self.schema else "",
            "options": redact(self.options),
            "persistent": self.persistent,
        }

    def __repr__(self) -> str:
        return f"SinkEntry(name={self.name!r}, connector={self.connector!r}, options={redact(self.options)!r})"


@dataclass
class ViewEntry:
    """A materialized view: a query whose current result the context maintains."""

    name: str
    query: str
    schema: pa.Schema | None = None
    persistent: bool = True

    kind = "materialized view"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "query": self.query, "schema": schema_to_text(self.schema)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ViewEntry:
        return cls(doc["name"], doc["query"], schema_from_text(doc.get("schema")))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "query": self.query}


Entry = SourceEntry | SinkEntry | ViewEntry
