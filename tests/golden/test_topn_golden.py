"""Golden rule for top-N: ROW_NUMBER() (RANK(), DENSE_RANK()) ... WHERE rn <= N streamed (a
changelog applied, or a window top-N's final rows) equals DuckDB running the same ranking as
a batch.

ROW_NUMBER's ties in ORDER BY go to the row that arrived first: every row carries ``seq``, its arrival
position, and DuckDB ranks by the same ORDER BY followed by ``seq`` (the streaming query
never orders by it), so both sides are deterministic even with many ties. Rows: a key with
few values (and NULL), an int with NULLs and ties, a float, event times on a half-second
grid; arrival order is bounded disorder within the watermark delay, so nothing is late;
batches have random sizes.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, cut, duckdb_result

import datum_sql as ds

TS = pa.timestamp("us")
BASE_US = int((dt.datetime(2024, 1, 1) - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000
HALF_S = 500_000
SCHEMA = pa.schema(
    [("k", pa.string()), ("v", pa.int64()), ("x", pa.float64()), ("ts", TS), ("seq", pa.int64())]
)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

key = st.sampled_from(["a", "a", "b", "b", "c", None])
row = st.tuples(
    key, st.one_of(st.none(), st.integers(0, 6)), st.integers(-8, 8), st.integers(0, 80)
)
rows_st = st.lists(row, max_size=70)


def arrival(rows: list[tuple], disorder: int, rnd: random.Random) -> list[tuple]:
    keyed = [(r[3] + rnd.randint(0, disorder), i, r) for i, r in enumerate(rows)]
    return [r for _, _, r in sorted(keyed)]


def to_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "x": pa.array([r[2] / 4 for r in rows], pa.float64()),
            "ts": pa.array([BASE_US + r[3] * HALF_S for r in rows], pa.int64()).cast(TS),
            "seq": pa.array(range(len(rows)), pa.int64()),
        },
        schema=SCHEMA,
    )


def duck_tumble(size_s: int) -> str:
    size = size_s * 1_000_000
    return (
        f"(SELECT *, make_timestamp(epoch_us(ts) // {size} * {size}) AS window_start, "
        f"make_timestamp(epoch_us(ts) // {size} * {size} + {size}) AS window_end FROM t)"
    )


def duck_hop(slide_s: int, size_s: int) -> str:
    slide, size = slide_s * 1_000_000, size_s * 1_000_000
    return (
        f"(SELECT k, v, x, ts, seq, make_timestamp(w) AS window_start, "
        f"make_timestamp(w + {size}) AS window_end FROM (SELECT *, "
        f"(epoch_us(ts) // {slide} - r.i) * {slide} AS w FROM t, range({size // slide + 1}) r(i)) "
        f"WHERE w + {size} > epoch_us(ts))"
    )


def ranked(select: str, over: str, source: str, where: str, duck_over: str, duck_source: str,
           outer: str = "*", rank: str = "ROW_NUMBER") -> tuple[str, str]:  # fmt: skip
    name = "rn" if rank == "ROW_NUMBER" else "r"
    stream = (
        f"SELECT {outer} FROM (SELECT {select}, {rank}() OVER ({over}) AS {name} FROM {source}) "
        f"WHERE {where}"
    )
    batch = (
        f"SELECT {outer} FROM (SELECT {select}, {rank}() OVER ({duck_over}) AS {name} "
        f"FROM {duck_source}) WHERE {where}"
    )
    return stream, batch


#: name -> (stream SQL, DuckDB SQL, window top-N, upsert key of the changelog form)
QUERIES = {
    # q19's shape: top N per key, rank selected
    "top3-by-key": (*ranked("*", "PARTITION BY k ORDER BY v DESC", "t", "rn <= 3",
                            "PARTITION BY k ORDER BY v DESC NULLS FIRST, seq", "t"), False, "k, rn"),
    # q18's shape: the last row per key (ties: the first to arrive), rank not selected
    "dedup-last": (*ranked("*", "PARTITION BY k ORDER BY ts DESC", "t", "rn = 1",
                           "PARTITION BY k ORDER BY ts DESC, seq", "t", "k, v, x, ts, seq"),
                   False, "k"),
    "range-2-3-nulls-last": (*ranked(
        "k, v, seq", "PARTITION BY k ORDER BY v NULLS LAST, x DESC", "t",
        "rn BETWEEN 2 AND 3 AND v IS NOT NULL",
        "PARTITION BY k ORDER BY v NULLS LAST, x DESC, seq", "t", "k, v, seq"), False, "k, seq"),
    "global-top4-expr": (*ranked(
        "k, v, seq", "ORDER BY v % 3 DESC, x", "t", "4 >= rn",
        "ORDER BY v % 3 DESC NULLS FIRST, x, seq", "t", "seq, rn"), False, "rn"),
    "tumble-top2": (*ranked(
        "*", "PARTITION BY window_start, window_end, k ORDER BY v DESC", "tumble(t, ts, INTERVAL '5 seconds')",
        "rn <= 2", "PARTITION BY window_start, window_end, k ORDER BY v DESC NULLS FIRST, seq",
        duck_tumble(5)), True, ""),
    "hop-top1-no-rank": (*ranked(
        "k, v, seq, window_end", "PARTITION BY window_start, window_end ORDER BY x DESC, v",
        "hop(t, ts, INTERVAL '2 seconds', INTERVAL '6 seconds')", "rn < 2",
        "PARTITION BY window_start, window_end ORDER BY x DESC, v, seq", duck_hop(2, 6),
        "k, v, seq, window_end"), True, ""),
    # a top-N nested in a derived table of the outer query
    "nested-derived": (
        "SELECT k, v, seq FROM (SELECT * FROM (SELECT k, v, seq, ROW_NUMBER() OVER (PARTITION BY k "
        "ORDER BY v) AS rn FROM t) WHERE rn <= 2) AS x WHERE v IS NOT NULL",
        "SELECT k, v, seq FROM (SELECT * FROM (SELECT k, v, seq, ROW_NUMBER() OVER (PARTITION BY k "
        "ORDER BY v NULLS LAST, seq) AS rn FROM t) WHERE rn <= 2) AS x WHERE v IS NOT NULL",
        False, "k, seq",
    ),
    # RANK/DENSE_RANK: ties share a rank, no arrival order needed
    "rank-top3": (*ranked("*", "PARTITION BY k ORDER BY v DESC", "t", "r <= 3",
                          "PARTITION BY k ORDER BY v DESC NULLS FIRST", "t", rank="RANK"),
                  False, "k, seq"),
    "dense-rank-range": (*ranked(
        "k, v, x, seq", "PARTITION BY k ORDER BY v, x DESC", "t", "r BETWEEN 2 AND 3",
        "PARTITION BY k ORDER BY v NULLS LAST, x DESC", "t", "seq, v, r", rank="DENSE_RANK"),
        False, "seq"),
    "tumble-dense-rank": (*ranked(
        "*", "PARTITION BY window_start, window_end ORDER BY x DESC", "tumble(t, ts, INTERVAL '5 seconds')",
        "r <= 2", "PARTITION BY window_start, window_end ORDER BY x DESC", duck_tumble(5),
        rank="DENSE_RANK"), True, ""),
    "top2-of-window-aggregate": (
        "SELECT * FROM (SELECT window_start, k, n, ROW_NUMBER() OVER (PARTITION BY window_start, "
        "window_end ORDER BY n DESC, k) AS rn FROM (SELECT window_start, window_end, k, count(*) AS n "
        "FROM tumble(t, ts, INTERVAL '10 seconds') GROUP BY window_start, window_end, k)) WHERE rn <= 2",
        "SELECT * FROM (SELECT window_start, k, n, ROW_NUMBER() OVER (PARTITION BY window_start, "
        "window_end ORDER BY n DESC, k NULLS LAST) AS rn FROM (SELECT window_start, window_end, k, "
        f"count(*) AS n FROM {duck_tumble(10)} GROUP BY window_start, window_end, k)) WHERE rn <= 2",
        True, "",
    ),
}  # fmt: skip


def run(sql: str, batches: list[pa.RecordBatch], delay: int) -> pa.Table:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", batches, schema=SCHEMA, event_time="ts",
                       watermark=ds.BoundedOutOfOrderness(milliseconds=delay * HALF_S // 1000))  # fmt: skip
    try:
        q = ctx.execute_streaming(sql)
        return q.to_arrow(timeout=60)
    finally:
        ctx.close()


@SETTINGS
@given(
    rows=rows_st,
    name=st.sampled_from(sorted(QUERIES)),
    disorder=st.integers(0, 12),
    max_batch=st.integers(1, 15),
    rnd=st.randoms(use_true_random=False),
)
def test_topn_equals_duckdb(
    rows: list, name: str, disorder: int, max_batch: int, rnd: random.Random
) -> None:
    stream_sql, batch_sql, _, _ = QUERIES[name]
    table = to_table(arrival(rows, disorder, rnd))
    got = run(stream_sql, cut(table, rnd, max_batch), disorder)
    assert "_op" not in got.column_names
    assert_same_rows(got, duckdb_result(batch_sql, {"t": table}))


def test_window_topn_is_append_only_and_changelog_upserts() -> None:
    """A window top-N emits final rows only; an unbounded one a changelog of -U/+U pairs."""
    rnd = random.Random(7)
    table = to_table(
        arrival([(rnd.choice("ab"), rnd.randint(0, 9), 0, i) for i in range(40)], 0, rnd)
    )
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", table, event_time="ts", batch_size=5)
    window_sql, _, _, _ = QUERIES["tumble-top2"]
    with ctx.execute_streaming(window_sql) as q:
        window_batches = list(q)
    assert all("_op" not in b.schema.names for b in window_batches)
    with ctx.execute_streaming(QUERIES["top3-by-key"][0]) as q:
        ops = [op for b in q for op in b.column("_op").to_pylist()]
    ctx.close()
    assert {"+I", "-U", "+U"} <= set(ops)
    assert ops.count("-U") == ops.count("+U")


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_topn_through_checkpoint_and_restore(name: str, tmp_path: Path) -> None:
    """300 disordered rows, checkpointed half-way, crashed at three quarters, resumed: the
    exactly-once sink (Parquet for a window top-N, a DuckDB upsert by the key for a
    changelog, so no NULL key) ends holding DuckDB's result."""
    stream_sql, batch_sql, window, key = QUERIES[name]
    rnd = random.Random(name)
    rows = [
        (rnd.choice(["a", "b", "c", None]), rnd.choice([None, *range(8)]), rnd.randint(-8, 8),
         rnd.randint(0, 240))
        for _ in range(300)
    ]  # fmt: skip
    if not window:
        rows = [("-" if r[0] is None else r[0], *r[1:]) for r in rows]
    table = to_table(arrival(rows, 6, rnd))
    assert_restore_matches(
        stream_sql,
        batch_sql,
        {"t": cut(table, rnd, 12)},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=6 * HALF_S // 1000)},
        sink="parquet" if window else "duckdb",
        primary_key=key or None,
    )


def test_changelog_rows_are_keyed_by_partition_and_rank(tmp_path: Path) -> None:
    """ROW_NUMBER's changelog is identified by partition and rank (by partition alone when
    one rank is kept); an upsert sink keyed otherwise is refused; RANK carries no key."""
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", to_table([]), event_time="ts")
    top3, _, _, _ = QUERIES["top3-by-key"]
    dedup = QUERIES["dedup-last"][0]

    def keys(sql: str) -> tuple:
        return ctx.prepare(sql).graph.nodes[-1].upsert_keys

    assert keys(top3) == (("k", "rn"),)
    assert keys(dedup) == (("k",),)
    assert keys(QUERIES["rank-top3"][0]) == ()
    ctx.execute(
        f"CREATE SINK by_seq WITH (connector = 'duckdb', path = '{tmp_path / 'x.duckdb'}', "
        "table = 'x', primary_key = 'seq')"
    )
    with pytest.raises(ds.PlanError, match="identified by 'k, rn'"):
        ctx.prepare(f"INSERT INTO by_seq {top3}")
    ctx.close()
