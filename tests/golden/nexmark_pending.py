"""Nexmark queries the streaming planner refuses today, ready for ``test_nexmark_golden.py``.

Each entry is ``name -> (streaming SQL, DuckDB SQL, upsert key or None, streams read)``, the fields of
``test_nexmark_golden.Case``, written for the same events and conventions as that file
(streams ``bid``, ``auction``, ``person``; windows computed in DuckDB from ``epoch_us``). A
query moves there, as ``Case(*PENDING[name])``, once it streams equal to DuckDB; until
then planning it raises a ``PlanError``. This module holds data only: pytest collects
nothing from it.
"""

from __future__ import annotations

HOP_COUNTS = """
    SELECT auction, count(*) AS num, window_start AS starttime
    FROM (
        SELECT auction, make_timestamp((epoch_us(date_time) // 2000000 - k) * 2000000)
            AS window_start
        FROM bid, range(5) AS r(k)
    ) GROUP BY window_start, auction"""

PENDING: dict[str, tuple[str, str, str | None, tuple[str, ...]]] = {
    "q5": (
        """SELECT AuctionBids.auction, AuctionBids.num FROM (
            SELECT auction, count(*) AS num, window_start AS starttime
            FROM hop(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
            GROUP BY window_start, auction
        ) AS AuctionBids
        JOIN (
            SELECT max(CountBids.num) AS maxn, CountBids.starttime_c FROM (
                SELECT count(*) AS num, window_start AS starttime_c
                FROM hop(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
                GROUP BY auction, window_start
            ) AS CountBids
            GROUP BY CountBids.starttime_c
        ) AS MaxBids
        ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn""",
        f"""WITH counts AS ({HOP_COUNTS}),
        maxes AS (SELECT max(num) AS maxn, starttime AS starttime_c FROM counts GROUP BY starttime)
        SELECT c.auction, c.num FROM counts c JOIN maxes m
        ON c.starttime = m.starttime_c AND c.num >= m.maxn""",
        None,
        ("bid",),
    ),
}
