"""Golden rule for composed queries: CTEs (several, each reading the one before), derived
tables, windows over a subquery or a CTE, an aggregate over a windowed aggregate, a window
over a windowed aggregate's ``window_end``, ``UNION ALL`` of two sources (a window over it
too) and ``SELECT DISTINCT`` over a windowed result. Each streamed result equals DuckDB's
batch result of the equivalent SQL over the same rows.

Rows: keys with NULL, int values with NULL, event times on a half-second grid (ties are
common, most windows are empty) in two sources ``t`` and ``u`` of the same schema, each
disordered within a bound its watermark delay covers (no row is late) and cut into
batches of random sizes. DuckDB windows use epoch arithmetic, as in test_windows_golden.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, cut, duckdb_result

import datum_sql as ds

TS = pa.timestamp("us")
BASE_US = 1_704_067_200_000_000  # 2024-01-01
HALF_S = 500_000
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("ts", TS)])
DELAY_TICKS = 8
S = 1_000_000  # one second in microseconds

row = st.tuples(
    st.sampled_from(["a", "a", "b", "c", None]),
    st.one_of(st.none(), st.integers(-30, 30)),
    st.integers(0, 200),
)
rows_st = st.lists(row, max_size=50)


def tumble_w(size_s: int, col: str = "epoch_us(ts)") -> str:
    return f"{col} // {size_s * S} * {size_s * S}"


#: name -> (streaming SQL, DuckDB SQL, upsert key of the changelog or None if append-only)
CASES: dict[str, tuple[str, str, str | None]] = {
    "cte_chain_window": (
        "WITH a AS (SELECT k, v, ts FROM t WHERE v IS NULL OR v > -20), "
        "b AS (SELECT k, v * 2 AS v2, ts AS t2 FROM a) "
        "SELECT k, window_start, window_end, count(*) AS n, sum(v2) AS s "
        "FROM tumble(b, t2, INTERVAL '10 seconds') GROUP BY window_start, window_end, k",
        "WITH a AS (SELECT k, v, ts FROM t WHERE v IS NULL OR v > -20), "
        "b AS (SELECT k, v * 2 AS v2, ts AS t2 FROM a) "
        f"SELECT k, make_timestamp(w) AS window_start, make_timestamp(w + {10 * S}) AS "
        "window_end, count(*) AS n, CAST(sum(v2) AS BIGINT) AS s "
        f"FROM (SELECT *, {tumble_w(10, 'epoch_us(t2)')} AS w FROM b) GROUP BY w, k",
        None,
    ),
    "derived_hop": (
        "SELECT window_start, window_end, count(*) AS n, max(v) AS mx FROM "
        "hop((SELECT v, ts AS et FROM t WHERE k IS NOT NULL), et, INTERVAL '5 seconds', "
        "INTERVAL '15 seconds') GROUP BY window_start, window_end",
        f"SELECT make_timestamp(w) AS window_start, make_timestamp(w + {15 * S}) AS window_end, "
        "count(*) AS n, max(v) AS mx FROM (SELECT v, epoch_us(ts) AS us, (epoch_us(ts) // "
        f"{5 * S} - r.i) * {5 * S} AS w FROM t, range(3) r(i) WHERE k IS NOT NULL) "
        f"WHERE w + {15 * S} > us GROUP BY w",
        None,
    ),
    "aggregate_over_window": (
        "SELECT k, count(*) AS windows, sum(n) AS total, max(n) AS busiest FROM "
        "(SELECT k, window_start, count(*) AS n FROM tumble(t, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end, k) AS w GROUP BY k",
        "SELECT k, count(*) AS windows, CAST(sum(n) AS BIGINT) AS total, max(n) AS busiest "
        f"FROM (SELECT k, count(*) AS n FROM (SELECT *, {tumble_w(10)} AS w FROM t) "
        "GROUP BY w, k) GROUP BY k",
        "k",
    ),
    "window_over_window_end": (
        "SELECT window_start, window_end, count(*) AS windows, sum(n) AS n, max(mx) AS mx "
        "FROM tumble((SELECT window_end AS we, k, count(*) AS n, max(v) AS mx "
        "FROM tumble(t, ts, INTERVAL '5 seconds') GROUP BY window_start, window_end, k), we, "
        "INTERVAL '20 seconds') GROUP BY window_start, window_end",
        f"SELECT make_timestamp(o) AS window_start, make_timestamp(o + {20 * S}) AS window_end, "
        "count(*) AS windows, CAST(sum(n) AS BIGINT) AS n, max(mx) AS mx FROM "
        f"(SELECT *, {tumble_w(20, 'we')} AS o FROM (SELECT w + {5 * S} AS we, k, count(*) AS n, "
        f"max(v) AS mx FROM (SELECT *, {tumble_w(5)} AS w FROM t) GROUP BY w, k)) GROUP BY o",
        None,
    ),
    "hop_over_window_end_cte": (
        "WITH per_key AS (SELECT k, window_end AS we, sum(v) AS s FROM tumble(t, ts, "
        "INTERVAL '4 seconds') GROUP BY window_start, window_end, k) "
        "SELECT k, window_start, window_end, count(s) AS cs, sum(s) AS ss FROM "
        "hop(per_key, we, INTERVAL '8 seconds', INTERVAL '16 seconds') "
        "GROUP BY window_start, window_end, k",
        "WITH per_key AS (SELECT k, w + 4000000 AS we, sum(v) AS s FROM "
        f"(SELECT *, {tumble_w(4)} AS w FROM t) GROUP BY w, k) "
        f"SELECT k, make_timestamp(o) AS window_start, make_timestamp(o + {16 * S}) AS "
        "window_end, count(s) AS cs, CAST(sum(s) AS BIGINT) AS ss FROM (SELECT *, "
        f"(we // {8 * S} - r.i) * {8 * S} AS o FROM per_key, range(3) r(i)) "
        f"WHERE o + {16 * S} > we GROUP BY o, k",
        None,
    ),
    "window_join": (
        "SELECT a.k, a.we, a.n AS tn, b.n AS un FROM (SELECT k, window_end AS we, count(*) AS n "
        "FROM tumble(t, ts, INTERVAL '10 seconds') GROUP BY window_start, window_end, k) AS a "
        "JOIN (SELECT k, window_end AS we, count(*) AS n FROM tumble(u, ts, "
        "INTERVAL '10 seconds') GROUP BY window_start, window_end, k) AS b "
        "ON a.k = b.k AND a.we = b.we",
        f"SELECT a.k, make_timestamp(a.we) AS we, a.n AS tn, b.n AS un FROM (SELECT k, w + {10 * S} "
        f"AS we, count(*) AS n FROM (SELECT *, {tumble_w(10)} AS w FROM t) GROUP BY w, k) AS a "
        f"JOIN (SELECT k, w + {10 * S} AS we, count(*) AS n FROM (SELECT *, {tumble_w(10)} AS w "
        "FROM u) GROUP BY w, k) AS b ON a.k = b.k AND a.we = b.we",
        None,
    ),
    "left_window_join": (
        "SELECT a.we, a.n AS tn, b.n AS un FROM (SELECT window_end AS we, count(*) AS n "
        "FROM tumble(t, ts, INTERVAL '5 seconds') GROUP BY window_start, window_end) AS a "
        "LEFT JOIN (SELECT window_end AS we, count(v) AS n FROM tumble(u, ts, "
        "INTERVAL '5 seconds') GROUP BY window_start, window_end) AS b ON a.we = b.we",
        f"SELECT make_timestamp(a.we) AS we, a.n AS tn, b.n AS un FROM (SELECT w + {5 * S} AS we, "
        f"count(*) AS n FROM (SELECT *, {tumble_w(5)} AS w FROM t) GROUP BY w) AS a "
        f"LEFT JOIN (SELECT w + {5 * S} AS we, count(v) AS n FROM (SELECT *, {tumble_w(5)} AS w "
        "FROM u) GROUP BY w) AS b ON a.we = b.we",
        None,
    ),
    "rows_joined_to_their_window": (
        "SELECT r.k, r.v, r.ts, m.we FROM t AS r JOIN (SELECT max(v) AS mx, window_end AS we "
        "FROM tumble(t, ts, INTERVAL '10 seconds') GROUP BY window_start, window_end) AS m "
        "ON r.v = m.mx WHERE r.ts >= m.we - INTERVAL '10 seconds' AND r.ts < m.we AND r.k <> 'c'",
        "SELECT r.k, r.v, r.ts, m.we FROM t AS r JOIN (SELECT max(v) AS mx, "
        f"make_timestamp(w + {10 * S}) AS we FROM (SELECT *, {tumble_w(10)} AS w FROM t) "
        "GROUP BY w) AS m ON r.v = m.mx "
        "WHERE r.ts >= m.we - INTERVAL 10 SECOND AND r.ts < m.we AND r.k <> 'c'",
        None,
    ),
    "union_all": (
        "SELECT k, v, ts FROM t UNION ALL SELECT k, v + 100 AS w, ts FROM u WHERE v > 0",
        "SELECT k, v, ts FROM t UNION ALL SELECT k, v + 100 AS w, ts FROM u WHERE v > 0",
        None,
    ),
    "window_over_union_all": (
        "SELECT k, window_start, window_end, count(*) AS n, sum(v) AS s FROM "
        "tumble((SELECT k, v, ts AS et FROM t UNION ALL SELECT k, v, ts AS t2 FROM u), et, "
        "INTERVAL '10 seconds') GROUP BY window_start, window_end, k",
        f"SELECT k, make_timestamp(w) AS window_start, make_timestamp(w + {10 * S}) AS "
        "window_end, count(*) AS n, CAST(sum(v) AS BIGINT) AS s FROM "
        f"(SELECT *, {tumble_w(10, 'epoch_us(et)')} AS w FROM (SELECT k, v, ts AS et FROM t "
        "UNION ALL SELECT k, v, ts AS t2 FROM u)) GROUP BY w, k",
        None,
    ),
    "distinct_over_window": (
        "SELECT DISTINCT k, n FROM (SELECT k, count(*) AS n FROM tumble(u, ts, "
        "INTERVAL '10 seconds') GROUP BY window_start, window_end, k) AS w",
        f"SELECT DISTINCT k, n FROM (SELECT k, count(*) AS n FROM (SELECT *, {tumble_w(10)} "
        "AS w FROM u) GROUP BY w, k)",
        "k, n",
    ),
}


# The outermost windowed aggregates emit final rows (append-only, into a Parquet sink).
for _name in ("cte_chain_window", "derived_hop", "window_over_window_end",
              "hop_over_window_end_cte", "window_over_union_all"):  # fmt: skip
    _stream, _batch, _key = CASES[_name]
    CASES[_name] = (_stream + " EMIT ON WINDOW CLOSE", _batch, _key)


def to_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "ts": pa.array([BASE_US + r[2] * HALF_S for r in rows], pa.int64()).cast(TS),
        },
        schema=SCHEMA,
    )


def arrival(rows: list[tuple], rnd: random.Random) -> list[tuple]:
    """``rows`` disordered by at most DELAY_TICKS (the watermark delay): none is late."""
    keyed = [(r[2] + rnd.randint(0, DELAY_TICKS), i, r) for i, r in enumerate(rows)]
    return [r for _, _, r in sorted(keyed)]


WATERMARK = ds.BoundedOutOfOrderness(milliseconds=DELAY_TICKS * HALF_S // 1000)


def stream(sql: str, inputs: dict[str, list[pa.RecordBatch]]) -> tuple[pa.Table, dict]:
    ctx = ds.Context(state_dir=None)
    for name, batches in inputs.items():
        ctx.register_arrow(name, batches, schema=SCHEMA, event_time="ts", watermark=WATERMARK)
    q = ctx.execute_streaming(sql)
    result = q.to_arrow(timeout=60)
    status = q.status()
    ctx.close()
    return result, status


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(list(CASES)),
    t_rows=rows_st,
    u_rows=rows_st,
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
)
def test_composed_queries_equal_duckdb(
    case: str, t_rows: list, u_rows: list, max_batch: int, rnd: random.Random
) -> None:
    """Each composed query, streamed over disordered batches of random sizes, ends equal to
    DuckDB's batch result (a changelog applied: its final state)."""
    stream_sql, batch_sql, _ = CASES[case]
    tables = {"t": to_table(arrival(t_rows, rnd)), "u": to_table(arrival(u_rows, rnd))}
    got, status = stream(stream_sql, {n: cut(tb, rnd, max_batch) for n, tb in tables.items()})
    assert status["late_rows"] == 0
    assert "_op" not in got.column_names
    assert_same_rows(got, duckdb_result(batch_sql, tables))


@pytest.mark.parametrize("case", list(CASES))
def test_composed_queries_through_checkpoint_and_restore(case: str, tmp_path: Path) -> None:
    """Each query over 250 rows per source into an exactly-once sink (Parquet when
    append-only, a DuckDB upsert on the key for a changelog, with no NULL key), checkpointed
    half-way, crashed at three quarters and resumed: the sink ends holding DuckDB's result."""
    stream_sql, batch_sql, key = CASES[case]
    rnd = random.Random(case)

    def rows() -> list[tuple]:
        out = [
            (rnd.choice(["a", "b", "c", None]), rnd.choice([None, *range(-20, 20)]),
             rnd.randint(0, 200))
            for _ in range(250)
        ]  # fmt: skip
        return [("-" if r[0] is None else r[0], *r[1:]) for r in out] if key else out

    names = [n for n in ("t", "u") if re.search(rf"(FROM|\() *{n}\b", stream_sql)]
    inputs = {name: cut(to_table(arrival(rows(), rnd)), rnd, 12) for name in names}
    assert_restore_matches(
        stream_sql,
        batch_sql,
        inputs,
        tmp_path / "state",
        event_time=dict.fromkeys(names, "ts"),
        watermark=dict.fromkeys(names, WATERMARK),
        sink="duckdb" if key else "parquet",
        primary_key=key,
        timeout=120,
    )
