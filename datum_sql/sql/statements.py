"""Checked statements: what the binder hands to the context and the planner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.catalog import SinkEntry, SourceEntry, ViewEntry


@dataclass(frozen=True)
class WindowSpec:
    """A window table function in FROM: tumble(t, ts, size), hop(...), cumulate(...),
    session(...)."""

    kind: str  # "tumble" | "hop" | "cumulate" | "session"
    time_column: str
    size_us: int  # tumble/hop/cumulate: window length; session: the gap
    slide_us: int | None = None  # hop: the slide; cumulate: the step
    #: Windows start at multiples of the slide (tumble, cumulate: the size) plus this,
    #: normalized into [0, that period).
    offset_us: int = 0


@dataclass
class Relation:
    """One item of a FROM clause after binding."""

    alias: str
    kind: str  # "source" | "view" | "sink" | "subquery"
    columns: list[str]
    types: dict[str, pa.DataType] = field(default_factory=dict)
    entry: SourceEntry | SinkEntry | ViewEntry | None = None
    window: WindowSpec | None = None

    def __deepcopy__(self, memo: dict) -> Relation:
        # AST copies share the binding: it points at catalog entries, which may hold
        # Python objects (registered Arrow data) that must never be copied.
        return self


@dataclass
class Query:
    """A bound query: qualified AST plus streaming clauses, optionally feeding a sink."""

    ast: exp.Query
    sql: str
    sink: SinkEntry | None = None
    emit_on_window_close: bool = False
    allowed_lateness_us: int = 0
    late_output: str | None = None

    @property
    def tables(self) -> list[str]:
        """Catalog names this query reads."""
        names: list[str] = []
        for node in self.ast.find_all(exp.Table):
            rel = node.meta.get("relation")
            if rel is not None and rel.entry is not None and rel.entry.name not in names:
                names.append(rel.entry.name)
        return names


@dataclass
class CreateSource:
    entry: SourceEntry
    if_not_exists: bool = False
    #: ``CREATE OR REPLACE``: replace an existing table of the same kind.
    or_replace: bool = False


@dataclass
class CreateSink:
    entry: SinkEntry
    if_not_exists: bool = False
    query: Query | None = None
    #: ``CREATE OR REPLACE``: replace an existing table of the same kind.
    or_replace: bool = False


@dataclass
class CreateView:
    entry: ViewEntry
    query: Query
    if_not_exists: bool = False
    #: ``CREATE OR REPLACE``: replace an existing table of the same kind.
    or_replace: bool = False


@dataclass
class Drop:
    kind: str  # "source" | "sink" | "materialized view"
    name: str
    if_exists: bool = False


@dataclass
class Show:
    what: str  # "sources" | "sinks" | "materialized views" | "tables"


@dataclass
class SetOption:
    name: str
    value: Any


@dataclass
class Explain:
    statement: Query


Statement = CreateSource | CreateSink | CreateView | Drop | Show | SetOption | Explain | Query
