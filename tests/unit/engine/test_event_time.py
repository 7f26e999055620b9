"""Event time at the edge of a query: the per-row late rule, late outputs, idle splits."""

from __future__ import annotations

import datetime as dt
import itertools

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datum_sql as ds
from datum_sql.engine.runtime.watermark import SourceClock
from datum_sql.types import END_OF_TIME

BASE = dt.datetime(2026, 1, 1)


def _ts(seconds: list[int | None]) -> pa.Array:
    return pa.array(
        [None if s is None else BASE + dt.timedelta(seconds=s) for s in seconds], pa.timestamp("us")
    )


def _reference_late(times: list[int | None], delay: int, lateness: int) -> list[bool]:
    """The rule of SEMANTICS.md, one row at a time: late when strictly below max(earlier) - d - L."""
    out, seen = [], None
    for t in times:
        if t is None:
            out.append(True)
            continue
        out.append(seen is not None and t < seen - delay - lateness)
        seen = t if seen is None else max(seen, t)
    return out


@settings(max_examples=150, deadline=None)
@given(
    times=st.lists(st.one_of(st.integers(0, 60), st.none()), min_size=1, max_size=80),
    cuts=st.lists(st.integers(1, 80), max_size=10),
    delay=st.integers(0, 5),
    lateness=st.integers(0, 5),
)
def test_late_rows_do_not_depend_on_batch_sizes(
    times: list[int | None], cuts: list[int], delay: int, lateness: int
) -> None:
    clock = SourceClock("ts", delay * 1_000_000, allowed_lateness_us=lateness * 1_000_000)
    batch = pa.record_batch({"i": list(range(len(times))), "ts": _ts(times)})
    bounds = sorted({0, len(times), *[c for c in cuts if c < len(times)]})
    late_ids: list[int] = []
    for lo, hi in itertools.pairwise(bounds):
        result = clock.split_batch(batch.slice(lo, hi - lo))
        if result.late is not None:
            late_ids += result.late.column("i").to_pylist()
    want = [i for i, late in enumerate(_reference_late(times, delay, lateness)) if late]
    assert late_ids == want


def test_source_watermark_is_min_over_splits_and_skips_idle_ones() -> None:
    clock = SourceClock("ts", 0, idle_timeout_s=10)
    clock.split_batch(pa.record_batch({"ts": _ts([100])}), "p0")
    clock.split_batch(pa.record_batch({"ts": _ts([40])}), "p1")
    t0 = clock.splits["p0"].last_seen
    assert clock.advance(now=t0 + 1) == _micros(40)
    clock.splits["p0"].last_seen = t0 + 5  # p0 keeps talking, p1 falls silent
    assert clock.advance(now=t0 + 12) == _micros(100), "an idle split must not hold the watermark"
    clock.end_split("p0")
    assert clock.advance(now=t0 + 13) == _micros(100), "watermarks never go back"
    assert clock.end() == END_OF_TIME


def _micros(seconds: int) -> int:
    return (
        int((BASE + dt.timedelta(seconds=seconds) - dt.datetime(1970, 1, 1)).total_seconds())
        * 1_000_000
    )


@pytest.mark.parametrize("batch_size", [1, 3, 50])
def test_late_output_receives_late_rows_with_diagnostics(batch_size: int) -> None:
    times = [10, 11, 30, 12, 31, 5, 40, 33]  # delay 5 s: 12 (wm 25), 5 (wm 26), 33 (wm 35) are late
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow(
        "events",
        pa.table({"id": list(range(len(times))), "ts": _ts(times)}),
        event_time="ts",
        watermark=ds.BoundedOutOfOrderness(seconds=5),
        batch_size=batch_size,
    )
    late: list[pa.RecordBatch] = []
    ctx.register_append_sink("late_rows", late.append)
    q = ctx.execute_streaming("SELECT id FROM events", late_output="late_rows")
    on_time = q.to_arrow().column("id").to_pylist()
    got = pa.Table.from_batches(late)
    assert sorted(on_time) == [0, 1, 2, 4, 6]
    assert got.column("id").to_pylist() == [3, 5, 7]
    assert got.column("_late_reason").to_pylist() == ["late"] * 3
    assert got.column("_late_source").to_pylist() == ["events"] * 3
    assert got.column("_late_watermark").to_pylist() == [
        BASE + dt.timedelta(seconds=s) for s in (25, 26, 35)
    ]
    status = q.status()
    # accounting: every input row was processed or is in the late output
    assert status["sources"]["events"]["rows"] == len(on_time) + got.num_rows
    assert status["late_rows"] == 3


def test_late_rows_are_counted_when_no_late_output_is_named() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow(
        "e",
        pa.table({"ts": _ts([10, 20, 1, 2])}),
        event_time="ts",
        watermark=ds.BoundedOutOfOrderness(),
    )
    q = ctx.execute_streaming("SELECT ts FROM e")
    assert q.to_arrow().num_rows == 2
    assert q.status()["sources"]["e"]["late_rows"] == 2


def test_allowed_lateness_keeps_rows_within_it() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow(
        "e",
        pa.table({"ts": _ts([10, 20, 17, 12])}),
        event_time="ts",
        watermark=ds.BoundedOutOfOrderness(),
    )
    q = ctx.execute_streaming("SELECT ts FROM e", allowed_lateness="5 seconds")
    assert q.to_arrow().num_rows == 3  # 17 is within 5 s of 20; 12 is not


def test_source_provided_watermarks_drive_lateness() -> None:
    schema = pa.schema([("ts", pa.timestamp("us"))])

    def batches():  # type: ignore[no-untyped-def]
        yield pa.record_batch({"ts": _ts([1, 2])}, schema=schema)
        yield ds.Watermark(BASE + dt.timedelta(seconds=50))
        yield pa.record_batch({"ts": _ts([3, 60])}, schema=schema)

    ctx = ds.Context(state_dir=None)
    # no watermark= policy: only the source's own markers (and its end) move the watermark
    ctx.register_arrow("e", batches(), schema=schema, event_time="ts")
    q = ctx.execute_streaming("SELECT ts FROM e")
    rows = [b for b in q]
    assert sum(b.num_rows for b in rows) == 3  # 3 s is below the provided watermark of 50 s
    assert q.status()["sources"]["e"]["late_rows"] == 1


def test_watermark_column_must_be_ordered() -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(ds.PlanError, match="must be a TIMESTAMP, DATE, integer or DECIMAL"):
        ctx.register_arrow("e", pa.table({"n": ["1"]}), event_time="n")
    with pytest.raises(ds.PlanError, match="does not exist"):
        ctx.register_arrow("e", pa.table({"n": [1]}), event_time="ts")


def test_a_quiet_input_stops_holding_back_a_join() -> None:
    """An idle source aligns with the other inputs, so an ASOF join still emits."""
    import asyncio
    import time

    schema = pa.schema([("k", pa.int64()), ("ts", pa.timestamp("us"))])

    async def quotes():  # type: ignore[no-untyped-def]
        yield pa.record_batch({"k": [1], "ts": _ts([1])}, schema=schema)
        await asyncio.sleep(30)

    async def trades():  # type: ignore[no-untyped-def]
        for i in range(20):
            yield pa.record_batch({"k": [1], "ts": _ts([i])}, schema=schema)
            await asyncio.sleep(0.01)
        await asyncio.sleep(30)

    ctx = ds.Context(state_dir=None)
    policy = ds.BoundedOutOfOrderness()
    ctx.register_arrow(
        "q", quotes(), schema=schema, event_time="ts", watermark=policy, idle_timeout=0.2
    )
    ctx.register_arrow(
        "t", trades(), schema=schema, event_time="ts", watermark=policy, idle_timeout=0.2
    )
    q = ctx.execute_streaming("SELECT t.ts FROM t ASOF LEFT JOIN q ON t.k = q.k AND t.ts >= q.ts")
    seen, deadline = 0, time.time() + 10
    try:
        for batch in q:
            seen += batch.num_rows
            if seen >= 19 or time.time() > deadline:
                break
    finally:
        q.cancel()
    assert seen >= 19, "rows waited for a source that had gone quiet"


def test_rows_out_counts_output_not_late_rows() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow(
        "e",
        pa.table({"ts": _ts([10, 20, 1, 2, 30])}),
        event_time="ts",
        watermark=ds.BoundedOutOfOrderness(),
    )
    ctx.register_append_sink("late", lambda b: None)
    ctx.register_append_sink("out", lambda b: None)
    q = ctx.execute_streaming("INSERT INTO out SELECT ts FROM e", late_output="late")
    q.wait(30)
    status = q.status()
    assert (status["rows_in"], status["rows_out"], status["late_rows"]) == (5, 3, 2)
