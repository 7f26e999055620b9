"""Golden rule for over-window aggregates: ``agg(x) OVER (PARTITION BY k ORDER BY ts <frame>)``
streamed (each row once the watermark passes its time) equals DuckDB running the same
window functions as a batch.

A ROWS frame orders rows with equal times by arrival: every row carries ``seq``, its
arrival position, and DuckDB orders by ``ts, seq`` (the streaming query orders by ``ts``
alone), so both sides are deterministic with many ties. A RANGE frame treats equal times
as peers, so DuckDB orders by ``ts`` alone; first_value/last_value, which pick one peer,
stay with ROWS frames. Rows: a key with few values and NULL, an int with NULLs, a float
in quarters (sums exact either way), event times on a half-second grid with many ties;
arrival is bounded disorder within the watermark delay, so nothing is late; batches have
random sizes.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, duckdb_result
from test_topn_golden import HALF_S, SCHEMA, SETTINGS, arrival, cut, rows_st, to_table

import datum_sql as ds

ROWS_CALLS = (
    "count(*) OVER w AS n, count(v) OVER w AS nv, sum(v) OVER w AS sv, avg(x) OVER w AS ax, "
    "min(v) OVER w AS lo, max(x) OVER w AS hi, first_value(v) OVER w AS fv, "
    "last_value(x) OVER w AS lx"
)
RANGE_CALLS = (
    "count(*) OVER w AS n, sum(x) OVER w AS sx, avg(v) OVER w AS av, min(x) OVER w AS lo, "
    "max(v) OVER w AS hi"
)


def over(calls: str, select: str, frame: str, *, ties_by_seq: bool, where: str = "",
         partition: str = "PARTITION BY k ") -> tuple[str, str]:  # fmt: skip
    """(streaming, DuckDB) SQL of ``select, calls`` over window ``w``, spelled inline."""
    stream_w = f"({partition}ORDER BY ts {frame})"
    duck_w = f"({partition}ORDER BY ts{', seq' if ties_by_seq else ''} {frame})"
    tail = f" FROM t{' WHERE ' + where if where else ''}"
    return (
        f"SELECT {select}, {calls.replace('OVER w', 'OVER ' + stream_w)}{tail}",
        f"SELECT {select}, {calls.replace('OVER w', 'OVER ' + duck_w)}{tail}",
    )


QUERIES = {
    "rows-3-preceding": over(ROWS_CALLS, "k, v, seq", "ROWS BETWEEN 3 PRECEDING AND CURRENT ROW",
                             ties_by_seq=True),
    "rows-0-preceding": over(ROWS_CALLS, "k, seq", "ROWS BETWEEN CURRENT ROW AND CURRENT ROW",
                             ties_by_seq=True),
    "rows-unbounded": over(ROWS_CALLS + ", row_number() OVER w AS rn, lag(v, 2, -1) OVER w AS l2",
                           "k, v, seq", "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
                           ties_by_seq=True),
    "rows-global-filtered": over(
        "sum(v) OVER w AS sv, max(v) OVER w AS hi, lag(x) OVER w AS lx", "seq, v * 2 AS v2",
        "ROWS 5 PRECEDING", ties_by_seq=True, where="v IS NOT NULL AND v > 1", partition=""),
    "range-2s": over(RANGE_CALLS, "k, x, seq",
                     "RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW",
                     ties_by_seq=False),
    "range-current-row": over(RANGE_CALLS, "k, seq", "RANGE BETWEEN CURRENT ROW AND CURRENT ROW",
                              ties_by_seq=False),
    # SQL's default frame with ORDER BY: RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    "range-unbounded-default": over(RANGE_CALLS, "k, seq", "", ties_by_seq=False),
    "range-expressions": (
        "SELECT seq, v - min(v) OVER (PARTITION BY k || 'x' ORDER BY ts RANGE BETWEEN "
        "INTERVAL '3' SECOND PRECEDING AND CURRENT ROW) AS above FROM t WHERE x >= -1",
        "SELECT seq, v - min(v) OVER (PARTITION BY k || 'x' ORDER BY ts RANGE BETWEEN "
        "INTERVAL 3 SECOND PRECEDING AND CURRENT ROW) AS above FROM t WHERE x >= -1",
    ),
}  # fmt: skip


#: Over a changelog: a top-1 per ``v`` (an unbounded top-N, as in Nexmark q6) or a GROUP BY,
#: whose rows change after they came out. Rows with equal ORDER BY values are ordered by
#: their other columns, which DuckDB spells out. name -> (stream SQL, DuckDB SQL, upsert key)
TOP1 = (
    "(SELECT k, v, x, ts, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY v ORDER BY x DESC, "
    "ts) AS rn FROM t) WHERE rn = 1) q"
)
CHANGELOG_QUERIES = {
    "top1-rows": (
        "SELECT k, v, seq, sum(x) OVER (PARTITION BY k ORDER BY ts ROWS 2 PRECEDING) AS sx, "
        f"min(v) OVER (PARTITION BY k ORDER BY ts ROWS 2 PRECEDING) AS lo FROM {TOP1}",
        "SELECT k, v, seq, sum(x) OVER (PARTITION BY k ORDER BY ts, k, v, x, seq ROWS 2 "
        "PRECEDING) AS sx, min(v) OVER (PARTITION BY k ORDER BY ts, k, v, x, seq ROWS 2 "
        f"PRECEDING) AS lo FROM {TOP1}",
        "v",
    ),
    # as Nexmark q6 selects it: no column of the result identifies a row (a multiset)
    "top1-rows-keyless": (
        f"SELECT k, avg(x) OVER (PARTITION BY k ORDER BY ts ROWS 2 PRECEDING) AS ax FROM {TOP1}",
        "SELECT k, avg(x) OVER (PARTITION BY k ORDER BY ts, k, v, x, seq ROWS 2 PRECEDING) AS ax "
        f"FROM {TOP1}",
        None,
    ),
    "top1-range": (
        "SELECT v, seq, count(*) OVER w AS n, avg(x) OVER w AS ax, max(seq) OVER w AS hi "
        f"FROM {TOP1}",
        "SELECT v, seq, count(*) OVER w AS n, avg(x) OVER w AS ax, max(seq) OVER w AS hi "
        f"FROM {TOP1}",
        "v",
    ),
    "top1-unbounded": (
        "SELECT k, v, sum(v) OVER w AS sv, first_value(seq) OVER w AS f, row_number() OVER w "
        f"AS rn, lag(x) OVER w AS lx FROM {TOP1}",
        "SELECT k, v, sum(v) OVER w AS sv, first_value(seq) OVER w AS f, row_number() OVER w "
        f"AS rn, lag(x) OVER w AS lx FROM {TOP1}",
        "v",
    ),
    "groupby-ordered-by-key": (
        "SELECT k, n, sum(n) OVER (ORDER BY k ROWS 1 PRECEDING) AS s2 "
        "FROM (SELECT k, count(*) AS n FROM t GROUP BY k) g",
        "SELECT k, n, sum(n) OVER (ORDER BY k ROWS 1 PRECEDING) AS s2 "
        "FROM (SELECT k, count(*) AS n FROM t GROUP BY k) g",
        "k",
    ),
    # rank and its kin are the same whatever the order of peers (equal ts)
    "top1-ranks": (
        "SELECT k, v, rank() OVER w AS r, dense_rank() OVER w AS dr, percent_rank() OVER w AS pr, "
        f"cume_dist() OVER w AS cd FROM {TOP1}",
        "SELECT k, v, rank() OVER w AS r, dense_rank() OVER w AS dr, percent_rank() OVER w AS pr, "
        f"cume_dist() OVER w AS cd FROM {TOP1}",
        "v",
    ),
    "top1-lead-ntile-nth": (
        "SELECT k, v, lead(seq, 2, -1) OVER w AS ld, ntile(3) OVER w AS nt, nth_value(x, 2) "
        f"OVER w AS nx FROM {TOP1}",
        "SELECT k, v, lead(seq, 2, -1) OVER w AS ld, ntile(3) OVER w AS nt, nth_value(x, 2) "
        f"OVER w AS nx FROM {TOP1}",
        "v",
    ),
    # over the append-only t: still a changelog, as no watermark makes these rows final
    "ranks-by-time": (
        "SELECT k, seq, rank() OVER w AS r, dense_rank() OVER w AS dr, percent_rank() OVER w "
        "AS pr, cume_dist() OVER w AS cd FROM t",
        "SELECT k, seq, rank() OVER w AS r, dense_rank() OVER w AS dr, percent_rank() OVER w "
        "AS pr, cume_dist() OVER w AS cd FROM t",
        "seq",
    ),
    # ORDER BY a column that is not event time (seq: unique, so lead/ntile/nth_value are
    # defined)
    "ordered-by-seq": (
        "SELECT k, seq, lead(v, 2, -1) OVER w AS ld, ntile(3) OVER w AS nt, nth_value(x, 2) "
        "OVER w AS nx, sum(x) OVER w AS sx FROM t",
        "SELECT k, seq, lead(v, 2, -1) OVER w AS ld, ntile(3) OVER w AS nt, nth_value(x, 2) "
        "OVER w AS nx, sum(x) OVER w AS sx FROM t",
        "seq",
    ),
    "ordered-by-value-range": (
        "SELECT k, seq, sum(x) OVER (PARTITION BY k ORDER BY v) AS sx, count(*) OVER "
        "(PARTITION BY k ORDER BY v) AS n FROM t",
        "SELECT k, seq, sum(x) OVER (PARTITION BY k ORDER BY v) AS sx, count(*) OVER "
        "(PARTITION BY k ORDER BY v) AS n FROM t",
        "seq",
    ),
}
WINDOWS = {
    "top1-ranks": ("(PARTITION BY k ORDER BY ts)", "(PARTITION BY k ORDER BY ts)"),
    # a ROWS frame: a RANGE frame's peers (equal ts) would differ from the oracle's, whose
    # ORDER BY spells the engine's tie order out and so has no peers
    "top1-lead-ntile-nth": (
        "(PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING)",
        "(PARTITION BY k ORDER BY ts, k, v, x, seq ROWS UNBOUNDED PRECEDING)",
    ),
    "ranks-by-time": ("(PARTITION BY k ORDER BY ts)", "(PARTITION BY k ORDER BY ts)"),
    "ordered-by-seq": ("(PARTITION BY k ORDER BY seq ROWS 2 PRECEDING)",) * 2,
    "top1-range": (
        "(PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW)",
        "(PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 2 SECOND PRECEDING AND CURRENT ROW)",
    ),
    "top1-unbounded": (
        "(PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING)",
        "(PARTITION BY k ORDER BY ts, k, v, x, seq ROWS UNBOUNDED PRECEDING)",
    ),
}
for _name, (_stream_w, _duck_w) in WINDOWS.items():
    _s, _d, _key = CHANGELOG_QUERIES[_name]
    CHANGELOG_QUERIES[_name] = (
        _s.replace("OVER w", f"OVER {_stream_w}"),
        _d.replace("OVER w", f"OVER {_duck_w}"),
        _key,
    )


def duck(sql: str) -> str:
    return sql.replace("INTERVAL '2' SECOND", "INTERVAL 2 SECOND")


def run(sql: str, batches: list[pa.RecordBatch], delay: int) -> pa.Table:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", batches, schema=SCHEMA, event_time="ts",
                       watermark=ds.BoundedOutOfOrderness(milliseconds=delay * HALF_S // 1000))  # fmt: skip
    try:
        return ctx.execute_streaming(sql).to_arrow(timeout=60)
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
def test_over_equals_duckdb(
    rows: list, name: str, disorder: int, max_batch: int, rnd: random.Random
) -> None:
    stream_sql, batch_sql = QUERIES[name]
    table = to_table(arrival(rows, disorder, rnd))
    got = run(stream_sql, cut(table, rnd, max_batch), disorder)
    assert_same_rows(got, duckdb_result(duck(batch_sql), {"t": table}))


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_over_through_checkpoint_and_restore(name: str, tmp_path: Path) -> None:
    """300 disordered rows, checkpointed half-way, crashed at three quarters, resumed: the
    exactly-once Parquet sink ends holding DuckDB's result."""
    stream_sql, batch_sql = QUERIES[name]
    rnd = random.Random(name)
    rows = [
        (rnd.choice(["a", "b", "c", None]), rnd.choice([None, *range(8)]), rnd.randint(-8, 8),
         rnd.randint(0, 240))
        for _ in range(300)
    ]  # fmt: skip
    table = to_table(arrival(rows, 6, rnd))
    assert_restore_matches(
        stream_sql,
        duck(batch_sql),
        {"t": cut(table, rnd, 12)},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=6 * HALF_S // 1000)},
        sink="parquet",
    )


@SETTINGS
@given(
    rows=rows_st,
    name=st.sampled_from(sorted(CHANGELOG_QUERIES)),
    disorder=st.integers(0, 12),
    max_batch=st.integers(1, 15),
    rnd=st.randoms(use_true_random=False),
)
def test_over_a_changelog_equals_duckdb(
    rows: list, name: str, disorder: int, max_batch: int, rnd: random.Random
) -> None:
    stream_sql, batch_sql, _ = CHANGELOG_QUERIES[name]
    table = to_table(arrival(rows, disorder, rnd))
    got = run(stream_sql, cut(table, rnd, max_batch), disorder)
    assert_same_rows(got, duckdb_result(batch_sql, {"t": table}))


@pytest.mark.parametrize("name", sorted(n for n, q in CHANGELOG_QUERIES.items() if q[2]))
def test_over_a_changelog_through_checkpoint_and_restore(name: str, tmp_path: Path) -> None:
    """The changelog, upserted by the input's key into DuckDB through a checkpoint, a
    crash and a restore, ends holding DuckDB's result (keys without NULLs)."""
    stream_sql, batch_sql, key = CHANGELOG_QUERIES[name]
    rnd = random.Random(name)
    rows = [(rnd.choice("abc"), rnd.randint(0, 30), rnd.randint(-8, 8), rnd.randint(0, 240))
            for _ in range(300)]  # fmt: skip
    table = to_table(arrival(rows, 6, rnd))
    assert_restore_matches(
        stream_sql,
        batch_sql,
        {"t": cut(table, rnd, 12)},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=6 * HALF_S // 1000)},
        primary_key=key,
    )


def test_over_a_changelog_re_emits_only_rows_whose_frame_changed() -> None:
    """A new top row for one key retracts and re-emits the rows its frame reaches, not the
    rest of the partition; the result is keyed by the input's key."""
    ctx = ds.Context(state_dir=None)
    rows = [("a", v, 4 * i, i) for i, v in enumerate([1, 2, 3, 4, 5, 6])] + [("a", 2, 32, 20)]
    ctx.register_arrow("t", to_table(rows), event_time="ts", batch_size=6)
    sql = ("SELECT v, sum(x) OVER (PARTITION BY k ORDER BY ts ROWS 1 PRECEDING) AS s "
           f"FROM {TOP1}")  # fmt: skip
    assert ctx.prepare(sql).graph.nodes[-1].upsert_keys == (("v",),)
    with ctx.execute_streaming(sql) as q:
        batches = [b for b in q if b.num_rows]
    ctx.close()
    last = batches[-1].to_pylist()
    # v=2 moved from ts 1 to ts 20: it and the rows after its old and new places change
    assert sorted((r["_op"], r["v"]) for r in last) == [("+I", 2), ("+I", 3), ("-D", 2), ("-D", 3)]


def test_rows_come_out_in_event_time_order_once_final() -> None:
    """Each row is emitted once, after the watermark passes its time, in time order (equal
    times in arrival order), and state keeps only what the frame needs."""
    rnd = random.Random(3)
    rows = [(rnd.choice("ab"), rnd.randint(0, 9), 0, rnd.randint(0, 200)) for _ in range(400)]
    table = to_table(arrival(rows, 4, rnd))
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", table, event_time="ts", batch_size=7,
                       watermark=ds.BoundedOutOfOrderness(milliseconds=4 * HALF_S // 1000))  # fmt: skip
    sql = ("SELECT seq, ts, sum(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN "
           "INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) AS s FROM t")  # fmt: skip
    with ctx.execute_streaming(sql) as q:
        got = q.to_arrow(timeout=60)
        status = q.status()
    ctx.close()
    assert sorted(got.column("seq").to_pylist()) == list(range(400))
    order = list(zip(got.column("ts").to_pylist(), got.column("seq").to_pylist(), strict=True))
    assert order == sorted(order)
    assert status["late_rows"] == 0


def test_lag_defaults_and_extremes_of_any_type_equal_the_batch_query() -> None:
    """lag's default takes the result's type (as the batch query casts it); min/max order
    text and timestamps too."""
    rnd = random.Random(11)
    rows = [(rnd.choice("ab"), rnd.randint(0, 9), rnd.randint(-8, 8), i) for i in range(60)]
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", to_table(arrival(rows, 0, rnd)), event_time="ts", batch_size=9)
    for sql in (
        "SELECT seq, lag(v, 2, 0.5) OVER (PARTITION BY k ORDER BY ts) AS l FROM t",
        "SELECT seq, lag(k, 1, 'none') OVER (ORDER BY ts) AS l, min(k || CAST(v AS VARCHAR)) "
        "OVER (ORDER BY ts ROWS 3 PRECEDING) AS lo, max(ts) OVER (ORDER BY ts "
        "ROWS 3 PRECEDING) AS hi FROM t",
    ):
        streamed = ctx.execute_streaming(sql).to_arrow(timeout=60)
        assert_same_rows(streamed, ctx.sql(sql))
    ctx.close()
