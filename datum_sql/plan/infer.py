"""Output schemas of DataFusion SQL, found by planning it over empty inputs (no data moves).

Planning runs DataFusion's analyzer and optimizer too, so type errors (a CASE whose branches
have no common type, a function given the wrong type) surface here, at planning, instead of
on the first batch, with DataFusion's message made short (:func:`datafusion_message`).
"""

from __future__ import annotations

import functools

import datafusion
import pyarrow as pa

from datum_sql.engine.datafusion_errors import datafusion_message
from datum_sql.engine.udfs import session
from datum_sql.errors import PlanError
from datum_sql.plan.engines import DataFusion
from datum_sql.sql.dialect import Datum

_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}

#: Plan nodes that need all of their input: a stateless Calc must contain none of them.
_STATEFUL_NODES = {"Aggregate", "Window", "WindowExpr", "Distinct", "Sort", "Limit"}


def normalize_type(t: pa.DataType) -> pa.DataType:
    """The one Arrow type datum-sql uses in flight for what DataFusion may return."""
    return _VIEW_TYPES.get(t, t)


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    # A column of NULL type (``SELECT NULL``, ``coalesce()`` of nothing) is nullable,
    # whatever DataFusion says of it.
    return pa.schema(
        [
            pa.field(f.name, normalize_type(f.type), f.nullable or pa.types.is_null(f.type))
            for f in schema
        ]
    )


@functools.cache
def aggregate_function_names() -> frozenset[str]:
    """The names of DataFusion's aggregate functions."""
    config = datafusion.SessionConfig().with_information_schema(True)
    rows = datafusion.SessionContext(config).sql(
        "SELECT DISTINCT routine_name FROM information_schema.routines "
        "WHERE function_type = 'AGGREGATE'"
    )
    return frozenset(rows.to_arrow_table().column(0).to_pylist())


@functools.cache
def prepare_planner() -> None:
    """The planner's set-up that is per process, not per query, done once: DataFusion's
    aggregate names, sqlglot's generator tables for the dialects every query is written in
    (a few ms each), and DataFusion's first plan over an empty table."""
    aggregate_function_names()
    for dialect in (Datum, DataFusion):
        dialect().generator()
    probe = planning_session({"t": pa.schema([("a", pa.int64())])})
    plan_error(probe, "SELECT a FROM t WHERE a = 1")


def planning_session(inputs: dict[str, pa.Schema]) -> datafusion.SessionContext:
    """A DataFusion session holding an empty table per input (names are used as given)."""
    ctx = session()
    for name, schema in inputs.items():
        ctx.register_record_batches(name, [[pa.RecordBatch.from_pylist([], schema=schema)]])
    return ctx


def plan_error(ctx: datafusion.SessionContext, sql: str) -> str | None:
    """DataFusion's (cleaned) objection to ``sql``, or None when it plans."""
    try:
        ctx.sql(sql).optimized_logical_plan()
    except Exception as exc:  # DataFusion raises plain Exception subclasses
        return datafusion_message(exc)
    return None


def infer_schema(
    sql: str, inputs: dict[str, pa.Schema], *, context: str = "", stateless: bool = False
) -> pa.Schema:
    """The schema DataFusion gives ``sql`` over tables ``inputs``; PlanError if it can't plan
    it. ``stateless``: also refuse SQL that would aggregate, sort or deduplicate each batch."""
    ctx = planning_session(inputs)
    try:
        df = ctx.sql(sql)
        df.optimized_logical_plan()
        out = df.schema()
    except Exception as exc:  # DataFusion raises plain Exception subclasses
        where = f" {context}" if context else " the expression"
        raise PlanError(f"cannot evaluate{where}: {datafusion_message(exc)}") from None
    if stateless:
        found = _stateful_nodes(df.logical_plan())
        if found:
            raise PlanError(
                f"{context or sql}: needs all of its input at once ({found[0].lower()}); "
                "a streaming query cannot evaluate it per batch"
            )
    names = out.names
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PlanError(f"the query returns column {dupes[0]!r} more than once; give each an alias")
    return normalize_schema(out)


def _stateful_nodes(plan: datafusion.LogicalPlan) -> list[str]:
    found = []
    stack = [plan]
    while stack:
        node = stack.pop()
        kind = type(node.to_variant()).__name__
        if kind in _STATEFUL_NODES:
            found.append(kind)
        stack.extend(node.inputs())
    return found
