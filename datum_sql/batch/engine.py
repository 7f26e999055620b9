"""A batch query the streaming engine runs over bounded copies of its tables.

For what DataFusion cannot run (a Python table function called per row, an ASOF JOIN, a
correlated NOT IN): the engine's own operators run it, so ``ctx.sql`` speaks the one
dialect of streaming queries. Each table keeps its event-time column, its watermark
moves only at the end so no row is late, and the query's final result is the answer (see
plan/lateral.py). A top-level ORDER BY / LIMIT sorts and cuts that result.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from sqlglot import exp

from datum_sql.batch.scan import register_table
from datum_sql.catalog import Catalog
from datum_sql.engine.datafusion_errors import datafusion_message
from datum_sql.engine.udfs import session as udf_session
from datum_sql.errors import PlanError
from datum_sql.plan.lateral import result_order
from datum_sql.sql.dialect import Datum

#: Runs streaming SQL over bounded tables (name -> (rows, event-time column or None)) on
#: an engine of its own, and returns the query's final result.
Stream = Callable[[dict[str, tuple[pa.Table, str | None]], str], pa.Table]


def run(
    node: exp.Query,
    tables: dict[str, pa.Table],
    catalog: Catalog,
    stream: Stream,
    reason: str | None = None,
) -> pa.Table:
    """``node`` over ``tables`` on the engine. A planning error is the streaming query's,
    word for word (one dialect); ``reason`` ("a table function", whose queries a streaming
    query plans differently) prefixes it."""
    body, order = result_order(node)
    inputs: dict[str, tuple[pa.Table, str | None]] = {}
    for name, table in tables.items():  # every table read (process() inputs too)
        entry = catalog.require(name)
        event_time = getattr(entry, "event_time", None)
        inputs[entry.name] = (table, event_time if event_time in table.schema.names else None)
    try:
        result = stream(inputs, body.sql(dialect=Datum))
    except PlanError as exc:
        if reason is None:
            raise
        raise PlanError(
            f"this batch query has {reason}, so it runs on the streaming engine and is "
            f"planned as a streaming query: {exc}"
        ) from None
    if order is None:
        return result
    session = udf_session()
    register_table(session, "result", result)
    try:
        return session.sql(order).to_arrow_table().cast(result.schema)
    except Exception as exc:  # DataFusion errors carry no type hierarchy
        raise PlanError(
            "the ORDER BY / LIMIT of this batch query sorts its result, by its output "
            f"columns: {datafusion_message(exc)}"
        ) from None
