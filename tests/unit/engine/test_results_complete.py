"""The final result of a streaming SELECT is complete, or the call says why it is not.

A bounded display buffer (``latest(n)``, the notebook view) is separate from the result
``to_arrow()`` and ``latest_state()`` return.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import datum_sql as ds

SCHEMA = pa.schema([("v", pa.int64())])


def _finite(batches: int, rows: int) -> Iterator[pa.RecordBatch]:
    for i in range(batches):
        yield pa.record_batch({"v": list(range(i * rows, (i + 1) * rows))}, schema=SCHEMA)


def _forever(rows: int = 100) -> Iterator[pa.RecordBatch]:
    i = 0
    while True:
        time.sleep(0.001)
        yield pa.record_batch({"v": list(range(i * rows, (i + 1) * rows))}, schema=SCHEMA)
        i += 1


def _wait_for(cond, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def ctx() -> ds.Context:
    return ds.Context(state_dir=None)


def test_to_arrow_over_a_finished_iterator_is_the_whole_result(ctx: ds.Context) -> None:
    # A plain iterator cannot say it is finite, so the query counts as unbounded.
    ctx.register_arrow("it", _finite(400, 100), schema=SCHEMA)
    q = ctx.execute_streaming("SELECT v FROM it WHERE v % 3 <> 0")
    assert q.wait(timeout=60)
    got = q.to_arrow().column("v").to_pylist()
    assert got == [v for v in range(40_000) if v % 3]
    assert q.latest_state().num_rows == len(got)


def test_display_stays_bounded_while_the_result_is_kept(ctx: ds.Context) -> None:
    ctx.register_arrow("it", _finite(400, 100), schema=SCHEMA)
    q = ctx.execute_streaming("SELECT v FROM it")
    assert q.wait(timeout=60)
    newest = q.latest(5)
    assert newest.column("v").to_pylist() == list(range(39_995, 40_000))
    assert q.to_arrow().num_rows == 40_000


def test_an_unbounded_result_read_late_starts_at_its_first_row(ctx: ds.Context) -> None:
    """Nobody iterates yet: past max_pending_rows the query waits for its reader rather
    than drop rows, however late the reader starts."""
    ctx.register_arrow("ticks", _forever(), schema=SCHEMA)
    q = ctx.execute_streaming("SELECT v FROM ticks", max_pending_rows=2_000)
    try:
        _wait_for(lambda: q.status()["rows_out"] >= 2_000, "the result to fill up")
        read: list[int] = []
        for batch in q:
            read += batch.column("v").to_pylist()
            if len(read) >= 10_000:
                break
    finally:
        q.cancel(timeout=30)
    assert read == list(range(len(read)))


def test_a_displayed_unbounded_result_that_outgrows_its_limit_refuses_to_arrow(
    ctx: ds.Context,
) -> None:
    """Displayed (``latest``), an unread result runs on keeping its newest rows; the
    complete result is then gone, and to_arrow() says so."""
    ctx.register_arrow("ticks", _forever(), schema=SCHEMA)
    q = ctx.execute_streaming("SELECT v FROM ticks", max_pending_rows=2_000)
    try:
        _wait_for(lambda: q.latest(5) is not None and q.status()["rows_out"] > 6_000, "rows")
    finally:
        q.cancel(timeout=30)
    assert q.state == "cancelled"
    with pytest.raises(ds.DatumError, match=r"dropped the oldest [\d,]+ rows") as info:
        q.to_arrow()
    assert "max_pending_rows" in str(info.value)
    with pytest.raises(ds.DatumError, match="dropped"):
        q.latest_state()
    # the display still shows the newest rows, in order
    shown = q.latest(50).column("v").to_pylist()
    produced = q.status()["rows_out"]
    assert shown == list(range(produced - 50, produced))


def test_an_iterated_unbounded_result_is_complete_afterwards(ctx: ds.Context) -> None:
    ctx.register_arrow("it", _finite(300, 100), schema=SCHEMA)
    with ctx.execute_streaming("SELECT v FROM it", max_pending_rows=50_000) as q:
        read = sum(b.num_rows for b in q)
    assert read == 30_000
    assert q.to_arrow().column("v").to_pylist() == list(range(30_000))


def test_updating_result_is_the_complete_state_after_iteration(ctx: ds.Context) -> None:
    # More changelog batches than are kept unfolded; the caller reads them all first.
    ctx.register_arrow("it", _finite(300, 50), schema=SCHEMA)
    sql = "SELECT v % 7 AS k, count(*) AS n, sum(v) AS total FROM it GROUP BY v % 7"
    with ctx.execute_streaming(sql) as q:
        changes = sum(b.num_rows for b in q)
    assert changes > 7
    expected = {k: (0, 0) for k in range(7)}
    for v in range(15_000):
        n, total = expected[v % 7]
        expected[v % 7] = (n + 1, total + v)
    for table in (q.to_arrow(), q.latest_state()):
        rows = table.to_pydict()
        assert "_op" not in rows
        got = {k: (n, t) for k, n, t in zip(rows["k"], rows["n"], rows["total"], strict=True)}
        assert got == expected


def test_updating_result_of_an_unread_unbounded_query_is_the_complete_state(
    ctx: ds.Context,
) -> None:
    ctx.register_arrow("it", _finite(300, 50), schema=SCHEMA)
    q = ctx.execute_streaming("SELECT v % 5 AS k, count(*) AS n FROM it GROUP BY v % 5")
    assert q.wait(timeout=60)
    rows = q.to_arrow().sort_by("k").to_pydict()
    assert rows == {"k": [0, 1, 2, 3, 4], "n": [3_000] * 5}
    assert q.latest(3).num_rows == 3


def test_iterating_an_updating_query_after_it_ended_replays_its_whole_changelog(
    ctx: ds.Context,
) -> None:
    ctx.register_arrow("it", _finite(300, 50), schema=SCHEMA)
    q = ctx.execute_streaming("SELECT v % 5 AS k, count(*) AS n FROM it GROUP BY v % 5")
    assert q.wait(timeout=60)
    changes = pa.Table.from_batches(list(q))
    assert changes.num_rows == q.status()["rows_out"]
    assert set(changes.column("_op").to_pylist()) == {"+I", "-U", "+U"}
    assert changes.filter(pc.equal(changes["_op"], "+I")).num_rows == 5


def test_a_late_reader_of_a_long_changelog_starts_from_the_current_state(
    ctx: ds.Context,
) -> None:
    ctx.register_arrow("it", _finite(300, 50), schema=SCHEMA)
    sql = "SELECT v % 5 AS k, count(*) AS n FROM it GROUP BY v % 5"
    q = ctx.execute_streaming(sql, max_pending_rows=100)
    assert q.wait(timeout=60)
    changes = pa.Table.from_batches(list(q))  # more than 100 rows were produced before
    assert changes.column("_op").to_pylist() == ["+I"] * 5
    assert changes.drop_columns(["_op"]).sort_by("k").to_pydict() == {
        "k": [0, 1, 2, 3, 4],
        "n": [3_000] * 5,
    }


def test_a_reader_of_a_restored_updating_result_starts_from_the_restored_state() -> None:
    from datum_sql.engine.runtime.results import ResultBuffer

    schema = pa.schema([("_op", pa.string()), ("k", pa.int64()), ("n", pa.int64())])
    buf = ResultBuffer(schema, bounded=True)
    buf.restore(pa.table({"k": [1, 2], "n": [10, 20]}))
    buf.close()
    rows = []
    while (batch := buf.next_batch(timeout=5)) is not None:
        rows += batch.to_pylist()
    assert rows == [{"_op": "+I", "k": 1, "n": 10}, {"_op": "+I", "k": 2, "n": 20}]
