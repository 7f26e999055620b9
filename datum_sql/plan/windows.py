"""Window table functions as plain SQL over a table: adds ``window_start`` / ``window_end``.

Used by batch queries (``ctx.sql``) and by stateless streaming queries over a window, so
both assign windows with the very same expressions.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan.engines import DataFusion
from datum_sql.sql.statements import WindowSpec

EPOCH = "TIMESTAMP '1970-01-01 00:00:00'"

#: hop() puts each row in up to ceil(size / slide) windows, cumulate() in size / step; beyond this many a query is refused at
#: planning (``SET max_windows_per_row = N`` raises it).
DEFAULT_MAX_WINDOWS_PER_ROW = 1000

_UNITS = (("day", 86_400_000_000), ("hour", 3_600_000_000), ("minute", 60_000_000),
          ("second", 1_000_000), ("millisecond", 1_000), ("microsecond", 1))  # fmt: skip


def interval(us: int) -> str:
    return f"INTERVAL '{us} microseconds'"


def duration_text(us: int) -> str:
    """``us`` microseconds in the largest unit that divides it: ``3 milliseconds``."""
    name, size = next((n, s) for n, s in _UNITS if us % s == 0)
    count = us // size
    return f"{count} {name}{'s' if count != 1 else ''}"


def windows_per_row(window: WindowSpec) -> int:
    """The most windows one row falls in: ``ceil(size / slide)`` for hop,
    ``size / step`` for cumulate, 1 for tumble and session."""
    if window.kind in ("hop", "cumulate") and window.slide_us is not None:
        return -(-window.size_us // window.slide_us)
    return 1


def check_windows_per_row(window: WindowSpec, limit: int) -> None:
    """Refuse a hop() or cumulate() that would put a row in more than ``limit`` windows."""
    per_row = windows_per_row(window)
    if per_row <= limit:
        return
    assert window.slide_us is not None
    slide, size = duration_text(window.slide_us), duration_text(window.size_us)
    ratio = "size / slide" if window.kind == "hop" else "size / step"
    step = "slide" if window.kind == "hop" else "step"
    raise PlanError(
        f"{window.kind}(..., INTERVAL '{slide}', INTERVAL '{size}') puts a row in up to "
        f"{per_row} windows ({ratio}), over the limit of {limit} windows per row: use a larger "
        f"{step}, or raise the limit with SET max_windows_per_row = N"
    )


def window_subquery(
    window: WindowSpec, table: exp.Expr, session_keys: list[str] | None = None
) -> exp.Subquery:
    """``(SELECT t.*, window_start, window_end FROM <table> AS t ...)``, in DataFusion SQL.

    Sessions need ``session_keys``: the columns the sessions are per (the GROUP BY keys).
    """
    source = table.sql(dialect=DataFusion)
    ts = exp.column(window.time_column, "t", quoted=True).sql(dialect=DataFusion)
    size = interval(window.size_us)
    origin = f"{EPOCH} + {interval(window.offset_us)}" if window.offset_us else EPOCH
    if window.kind == "tumble":
        start = f"date_bin({size}, {ts}, {origin})"
        sql = f"SELECT t.*, {start} AS window_start, {start} + {size} AS window_end FROM {source} AS t"
    elif window.kind in ("hop", "cumulate"):
        sql = _fanned_out_sql(window, source, ts, origin)
    elif session_keys is not None:
        sql = _session_sql(window, source, session_keys)
    else:
        raise PlanError(
            "session() windows are assigned by the session aggregate, not by a projection"
        )
    parsed: exp.Expr = exp.maybe_parse(sql, dialect=DataFusion)
    return exp.Subquery(this=parsed)


def _fanned_out_sql(window: WindowSpec, source: str, ts: str, origin: str) -> str:
    """hop and cumulate: each row joined with its candidate windows, those that do not
    hold it filtered out.

    hop: the windows holding ``ts`` start at the latest ``slide`` boundary at or before it
    and at the ``ceil(size / slide) - 1`` boundaries before that, if they reach past ``ts``
    (none does when ``slide > size`` and ``ts`` falls in a gap). cumulate: the windows
    start at the ``size`` boundary at or before ``ts`` and end at each ``step`` after that
    start up to ``size``, if they end after ``ts``.
    """
    assert window.slide_us is not None
    size, slide = interval(window.size_us), interval(window.slide_us)
    n = windows_per_row(window)
    if window.kind == "hop":
        offsets = ", ".join(interval(k * window.slide_us) for k in range(n))
        start = f"date_bin({slide}, {ts}, {origin}) - ks.k"
        end = f"{start} + {size}"
    else:
        offsets = ", ".join(interval(k * window.slide_us) for k in range(1, n + 1))
        start = f"date_bin({size}, {ts}, {origin})"
        end = f"{start} + ks.k"
    return (
        f"SELECT t.*, {start} AS window_start, {end} AS window_end "
        f"FROM {source} AS t CROSS JOIN (SELECT unnest(make_array({offsets})) AS k) AS ks "
        f"WHERE {end} > {ts}"
    )


def _session_sql(window: WindowSpec, source: str, keys: list[str]) -> str:
    """Sessions with window functions: a row starts a session when the previous row of its
    key is ``gap`` or more before it; a session spans [first ts, last ts + gap)."""
    gap = interval(window.size_us)
    ts = exp.column(window.time_column, quoted=True).sql(dialect=DataFusion)
    part = ", ".join(exp.column(k, quoted=True).sql(dialect=DataFusion) for k in keys)
    by_key = f"PARTITION BY {part} " if keys else ""
    marked = (
        f"SELECT t.*, CASE WHEN lag({ts}) OVER (w) IS NULL OR {ts} - lag({ts}) OVER (w) >= {gap} "
        f"THEN 1 ELSE 0 END AS __new FROM {source} AS t WINDOW w AS ({by_key}ORDER BY {ts})"
    )
    numbered = (
        f"SELECT m.*, sum(__new) OVER ({by_key}ORDER BY {ts} ROWS UNBOUNDED PRECEDING) AS __sid "
        f"FROM ({marked}) AS m"
    )
    sid_part = f"PARTITION BY {part + ', ' if keys else ''}__sid"
    return (
        f"SELECT s.* EXCLUDE (__new, __sid), min({ts}) OVER ({sid_part}) AS window_start, "
        f"max({ts}) OVER ({sid_part}) + {gap} AS window_end FROM ({numbered}) AS s"
    )
