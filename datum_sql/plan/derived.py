"""Event time through nested queries: which columns of a plan carry event time, and whether a
window over a derived table (a subquery, a CTE, a view) may use a given column.

A window closes when the watermark passes its end, so its time column must be one the
watermark bounds: a source's event-time column passed through (renamed or not) by the
steps between, or the ``window_end`` of a windowed aggregate that emits final rows.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.catalog import SourceEntry
from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.sql import statements as st


def passed_time_columns(
    select: exp.Select, input: lp.PlanNode, *, windowed: bool
) -> tuple[str, ...]:
    """Output columns of ``select`` (over ``input``) that pass an input time column through.

    Over a window, ``window_end`` is one too: it is after the row's own event time."""
    if input.updating or select.args.get("group") or select.args.get("distinct"):
        return ()
    times = set(input.time_columns)
    if windowed and times:
        times.add("window_end")
    out = []
    for e in select.expressions:
        col = e.this if isinstance(e, exp.Alias) else e
        if isinstance(col, exp.Column) and not isinstance(col.this, exp.Star) and col.name in times:
            out.append(e.alias_or_name)
    return tuple(out)


def check_window_input(window: st.WindowSpec, alias: str, plan: lp.PlanNode) -> None:
    """Refuse a window over a derived table whose time column no watermark bounds."""
    if plan.updating:
        raise PlanError(
            lp.window_over_changelog(f"{window.kind}({alias}, {window.time_column}, ...)",
                                     repr(alias))
        )  # fmt: skip
    if window.time_column in plan.time_columns:
        return
    carried = ", ".join(plan.time_columns) or "none"
    raise PlanError(
        f"{window.kind}({alias}, {window.time_column}, ...): column {window.time_column!r} of "
        f"{alias!r} carries no event time, so no watermark would close its windows (columns "
        f"with event time: {carried}). Over a subquery, a CTE or a view the time column must "
        "be a source's event-time column passed through, or the window_end of a windowed "
        "aggregate"
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
