"""Joins: the same join streamed by datum-sql and batched by DuckDB (and polars) on the same rows.

* ``asof_left_join``: trades ASOF LEFT JOIN quotes over 50 symbols (``t.ts >= q.ts``), half
  the events each, both in time order (strictly increasing times: no ties to break).
* ``asof_left_join_tolerance``: the same with ``AND t.ts - q.ts <= INTERVAL '1 second'``
  (DuckDB applies the tolerance as a filter on the match; polars as ``tolerance="1s"``).
* ``interval_join_persons_auctions``: like Nexmark q8, new persons and the auctions they open
  — but as an interval join within 10 s of registering (``a.date_time BETWEEN p.date_time -
  10 s AND p.date_time + 10 s``), not q8's 10 s tumbling window; 1 person per 3 auctions,
  generated together as Nexmark does.

datum-sql reads ``register_arrow`` tables in 65536-row batches; the runtime reads one
in-memory table to its end before the other, so the join holds the whole first input. The
``_paced`` variants feed the same batches through async iterators that yield to the event
loop between batches: the two inputs alternate, as live streams would. Events are the rows
of both inputs.
"""

from __future__ import annotations

from typing import Any

from benchmarks.spec import Benchmark, Input

ASOF_SQL = (
    "SELECT t.sym, t.ts, t.px, q.bid FROM trades t "
    "ASOF LEFT JOIN quotes q ON t.sym = q.sym AND t.ts >= q.ts"
)
ASOF_TOL_SQL = (
    "SELECT t.sym, t.ts, t.px, q.bid FROM trades t ASOF LEFT JOIN quotes q "
    "ON t.sym = q.sym AND t.ts >= q.ts AND t.ts - q.ts <= INTERVAL '1 second'"
)
ASOF_TOL_DUCKDB = (
    "SELECT t.sym, t.ts, t.px, CASE WHEN t.ts - q.ts <= INTERVAL 1 SECOND THEN q.bid END AS bid "
    "FROM trades t ASOF LEFT JOIN quotes q ON t.sym = q.sym AND t.ts >= q.ts"
)
INTERVAL_SQL = (
    "SELECT p.id, p.name, a.id AS auction, a.reserve, a.date_time FROM person p "
    "JOIN auction a ON p.id = a.seller "
    "AND a.date_time BETWEEN p.date_time - INTERVAL '10' SECOND AND p.date_time + INTERVAL '10' SECOND"
)


def market(events: int) -> dict[str, Input]:
    half = events // 2
    return {
        "trades": Input("trades", half, event_time="ts"),
        "quotes": Input("quotes", events - half, event_time="ts"),
    }


def persons_auctions(events: int) -> dict[str, Input]:
    persons = events // 4
    return {
        "person": Input("person", persons, event_time="date_time"),
        "auction": Input("auction", 3 * persons, event_time="date_time"),
    }


def _polars_asof(t: dict[str, Any], tolerance: str | None = None) -> Any:
    quotes = t["quotes"].select("sym", "ts", "bid")
    return (
        t["trades"]
        .join_asof(quotes, on="ts", by="sym", strategy="backward", tolerance=tolerance)
        .select("sym", "ts", "px", "bid")
    )


def _polars_interval(t: dict[str, Any]) -> Any:
    import polars as pl

    ten = pl.duration(seconds=10)
    return (
        t["person"]
        .join(t["auction"], left_on="id", right_on="seller", suffix="_a")
        .filter(pl.col("date_time_a").is_between(pl.col("date_time") - ten,
                                                 pl.col("date_time") + ten))
        .select("id", "name", auction="id_a", reserve="reserve", date_time="date_time_a")
    )  # fmt: skip


def _benchmarks(paced: bool) -> list[Benchmark]:
    suffix = "_paced" if paced else ""
    how = "; datum-sql's inputs alternate batch by batch" if paced else ""
    # paced changes only how datum-sql reads: polars would repeat its unpaced run
    engines = ("datum-sql", "duckdb") if paced else ("datum-sql", "duckdb", "polars")
    both = {"paced": paced, "engines": engines}
    return [
        Benchmark(
            f"asof_left_join{suffix}", "joins", f"trades ASOF LEFT JOIN quotes, 50 symbols{how}",
            market, ASOF_SQL, ASOF_SQL, _polars_asof, **both,
        ),
        Benchmark(
            f"asof_left_join_tolerance{suffix}", "joins",
            f"the same within 1 second{how}",
            market, ASOF_TOL_SQL, ASOF_TOL_DUCKDB, lambda t: _polars_asof(t, "1s"), **both,
        ),
        Benchmark(
            f"interval_join_persons_auctions{suffix}", "joins",
            f"persons joined with the auctions they open within 10 s (q8-like){how}",
            persons_auctions, INTERVAL_SQL, INTERVAL_SQL, _polars_interval, **both,
        ),
    ]  # fmt: skip


#: paced: the plain ASOF join and the interval join (the tolerance changes nothing about pacing)
BENCHMARKS = [
    *_benchmarks(paced=False),
    *(b for b in _benchmarks(paced=True) if "tolerance" not in b.name),
]

__all__ = ["BENCHMARKS"]
