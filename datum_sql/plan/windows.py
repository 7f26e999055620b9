"""Window table functions as plain SQL over a table: adds ``window_start`` / ``window_end``.

Used by batch queries (``ctx.sql``) and by stateless streaming queries over a window, so
both assign windows with the very same expressions.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.sql.statements import WindowSpec

EPOCH = "TIMESTAMP '1970-01-01 00:00:00'"


def interval(us: int) -> str:
    return f"INTERVAL '{us} microseconds'"


def window_subquery(
    window: WindowSpec, table: exp.Expr, dialect: str, session_keys: list[str] | None = None
) -> exp.Subquery:
    """``(SELECT t.*, window_start, window_end FROM <table> AS t ...)``.

    Sessions need ``session_keys``: the columns the sessions are per (the GROUP BY keys).
    """
    source = table.sql(dialect=dialect)
    ts = exp.column(window.time_column, "t", quoted=True).sql(dialect=dialect)
    size = interval(window.size_us)
    if window.kind == "tumble":
        start = f"date_bin({size}, {ts}, {EPOCH})"
        sql = f"SELECT t.*, {start} AS window_start, {start} + {size} AS window_end FROM {source} AS t"
    elif window.kind == "hop":
        assert window.slide_us is not None
        slide = interval(window.slide_us)
        # The windows holding ts start at the latest multiple of slide <= ts and at the
        # size/slide - 1 multiples of slide before it.
        offsets = ", ".join(
            interval(k * window.slide_us) for k in range(window.size_us // window.slide_us)
        )
        start = f"date_bin({slide}, {ts}, {EPOCH}) - ks.off"
        sql = (
            f"SELECT t.*, {start} AS window_start, {start} + {size} AS window_end "
            f"FROM {source} AS t CROSS JOIN (SELECT unnest(make_array({offsets})) AS off) AS ks"
        )
    elif session_keys is not None:
        sql = _session_sql(window, source, session_keys, dialect)
    else:
        raise PlanError(
            "session() windows are assigned by the session aggregate, not by a projection"
        )
    parsed: exp.Expr = exp.maybe_parse(sql, dialect=dialect)
    return exp.Subquery(this=parsed)


def _session_sql(window: WindowSpec, source: str, keys: list[str], dialect: str) -> str:
    """Sessions with window functions: a row starts a session when the previous row of its
    key is ``gap`` or more before it; a session spans [first ts, last ts + gap)."""
    gap = interval(window.size_us)
    ts = exp.column(window.time_column, quoted=True).sql(dialect=dialect)
    part = ", ".join(exp.column(k, quoted=True).sql(dialect=dialect) for k in keys)
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
