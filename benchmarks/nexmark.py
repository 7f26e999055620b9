"""Nexmark over N bids held in memory: the same query streamed by datum-sql, batched by DuckDB
(and by polars' streaming engine).

``q0`` pass-through, ``q1`` projection (dollars to euros), ``q2`` filter and ``q5`` (the
auctions with the most bids per sliding window: two windowed aggregates joined on
window_start), as the golden tests write them (``tests/golden/test_nexmark_golden.py``;
``tests/benchmarks`` checks the texts agree), over table ``bid``. Then the peers' shapes over
table ``bids``: a filter on an expression (``auction % 123``), ``tumble_count_sum_max``
(three aggregates per auction and window) and ``groupby_bidder_changelog`` (an unbounded
GROUP BY whose changelog datum-sql applies to its final state, compared with DuckDB's batch
answer). The rest of the suite is in :mod:`benchmarks.nexmark_suite`.
"""

from __future__ import annotations

from typing import Any

from benchmarks.spec import Benchmark, bid, bids


def _polars_q0(t: dict[str, Any]) -> Any:
    return t["bid"].select("auction", "bidder", "price", "date_time")


def _polars_q1(t: dict[str, Any]) -> Any:
    import polars as pl

    price = (0.908 * pl.col("price")).alias("price")
    return t["bid"].select("auction", "bidder", price, "date_time")


def _polars_q2(t: dict[str, Any]) -> Any:
    import polars as pl

    return t["bid"].filter(pl.col("auction").is_in(Q2_AUCTIONS)).select("auction", "price")


def _polars_filter(t: dict[str, Any]) -> Any:
    import polars as pl

    return t["bids"].filter(pl.col("auction") % 123 == 0).select("auction", "price")


def _tumble_10s(t: dict[str, Any], keys: list[str], *aggs: Any) -> Any:
    import polars as pl

    start = pl.col("date_time").dt.truncate("10s").alias("window_start")
    return (
        t["bids"]
        .group_by(*keys, start)
        .agg(*aggs)
        .with_columns(window_end=pl.col("window_start") + pl.duration(seconds=10))
    )


def _polars_tumble_count_sum_max(t: dict[str, Any]) -> Any:
    import polars as pl

    price = pl.col("price")
    return _tumble_10s(t, ["auction"], pl.len().alias("n"), price.sum().alias("total"),
                       price.max().alias("top"))  # fmt: skip


def _polars_groupby_bidder(t: dict[str, Any]) -> Any:
    import polars as pl

    return t["bids"].group_by("bidder").agg(n=pl.len(), top=pl.col("price").max())


#: Nexmark q0 to q2 as the golden tests write them (tests/golden/test_nexmark_golden.py)
Q0 = "SELECT auction, bidder, price, date_time FROM bid"
Q1 = "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid"
Q1_DUCKDB = "SELECT auction, bidder, 0.908::DOUBLE * price AS price, date_time FROM bid"
Q2_AUCTIONS = (1007, 1020, 2001, 2019, 2087)
Q2 = "SELECT auction, price FROM bid WHERE " + " OR ".join(f"auction = {a}" for a in Q2_AUCTIONS)

#: Nexmark q5 as its golden test writes it: bids per auction and hop window, joined on
#: window_start with each window's maximum (DuckDB: the windows by epoch arithmetic)
Q5 = """SELECT AuctionBids.auction, AuctionBids.num FROM (
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
ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn"""
Q5_DUCKDB = """WITH counts AS (
    SELECT auction, count(*) AS num, window_start AS starttime
    FROM (
        SELECT auction, make_timestamp((epoch_us(date_time) // 2000000 - k) * 2000000)
            AS window_start
        FROM bid, range(5) AS r(k)
    ) GROUP BY window_start, auction),
maxes AS (SELECT max(num) AS maxn, starttime AS starttime_c FROM counts GROUP BY starttime)
SELECT c.auction, c.num FROM counts c JOIN maxes m
ON c.starttime = m.starttime_c AND c.num >= m.maxn"""

TUMBLE_COUNT_SUM_MAX = (
    "SELECT auction, window_start, window_end, count(*) AS n, sum(price) AS total, "
    "max(price) AS top FROM tumble(bids, date_time, INTERVAL '10 seconds') "
    "GROUP BY window_start, window_end, auction EMIT ON WINDOW CLOSE"
)
TUMBLE_COUNT_SUM_MAX_DUCKDB = (
    "SELECT auction, time_bucket(INTERVAL 10 SECOND, date_time) AS window_start, "
    "time_bucket(INTERVAL 10 SECOND, date_time) + INTERVAL 10 SECOND AS window_end, "
    "count(*) AS n, sum(price) AS total, max(price) AS top FROM bids GROUP BY 1, 2, 3"
)

BENCHMARKS = [
    Benchmark(
        "q0_passthrough", "nexmark", "Nexmark q0: every bid, four of its columns",
        bid, Q0, Q0, _polars_q0,
    ),
    Benchmark(
        "q1_projection", "nexmark", "Nexmark q1: the price in euros (0.908 * price, a double)",
        bid, Q1, Q1_DUCKDB, _polars_q1,
    ),
    Benchmark(
        "q2_filter", "nexmark", "Nexmark q2: the bids on five auctions (an OR of equalities)",
        bid, Q2, Q2, _polars_q2,
    ),
    Benchmark(
        "filter_every_123rd_auction", "nexmark", "a filter on an expression: the bids on every "
        "123rd auction (Flink's Nexmark q2)",
        bids,
        "SELECT auction, price FROM bids WHERE auction % 123 = 0",
        "SELECT auction, price FROM bids WHERE auction % 123 = 0",
        _polars_filter,
    ),
    Benchmark(
        "q5_hot_items", "nexmark",
        "Nexmark q5: the auctions with the most bids in each 10 s window sliding by 2 s",
        bid, Q5, Q5_DUCKDB, engines=("datum-sql", "duckdb"),
    ),
    Benchmark(
        "tumble_count_sum_max", "nexmark",
        "count, sum and max per auction in 10 s tumbling windows",
        bids, TUMBLE_COUNT_SUM_MAX, TUMBLE_COUNT_SUM_MAX_DUCKDB, _polars_tumble_count_sum_max,
    ),
    Benchmark(
        "groupby_bidder_changelog", "nexmark",
        "unbounded GROUP BY bidder (count, max): datum-sql's changelog applied to its final state",
        bids,
        "SELECT bidder, count(*) AS n, max(price) AS top FROM bids GROUP BY bidder",
        "SELECT bidder, count(*) AS n, max(price) AS top FROM bids GROUP BY bidder",
        _polars_groupby_bidder,
    ),
]  # fmt: skip

__all__ = ["BENCHMARKS", "TUMBLE_COUNT_SUM_MAX"]
