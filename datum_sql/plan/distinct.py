"""Aggregate calls with DISTINCT, alike in ``ctx.sql`` and streaming.

Every one-argument aggregate takes ``f(DISTINCT x)``: it aggregates the group's distinct
values. :func:`refuse` turns down, in both paths with one message, the calls where DISTINCT
means nothing or more than one value set would have to be kept: ``first_value`` /
``last_value`` (the first row's value is one of the distinct values, so DISTINCT changes
nothing), ``grouping`` (it takes GROUP BY keys), aggregates of two arguments and
``f(DISTINCT a, b)``, Python aggregate functions, and ``array_agg``/``string_agg`` of
DISTINCT values ordered by anything but those values (what should order a value that
stands for several rows?).

``array_agg(DISTINCT x)`` and ``string_agg(DISTINCT x, sep)`` without ORDER BY list the
values in ascending order, NULL last, in both paths (:func:`datum_sql.plan.gathered.
distinct_lists` sorts them for ``ctx.sql``).
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.sql.dialect import TWO_ARGUMENT_AGGREGATES

_TWO_ARGUMENTS = tuple(TWO_ARGUMENT_AGGREGATES.values())
_LISTS = (exp.ArrayAgg, exp.GroupConcat)
_NAMES: dict[type[exp.Expr], str] = {
    exp.GroupConcat: "string_agg", exp.First: "first_value", exp.Last: "last_value"
}  # fmt: skip
_ROW = {"first_value": "first", "last_value": "last"}
#: The aggregates that take no DISTINCT, by name: why (docs/functions-list.md says it).
NO_DISTINCT = {
    **{
        name: f"the value of the {row} row is one of the distinct values, so DISTINCT changes nothing"
        for name, row in _ROW.items()
    },
    "grouping": "grouping() takes GROUP BY keys",
    **{
        cls.sql_name().lower(): "DISTINCT goes with aggregates of one argument"
        for cls in _TWO_ARGUMENTS
    },
}


def _name_of(call: exp.Expr) -> str:
    """The SQL name of an aggregate call, as the user writes it."""
    if isinstance(call, exp.AnonymousAggFunc | exp.Anonymous):
        return call.name.lower()
    named = _NAMES.get(type(call))
    if named is not None:
        return named
    return call.sql_name().lower() if isinstance(call, exp.Func) else type(call).__name__.lower()


def refuse(ast: exp.Expr) -> None:
    """PlanError for the first aggregate call of ``ast`` that takes no DISTINCT (see the
    module docstring)."""
    for distinct in ast.find_all(exp.Distinct):
        parent = distinct.parent
        ordered = isinstance(parent, exp.Order)
        call = parent.parent if isinstance(parent, exp.Order) else parent
        if call is None or isinstance(call, exp.Select):
            continue  # SELECT DISTINCT
        why = _refusal(call, distinct, parent if ordered else None)
        if why is not None:
            raise PlanError(why)
    for call in ast.find_all(exp.AnonymousAggFunc):
        if any(isinstance(a, exp.Order) for a in call.expressions):
            raise PlanError(_python_refusal(call.name.lower()))


def _python_refusal(name: str) -> str:
    return (
        f"{name}(DISTINCT ...) and {name}(... ORDER BY ...) are not supported for Python "
        f"aggregate functions; deduplicate in a subquery, or write {name}(args)"
    )


def _refusal(call: exp.Expr, distinct: exp.Distinct, order: exp.Expr | None) -> str | None:
    name = _name_of(call)
    if isinstance(call, exp.AnonymousAggFunc):
        return _python_refusal(name)
    why = NO_DISTINCT.get(name)
    if isinstance(call, _TWO_ARGUMENTS):
        return (
            f"{name}(DISTINCT y, x) is not supported: {why}; for the distinct (y, x) pairs, "
            f"aggregate a derived table, as in SELECT k, {name}(y, x) FROM (SELECT DISTINCT "
            "k, y, x FROM t) GROUP BY k"
        )
    if len(distinct.expressions) != 1:
        return (
            f"{name}(DISTINCT a, b, ...) is not supported: DISTINCT aggregates take one "
            f"argument, as in {name}(DISTINCT a)"
        )
    if why is not None:
        shape = "grouping(k)" if name == "grouping" else f"{name}(col)"
        return f"{name}(DISTINCT ...) is not supported: {why}; write {shape}"
    if order is not None and isinstance(call, _LISTS):
        value = distinct.expressions[0]
        if any(key.this != value for key in order.expressions):
            shape = "array_agg(DISTINCT x" if name == "array_agg" else "string_agg(DISTINCT x, ','"
            return (
                f"{name}(DISTINCT ... ORDER BY ...) orders by the distinct values only (one "
                f"value stands for several rows): the ORDER BY must be the argument, as in "
                f"{shape} ORDER BY x DESC)"
            )
    return None
