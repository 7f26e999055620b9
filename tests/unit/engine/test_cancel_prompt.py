"""Cancelling a query is prompt whatever the consumer's pace, and never a bare TimeoutError."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.errors import QueryTimeout

SCHEMA = pa.schema([("v", pa.int64())])
ROWS = 1_000
#: Far more than ``max_pending_rows``: the source is held back by the slow reader.
BATCHES = 500
#: Well under the 30 s default timeout of cancel(), generous for a loaded machine.
PROMPT_S = 10.0


def _source() -> Iterator[pa.RecordBatch]:
    for i in range(BATCHES):
        yield pa.record_batch({"v": list(range(i * ROWS, (i + 1) * ROWS))}, schema=SCHEMA)


@pytest.fixture
def ctx() -> ds.Context:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("big", _source(), schema=SCHEMA)
    return ctx


def _read_slowly(q: ds.StreamingQuery, batches: int) -> int:
    """Read ``batches`` batches at 0.3 s each, after the buffer has filled up."""
    it = iter(q)
    rows = 0
    for _ in range(batches):
        rows += next(it).num_rows
        time.sleep(0.3)
    return rows


def test_leaving_the_with_block_of_a_slowly_read_query_is_prompt(ctx: ds.Context) -> None:
    with ctx.execute_streaming("SELECT v FROM big", max_pending_rows=3 * ROWS) as q:
        for n, _batch in enumerate(q):
            time.sleep(0.3)
            if n == 3:
                started = time.monotonic()
                break
    took = time.monotonic() - started
    assert took < PROMPT_S, f"leaving the with block took {took:.1f} s"
    assert q.state == "cancelled" and q.done
    assert q.status()["sources"]["big"]["rows"] < BATCHES * ROWS


def test_cancel_of_a_slowly_read_query_is_prompt(ctx: ds.Context) -> None:
    q = ctx.execute_streaming("SELECT v FROM big", max_pending_rows=3 * ROWS)
    assert _read_slowly(q, 3) == 3 * ROWS
    started = time.monotonic()
    q.cancel(timeout=30)
    took = time.monotonic() - started
    assert took < PROMPT_S, f"cancel() took {took:.1f} s"
    assert q.state == "cancelled" and q.done
    q.wait(timeout=1)


def test_cancel_from_another_thread_while_the_reader_pauses(ctx: ds.Context) -> None:
    q = ctx.execute_streaming("SELECT v FROM big", max_pending_rows=3 * ROWS)
    it = iter(q)
    next(it)  # the reader pauses here: the buffer fills and the next step waits for space
    deadline = time.monotonic() + 60
    while q.status()["sources"]["big"]["rows"] < 5 * ROWS:
        assert time.monotonic() < deadline, "the buffer never filled up"
        time.sleep(0.01)
    outcome: list[object] = []

    def cancel() -> None:
        started = time.monotonic()
        try:
            q.cancel(timeout=30)
        except BaseException as exc:  # reported below, with the time it took
            outcome.append(exc)
        outcome.append(time.monotonic() - started)

    canceller = threading.Thread(target=cancel)
    canceller.start()
    canceller.join(60)
    assert len(outcome) == 1 and outcome[0] < PROMPT_S, outcome  # type: ignore[operator]
    rest = sum(b.num_rows for b in it)  # what was already produced, then the end
    assert rest < BATCHES * ROWS
    assert q.state == "cancelled"


def test_cancel_that_cannot_finish_in_time_raises_a_datum_error() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", pa.table({"v": list(range(10))}), batch_size=1)
    entered, release = threading.Event(), threading.Event()

    def stuck(batch: pa.RecordBatch) -> None:
        entered.set()
        release.wait(60)  # a sink write that does not return (the step cannot end)

    ctx.register_append_sink("stuck", stuck)
    q = ctx.execute_streaming("INSERT INTO stuck SELECT v FROM t")
    try:
        assert entered.wait(30)
        with pytest.raises(QueryTimeout, match=r"did not stop within 0\.5 s") as info:
            q.cancel(timeout=0.5)
        assert isinstance(info.value, ds.DatumError)
        assert q.name in str(info.value)
    finally:
        release.set()
    assert q.wait(timeout=30)
    assert q.state == "cancelled"


def test_a_polling_reader_sees_the_pending_rows_held_at_the_bound(ctx: ds.Context) -> None:
    q = ctx.execute_streaming("SELECT v FROM big", max_pending_rows=3 * ROWS)
    first = q.next_batch(PROMPT_S)
    assert first is not None and first.num_rows == ROWS
    deadline = time.monotonic() + PROMPT_S
    while q.pending_rows < 3 * ROWS:  # nobody reads: the buffer fills up to its bound
        assert time.monotonic() < deadline, f"{q.pending_rows} rows pending"
        time.sleep(0.05)
    time.sleep(0.3)
    assert q.pending_rows == 3 * ROWS  # and stays there: the source waits
    q.cancel()
    rows = 0
    while (batch := q.next_batch(PROMPT_S)) is not None:  # what was pending, then the end
        rows += batch.num_rows
    # the pending rows, and at most the step the cancel let finish
    assert 3 * ROWS <= rows <= 4 * ROWS and q.state == "cancelled"
