"""Aggregates used as window functions, ``f(x) OVER (...)``: those the streaming OVER
operator does not compute are refused alike in ``ctx.sql`` and streaming, with one message
naming the function and why (run by the type check both paths share).

The operator computes every frame aggregate of a run of rows at once from prefix sums
(count, sum, avg, and bool_and/bool_or as counts of true values) and sparse tables (min,
max), or by picking a row (first_value, last_value, nth_value). An aggregate that fits
neither is refused: its frame would be gathered and reduced once per row. DataFusion
computes some of them (array_agg, var_samp, corr, ...) and cannot compute others over a
sliding frame (string_agg, bool_and, bit_or: no retraction), so without this refusal the
same SQL would run in one path and not in the other, or in one frame and not in another.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.sql.dialect import Datum

_MOMENTS = (
    "the OVER operator keeps no running moments of a frame; compute it from sums over the "
    "same window, as in (sum(x * x) OVER w - sum(x) OVER w * avg(x) OVER w) / "
    "nullif(count(x) OVER w - 1, 0) for var_samp(x), or aggregate per window with GROUP BY"
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
    "Stddev": ("stddev", _MOMENTS),
    "StddevSamp": ("stddev_samp", _MOMENTS),
    "StddevPop": ("stddev_pop", _MOMENTS),
    "Variance": ("var_samp", _MOMENTS),
    "VariancePop": ("var_pop", _MOMENTS),
    "Corr": ("corr", _MOMENTS),
    "CovarSamp": ("covar_samp", _MOMENTS),
    "CovarPop": ("covar_pop", _MOMENTS),
    **{f"Regr{s.capitalize()}": (f"regr_{s}", _MOMENTS)
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
    aggregate, an aggregate with FILTER or of DISTINCT values."""
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
        if isinstance(fn, exp.AggFunc) and isinstance(fn.this, exp.Distinct):
            name = fn.sql(dialect=Datum, normalize_functions="lower").split("(")[0]
            raise PlanError(f"{name}(DISTINCT ...) OVER (...) is not supported: {DISTINCT_WHY}")


def bools_as_extremes(ast: exp.Expr) -> None:
    """``bool_and(b) OVER w`` as ``min(b) OVER w`` and ``bool_or`` as ``max`` (false below
    true, NULLs skipped: the same values), in place: DataFusion cannot retract a row from
    bool_and over a sliding frame, its min and max can (``ctx.sql``)."""
    for window in list(ast.find_all(exp.Window)):
        fn = window.this
        if isinstance(fn, exp.LogicalAnd | exp.LogicalOr):
            extreme = exp.Min if isinstance(fn, exp.LogicalAnd) else exp.Max
            fn.replace(extreme(this=fn.this))
