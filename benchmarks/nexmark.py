"""Nexmark over N bids held in memory: the same query streamed by datum-sql, batched by DuckDB
(and by polars' streaming engine).

``q0`` pass-through, ``q1`` projection (dollars to euros), ``q2`` filter.
``hop_count_by_auction`` is the windowed aggregation inside Nexmark q5, not the whole q5
(which also keeps the hottest auction per window, and which the streaming planner refuses);
the whole q7 is in :mod:`benchmarks.nexmark_suite`. Then ``tumble_count_sum_max`` (three
aggregates per auction and window), and
``groupby_bidder_changelog`` (an unbounded GROUP BY whose changelog datum-sql applies to its
final state, compared with DuckDB's batch answer).
"""

from __future__ import annotations

from typing import Any

from benchmarks.spec import Benchmark, bids


def _polars_q0(t: dict[str, Any]) -> Any:
    return t["bids"].select("auction", "bidder", "price", "channel", "date_time")


def _polars_q1(t: dict[str, Any]) -> Any:
    import polars as pl

    price_eur = (pl.col("price") * 908 // 1000).alias("price_eur")
    return t["bids"].select("auction", "bidder", price_eur, "date_time")


def _polars_q2(t: dict[str, Any]) -> Any:
    import polars as pl

    return t["bids"].filter(pl.col("auction") % 123 == 0).select("auction", "price")


def _polars_hop(t: dict[str, Any]) -> Any:
    """Each bid in the 5 windows of 10 s sliding by 2 s that hold it, counted per auction."""
    import polars as pl

    start = pl.col("date_time").dt.truncate("2s") - pl.duration(seconds=2 * pl.col("k"))
    return (
        t["bids"]
        .select("auction", "date_time", k=pl.lit(list(range(5))))
        .explode("k")
        .group_by("auction", start.alias("window_start"))
        .agg(num=pl.len())
        .with_columns(window_end=pl.col("window_start") + pl.duration(seconds=10))
    )


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
        "q0_passthrough", "nexmark", "Nexmark q0: every bid, every column",
        bids,
        "SELECT auction, bidder, price, channel, date_time FROM bids",
        "SELECT auction, bidder, price, channel, date_time FROM bids",
        _polars_q0,
    ),
    Benchmark(
        "q1_projection", "nexmark", "Nexmark q1: price in euros (integer arithmetic)",
        bids,
        "SELECT auction, bidder, price * 908 / 1000 AS price_eur, date_time FROM bids",
        "SELECT auction, bidder, price * 908 // 1000 AS price_eur, date_time FROM bids",
        _polars_q1,
    ),
    Benchmark(
        "q2_filter", "nexmark", "Nexmark q2: bids on every 123rd auction",
        bids,
        "SELECT auction, price FROM bids WHERE auction % 123 = 0",
        "SELECT auction, price FROM bids WHERE auction % 123 = 0",
        _polars_q2,
    ),
    Benchmark(
        "hop_count_by_auction", "nexmark",
        "the inner aggregation of Nexmark q5: bids per auction in 10 s windows sliding by 2 s",
        bids,
        "SELECT auction, window_start, window_end, count(*) AS num FROM hop(bids, date_time, "
        "INTERVAL '2 seconds', INTERVAL '10 seconds') GROUP BY window_start, window_end, auction "
        "EMIT ON WINDOW CLOSE",
        "SELECT auction, ws AS window_start, ws + INTERVAL 10 SECOND AS window_end, count(*) AS num "
        "FROM (SELECT auction, time_bucket(INTERVAL 2 SECOND, date_time) - to_seconds(2 * k) AS ws "
        "FROM bids, range(5) r(k)) GROUP BY ws, auction",
        _polars_hop,
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
