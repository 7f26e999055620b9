"""``EMIT ON WINDOW CLOSE`` on a query without windows: its rows in event-time order, each
emitted once the watermark has passed its event time.

The query is planned with one more output column, :data:`TIME`, carrying each row's event
time up from its source (through derived tables); an :class:`~logical.EventTimeSort` holds
the rows until the watermark passes that time, and a projection drops the column again.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa
from sqlglot import exp

from datum_sql.catalog import SourceEntry
from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.plan.engines import DataFusion
from datum_sql.sql import statements as st

TIME = "__eowc_time"
WHAT = (
    "EMIT ON WINDOW CLOSE on a query without a windowed aggregate emits each row once the "
    "watermark passes its event time"
)


def with_event_time(node: exp.Expr, marker_connectors: Collection[str]) -> exp.Expr:
    """A copy of the query with its rows' event time as one more output column, TIME;
    a PlanError when no watermark would ever pass it (``marker_connectors``: the sources
    whose data may carry watermark markers)."""
    query = node.copy()
    _add_time(query, marker_connectors)
    return query


def sort(input: lp.PlanNode, allowed_lateness_us: int) -> lp.PlanNode:
    """``input`` (with a TIME column) sorted by it, watermark by watermark, then without it."""
    held = lp.EventTimeSort(input, TIME, allowed_lateness_us)
    names = [n for n in input.schema.names if n != TIME]
    sql = exp.select(*(exp.column(n, quoted=True) for n in names)).from_("input")
    schema = pa.schema([f for f in input.schema if f.name != TIME])
    return lp.Calc(held, sql.sql(dialect=DataFusion), schema, tuple((n, n) for n in names))


def _add_time(node: exp.Expr, markers: Collection[str]) -> None:
    if isinstance(node, exp.Subquery):
        return _add_time(node.this, markers)
    if not isinstance(node, exp.Select) or node.args.get("joins"):
        raise PlanError(
            f"{WHAT}; it reads one source (or a derived table over one), not a join or a set "
            "operation: use a windowed aggregate, or drop EMIT ON WINDOW CLOSE"
        )
    from_ = node.args.get("from_")
    rel: st.Relation | None = from_.this.meta.get("relation") if from_ is not None else None
    if from_ is not None and rel is not None and rel.kind == "subquery":
        _add_time(from_.this.this, markers)
        time = exp.column(TIME, rel.alias, quoted=True)
    elif rel is not None and isinstance(rel.entry, SourceEntry):
        entry = rel.entry
        declare = (
            "declare one with WATERMARK FOR <column> AS <column> - INTERVAL '5 seconds' in "
            "CREATE SOURCE, or event_time= and watermark= in Python"
        )
        if entry.event_time is None:
            raise PlanError(f"{WHAT}: source {entry.name!r} has no event time; {declare}")
        if (
            entry.watermark_delay_us is None
            and not entry.bounded
            and entry.connector not in markers
        ):
            raise PlanError(
                f"{WHAT}: source {entry.name!r} never ends and has no watermark policy for "
                f"{entry.event_time!r}, so no row would ever be emitted; {declare}"
            )
        time = exp.column(entry.event_time, rel.alias, quoted=True)
    else:
        raise PlanError(f"{WHAT}; its FROM must be a source with an event time")
    node.select(exp.alias_(time, TIME, quoted=True), copy=False)
    return None
