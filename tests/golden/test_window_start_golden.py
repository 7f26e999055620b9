"""Golden rule for queries over a windowed aggregate's window bounds: GROUP BY its
``window_start`` (alias, plain name, shifted by an interval) or ``window_end`` over tumble,
hop and cumulate outputs, with and without keys; a window over ``window_start``; joins of two
windowed results on ``window_start`` with a residual condition (Nexmark q5's shape, inner
and LEFT); a GROUP BY on a source's event time, joined back to its rows, and rows joined
back to their window's keyless aggregate (Nexmark q7's shape, tumble and LEFT over hop:
the interval join beside a sparse side). ``window_start``
trails the watermark by the window's size, so each of these reads it behind that lag.

Rows, disorder, batches and the DuckDB windows are those of test_compose_golden: keys with
NULL, event times on a half-second grid (equal timestamps are common, most windows empty),
each source disordered within its watermark delay (no row is late).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, duckdb_result
from test_compose_golden import WATERMARK, S, arrival, cut, rows_st, stream, to_table

EOWC = " EMIT ON WINDOW CLOSE"


def tumble_d(size_s: int, table: str = "t") -> str:
    """DuckDB: the rows of ``table`` with ``ws``/``we``, their ``size_s`` tumbling window."""
    size = size_s * S
    return (
        f"(SELECT *, epoch_us(ts) // {size} * {size} AS ws, "
        f"epoch_us(ts) // {size} * {size} + {size} AS we FROM {table})"
    )


def hop_d(slide_s: int, size_s: int, table: str = "t") -> str:
    slide, size = slide_s * S, size_s * S
    n = -(-size // slide)
    return (
        f"(SELECT *, w AS ws, w + {size} AS we FROM (SELECT *, (epoch_us(ts) // {slide} - r.i) "
        f"* {slide} AS w FROM {table}, range({n}) r(i)) WHERE w + {size} > epoch_us(ts))"
    )


def cumulate_d(step_s: int, size_s: int, table: str = "t") -> str:
    step, size = step_s * S, size_s * S
    return (
        f"(SELECT *, s AS ws, s + r.i * {step} AS we FROM (SELECT *, epoch_us(ts) // {size} * "
        f"{size} AS s FROM {table}), range(1, {size // step + 1}) r(i) "
        f"WHERE s + r.i * {step} > epoch_us(ts))"
    )


HOP = "hop(t, ts, INTERVAL '5 seconds', INTERVAL '15 seconds')"
CUMULATE = "cumulate(t, ts, INTERVAL '5 seconds', INTERVAL '20 seconds')"
TUMBLE = "tumble(t, ts, INTERVAL '10 seconds')"

#: name -> (streaming SQL, DuckDB SQL, upsert key of the changelog or None if append-only)
CASES: dict[str, tuple[str, str, str | None]] = {
    "by_start_alias_over_tumble": (
        "SELECT ws, count(*) AS keys, sum(n) AS n, max(mx) AS mx FROM (SELECT k, window_start "
        f"AS ws, count(*) AS n, max(v) AS mx FROM {TUMBLE} GROUP BY window_start, window_end, k) "
        "AS w GROUP BY ws",
        "SELECT make_timestamp(ws) AS ws, count(*) AS keys, CAST(sum(n) AS BIGINT) AS n, "
        f"max(mx) AS mx FROM (SELECT k, ws, count(*) AS n, max(v) AS mx FROM {tumble_d(10)} "
        "GROUP BY ws, k) GROUP BY ws",
        "ws",
    ),
    "by_start_and_key_over_hop": (
        "SELECT window_start, k, max(n) AS top, count(*) AS c FROM (SELECT k, window_start, "
        f"window_end, count(*) AS n FROM {HOP} GROUP BY window_start, window_end, k) AS h "
        "GROUP BY window_start, k" + EOWC,
        "SELECT make_timestamp(ws) AS window_start, k, max(n) AS top, count(*) AS c FROM "
        f"(SELECT k, ws, count(*) AS n FROM {hop_d(5, 15)} GROUP BY ws, k) GROUP BY ws, k",
        None,
    ),
    "by_start_over_cumulate": (
        "SELECT ws, count(*) AS windows, max(n) AS mx, min(we) AS first_end FROM (SELECT "
        f"window_start AS ws, window_end AS we, count(*) AS n FROM {CUMULATE} "
        "GROUP BY window_start, window_end) AS c GROUP BY ws",
        "SELECT make_timestamp(ws) AS ws, count(*) AS windows, max(n) AS mx, "
        "make_timestamp(min(we)) AS first_end FROM (SELECT ws, we, count(*) AS n FROM "
        f"{cumulate_d(5, 20)} GROUP BY ws, we) GROUP BY ws",
        "ws",
    ),
    "by_end_over_cumulate": (
        "SELECT we, count(*) AS keys, sum(n) AS n FROM (SELECT k, window_end AS we, count(*) "
        f"AS n FROM {CUMULATE} GROUP BY window_end, k) AS c GROUP BY we" + EOWC,
        "SELECT make_timestamp(we) AS we, count(*) AS keys, CAST(sum(n) AS BIGINT) AS n FROM "
        f"(SELECT k, we, count(*) AS n FROM {cumulate_d(5, 20)} GROUP BY we, k) GROUP BY we",
        None,
    ),
    "by_shifted_start": (
        "SELECT s5, count(*) AS keys FROM (SELECT k, window_start + INTERVAL '5 seconds' AS s5 "
        f"FROM {TUMBLE} GROUP BY window_start, window_end, k) AS w GROUP BY s5",
        f"SELECT make_timestamp(ws + {5 * S}) AS s5, count(*) AS keys FROM (SELECT DISTINCT "
        f"k, ws FROM {tumble_d(10)}) GROUP BY ws",
        "s5",
    ),
    "window_over_start": (
        "SELECT window_start, window_end, count(*) AS windows, sum(n) AS n FROM tumble("
        f"(SELECT window_start AS ws, count(*) AS n FROM {HOP} GROUP BY window_start, "
        "window_end) AS h, ws, INTERVAL '20 seconds') GROUP BY window_start, window_end" + EOWC,
        f"SELECT make_timestamp(o) AS window_start, make_timestamp(o + {20 * S}) AS window_end, "
        "count(*) AS windows, CAST(sum(n) AS BIGINT) AS n FROM (SELECT ws // "
        f"{20 * S} * {20 * S} AS o, count(*) AS n FROM {hop_d(5, 15)} GROUP BY ws) GROUP BY o",
        None,
    ),
    "join_on_start_q5": (
        "SELECT a.k, a.n, a.ws FROM (SELECT k, count(*) AS n, window_start AS ws FROM "
        f"{HOP} GROUP BY window_start, window_end, k) AS a JOIN (SELECT max(c.n) AS maxn, "
        f"c.ws_c FROM (SELECT count(*) AS n, window_start AS ws_c FROM {HOP} GROUP BY k, "
        "window_start, window_end) AS c GROUP BY c.ws_c) AS m ON a.ws = m.ws_c AND a.n >= m.maxn",
        f"WITH counts AS (SELECT k, count(*) AS n, ws FROM {hop_d(5, 15)} GROUP BY ws, k), "
        "maxes AS (SELECT max(n) AS maxn, ws AS ws_c FROM counts GROUP BY ws) "
        "SELECT a.k, a.n, make_timestamp(a.ws) AS ws FROM counts a JOIN maxes m "
        "ON a.ws = m.ws_c AND a.n >= m.maxn",
        None,
    ),
    "left_join_on_start": (
        "SELECT a.ws, a.n AS tn, b.n AS un FROM (SELECT window_start AS ws, count(*) AS n FROM "
        f"{TUMBLE} GROUP BY window_start, window_end) AS a LEFT JOIN (SELECT window_start AS ws, "
        "count(v) AS n FROM hop(u, ts, INTERVAL '5 seconds', INTERVAL '10 seconds') GROUP BY "
        "window_start, window_end) AS b ON a.ws = b.ws AND a.n > b.n",
        "SELECT make_timestamp(a.ws) AS ws, a.n AS tn, b.n AS un FROM (SELECT ws, count(*) AS n "
        f"FROM {tumble_d(10)} GROUP BY ws) AS a LEFT JOIN (SELECT ws, count(v) AS n FROM "
        f"{hop_d(5, 10, 'u')} GROUP BY ws) AS b ON a.ws = b.ws AND a.n > b.n",
        None,
    ),
    "rows_at_their_window_max_q7": (
        "SELECT r.k, r.v, r.ts FROM t AS r JOIN (SELECT max(v) AS mv, window_end AS we FROM "
        f"{TUMBLE} GROUP BY window_end) AS m ON r.v = m.mv "
        "WHERE r.ts BETWEEN m.we - INTERVAL '10' SECOND AND m.we",
        f"SELECT r.k, r.v, r.ts FROM t AS r JOIN (SELECT max(v) AS mv, we FROM {tumble_d(10)} "
        f"GROUP BY we) AS m ON r.v = m.mv AND epoch_us(r.ts) BETWEEN m.we - {10 * S} AND m.we",
        None,
    ),
    "rows_left_joined_to_their_hop_windows_max": (
        "SELECT r.k, r.v, m.mv, m.ws FROM t AS r LEFT JOIN (SELECT max(v) AS mv, window_start "
        f"AS ws FROM {HOP} GROUP BY window_start, window_end) AS m ON r.v = m.mv "
        "AND r.ts BETWEEN m.ws AND m.ws + INTERVAL '15' SECOND",
        "SELECT r.k, r.v, m.mv, make_timestamp(m.ws) AS ws FROM t AS r LEFT JOIN (SELECT "
        f"max(v) AS mv, ws FROM {hop_d(5, 15)} GROUP BY ws) AS m ON r.v = m.mv "
        f"AND epoch_us(r.ts) BETWEEN m.ws AND m.ws + {15 * S}",
        None,
    ),
    "rows_joined_to_their_time_group": (
        "SELECT r.k, r.v, g.n, g.sv FROM t AS r JOIN (SELECT ts, count(*) AS n, sum(v) AS sv "
        "FROM t GROUP BY ts) AS g ON r.ts = g.ts WHERE r.k IS NOT NULL",
        "SELECT r.k, r.v, g.n, CAST(g.sv AS BIGINT) AS sv FROM t AS r JOIN (SELECT ts, "
        "count(*) AS n, sum(v) AS sv FROM t GROUP BY ts) AS g ON r.ts = g.ts "
        "WHERE r.k IS NOT NULL",
        None,
    ),
}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(list(CASES)),
    t_rows=rows_st,
    u_rows=rows_st,
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
)
def test_queries_over_window_bounds_equal_duckdb(
    case: str, t_rows: list, u_rows: list, max_batch: int, rnd: random.Random
) -> None:
    """Each query, streamed over disordered batches of random sizes (empty input too), ends
    equal to DuckDB's batch result (a changelog applied: its final state)."""
    stream_sql, batch_sql, _ = CASES[case]
    tables = {"t": to_table(arrival(t_rows, rnd)), "u": to_table(arrival(u_rows, rnd))}
    got, status = stream(stream_sql, {n: cut(tb, rnd, max_batch) for n, tb in tables.items()})
    assert status["late_rows"] == 0
    assert "_op" not in got.column_names
    assert_same_rows(got, duckdb_result(batch_sql, tables))


@pytest.mark.parametrize("case", list(CASES))
def test_queries_over_window_bounds_through_checkpoint_and_restore(
    case: str, tmp_path: Path
) -> None:
    """Each query over 250 rows per source into an exactly-once sink, checkpointed half-way,
    crashed and resumed: the sink ends holding DuckDB's result."""
    stream_sql, batch_sql, key = CASES[case]
    rnd = random.Random(case)

    def rows() -> list[tuple]:
        return [
            (rnd.choice(["a", "b", "c", None]), rnd.choice([None, *range(-20, 20)]),
             rnd.randint(0, 200))
            for _ in range(250)
        ]  # fmt: skip

    names = [n for n in ("t", "u") if re.search(rf"(FROM|\(|JOIN) *{n}\b", stream_sql)]
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
