"""Golden rule for joins: streaming ASOF, interval and lookup joins through SQL equal DuckDB
running the same join as a batch over the same rows.

Both inputs arrive in event-time order (each table sorted by ``ts``, watermark delay 0, so
no row is late) cut into random batch sizes. The runtime reads two in-memory tables one
after the other (the first to its end), so the tests over tables see one interleaving; the
async-iterator test varies it: each input sleeps at random between batches (``sleep(0)``
only yields to the event loop), so either input may run ahead, by any amount.
Left times tie freely; right times are distinct per symbol in the ASOF tests because DuckDB
picks arbitrarily among right rows tied on time (the engine picks the last arrival).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, duckdb_result

import datum_sql as ds

TS = pa.timestamp("us")
BASE = dt.datetime(2024, 1, 1)
TRADES = pa.schema([("sym", pa.string()), ("ts", TS), ("px", pa.float64())])
QUOTES = pa.schema([("sym", pa.string()), ("ts", TS), ("bid", pa.float64())])
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

sym = st.sampled_from(["a", "a", "b", "b", "c", None])
second = st.integers(0, 30)
trade_rows = st.lists(st.tuples(sym, second), max_size=50)
# unique (sym, ts): right times never tie within a symbol
quote_rows_unique = st.lists(st.tuples(sym, second), max_size=50, unique=True)
quote_rows = st.lists(st.tuples(sym, second), max_size=50)
batch = st.integers(1, 9)


def table(rows: list[tuple[str | None, int]], schema: pa.Schema, offset: float) -> pa.Table:
    """Rows sorted by time (in-order arrival); the value column numbers the rows."""
    rows = sorted(rows, key=lambda r: r[1])
    return pa.table(
        {
            "sym": pa.array([r[0] for r in rows], pa.string()),
            "ts": pa.array([BASE + dt.timedelta(seconds=r[1]) for r in rows], TS),
            schema.names[2]: pa.array([i + offset for i in range(len(rows))], pa.float64()),
        },
        schema=schema,
    )


def streamed(sql: str, data: dict[str, tuple[Any, int | None]]) -> pa.Table:
    """Run ``sql`` streaming over timed Arrow sources: name -> (data, batch_size)."""
    ctx = ds.Context(state_dir=None)
    for name, (obj, size) in data.items():
        ctx.register_arrow(
            name,
            obj,
            schema=TRADES if name == "trades" else QUOTES,
            event_time="ts",
            watermark=ds.BoundedOutOfOrderness(),
            batch_size=size,
        )
    return ctx.execute_streaming(sql).to_arrow(timeout=60)


def batched(sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    """``sql`` as a batch query (``ctx.sql``) over the same sources, event time and all."""
    ctx = ds.Context(state_dir=None)
    for name, data in tables.items():
        ctx.register_arrow(name, data, event_time="ts", watermark=ds.BoundedOutOfOrderness())
    return ctx.sql(sql)


# -- ASOF ----------------------------------------------------------------------------------
# (inequality, tolerance condition) per direction; DuckDB knows all four ASOF inequalities
ASOF_FORMS = {
    ">=": "t.ts - q.ts",
    ">": "t.ts - q.ts",
    "<=": "q.ts - t.ts",
    "<": "q.ts - t.ts",
}


def asof_sql(op: str, outer: bool, tolerance: bool) -> tuple[str, str]:
    """(streaming SQL, DuckDB SQL) of one ASOF join; DuckDB applies the tolerance as a
    filter on the match: NULLs the match (LEFT) or drops the row (inner)."""
    join = "ASOF LEFT JOIN" if outer else "ASOF JOIN"
    on = f"t.sym = q.sym AND t.ts {op} q.ts"
    gap = ASOF_FORMS[op]
    tol = f" AND {gap} <= INTERVAL '3 seconds'" if tolerance else ""
    stream = f"SELECT t.sym, t.ts, t.px, q.bid FROM trades t {join} quotes q ON {on}{tol}"
    if not tolerance:
        return stream, stream
    if outer:
        bid = f"CASE WHEN {gap} <= INTERVAL 3 SECOND THEN q.bid END AS bid"
        return stream, f"SELECT t.sym, t.ts, t.px, {bid} FROM trades t {join} quotes q ON {on}"
    where = f" WHERE {gap} <= INTERVAL 3 SECOND"
    return stream, f"SELECT t.sym, t.ts, t.px, q.bid FROM trades t {join} quotes q ON {on}{where}"


@SETTINGS
@given(
    trades=trade_rows,
    quotes=quote_rows_unique,
    tb=batch,
    qb=batch,
    outer=st.booleans(),
    tolerance=st.booleans(),
)
def test_asof_backward_equals_duckdb(
    trades: list, quotes: list, tb: int, qb: int, outer: bool, tolerance: bool
) -> None:
    """The brief's form: ``t.ts >= q.ts``, LEFT and inner, with and without tolerance."""
    t, q = table(trades, TRADES, 0.0), table(quotes, QUOTES, 0.5)
    stream, batch_sql = asof_sql(">=", outer, tolerance)
    got = streamed(stream, {"trades": (t, tb), "quotes": (q, qb)})
    assert_same_rows(got, duckdb_result(batch_sql, {"trades": t, "quotes": q}))


@SETTINGS
@given(
    trades=trade_rows,
    quotes=quote_rows_unique,
    tb=batch,
    qb=batch,
    op=st.sampled_from(list(ASOF_FORMS)),
    outer=st.booleans(),
    tolerance=st.booleans(),
)
def test_asof_all_forms_equal_duckdb(
    trades: list, quotes: list, tb: int, qb: int, op: str, outer: bool, tolerance: bool
) -> None:
    """Strict and forward forms too (``>``, ``<=``, ``<``); ``ctx.sql`` of the same SQL,
    run by the engine's ASOF operator over the bounded tables, equals DuckDB too."""
    t, q = table(trades, TRADES, 0.0), table(quotes, QUOTES, 0.5)
    stream, batch_sql = asof_sql(op, outer, tolerance)
    got = streamed(stream, {"trades": (t, tb), "quotes": (q, qb)})
    want = duckdb_result(batch_sql, {"trades": t, "quotes": q})
    assert_same_rows(got, want)
    assert_same_rows(batched(stream, {"trades": t, "quotes": q}), want)


def test_asof_tolerance_boundary_is_inclusive() -> None:
    """A quote exactly ``tolerance`` older matches; one microsecond more does not."""
    t = pa.table(
        {
            "sym": ["a", "b"],
            "ts": pa.array([BASE + dt.timedelta(seconds=3)] * 2, TS),
            "px": [1.0, 2.0],
        }
    )
    q = pa.table(
        {
            "sym": ["b", "a"],
            "ts": pa.array([BASE - dt.timedelta(microseconds=1), BASE], TS),
            "bid": [20.0, 10.0],
        }
    )
    stream, batch_sql = asof_sql(">=", True, True)
    got = streamed(stream, {"trades": (t, None), "quotes": (q, None)})
    want = duckdb_result(batch_sql, {"trades": t, "quotes": q})
    assert_same_rows(got, want)
    assert dict(zip(got["sym"].to_pylist(), got["bid"].to_pylist(), strict=True)) == {
        "a": 10.0,
        "b": None,
    }


# -- interval join ---------------------------------------------------------------------------
INTERVAL_ON = (
    "t.sym = q.sym AND t.ts BETWEEN q.ts - INTERVAL '2 seconds' AND q.ts + INTERVAL '1 second'"
)


@SETTINGS
@given(trades=trade_rows, quotes=quote_rows, tb=batch, qb=batch, outer=st.booleans())
def test_interval_join_equals_duckdb(
    trades: list, quotes: list, tb: int, qb: int, outer: bool
) -> None:
    """Inner and LEFT, ties on both sides (every matching pair counts)."""
    t, q = table(trades, TRADES, 0.0), table(quotes, QUOTES, 0.5)
    join = "LEFT JOIN" if outer else "JOIN"
    sql = f"SELECT t.sym, t.ts, t.px, q.bid FROM trades t {join} quotes q ON {INTERVAL_ON}"
    got = streamed(sql, {"trades": (t, tb), "quotes": (q, qb)})
    assert_same_rows(got, duckdb_result(sql, {"trades": t, "quotes": q}))


@SETTINGS
@given(trades=trade_rows, quotes=quote_rows, tb=batch, qb=batch, outer=st.booleans())
def test_interval_join_ge_le_form_equals_duckdb(
    trades: list, quotes: list, tb: int, qb: int, outer: bool
) -> None:
    """The same bounds written as a pair of comparisons, one strict, right time first."""
    t, q = table(trades, TRADES, 0.0), table(quotes, QUOTES, 0.5)
    join = "LEFT JOIN" if outer else "JOIN"
    on = "t.sym = q.sym AND q.ts + INTERVAL '1 second' > t.ts AND t.ts >= q.ts - INTERVAL '2 seconds'"
    sql = f"SELECT t.sym, t.ts, t.px, q.bid FROM trades t {join} quotes q ON {on}"
    got = streamed(sql, {"trades": (t, tb), "quotes": (q, qb)})
    assert_same_rows(got, duckdb_result(sql, {"trades": t, "quotes": q}))


# -- lookup join ----------------------------------------------------------------------------
@SETTINGS
@given(
    trades=trade_rows,
    dims=st.lists(st.tuples(sym, st.sampled_from(["x", "y", None])), max_size=8),
    tb=batch,
    timed=st.booleans(),
    outer=st.booleans(),
)
def test_lookup_join_equals_duckdb(
    trades: list, dims: list, tb: int, timed: bool, outer: bool
) -> None:
    """A stream joined with a bounded Arrow table without event time; duplicate keys in the
    table give one row per partner, NULL keys never match."""
    t = table(trades, TRADES, 0.0)
    d = pa.table(
        {
            "sym": pa.array([r[0] for r in dims], pa.string()),
            "venue": pa.array([r[1] for r in dims], pa.string()),
        }
    )
    ctx = ds.Context(state_dir=None)
    if timed:
        ctx.register_arrow(
            "trades", t, event_time="ts", watermark=ds.BoundedOutOfOrderness(), batch_size=tb
        )
    else:
        ctx.register_arrow("trades", t, batch_size=tb)
    ctx.register_arrow("venues", d)
    join = "LEFT JOIN" if outer else "JOIN"
    sql = f"SELECT t.sym, t.ts, t.px, v.venue FROM trades t {join} venues v ON t.sym = v.sym"
    got = ctx.execute_streaming(sql).to_arrow(timeout=60)
    assert_same_rows(got, duckdb_result(sql, {"trades": t, "venues": d}))


# -- interleaving driven by the test ----------------------------------------------------------
async def trickle(data: pa.Table, size: int, pauses: list[float]) -> AsyncIterator[pa.RecordBatch]:
    """``data`` in batches of ``size``, sleeping ``pauses[i % len]`` before batch ``i``:
    ``0`` only yields to the event loop, a few milliseconds lets the other input run ahead."""
    for i, b in enumerate(data.to_batches(max_chunksize=size)):
        await asyncio.sleep(pauses[i % len(pauses)])
        yield b


pause = st.sampled_from([0.0, 0.0, 0.001, 0.003])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trades=trade_rows,
    quotes=quote_rows_unique,
    tb=batch,
    qb=batch,
    tp=st.lists(pause, min_size=1, max_size=6),
    qp=st.lists(pause, min_size=1, max_size=6),
    kind=st.sampled_from(["asof", "asof_left_tol", "interval", "interval_left"]),
)
def test_joins_under_random_interleaving_equal_duckdb(
    trades: list, quotes: list, tb: int, qb: int, tp: list, qp: list, kind: str
) -> None:
    """Each input is an async iterator sleeping at random between batches, so which input
    runs ahead (and by how much) varies from example to example."""
    t, q = table(trades, TRADES, 0.0), table(quotes, QUOTES, 0.5)
    if kind.startswith("asof"):
        stream, batch_sql = asof_sql(">=", kind != "asof", kind.endswith("tol"))
    else:
        join = "LEFT JOIN" if kind.endswith("left") else "JOIN"
        stream = batch_sql = (
            f"SELECT t.sym, t.ts, t.px, q.bid FROM trades t {join} quotes q ON {INTERVAL_ON}"
        )
    ctx = ds.Context(state_dir=None)
    for name, data, size, pauses in (("trades", t, tb, tp), ("quotes", q, qb, qp)):
        ctx.register_arrow(
            name,
            trickle(data, size, pauses),
            schema=data.schema,
            event_time="ts",
            watermark=ds.BoundedOutOfOrderness(),
        )
    out: list[pa.RecordBatch] = []
    ctx.register_append_sink("out", out.append)
    assert ctx.execute_streaming(f"INSERT INTO out {stream}").wait(60)
    got = pa.Table.from_batches(out) if out else None
    want = duckdb_result(batch_sql, {"trades": t, "quotes": q})
    if got is None:
        assert want.num_rows == 0
        return
    assert_same_rows(got, want)


# -- bounded state ---------------------------------------------------------------------------
def test_asof_right_state_stays_bounded_on_a_long_stream() -> None:
    """200k quotes over 5 symbols against 50k trades: the right rows the ASOF join holds
    (sampled from ``status()`` while the query runs) stay a tiny fraction of the input."""
    n_quotes, n_trades, syms = 200_000, 50_000, ["s0", "s1", "s2", "s3", "s4"]
    rng = random.Random(7)
    q_us = sorted(rng.sample(range(0, 10 * n_quotes * 1000), n_quotes))
    t_us = sorted(rng.randrange(0, 10 * n_quotes * 1000) for _ in range(n_trades))
    quotes = pa.table(
        {
            "sym": pa.array([syms[i % 5] for i in range(n_quotes)], pa.string()),
            "ts": pa.array(q_us, pa.int64()).cast(TS),
            "bid": pa.array([float(i) for i in range(n_quotes)], pa.float64()),
        }
    )
    trades = pa.table(
        {
            "sym": pa.array([rng.choice(syms) for _ in range(n_trades)], pa.string()),
            "ts": pa.array(t_us, pa.int64()).cast(TS),
            "px": pa.array([float(i) for i in range(n_trades)], pa.float64()),
        }
    )
    ctx = ds.Context(state_dir=None)
    # async iterators pacing both inputs, so the run lasts long enough to be sampled
    ctx.register_arrow(
        "quotes",
        trickle(quotes, 2000, [0.02]),
        schema=QUOTES,
        event_time="ts",
        watermark=ds.BoundedOutOfOrderness(),
    )
    ctx.register_arrow(
        "trades",
        trickle(trades, 500, [0.02]),
        schema=TRADES,
        event_time="ts",
        watermark=ds.BoundedOutOfOrderness(),
    )
    rows = [0]
    ctx.register_append_sink("out", lambda b: rows.__setitem__(0, rows[0] + b.num_rows))
    q = ctx.execute_streaming(
        "INSERT INTO out SELECT t.sym, t.ts, t.px, q.bid FROM trades t "
        "ASOF LEFT JOIN quotes q ON t.sym = q.sym AND t.ts >= q.ts"
    )
    samples: list[dict[str, Any]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            ops = q.status()["operators"]
            samples.extend(
                o for o in ops.values() if o["kind"] == "asof_join" and "right_rows_held" in o
            )
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert q.wait(120)
    finally:
        done.set()
        watcher.join()
    assert rows[0] == n_trades
    live = [s for s in samples if s["rows_in"] > 0]
    assert len(live) >= 5, f"too few status samples while running: {len(live)}"
    peak_right = max(s["right_rows_held"] for s in live)
    peak_left = max(s["left_rows_held"] for s in live)
    assert max(s["rows_in"] for s in live) > n_quotes // 2
    # per symbol: the newest quote at or before the left watermark plus the quotes newer
    # than it (at most one batch ahead of the slower input) — nothing like 200k
    assert peak_right < 5_000, peak_right
    assert peak_left < 5_000, peak_left
    assert max(s["state_rows"] for s in live) < 10_000
    end = q.status()["operators"]
    assert all(o["state_rows"] == 0 for o in end.values() if o["kind"] == "asof_join")


# -- through a checkpoint and a restore -------------------------------------------------------
def _restore_cases() -> dict[str, tuple[str, str]]:
    """(streaming SQL, DuckDB SQL) of every join form above, by name."""
    cases = {
        f"asof{op}-{'left' if outer else 'inner'}{'-tol' if tol else ''}": asof_sql(op, outer, tol)
        for op in ASOF_FORMS
        for outer in (True, False)
        for tol in (True, False)
    }
    for join in ("JOIN", "LEFT JOIN"):
        for form, on in (
            ("between", INTERVAL_ON),
            ("ge-lt", "t.sym = q.sym AND q.ts + INTERVAL '1 second' > t.ts "
                      "AND t.ts >= q.ts - INTERVAL '2 seconds'"),
        ):  # fmt: skip
            sql = f"SELECT t.sym, t.ts, t.px, q.bid FROM trades t {join} quotes q ON {on}"
            cases[f"interval-{form}-{join.split()[0].lower()}"] = (sql, sql)
    return cases


RESTORE_CASES = _restore_cases()


def _restore_inputs(rnd: random.Random, n: int, unique_quotes: bool) -> dict[str, list]:
    trades = [(rnd.choice(["a", "b", "c", None]), rnd.randint(0, 60)) for _ in range(n)]
    quotes = [(rnd.choice(["a", "b", "c", None]), rnd.randint(0, 60)) for _ in range(n)]
    if unique_quotes:
        quotes = list(dict.fromkeys(quotes))
    t, q = table(trades, TRADES, 0.0), table(quotes, QUOTES, 0.5)
    return {
        "trades": t.to_batches(max_chunksize=rnd.randint(3, 9)),
        "quotes": q.to_batches(max_chunksize=rnd.randint(3, 9)),
    }


@pytest.mark.parametrize("case", list(RESTORE_CASES))
def test_joins_through_checkpoint_and_restore(case: str, tmp_path: Path) -> None:
    """Each ASOF and interval join above, over 120 in-order rows per side into a Parquet
    sink: checkpointed half-way through both inputs, crashed at three quarters, resumed in
    a new context; the sink ends holding DuckDB's batch join."""
    stream_sql, batch_sql = RESTORE_CASES[case]
    inputs = _restore_inputs(random.Random(case), 120, unique_quotes=case.startswith("asof"))
    assert_restore_matches(
        stream_sql,
        batch_sql,
        inputs,
        tmp_path / "state",
        event_time={"trades": "ts", "quotes": "ts"},
        sink="parquet",
    )


@pytest.mark.parametrize("outer", [True, False], ids=["left", "inner"])
@pytest.mark.parametrize("timed", [True, False], ids=["event_time", "no_event_time"])
def test_lookup_join_through_checkpoint_and_restore(
    outer: bool, timed: bool, tmp_path: Path
) -> None:
    """The stream is held (checkpoint half-way, crash at three quarters); the dimension
    table is read whole by both runs. The resumed run ends with DuckDB's join."""
    rnd = random.Random(f"lookup-{outer}-{timed}")
    trades = _restore_inputs(rnd, 120, unique_quotes=False)["trades"]
    venues = pa.table(
        {
            "sym": pa.array([rnd.choice(["a", "b", "c", None]) for _ in range(6)], pa.string()),
            "venue": pa.array([rnd.choice(["x", "y", None]) for _ in range(6)], pa.string()),
        }
    )
    join = "LEFT JOIN" if outer else "JOIN"
    sql = f"SELECT t.sym, t.ts, t.px, v.venue FROM trades t {join} venues v ON t.sym = v.sym"
    assert_restore_matches(
        sql,
        sql,
        {"trades": trades, "venues": venues.to_batches()},
        tmp_path / "state",
        hold=["trades"],
        event_time={"trades": "ts"} if timed else None,
        sink="duckdb",
    )
