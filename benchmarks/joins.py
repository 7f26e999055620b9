"""Joins: the same SQL streamed by datum-sql and batched by DuckDB (one thread) on the same rows.

* ``asof``: 1M trades ASOF LEFT JOIN 1M quotes over 50 symbols (``t.ts >= q.ts``); both
  tables registered as event-time sources in time order, cut into 65536-row batches.
* ``asof_tolerance``: the same with ``AND t.ts - q.ts <= INTERVAL '1 second'`` (DuckDB
  applies the tolerance as a filter on the match).
* ``interval_q8``: Nexmark q8-like — new persons joined with the auctions they open within
  10 seconds of registering (``a.date_time BETWEEN p.date_time - 10 s AND p.date_time + 10 s``),
  persons and auctions generated together (1 person per 3 auctions, as Nexmark does).

Each runs over ``register_arrow`` tables cut into 65536-row batches; the runtime then reads
one in-memory table to its end before the other, so the join holds the whole first input.
The ``_paced`` variants feed the same batches through async iterators that yield to the
event loop between batches: the two inputs alternate, as live streams would.

Events are the rows of both inputs. Each benchmark runs in its own child process; peak RSS
is taken after the streaming run, before DuckDB loads anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pyarrow as pa

import datum_sql as ds
from benchmarks.harness import HEADER, Result, duckdb_seconds, peak_rss_mb, run_isolated, timed
from datum_sql.connectors.generators import nexmark_table

TS = pa.timestamp("us")
BATCH = 65_536

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
Q8_SQL = (
    "SELECT p.id, p.name, a.id AS auction, a.reserve, a.date_time FROM person p "
    "JOIN auction a ON p.id = a.seller "
    "AND a.date_time BETWEEN p.date_time - INTERVAL '10' SECOND AND p.date_time + INTERVAL '10' SECOND"
)


def market(rows: int, symbols: int, seed: int, value: str) -> pa.Table:
    """``rows`` ticks over ``symbols`` symbols, about one per millisecond, sorted by time."""
    rng = np.random.default_rng(seed)
    names = pa.array([f"SYM{i:03d}" for i in range(symbols)], pa.string())
    ts = np.sort(rng.integers(0, rows * 1000, rows, dtype=np.int64)) + 1_767_225_600_000_000
    return pa.table(
        {
            "sym": names.take(pa.array(rng.integers(0, symbols, rows))),
            "ts": pa.array(ts, pa.int64()).cast(TS),
            value: pa.array(rng.uniform(10, 1000, rows).round(2), pa.float64()),
        }
    )


async def _paced(table: pa.Table, batch_size: int) -> AsyncIterator[pa.RecordBatch]:
    """``table`` in batches, yielding to the event loop before each: the inputs alternate."""
    for batch in table.to_batches(max_chunksize=batch_size):
        await asyncio.sleep(0)
        yield batch


def _stream(
    sql: str, tables: dict[str, tuple[pa.Table, str]], interleave: bool
) -> tuple[float, int]:
    """Seconds to stream ``INSERT INTO out <sql>`` to its end, and the rows it wrote."""
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    for name, (table, time_col) in tables.items():
        wm = ds.BoundedOutOfOrderness()
        if interleave:
            data = _paced(table, BATCH)
            ctx.register_arrow(name, data, schema=table.schema, event_time=time_col, watermark=wm)
        else:
            ctx.register_arrow(name, table, event_time=time_col, watermark=wm, batch_size=BATCH)
    out = {"rows": 0}

    def count(batch: pa.RecordBatch) -> None:
        out["rows"] += batch.num_rows

    ctx.register_append_sink("out", count)
    seconds, _ = timed(lambda: ctx.execute_streaming(f"INSERT INTO out {sql}").wait())
    return seconds, out["rows"]


def _result(
    name: str, events: int, seconds: float, rows: int, duck_sql: str, tables: dict
) -> Result:
    rss = peak_rss_mb()
    duck_s, duck_rows = duckdb_seconds(duck_sql, tables)
    note = "" if rows == duck_rows else f"ROWS DIFFER: duckdb {duck_rows}"
    return Result(name, events, seconds, duck_s, rss, rows, note)


def run_asof(
    trades: int = 1_000_000,
    quotes: int = 1_000_000,
    symbols: int = 50,
    tolerance: bool = False,
    interleave: bool = False,
) -> Result:
    t = market(trades, symbols, 1, "px")
    q = market(quotes, symbols, 2, "bid")
    sql, duck_sql = (ASOF_TOL_SQL, ASOF_TOL_DUCKDB) if tolerance else (ASOF_SQL, ASOF_SQL)
    seconds, rows = _stream(sql, {"trades": (t, "ts"), "quotes": (q, "ts")}, interleave)
    name = "asof_left_join" + ("_tolerance" if tolerance else "") + ("_paced" if interleave else "")
    return _result(name, trades + quotes, seconds, rows, duck_sql, {"trades": t, "quotes": q})


def run_interval_q8(persons: int = 250_000, interleave: bool = False) -> Result:
    p = nexmark_table("person", persons, columns=["id", "name", "date_time"])
    a = nexmark_table("auction", 3 * persons, columns=["id", "seller", "reserve", "date_time"])
    tables = {"person": (p, "date_time"), "auction": (a, "date_time")}
    seconds, rows = _stream(Q8_SQL, tables, interleave)
    name = "interval_join_q8" + ("_paced" if interleave else "")
    events = p.num_rows + a.num_rows
    return _result(name, events, seconds, rows, Q8_SQL, {"person": p, "auction": a})


#: (function suffix, arguments) of the group, in order
BENCHMARKS: list[tuple[str, dict[str, Any]]] = [
    ("asof", {}),
    ("asof", {"tolerance": True}),
    ("asof", {"interleave": True}),
    ("interval_q8", {}),
    ("interval_q8", {"interleave": True}),
]


def main() -> None:
    """Run the joins group, each benchmark in its own child process."""
    print(HEADER)
    for name, args in BENCHMARKS:
        print(run_isolated("benchmarks.joins", name, args).line(), flush=True)


if __name__ == "__main__":
    main()
