"""Aggregates used as window functions, ``f(x) OVER (...)``: those the streaming OVER
operator does not compute are refused alike in ``ctx.sql`` and streaming, with one message
naming the function and why (run by the type check both paths share).

The operator computes every frame aggregate of a run of rows at once from prefix sums
(count, sum, avg, the variances and standard deviations from sums of shifted values and
their squares, and bool_and/bool_or as counts of true values) and sparse tables (min,
max), or by picking a row (first_value, last_value, nth_value). An aggregate that fits
neither is refused: its frame would be gathered and reduced once per row. DataFusion
computes some of them (array_agg, corr, median, ...) and cannot compute others over a
sliding frame (string_agg, bool_and, bit_or: no retraction), so without this refusal the
same SQL would run in one path and not in the other, or in one frame and not in another.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.sql.dialect import Datum

_COMOMENTS = (
    "the OVER operator keeps the moments of one column, not the co-moments of two; compute "
    "it from sums over the same window of the rows where both are not NULL, or aggregate per "
    "window with GROUP BY"
)
_LIST = (
    "a list per row copies its frame into every row (quadratic in an unbounded frame); "
    "collect lists with GROUP BY (per key or window), or read the previous rows with lag()"
)
_PERCENTILE = (
    "a percentile of a frame needs the frame's values sorted again for every row; "
    "aggregate per window with GROUP BY (as in percentile_cont(x, 0.5) per tumble window)"
)
_BITS = (
    "the OVER operator computes frames from sums and extremes, from which no bitwise "
    "aggregate follows; aggregate per window with GROUP BY"
)
#: sqlglot class name of an aggregate -> (its name in the message, why it is refused).
REFUSED: dict[str, tuple[str, str]] = {
    "Corr": ("corr", _COMOMENTS),
    "CovarSamp": ("covar_samp", _COMOMENTS),
    "CovarPop": ("covar_pop", _COMOMENTS),
    **{f"Regr{s.capitalize()}": (f"regr_{s}", _COMOMENTS)
       for s in ("slope", "intercept", "count", "r2", "avgx", "avgy", "sxx", "syy", "sxy")},
    "ArrayAgg": ("array_agg", _LIST),
    "GroupConcat": ("string_agg", _LIST),
    "ApproxQuantile": ("percentile_cont", _PERCENTILE),
    "Median": ("median", _PERCENTILE),
    "WithinGroup": ("percentile_cont", _PERCENTILE),
    "BitwiseAndAgg": ("bit_and", _BITS),
    "BitwiseOrAgg": ("bit_or", _BITS),
    "BitwiseXorAgg": ("bit_xor", _BITS),
    "Grouping": ("grouping", "grouping() takes GROUP BY keys, which a window has none of"),
}  # fmt: skip
#: Why a Python aggregate is refused as a window function.
PYTHON_WHY = (
    "a Python aggregate function over a frame would accumulate every frame again for each "
    "row; aggregate per window with GROUP BY"
)
#: Why FILTER is refused on a window function.
FILTER_WHY = (
    "the OVER operator aggregates every row of the frame; put the condition in the "
    "argument, as in sum(CASE WHEN v > 0 THEN v END) OVER w"
)
#: Why DISTINCT is refused inside a window function.
DISTINCT_WHY = (
    "DISTINCT over a frame needs the frame's set of values for every row; count the "
    "distinct values per window with GROUP BY"
)


def message(name: str, why: str) -> str:
    return f"{name}() OVER (...) is not supported: {why}"


def refuse(ast: exp.Expr) -> None:
    """PlanError for the first window function of ``ast`` that is a :data:`REFUSED`
    aggregate, a Python aggregate, an aggregate with FILTER or of DISTINCT values."""
    for window in ast.find_all(exp.Window):
        fn = window.this
        if isinstance(fn, exp.Filter):
            name = fn.this.sql(dialect=Datum, normalize_functions="lower").split("(")[0]
            raise PlanError(
                f"{name}() FILTER (WHERE ...) OVER (...) is not supported: {FILTER_WHY}"
            )
        refused = REFUSED.get(type(fn).__name__)
        if refused is not None:
            raise PlanError(message(*refused))
        if isinstance(fn, exp.AnonymousAggFunc):
            raise PlanError(message(fn.name.lower(), PYTHON_WHY))
        if isinstance(fn, exp.AggFunc) and isinstance(fn.this, exp.Distinct):
            name = fn.sql(dialect=Datum, normalize_functions="lower").split("(")[0]
            raise PlanError(f"{name}(DISTINCT ...) OVER (...) is not supported: {DISTINCT_WHY}")


def batch_forms(ast: exp.Expr) -> None:
    """Rewrite, in place, the window functions DataFusion computes otherwise than a
    streaming query (``ctx.sql``): ``bool_and(b) OVER w`` as ``min(b) OVER w`` and
    ``bool_or`` as ``max`` (false below true, NULLs skipped: the same values), since
    DataFusion cannot retract a row from bool_and over a sliding frame; a variance over a
    frame at least 0 and a standard deviation as the square root of that variance, since
    DataFusion's retractions leave a frame of equal values a variance of -1e-15 (and its
    standard deviation NaN)."""
    for window in list(ast.find_all(exp.Window)):
        fn = window.this
        if isinstance(fn, exp.LogicalAnd | exp.LogicalOr):
            extreme = exp.Min if isinstance(fn, exp.LogicalAnd) else exp.Max
            fn.replace(extreme(this=fn.this))
        elif isinstance(fn, exp.Variance | exp.VariancePop):
            window.replace(_at_least_zero(window.copy()))
        elif isinstance(fn, exp.Stddev | exp.StddevSamp | exp.StddevPop):
            variance = exp.VariancePop if isinstance(fn, exp.StddevPop) else exp.Variance
            fn.replace(variance(this=fn.this))
            window.replace(exp.Anonymous(this="sqrt", expressions=[_at_least_zero(window.copy())]))


def _at_least_zero(value: exp.Expr) -> exp.Expr:
    """``value``, or 0 where it is below 0 (NULL stays NULL)."""
    below = exp.LT(this=value.copy(), expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=below, true=exp.Literal.number(0.0))], default=value)
