"""Golden rule for event time, windows and aggregates: the streamed result of a windowed or
grouped query through SQL equals DuckDB running the equivalent SQL as a batch.

Rows: a key with few values (and NULL), an int and a float column (with NULLs; floats are
multiples of 1/4, so sums are exact in any order), event times on a half-second grid over
two minutes (ties are common). Arrival order: the rows sorted by time, then shuffled
within a disorder bound ``d`` (each row's sort key is its time plus a random jitter in
``[0, d]``, so no row arrives after a row more than ``d`` newer than it); the stream is cut
into batches of random sizes.

With ``delay + allowed lateness >= d`` no row is late and the final result must equal
DuckDB's over all the rows. With more disorder, the test computes the late set itself with
the per-row rule of SEMANTICS.md (a row is late when its time is strictly below the max
time of the rows before it, minus the delay, minus the allowed lateness): the result must
equal DuckDB's over exactly the other rows, and the late output must hold exactly the late
rows, with the watermark each one met.

DuckDB windows are computed with epoch arithmetic (``epoch_us``; all times are after 1970
so integer division floors): tumble ``[floor(t/s)*s, +s)``; hop every multiple of the slide
whose window contains ``t``; session per key with ``lag`` (a new session when the gap to the
previous row is ``>= gap``), ``[min t, max t + gap)``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import queue
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, cut, duckdb_result

import datum_sql as ds
from datum_sql.testing import sorted_rows

TS = pa.timestamp("us")
BASE = dt.datetime(2024, 1, 1)
BASE_US = int((BASE - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000
HALF_S = 500_000  # the time grid, in microseconds
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("x", pa.float64()), ("ts", TS)])
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: The main properties cover four query kinds and both emit modes: more examples.
MANY = settings(SETTINGS, max_examples=120)

# -- data -----------------------------------------------------------------------------------

key = st.sampled_from(["a", "a", "b", "b", "c", None])
int_value = st.one_of(st.none(), st.integers(-50, 50))
float_value = st.one_of(st.none(), st.integers(-40, 40).map(lambda i: i / 4))
tick = st.integers(0, 240)  # half seconds: two minutes
row = st.tuples(key, int_value, float_value, tick)
rows_st = st.lists(row, max_size=60)


def unique_time_rows(rows: list[tuple]) -> list[tuple]:
    """The rows with at most one row per (key, time): first/last_value without ties."""
    seen: set[tuple] = set()
    out = []
    for r in rows:
        if (r[0], r[3]) not in seen:
            seen.add((r[0], r[3]))
            out.append(r)
    return out


def arrival(rows: list[tuple], disorder: int, rnd: random.Random) -> list[tuple]:
    """``rows`` in an arrival order where no row comes more than ``disorder`` ticks after
    a row of a later time."""
    keyed = [(r[3] + rnd.randint(0, disorder), i, r) for i, r in enumerate(rows)]
    return [r for _, _, r in sorted(keyed)]


def to_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "x": pa.array([r[2] for r in rows], pa.float64()),
            "ts": pa.array([BASE_US + r[3] * HALF_S for r in rows], pa.int64()).cast(TS),
        },
        schema=SCHEMA,
    )


def late_mask(ticks: list[int], offset: int) -> list[bool]:
    """The per-row late rule: late when strictly below max(earlier times) - offset."""
    out, top = [], None
    for t in ticks:
        out.append(top is not None and t < top - offset)
        top = t if top is None else max(top, t)
    return out


def met_watermarks(ticks: list[int], delay: int) -> list[int | None]:
    """The watermark each row meets: max(earlier times) - delay (None before any row)."""
    out, top = [], None
    for t in ticks:
        out.append(None if top is None else top - delay)
        top = t if top is None else max(top, t)
    return out


# -- running --------------------------------------------------------------------------------


def ms(ticks: int) -> int:
    return ticks * HALF_S // 1000


def run(
    sql: str,
    batches: list[pa.RecordBatch],
    delay: int,
    *,
    lateness: int = 0,
    lateness_in_sql: bool = False,
    late_via: str | None = None,
) -> tuple[pa.Table, pa.Table | None, dict[str, Any]]:
    """Stream ``sql`` over ``batches`` (source ``t``, watermark delay ``delay`` ticks):
    (final result, late output or None, status). ``late_via`` routes late rows to a callback
    sink: ``"source"`` (register_arrow option), ``"python"`` (execute_streaming keyword) or
    ``"sql"`` (``LATE ROWS TO``)."""
    ctx = ds.Context(state_dir=None)
    late: list[pa.RecordBatch] = []
    ctx.register_append_sink("late_rows", late.append)
    ctx.register_arrow(
        "t",
        batches,
        schema=SCHEMA,
        event_time="ts",
        watermark=ds.BoundedOutOfOrderness(milliseconds=ms(delay)),
        late_output="late_rows" if late_via == "source" else None,
    )
    kw: dict[str, Any] = {}
    if lateness and lateness_in_sql:
        sql += f" ALLOWED LATENESS INTERVAL '{ms(lateness)} milliseconds'"
    elif lateness:
        kw["allowed_lateness"] = dt.timedelta(milliseconds=ms(lateness))
    if late_via == "sql":
        sql += " LATE ROWS TO late_rows"
    elif late_via == "python":
        kw["late_output"] = "late_rows"
    q = ctx.execute_streaming(sql, **kw)
    result = q.to_arrow(timeout=60)
    status = q.status()
    ctx.close()
    return result, (pa.Table.from_batches(late) if late else None), status


def duck(sql: str, table: pa.Table) -> pa.Table:
    return duckdb_result(sql, {"t": table})


# -- the queries: (streaming SQL, DuckDB SQL) -------------------------------------------------

AGGS = (
    "count(*) AS n, count(v) AS cv, sum(v) AS sv, avg(v) AS av, min(v) AS mnv, max(v) AS mxv, "
    "sum(x) AS sx, avg(x) AS ax, min(x) AS mnx, max(x) AS mxx"
)
DUCK_AGGS = (
    "count(*) AS n, count(v) AS cv, CAST(sum(v) AS BIGINT) AS sv, avg(v) AS av, min(v) AS mnv, "
    "max(v) AS mxv, sum(x) AS sx, avg(x) AS ax, min(x) AS mnx, max(x) AS mxx"
)
FIRST_LAST = "first_value(v) AS fv, last_value(v) AS lv, first_value(x) AS fx, last_value(x) AS lx"
DUCK_FIRST_LAST = (
    "first(v ORDER BY ts) AS fv, last(v ORDER BY ts) AS lv, "
    "first(x ORDER BY ts) AS fx, last(x ORDER BY ts) AS lx"
)


def tumble_sql(
    size_s: int, emit: bool, aggs: str = AGGS, duck_aggs: str = DUCK_AGGS
) -> tuple[str, str]:
    size = size_s * 1_000_000
    stream = (
        f"SELECT k, window_start, window_end, {aggs} FROM tumble(t, ts, INTERVAL '{size_s} seconds') "
        "GROUP BY window_start, window_end, k" + (" EMIT ON WINDOW CLOSE" if emit else "")
    )
    batch = (
        f"SELECT k, make_timestamp(w) AS window_start, make_timestamp(w + {size}) AS window_end, "
        f"{duck_aggs} FROM (SELECT *, epoch_us(ts) // {size} * {size} AS w FROM t) GROUP BY w, k"
    )
    return stream, batch


def hop_sql(slide_s: int, size_s: int, emit: bool) -> tuple[str, str]:
    slide, size = slide_s * 1_000_000, size_s * 1_000_000
    stream = (
        f"SELECT k, window_start, window_end, {AGGS} FROM hop(t, ts, INTERVAL '{slide_s} seconds', "
        f"INTERVAL '{size_s} seconds') GROUP BY window_start, window_end, k"
        + (" EMIT ON WINDOW CLOSE" if emit else "")
    )
    # every multiple of the slide in (t - size, t]
    n = size // slide + 1
    batch = (
        f"SELECT k, make_timestamp(w) AS window_start, make_timestamp(w + {size}) AS window_end, "
        f"{DUCK_AGGS} FROM (SELECT *, (epoch_us(ts) // {slide} - r.i) * {slide} AS w "
        f"FROM t, range({n}) r(i)) WHERE w + {size} > epoch_us(ts) GROUP BY w, k"
    )
    return stream, batch


def session_sql(gap_s: int, emit: bool, keyed: bool = True) -> tuple[str, str]:
    """Sessions per key ``k``; without ``keyed``, one global session sequence."""
    gap = gap_s * 1_000_000
    k, part = ("k, ", "PARTITION BY k ") if keyed else ("", "")
    stream = (
        f"SELECT {k}window_start, window_end, {AGGS} FROM session(t, ts, INTERVAL '{gap_s} seconds') "
        f"GROUP BY window_start, window_end{', k' if keyed else ''}"
        + (" EMIT ON WINDOW CLOSE" if emit else "")
    )
    batch = (
        f"SELECT {k}make_timestamp(min(us)) AS window_start, make_timestamp(max(us) + {gap}) "
        f"AS window_end, {DUCK_AGGS} FROM (SELECT *, sum(new) OVER ({part}ORDER BY us, new DESC "
        "ROWS UNBOUNDED PRECEDING) AS sid FROM (SELECT *, epoch_us(ts) AS us, CASE WHEN "
        f"epoch_us(ts) - lag(epoch_us(ts)) OVER ({part}ORDER BY ts) < {gap} THEN 0 "
        f"ELSE 1 END AS new FROM t)) GROUP BY {k}sid"
    )
    return stream, batch


GROUP_BY = (
    "SELECT k, count(*) AS n, count(DISTINCT v) AS dv, count(DISTINCT x) AS dx, sum(v) AS sv, "
    "min(x) AS mnx, max(v) AS mxv FROM t GROUP BY k",
    "SELECT k, count(*) AS n, count(DISTINCT v) AS dv, count(DISTINCT x) AS dx, "
    "CAST(sum(v) AS BIGINT) AS sv, min(x) AS mnx, max(v) AS mxv FROM t GROUP BY k",
)


def query(kind: str, emit: bool, shape: int) -> tuple[str, str]:
    if kind == "tumble":
        return tumble_sql((10, 20, 7)[shape], emit)
    if kind == "hop":
        slide, size = ((10, 30), (4, 20), (30, 30))[shape]  # the size is a multiple of the slide
        return hop_sql(slide, size, emit)
    if kind == "session":
        return session_sql((3, 5, 10)[shape], emit)
    if kind == "global_session":
        return session_sql((1, 2, 4)[shape], emit, keyed=False)
    return GROUP_BY


KINDS = st.sampled_from(["tumble", "hop", "session", "global_session", "group_by"])

# -- golden: no late rows ---------------------------------------------------------------------


@MANY
@given(
    rows=rows_st,
    kind=KINDS,
    emit=st.booleans(),
    shape=st.integers(0, 2),
    disorder=st.integers(0, 40),
    slack=st.integers(0, 6),
    split=st.floats(0, 1),
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
    lateness_in_sql=st.booleans(),
)
def test_windows_and_aggregates_equal_duckdb(
    rows: list,
    kind: str,
    emit: bool,
    shape: int,
    disorder: int,
    slack: int,
    split: float,
    max_batch: int,
    rnd: random.Random,
    lateness_in_sql: bool,
) -> None:
    """Disorder within delay + allowed lateness: nothing is late, every window and group
    equals the batch result. EMIT ON WINDOW CLOSE emits final rows only (append-only, no
    ``_op``); without it the changelog applied (``to_arrow()``) is the final state."""
    stream_sql, batch_sql = query(kind, emit, shape)
    # delay + lateness = disorder + slack, split at random between the two
    delay = round((disorder + slack) * split)
    lateness = disorder + slack - delay
    ordered = arrival(rows, disorder, rnd)
    table = to_table(ordered)
    got, late, status = run(
        stream_sql,
        cut(table, rnd, max_batch),
        delay,
        lateness=lateness,
        lateness_in_sql=lateness_in_sql,
        late_via="python",
    )
    assert late is None and status["late_rows"] == 0
    assert "_op" not in got.column_names
    assert_same_rows(got, duck(batch_sql, table))


@SETTINGS
@given(
    rows=rows_st.map(unique_time_rows),
    windowed=st.booleans(),
    emit=st.booleans(),
    disorder=st.integers(0, 30),
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
)
def test_first_and_last_value_by_event_time(
    rows: list, windowed: bool, emit: bool, disorder: int, max_batch: int, rnd: random.Random
) -> None:
    """first_value/last_value pick by event time, not arrival (times unique per key, so
    there is no tie to break); NULL values count as values, as in DuckDB's first/last."""
    if windowed:
        stream_sql, batch_sql = tumble_sql(20, emit, FIRST_LAST, DUCK_FIRST_LAST)
    else:
        stream_sql = f"SELECT k, {FIRST_LAST}, count(*) AS n FROM t GROUP BY k"
        batch_sql = f"SELECT k, {DUCK_FIRST_LAST}, count(*) AS n FROM t GROUP BY k"
    table = to_table(arrival(rows, disorder, rnd))
    got, late, _ = run(stream_sql, cut(table, rnd, max_batch), disorder)
    assert late is None
    assert_same_rows(got, duck(batch_sql, table))


# -- golden: late rows ------------------------------------------------------------------------


@MANY
@given(
    rows=rows_st,
    kind=KINDS,
    emit=st.booleans(),
    shape=st.integers(0, 2),
    disorder=st.integers(4, 60),
    delay=st.integers(0, 4),
    lateness=st.integers(0, 4),
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
    late_via=st.sampled_from(["source", "python", "sql"]),
    lateness_in_sql=st.booleans(),
)
def test_late_rows_go_to_the_late_output(
    rows: list,
    kind: str,
    emit: bool,
    shape: int,
    disorder: int,
    delay: int,
    lateness: int,
    max_batch: int,
    rnd: random.Random,
    late_via: str,
    lateness_in_sql: bool,
) -> None:
    """Disorder beyond delay + lateness: the result equals DuckDB over exactly the rows the
    per-row rule keeps; the late output holds exactly the others, each with the watermark
    it met; processed + late == input."""
    stream_sql, batch_sql = query(kind, emit, shape)
    ordered = arrival(rows, disorder, rnd)
    ticks = [r[3] for r in ordered]
    is_late = late_mask(ticks, delay + lateness)
    met = met_watermarks(ticks, delay)
    table = to_table(ordered)
    on_time = to_table([r for r, x in zip(ordered, is_late, strict=True) if not x])
    want_late = to_table([r for r, x in zip(ordered, is_late, strict=True) if x])
    got, late, status = run(
        stream_sql,
        cut(table, rnd, max_batch),
        delay,
        lateness=lateness,
        lateness_in_sql=lateness_in_sql,
        late_via=late_via,
    )
    assert_same_rows(got, duck(batch_sql, on_time))

    n_late = sum(is_late)
    assert status["late_rows"] == n_late
    first_op = next(iter(status["operators"].values()))
    assert status["rows_in"] == len(rows)
    assert first_op["rows_in"] + status["late_rows"] == len(rows)  # processed + late == input
    if n_late == 0:
        assert late is None
        return
    assert late is not None
    assert late.column_names == [*SCHEMA.names, "_late_reason", "_late_watermark", "_late_source"]
    assert sorted_rows(late.select(SCHEMA.names)) == sorted_rows(want_late)
    assert set(late.column("_late_reason").to_pylist()) == {"late"}
    assert set(late.column("_late_source").to_pylist()) == {"t"}
    # each late row met the watermark max(earlier) - delay; rows and marks in arrival order
    want_marks = [
        BASE + dt.timedelta(microseconds=m * HALF_S)
        for m, x in zip(met, is_late, strict=True)
        if x and m is not None
    ]
    assert late.column("_late_watermark").to_pylist() == want_marks
    assert late.column("ts").to_pylist() == want_late.column("ts").to_pylist()


# -- session merging --------------------------------------------------------------------------


def _session_rows(late_s: int) -> list[pa.RecordBatch]:
    """Key a: sessions [0, 10) and [15, 25) (gap 10 s); key b at 30 s moves the watermark
    to 30 s; then a row of key a at ``late_s`` arrives late."""

    def b(k: str, s: int) -> pa.RecordBatch:
        return to_table([(k, s, float(s), 2 * s)]).to_batches()[0]

    return [b("a", 0), b("a", 15), b("b", 30), b("a", late_s)]


@pytest.mark.parametrize("emit", [True, False], ids=["emit_on_close", "changelog"])
@pytest.mark.parametrize("via_sql", [True, False], ids=["sql", "python"])
def test_late_row_within_lateness_bridges_two_sessions(emit: bool, via_sql: bool) -> None:
    stream_sql, _ = session_sql(10, emit)
    result, late, _ = run(
        stream_sql, _session_rows(7), 0, lateness=60, lateness_in_sql=via_sql, late_via="sql"
    )
    assert late is None
    got = sorted_rows(result, ["k", "window_start", "window_end", "n", "sv"])
    at = lambda s: BASE + dt.timedelta(seconds=s)  # noqa: E731
    # 7 is within 10 s of both 0 and 15: one session [0, 25) holding the three rows
    assert got == [("a", at(0), at(25), 3, 22), ("b", at(30), at(40), 1, 30)]


def test_late_row_beyond_lateness_does_not_bridge() -> None:
    stream_sql, _ = session_sql(10, True)
    # allowed lateness 20 s: the cut is 30 - 20 = 10 s, so a row at 7 s is late
    result, late, status = run(stream_sql, _session_rows(7), 0, lateness=40, late_via="sql")
    at = lambda s: BASE + dt.timedelta(seconds=s)  # noqa: E731
    assert sorted_rows(result, ["k", "window_start", "window_end", "n"]) == [
        ("a", at(0), at(10), 1),
        ("a", at(15), at(25), 1),
        ("b", at(30), at(40), 1),
    ]
    assert late is not None and late.column("v").to_pylist() == [7]
    assert late.column("_late_watermark").to_pylist() == [at(30)]
    assert status["late_rows"] == 1


# -- materialized views and the upsert sink ---------------------------------------------------


async def _feed(inbox: queue.Queue) -> AsyncIterator[pa.RecordBatch]:
    """Batches put into ``inbox`` by the test thread, until ``None``."""
    while True:
        try:
            item = inbox.get_nowait()
        except queue.Empty:
            await asyncio.sleep(0.005)
            continue
        if item is None:
            return
        yield item


def _wait_for(check, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


VIEW_SQL = "SELECT k, count(*) AS n, sum(v) AS sv, max(x) AS mxx FROM events GROUP BY k"
VIEW_DUCK = "SELECT k, count(*) AS n, CAST(sum(v) AS BIGINT) AS sv, max(x) AS mxx FROM t GROUP BY k"


def test_materialized_view_tracks_an_unbounded_stream() -> None:
    """A view over an async iterator that never ends on its own: after each batch fed,
    ``ctx.sql`` on the view shows the state over exactly the rows fed so far, and every
    state ever read is the result over some prefix of whole batches (never a partial one)."""
    rnd = random.Random(7)
    rows = [
        (rnd.choice(["a", "b", "c", None]), rnd.choice([None, *range(-5, 20)]),
         rnd.randint(-8, 8) / 4, i)
        for i in range(200)
    ]  # fmt: skip
    batches = cut(to_table(rows), rnd, 25)
    ctx = ds.Context(state_dir=None)
    inbox: queue.Queue = queue.Queue()
    ctx.register_arrow("events", _feed(inbox), schema=SCHEMA, event_time="ts")
    ctx.execute(f"CREATE MATERIALIZED VIEW totals AS {VIEW_SQL}")
    view = ctx.view("totals")
    fed: list[pa.RecordBatch] = []
    prefixes = [sorted_rows(duck(VIEW_DUCK, SCHEMA.empty_table()))]
    seen: list[list[tuple]] = []

    def caught_up() -> bool:
        state = sorted_rows(ctx.sql("SELECT k, n, sv, mxx FROM totals"))
        seen.append(state)
        return state == prefixes[-1]

    try:
        for batch in batches:
            fed.append(batch)
            prefixes.append(sorted_rows(duck(VIEW_DUCK, pa.Table.from_batches(fed))))
            inbox.put(batch)
            _wait_for(caught_up)
            assert view.state == "running"
        assert all(s in prefixes for s in seen)
        assert view.status()["sources"]["events"]["rows"] == 200
    finally:
        inbox.put(None)
        ctx.close()
    assert view.state in ("finished", "cancelled")


@SETTINGS
@given(
    rows=rows_st,
    windowed=st.booleans(),
    disorder=st.integers(0, 20),
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
)
def test_duckdb_upsert_sink_ends_equal_to_batch_result(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list,
    windowed: bool,
    disorder: int,
    max_batch: int,
    rnd: random.Random,
) -> None:
    """An updating query (a changelog: +I, -U/+U) into a DuckDB sink with ``primary_key``:
    the table ends holding the batch result, one row per key."""
    if windowed:
        stream_sql, batch_sql = tumble_sql(20, False)
        pk = "k, window_start"
    else:
        stream_sql, batch_sql = GROUP_BY
        pk = "k"
    # a primary key cannot be NULL in DuckDB: name the NULL key
    table = to_table(
        [("-" if r[0] is None else r[0], *r[1:]) for r in arrival(rows, disorder, rnd)]
    )
    path = tmp_path_factory.mktemp("upsert") / "out.duckdb"
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", cut(table, rnd, max_batch), schema=SCHEMA, event_time="ts",
                       watermark=ds.BoundedOutOfOrderness(milliseconds=ms(disorder)))  # fmt: skip
    ctx.register_append_sink("out", ds.DuckDBSink(path, "result", primary_key=pk))
    q = ctx.execute_streaming(f"INSERT INTO out {stream_sql}")
    assert q.wait(60)
    assert q.status()["late_rows"] == 0
    con = duckdb.connect(str(path))
    try:
        got = con.sql("SELECT * FROM result").to_arrow_table()
    finally:
        con.close()
    assert_same_rows(got, duck(batch_sql, table))


# -- through a checkpoint and a restore -------------------------------------------------------

#: (stream SQL, DuckDB SQL, upsert key of the changelog form) of every windowed and grouped
#: golden query; each runs once through a checkpoint, a crash and a restore
RESTORE_CASES = {
    **{
        f"{kind}-{shape}-{'emit' if emit else 'changelog'}": (
            *query(kind, emit, shape),
            emit,
            "window_start" if kind == "global_session" else "k, window_start",
        )
        for kind in ("tumble", "hop", "session", "global_session")
        for shape in range(3)
        for emit in (True, False)
    },
    "group_by": (*GROUP_BY, False, "k"),
    "first_last-tumble-emit": (*tumble_sql(20, True, FIRST_LAST, DUCK_FIRST_LAST), True, ""),
    "first_last-tumble-changelog": (
        *tumble_sql(20, False, FIRST_LAST, DUCK_FIRST_LAST),
        False,
        "k, window_start",
    ),
    "first_last-group_by": (
        f"SELECT k, {FIRST_LAST}, count(*) AS n FROM t GROUP BY k",
        f"SELECT k, {DUCK_FIRST_LAST}, count(*) AS n FROM t GROUP BY k",
        False,
        "k",
    ),
}


@pytest.mark.parametrize("case", list(RESTORE_CASES))
def test_windows_and_aggregates_through_checkpoint_and_restore(case: str, tmp_path: Path) -> None:
    """Each query above streams over 300 disordered rows (delay 3 ticks + allowed lateness
    3 ticks cover the disorder of 6: nothing is late) into an exactly-once sink: Parquet for
    EMIT ON WINDOW CLOSE (NULL keys included), a DuckDB upsert for a changelog (keyed, so no
    NULL key). Checkpointed half-way, crashed at three quarters, resumed in a new context:
    the sink ends holding DuckDB's batch result."""
    stream_sql, batch_sql, emit, key = RESTORE_CASES[case]
    rnd = random.Random(case)
    rows = [
        (rnd.choice(["a", "b", "c", None]), rnd.choice([None, *range(-20, 20)]),
         rnd.randint(-40, 40) / 4 if rnd.random() > 0.1 else None,
         rnd.randint(0, 240))
        for _ in range(300)
    ]  # fmt: skip
    if case.startswith("first_last"):
        rows = unique_time_rows(rows)
    if not emit:
        rows = [("-" if r[0] is None else r[0], *r[1:]) for r in rows]
    batches = cut(to_table(arrival(rows, 6, rnd)), rnd, 12)
    assert_restore_matches(
        stream_sql,
        batch_sql,
        {"t": batches},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=ms(3))},
        allowed_lateness=dt.timedelta(milliseconds=ms(3)),
        sink="parquet" if emit else "duckdb",
        primary_key=key or None,
    )
