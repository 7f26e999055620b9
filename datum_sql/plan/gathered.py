"""``ctx.sql``'s aggregates rewritten so that both paths give the same answer: most are
computed by the streaming engine's own code over the values DataFusion gathers
(``array_agg``).

**Percentiles.** Every spelling of the exact continuous percentile (``percentile_cont``, ``median``,
``approx_percentile``, ``approx_percentile_cont``, ``quantile_cont``, ``approx_median``, in
the call and the ``WITHIN GROUP`` forms) becomes
``__datum_percentile_cont(array_sort(CAST(array_agg(x) AS DOUBLE[])), q)``: DataFusion
gathers and sorts the values (with the call's DISTINCT, FILTER and OVER) and
:mod:`datum_sql.engine.percentile` interpolates them with the streaming operator's code,
where DataFusion's own ``percentile_cont`` rounds its interpolation. The result is float64
for every input type (PostgreSQL's ``double precision``), in both paths.

**bit_xor(DISTINCT x)** becomes the xor of ``array_agg(DISTINCT x)`` by the function of
``x``'s integer type (:mod:`datum_sql.engine.xor_distinct`): DataFusion's own fails beside
another aggregate.

**array_agg(DISTINCT x [ORDER BY x ...])** becomes ``array_sort(array_agg(DISTINCT x), dir,
nulls)``, and **string_agg(DISTINCT x, sep [ORDER BY x ...])** ``array_to_string`` of the
sorted non-NULL values: in value order, ascending and NULL last without ORDER BY, as the
streaming operator lists them. DataFusion orders such a call itself only when it is the
query's one DISTINCT aggregate: beside another DISTINCT one of the same column, it groups
by that column first and each list comes out in one order, whatever its ORDER BY.

**stddev_samp/stddev_pop(DISTINCT x)** become ``sqrt(var_samp/var_pop(DISTINCT x))``, as
the streaming operator computes them: DataFusion has no standard deviation of DISTINCT
values beside another aggregate.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from sqlglot import exp

from datum_sql.engine import xor_distinct as xor
from datum_sql.engine.percentile import UDF_NAME, check_q
from datum_sql.errors import PlanError
from datum_sql.plan import typecheck
from datum_sql.plan.engines import DataFusion
from datum_sql.plan.infer import planning_session


def percentiles(ast: exp.Expr) -> None:
    """Replace, in place, each percentile call of ``ast`` by the interpolation of its values."""
    for node in list(ast.find_all(exp.ApproxQuantile, exp.Median, exp.WithinGroup)):
        found = _call(node)
        if found is None:
            continue
        arg, q = found
        gathered = exp.ArrayAgg(this=arg.copy())
        replace_gathered(node, gathered, _arguments(q), UDF_NAME)


def replace_gathered(
    node: exp.Expr, gathered: exp.Expr, arguments: Callable[[exp.Expr], list[exp.Expr]], name: str
) -> None:
    """Put ``gathered`` (an ``array_agg``) in ``node``'s place and call ``name`` with the
    ``arguments`` of the lists: a FILTER or OVER of the call wraps the gathering."""
    node.replace(gathered)
    top: exp.Expr = gathered
    while isinstance(top.parent, exp.Filter | exp.Window):
        top = top.parent
    top.replace(exp.Anonymous(this=name, expressions=arguments(top.copy())))


def _arguments(q: float) -> Callable[[exp.Expr], list[exp.Expr]]:
    """The interpolation's arguments: the lists as float64, sorted by DataFusion (faster
    than numpy's sort by group and value), and q. The lists are cast, not the values:
    DataFusion names ``array_agg(CAST(x AS DOUBLE))`` as it names ``array_agg(x)``, and
    refuses the two in one SELECT as two columns of one name."""

    def arguments(lists: exp.Expr) -> list[exp.Expr]:
        floats = exp.Cast(this=lists, to=exp.DataType.build("ARRAY<DOUBLE>"))
        return [exp.Anonymous(this="array_sort", expressions=[floats]), exp.Literal.number(q)]

    return arguments


def _call(node: exp.Expr) -> tuple[exp.Expr, float] | None:
    """(the argument, q) of a percentile call; None for another WITHIN GROUP call."""
    if isinstance(node, exp.Median):
        return node.this, 0.5
    if isinstance(node, exp.ApproxQuantile):
        q = node.args.get("quantile")
        if not isinstance(q, exp.Literal) or q.is_string:
            raise PlanError("approx_percentile(col, q) needs a literal q between 0 and 1")
        return node.this, check_q(q.this)
    if not isinstance(node, exp.WithinGroup) or not isinstance(node.this, exp.PercentileCont):
        return None
    return within_group(node)


def within_group(node: exp.WithinGroup) -> tuple[exp.Expr, float]:
    """(the column, q) of ``percentile_cont(q) WITHIN GROUP (ORDER BY col)``, refused
    alike in both paths when it is not that."""
    inner, order = node.this, node.expression
    keys = order.expressions if isinstance(order, exp.Order) else []
    if len(keys) != 1 or keys[0].args.get("desc"):
        raise PlanError(
            "percentile_cont(q) WITHIN GROUP (...) takes one ascending ORDER BY column, as in "
            "percentile_cont(q) WITHIN GROUP (ORDER BY col); for a descending order use "
            "percentile_cont(1 - q)"
        )
    q = inner.this
    if not isinstance(q, exp.Literal) or q.is_string:
        raise PlanError("percentile_cont(q) needs a literal q between 0 and 1")
    return keys[0].this, check_q(q.this)


def xor_distinct(ast: exp.Expr, tables: dict[str, pa.Schema]) -> None:
    """``bit_xor(DISTINCT x)`` as the xor of ``array_agg(DISTINCT x)`` (see
    :mod:`datum_sql.engine.xor_distinct`), by the function of ``x``'s integer type."""
    calls = [n for n in ast.find_all(exp.BitwiseXorAgg) if isinstance(n.this, exp.Distinct)]
    if not calls:
        return
    session = planning_session({f'"{name}"': schema for name, schema in tables.items()})
    for node in calls:
        select = node.find_ancestor(exp.Select)
        values = node.this.expressions
        found = typecheck.types_of(session, select, values[:1]) if select else None
        if found is None:
            raise PlanError(
                f"bit_xor(DISTINCT {values[0].sql(dialect=DataFusion)}): its argument cannot "
                "be typed in this SELECT; compute it in a derived table"
            )
        name = xor.name_for(found[0]) if len(values) == 1 else None
        if name is None:
            raise PlanError(f"bit_xor(DISTINCT ...) takes one integer argument, got {found[0]}")
        gathered = exp.ArrayAgg(this=node.this.copy())
        replace_gathered(node, gathered, lambda lists: [lists], name)


def distinct_lists(ast: exp.Expr) -> None:
    """Replace, in place, each ``array_agg``/``string_agg`` of DISTINCT values of ``ast`` by
    the sort of the gathered values (see the module docstring)."""
    for node in list(ast.find_all(exp.ArrayAgg, exp.GroupConcat)):
        order = node.this if isinstance(node.this, exp.Order) else None
        distinct = order.this if order is not None else node.this
        if not isinstance(distinct, exp.Distinct):
            continue
        keys = order.expressions if order is not None else []
        desc = bool(keys and keys[0].args.get("desc"))
        nulls_first = keys[0].args.get("nulls_first") if keys else None
        nulls = "NULLS FIRST" if (desc if nulls_first is None else nulls_first) else "NULLS LAST"
        how: list[exp.Expr] = [
            exp.Literal.string("DESC" if desc else "ASC"),
            exp.Literal.string(nulls),
        ]
        value = distinct.expressions[0]
        gathered = exp.ArrayAgg(this=exp.Distinct(expressions=[value.copy()]))
        if isinstance(node, exp.ArrayAgg):
            replace_gathered(node, gathered, _sorted(how), "array_sort")
            continue
        sep = node.args["separator"]  # (without one, the type check refused the call)
        present = exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null()))
        if isinstance(node.parent, exp.Filter):  # no NULL: a group of NULLs is NULL
            where = node.parent.expression
            cond = where.this if isinstance(where, exp.Where) else where
            node.parent.set("expression", exp.Where(this=exp.and_(cond.copy(), present)))
        else:
            wrapped = exp.Filter(this=node.copy(), expression=exp.Where(this=present))
            node.replace(wrapped)
            node = wrapped.this
        replace_gathered(node, gathered, _joined(how, sep), "array_to_string")


def _sorted(how: list[exp.Expr]) -> Callable[[exp.Expr], list[exp.Expr]]:
    """``array_sort``'s arguments: the lists and ``how`` (direction, NULL placement)."""
    return lambda lists: [lists, *(h.copy() for h in how)]


def _joined(how: list[exp.Expr], sep: exp.Expr) -> Callable[[exp.Expr], list[exp.Expr]]:
    """``array_to_string``'s arguments: the sorted lists and the separator."""
    return lambda lists: [
        exp.Anonymous(this="array_sort", expressions=_sorted(how)(lists)),
        sep.copy(),
    ]


def distinct_spreads(ast: exp.Expr) -> None:
    """Replace, in place, each standard deviation of DISTINCT values of ``ast`` by the
    square root of the variance (see the module docstring)."""
    for node in list(ast.find_all(exp.Stddev, exp.StddevSamp, exp.StddevPop)):
        if isinstance(node.this, exp.Distinct):
            variance = exp.VariancePop if isinstance(node, exp.StddevPop) else exp.Variance
            replace_gathered(node, variance(this=node.this.copy()), lambda v: [v], "sqrt")
