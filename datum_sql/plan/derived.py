"""Event time through nested queries: which columns of a plan carry event time, and whether a
window over a derived table (a subquery, a CTE, a view) may use a given column.

A window closes when the watermark passes its end, so its time column must be one the
watermark bounds, possibly with a lag (``PlanNode.time_lags``): a source's event-time
column passed through (renamed or shifted by an interval) by the steps between, or the
``window_end`` (lag 0) or ``window_start`` (lag: the window's size) of a windowed aggregate
that emits final rows. The window then reads the derived table behind a watermark lag.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.catalog import SourceEntry
from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.plan.intervals import offset_of
from datum_sql.sql import statements as st


def passed_time_columns(
    select: exp.Select, input: lp.PlanNode, *, window: st.WindowSpec | None = None
) -> tuple[tuple[str, int], ...]:
    """Output columns of ``select`` (over ``input``) that pass an input time column through,
    renamed or shifted by a constant interval, with their lags (``PlanNode.time_lags``).

    Over a window (``window``: the rows of a window function), ``window_end`` is one too: it
    is after the row's own event time; ``window_start`` trails that by the window's size."""
    if input.updating or select.args.get("group") or select.args.get("distinct"):
        return ()
    lags = dict(input.time_lags)
    if window is not None and window.kind != "session" and window.time_column in lags:
        lags["window_end"] = lags[window.time_column]
        lags["window_start"] = lags[window.time_column] + window.size_us
    out = []
    for e in select.expressions:
        lag = _lag_of(e.this if isinstance(e, exp.Alias) else e, lags)
        if lag is not None:
            out.append((e.alias_or_name, lag))
    return tuple(out)


def _lag_of(node: exp.Expr, lags: dict[str, int]) -> int | None:
    """The lag of an expression over time columns: a column, or one plus or minus an
    interval (``window_start + INTERVAL '5' SECOND`` trails by 5 s less); None otherwise."""
    if isinstance(node, exp.Paren):
        return _lag_of(node.this, lags)
    if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
        return lags.get(node.name)
    if isinstance(node, exp.Add | exp.Sub) and isinstance(node.expression, exp.Interval):
        base = _lag_of(node.this, lags)
        if base is None:
            return None
        try:
            shift = offset_of(node.expression)
        except PlanError:  # months and years have no fixed length
            return None
        return max(0, base - shift if isinstance(node, exp.Add) else base + shift)
    return None


def check_window_input(window: st.WindowSpec, alias: str, plan: lp.PlanNode) -> lp.PlanNode:
    """``plan`` read by a window over its ``window.time_column`` (behind the watermark lag
    of that column); refused when no watermark bounds the column."""
    if plan.updating:
        raise PlanError(
            lp.window_over_changelog(f"{window.kind}({alias}, {window.time_column}, ...)",
                                     repr(alias))
        )  # fmt: skip
    if window.time_column in plan.time_lags:
        return lp.lagged(plan, window.time_column)
    carried = ", ".join(plan.time_lags) or "none"
    raise PlanError(
        f"{window.kind}({alias}, {window.time_column}, ...): column {window.time_column!r} of "
        f"{alias!r} carries no event time, so no watermark would close its windows (columns "
        f"with event time: {carried}). Over a subquery, a CTE or a view the time column must "
        "be a source's event-time column passed through (renamed, or plus or minus an "
        "INTERVAL), or the window_start or window_end of a windowed aggregate"
    )


def event_time_sources(node: exp.Expr) -> list[SourceEntry]:
    """The sources with an event time that ``node`` reads, in the order met."""
    out: list[SourceEntry] = []
    for table in node.find_all(exp.Table):
        rel = table.meta.get("relation")
        entry = rel.entry if rel is not None else None
        if isinstance(entry, SourceEntry) and entry.event_time and entry not in out:
            out.append(entry)
    return out
