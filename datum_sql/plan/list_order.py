"""``array_agg(x)`` and ``string_agg(x, sep)`` without ORDER BY (and without DISTINCT):
refused alike in ``ctx.sql`` and streaming, with one message asking for ORDER BY.

Such a list would follow the order the group's rows come in, which neither path defines
so that the other gives it too: DataFusion aggregates the partitions of a table in
parallel, so ``ctx.sql`` lists a group in another order from one run to the next over the
same table; with one partition it follows the table's order, but over an aggregate of an
aggregate it follows the order in which the inner hash table first saw its groups, where
a streaming query's retractions and updates leave each value where its last update
arrived; session windows are computed by sorting on the event time, which a streaming
query reads out of order; a Kafka topic's partitions and a join's sides interleave as
they arrive. ``array_agg(x ORDER BY key)`` (the event time lists the rows as they
happened) and ``array_agg(DISTINCT x)`` (the distinct values, ascending) are defined in
both, so the refusal says to write one of them.

``array_agg(x) OVER (...)``, a window function, is not this: its order is the window's.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError

#: Why a list needs ORDER BY (docs/functions-list.md says it too).
WHY = (
    "the rows of a group come in no defined order (a batch query's changes from run to run, "
    "a streaming query's with batch sizes, restarts and retractions), so the list would not "
    "be repeatable"
)
#: name -> (the ordered call, the DISTINCT call) the refusal proposes.
_SHAPES = {
    "array_agg": ("array_agg(x ORDER BY col)", "array_agg(DISTINCT x)"),
    "string_agg": ("string_agg(x, ',' ORDER BY col)", "string_agg(DISTINCT x, ',')"),
}


def message(name: str) -> str:
    """Why ``name`` (``array_agg``/``string_agg``) needs ORDER BY, and what to write."""
    ordered, distinct = _SHAPES[name]
    return (
        f"{name}() needs ORDER BY: {WHY}; write {ordered} (ORDER BY the event time lists "
        f"the rows as they happened), or {distinct} for the distinct values in ascending order"
    )


def refuse(ast: exp.Expr) -> None:
    """PlanError for the first ``array_agg``/``string_agg`` aggregate call of ``ast`` with
    neither ORDER BY nor DISTINCT (see the module docstring)."""
    for call in ast.find_all(exp.ArrayAgg, exp.GroupConcat):
        if _is_window_function(call):
            continue
        if not isinstance(call.this, exp.Order | exp.Distinct):
            name = "array_agg" if isinstance(call, exp.ArrayAgg) else "string_agg"
            raise PlanError(message(name))


def _is_window_function(call: exp.Expr) -> bool:
    parent = call.parent
    while isinstance(parent, exp.Filter):
        parent = parent.parent
    return isinstance(parent, exp.Window)
