"""Streaming ASOF join: golden property tests against DuckDB's ASOF LEFT JOIN (tie-free right
times) and a brute-force reference (ties: the right row that arrived last wins), emission
timing, NULLs, bounded state, limits and snapshot/restore."""

from __future__ import annotations

import random
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from joins_harness import SEC, make, rows, run, stream_steps, ts_array

from datum_sql.engine.operators.joins.common import pack
from datum_sql.errors import CheckpointError, PlanError, QueryFailed
from datum_sql.types import END_OF_TIME

TS = pa.timestamp("us")
OPS = {("backward", False): ">=", ("backward", True): ">", ("forward", False): "<=", ("forward", True): "<"}  # fmt: skip


def tables(
    left: list[tuple[Any, ...]], right: list[tuple[Any, ...]], two_keys: bool = False
) -> tuple[pa.Table, pa.Table]:
    def build(data: list[tuple[Any, ...]], id_name: str) -> pa.Table:
        cols: dict[str, Any] = {
            id_name: pa.array(range(len(data)), pa.int64()),
            "k": pa.array([r[0] for r in data], pa.int64()),
            "ts": ts_array([r[1] for r in data]),
        }
        if two_keys:
            cols["s"] = pa.array([r[2] for r in data], pa.string())
        return pa.table(cols)

    return build(left, "lid"), build(right, "rid")


def config(
    kind: str = "left",
    direction: str = "backward",
    strict: bool = False,
    tol_s: int | None = None,
    keys: list[str] | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    keys = ["k"] if keys is None else keys
    schema = pa.schema(
        [("lid", pa.int64()), ("k", pa.int64()), ("ts", TS), ("rid", pa.int64()), ("r_ts", TS)]
    )
    return {
        "left_keys": keys,
        "right_keys": keys,
        "left_columns": [["lid", "lid"], ["k", "k"], ["ts", "ts"]],
        "right_columns": [["rid", "rid"], ["ts", "r_ts"]],
        "kind": kind,
        "state_limit_rows": limit,
        "left_time": "ts",
        "right_time": "ts",
        "direction": direction,
        "strict": strict,
        "tolerance_us": None if tol_s is None else tol_s * SEC,
        "schema": schema,
    }


def duckdb_expected(
    lt: pa.Table, rt: pa.Table, cfg: dict[str, Any]
) -> list[tuple[int, int | None]]:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("l", lt)
    con.register("r", rt)
    op = OPS[(cfg["direction"], cfg["strict"])]
    on = " AND ".join([f"l.{k} = r.{k}" for k in cfg["left_keys"]] + [f"l.ts {op} r.ts"])
    got = con.sql(
        f"SELECT l.lid, r.rid, epoch_us(l.ts) - epoch_us(r.ts) AS gap "
        f"FROM l ASOF LEFT JOIN r ON {on}"
    ).fetchall()
    out = []
    tol = cfg["tolerance_us"]
    for lid, rid, gap in got:
        if rid is not None and tol is not None and abs(gap) > tol:
            rid = None
        if rid is None and cfg["kind"] == "inner":
            continue
        out.append((lid, rid))
    return sorted(out, key=lambda r: (r[0], -1 if r[1] is None else r[1]))


def brute_expected(
    lt: pa.Table, arrival: list[tuple[int, Any, int]], cfg: dict[str, Any]
) -> list[tuple[int, int | None]]:
    """``arrival``: right rows (rid, key, ts) in the order they reached the operator."""
    forward, strict, tol = cfg["direction"] == "forward", cfg["strict"], cfg["tolerance_us"]
    keyed = bool(cfg["left_keys"])
    out = []
    for lid, k, t in zip(lt["lid"].to_pylist(), lt["k"].to_pylist(), lt["ts"].to_pylist()):
        best: tuple[Any, ...] | None = None
        if not (keyed and k is None):
            lts = t.timestamp()
            for pos, (rid, rk, rts_) in enumerate(arrival):
                if keyed and (rk is None or rk != k):
                    continue
                rts = rts_.timestamp()
                ok = (
                    (rts < lts if strict else rts <= lts)
                    if not forward
                    else (rts > lts if strict else rts >= lts)
                )
                if not ok:
                    continue
                rank = (-rts, pos) if forward else (rts, pos)
                if best is None or rank > best[0]:
                    best = (rank, rid, rts)
        rid = None
        if best is not None:
            gap = abs(lts - best[2]) * SEC
            rid = best[1] if tol is None or gap <= tol + 0.5 else None
        if rid is None and cfg["kind"] == "inner":
            continue
        out.append((lid, rid))
    return sorted(out, key=lambda r: (r[0], -1 if r[1] is None else r[1]))


def arrival_of(steps: list[tuple[Any, ...]]) -> list[tuple[int, Any, Any]]:
    out = []
    for s in steps:
        if s[0] == "batch" and s[1] == 1:
            out += zip(s[2]["rid"].to_pylist(), s[2]["k"].to_pylist(), s[2]["ts"].to_pylist())
    return out


def got_pairs(out: pa.Table) -> list[tuple[int, int | None]]:
    pairs = rows(out, "lid", "rid")
    lids = [p[0] for p in pairs]
    assert len(lids) == len(set(lids)), "a left row was emitted more than once"
    return sorted(pairs, key=lambda r: (r[0], -1 if r[1] is None else r[1]))


KEY = st.one_of(st.none(), st.integers(0, 2))
ROWS = st.lists(st.tuples(KEY, st.integers(0, 25)), max_size=40)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scenario(draw: Any, ties: bool) -> dict[str, Any]:
    left = draw(ROWS)
    right = draw(ROWS)
    keys = draw(st.sampled_from([["k"], ["k"], []]))
    if not ties:  # DuckDB picks any of equal right times: keep one per (key, time)
        right = list({(r if keys else r[1]): r for r in right}.values())
    cfg = config(
        kind=draw(st.sampled_from(["left", "inner"])),
        direction=draw(st.sampled_from(["backward", "forward"])),
        strict=draw(st.booleans()),
        tol_s=draw(st.one_of(st.none(), st.integers(0, 6))),
        keys=keys,
    )
    return {
        "left": left,
        "right": right,
        "cfg": cfg,
        "seed": draw(st.integers(0, 2**32)),
        "disorder": draw(st.sampled_from([0, 0, 3 * SEC])),
        "max_batch": draw(st.integers(1, 12)),
        "restore": draw(st.one_of(st.none(), st.floats(0, 1))),
    }


def _run_scenario(sc: dict[str, Any]) -> tuple[pa.Table, pa.Table, list[Any], pa.Table]:
    lt, rt = tables(sc["left"], sc["right"])
    rng = random.Random(sc["seed"])
    steps = stream_steps(lt, rt, rng, disorder_us=sc["disorder"], max_batch=sc["max_batch"])
    restore_at = None if sc["restore"] is None else int(sc["restore"] * (len(steps) - 1))
    out = run("asof_join", sc["cfg"], lt.schema, rt.schema, steps, restore_at=restore_at)
    return lt, rt, steps, out


@SETTINGS
@given(scenario(ties=False))
def test_streaming_asof_equals_duckdb(sc: dict[str, Any]) -> None:
    lt, rt, _, out = _run_scenario(sc)
    assert got_pairs(out) == duckdb_expected(lt, rt, sc["cfg"])


@SETTINGS
@given(scenario(ties=True))
def test_streaming_asof_ties_go_to_the_last_arrival(sc: dict[str, Any]) -> None:
    lt, _, steps, out = _run_scenario(sc)
    assert got_pairs(out) == brute_expected(lt, arrival_of(steps), sc["cfg"])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(KEY, st.integers(0, 15), st.sampled_from(["a", "b", None])), max_size=30),
    st.lists(st.tuples(KEY, st.integers(0, 15), st.sampled_from(["a", "b", None])), max_size=30),
    st.sampled_from(["left", "inner"]),
    st.integers(0, 2**32),
)
def test_two_keys_one_of_them_a_string(
    left: list[Any], right: list[Any], kind: str, seed: int
) -> None:
    right = list({(r[0], r[1], r[2]): r for r in right}.values())
    lt, rt = tables(left, right, two_keys=True)
    cfg = config(kind=kind, keys=["k", "s"])
    steps = stream_steps(lt, rt, random.Random(seed), max_batch=5)
    out = run("asof_join", cfg, lt.schema, rt.schema, steps)
    assert got_pairs(out) == duckdb_expected(lt, rt, cfg)


# -- hand-made cases -------------------------------------------------------------------------
def _left(ids: list[int], keys: list[Any], secs: list[int | None]) -> pa.RecordBatch:
    return pa.record_batch(
        {"lid": pa.array(ids, pa.int64()), "k": pa.array(keys, pa.int64()), "ts": ts_array(secs)}
    )


def _right(ids: list[int], keys: list[Any], secs: list[int | None]) -> pa.RecordBatch:
    return pa.record_batch(
        {"rid": pa.array(ids, pa.int64()), "k": pa.array(keys, pa.int64()), "ts": ts_array(secs)}
    )


L_SCHEMA = _left([], [], []).schema
R_SCHEMA = _right([], [], []).schema


def _pairs(batches: list[pa.RecordBatch]) -> list[tuple[int, int | None]]:
    if not batches:
        return []
    return rows(pa.Table.from_batches(batches), "lid", "rid")


def wm(s: int) -> int:
    from joins_harness import BASE_US

    return BASE_US + s * SEC


def test_tie_on_right_time_goes_to_the_row_that_arrived_last() -> None:
    for direction in ("backward", "forward"):
        op = make("asof_join", config(direction=direction), L_SCHEMA, R_SCHEMA)
        op.on_batch(_right([1, 2], [7, 7], [10, 10]), 1)  # within a batch: 2 arrived last
        op.on_batch(_left([100], [7], [10]), 0)
        out = op.on_watermark(wm(11), 1)
        assert _pairs(out) == [(100, 2)]
        op.on_batch(_right([3], [7], [20]), 1)
        op.on_batch(_right([4], [7], [20]), 1)  # across batches: 4 arrived last
        op.on_batch(_left([101], [7], [20]), 0)
        out = op.on_watermark(END_OF_TIME, 1)
        assert _pairs(out) == [(101, 4)]


def test_tolerance_filters_the_closest_candidate_only() -> None:
    op = make("asof_join", config(tol_s=2), L_SCHEMA, R_SCHEMA)
    op.on_batch(_right([1, 2], [1, 1], [0, 5]), 1)
    op.on_batch(_left([10, 11, 12], [1, 1, 1], [6, 8, 4]), 0)
    out = op.on_watermark(END_OF_TIME, 1)
    # 8: closest is 5 (3 s away) -> no match, never the older 0; 4: closest 0 is 4 s away
    assert _pairs(out) == [(10, 2), (11, None), (12, None)]
    # a right row exactly `tolerance` older than the left watermark is still held
    op = make("asof_join", config(tol_s=2), L_SCHEMA, R_SCHEMA)
    op.on_batch(_right([1], [1], [0]), 1)
    op.on_watermark(wm(2), 0)
    op.on_batch(_left([10], [1], [2]), 0)
    assert _pairs(op.on_watermark(END_OF_TIME, 1)) == [(10, 1)]


def test_null_keys_and_times_never_match() -> None:
    left = _left([1, 2, 3], [None, 1, 1], [5, None, 5])
    right = _right([10, 11], [None, 1], [1, 1])
    op = make("asof_join", config(), L_SCHEMA, R_SCHEMA)
    op.on_batch(right, 1)
    out = op.on_batch(left, 0)  # the NULL rows are final at once
    assert _pairs(out) == [(1, None), (2, None)]
    assert _pairs(op.on_watermark(END_OF_TIME, 1)) == [(3, 11)]
    inner = make("asof_join", config(kind="inner"), L_SCHEMA, R_SCHEMA)
    inner.on_batch(right, 1)
    assert inner.on_batch(left, 0) == []
    assert _pairs(inner.on_watermark(END_OF_TIME, 1)) == [(3, 11)]


def test_backward_emission_waits_until_the_right_watermark_passes_the_left_time() -> None:
    op = make("asof_join", config(), L_SCHEMA, R_SCHEMA)
    op.on_batch(_right([1], [1], [3]), 1)
    assert op.on_batch(_left([10], [1], [5]), 0) == []
    assert op.on_watermark(wm(5), 1) == []  # a right row at 5 may still arrive
    op.on_batch(_right([2], [1], [5]), 1)
    assert _pairs(op.on_watermark(wm(5) + 1, 1)) == [(10, 2)]
    strict = make("asof_join", config(strict=True), L_SCHEMA, R_SCHEMA)
    strict.on_batch(_right([1], [1], [3]), 1)
    assert strict.on_batch(_left([10], [1], [5]), 0) == []
    assert _pairs(strict.on_watermark(wm(5), 1)) == [(10, 1)]  # r.ts = 5 cannot qualify
    # final on arrival: emitted from on_batch
    assert _pairs(strict.on_batch(_left([11], [1], [4]), 0)) == [(11, 1)]


def test_forward_emission_waits_for_the_candidate_or_the_tolerance() -> None:
    op = make("asof_join", config(direction="forward"), L_SCHEMA, R_SCHEMA)
    op.on_batch(_left([10], [1], [5]), 0)
    op.on_batch(_right([1], [1], [9]), 1)
    assert op.on_watermark(wm(9), 1) == []  # another row at 9 could still win the tie
    assert _pairs(op.on_watermark(wm(9) + 1, 1)) == [(10, 1)]
    tol = make("asof_join", config(direction="forward", tol_s=2), L_SCHEMA, R_SCHEMA)
    tol.on_batch(_left([10], [1], [5]), 0)
    assert tol.on_watermark(wm(7), 1) == []
    assert _pairs(tol.on_watermark(wm(7) + 1, 1)) == [(10, None)]  # no row within 2 s


def test_right_state_stays_bounded_on_a_long_stream() -> None:
    n, batch, keys = 60_000, 500, 4
    rng = np.random.default_rng(3)
    for direction, tol in (("backward", None), ("backward", 5), ("forward", None)):
        op = make("asof_join", config(direction=direction, tol_s=tol), L_SCHEMA, R_SCHEMA)
        lt = np.sort(rng.integers(0, n, n))
        rt = np.sort(rng.integers(0, n, n))
        lk, rk = rng.integers(0, keys, n), rng.integers(0, keys, n)
        emitted = 0
        peak_first = peak_second = 0
        for i in range(0, n, batch):
            sl = slice(i, i + batch)
            emitted += sum(b.num_rows for b in op.on_batch(_right(list(range(i, i + batch)), rk[sl].tolist(), rt[sl].tolist()), 1))  # fmt: skip
            emitted += sum(b.num_rows for b in op.on_watermark(wm(int(rt[sl].max())), 1))
            emitted += sum(b.num_rows for b in op.on_batch(_left(list(range(i, i + batch)), lk[sl].tolist(), lt[sl].tolist()), 0))  # fmt: skip
            for b in op.on_watermark(wm(int(lt[sl].max())), 0):
                emitted += b.num_rows
            right_rows = op.describe()["right_rows_held"]
            if i < n // 2:
                peak_first = max(peak_first, right_rows)
            else:
                peak_second = max(peak_second, right_rows)
            assert op.state_size()[0] < 4 * batch
        for port in (0, 1):
            emitted += sum(b.num_rows for b in op.on_watermark(END_OF_TIME, port))
        emitted += sum(b.num_rows for b in op.on_close())
        assert emitted == n
        assert op.state_size()[0] == 0
        assert peak_second <= 2 * batch + keys and peak_first <= 2 * batch + keys


def test_state_limit_fails_the_query_naming_the_side() -> None:
    op = make("asof_join", config(limit=5), L_SCHEMA, R_SCHEMA)
    with pytest.raises(QueryFailed, match=r"'join'.*left input.*limit of 5"):
        for i in range(10):  # no right watermark: left rows wait
            op.on_batch(_left([i], [1], [i]), 0)
    op = make("asof_join", config(limit=5), L_SCHEMA, R_SCHEMA)
    with pytest.raises(QueryFailed, match=r"right input.*limit of 5") as info:
        for i in range(10):  # no left watermark: every right row may still be chosen
            op.on_batch(_right([i], [1], [i]), 1)
    assert info.value.operator == "join"


def test_snapshot_restore_mid_stream_equals_an_uninterrupted_run() -> None:
    rng = random.Random(7)
    left = [(rng.choice([0, 1, None]), rng.randint(0, 200)) for _ in range(300)]
    right = [(rng.choice([0, 1, None]), rng.randint(0, 200)) for _ in range(300)]
    lt, rt = tables(left, right)
    steps = stream_steps(lt, rt, random.Random(1), disorder_us=5 * SEC, max_batch=20)
    for cfg in (config(), config(direction="forward", strict=True, tol_s=4, kind="inner")):
        whole = run("asof_join", cfg, lt.schema, rt.schema, steps)
        for at in (3, len(steps) // 2, len(steps) - 3):
            again = run("asof_join", cfg, lt.schema, rt.schema, steps, restore_at=at)
            assert rows(again, *again.column_names) == rows(whole, *whole.column_names)


def test_restore_refuses_foreign_state() -> None:
    op = make("asof_join", config(), L_SCHEMA, R_SCHEMA)
    with pytest.raises(CheckpointError):
        op.restore(b"not a snapshot")


def test_mixed_key_types_and_describe() -> None:
    left = pa.record_batch({"lid": pa.array([1], pa.int64()), "k": pa.array([3], pa.int32()), "ts": ts_array([5])})  # fmt: skip
    op = make("asof_join", config(), left.schema, R_SCHEMA)
    op.on_batch(_right([9], [3], [4]), 1)
    op.on_batch(left, 0)
    assert op.describe()["left_rows_held"] == 1
    assert _pairs(op.on_watermark(END_OF_TIME, 1)) == [(1, 9)]


def test_bad_config_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="direction"):
        make("asof_join", config(direction="sideways"), L_SCHEMA, R_SCHEMA)
    with pytest.raises(PlanError, match="no column 'nope'"):
        make("asof_join", config(keys=["nope"]), L_SCHEMA, R_SCHEMA)
    cfg = config()
    cfg["kind"] = "full"
    with pytest.raises(PlanError, match="kind"):
        make("asof_join", cfg, L_SCHEMA, R_SCHEMA)


@pytest.mark.parametrize("span", [1_000, 2**61])
def test_pack_preserves_slot_time_order(span: int) -> None:
    rng = np.random.default_rng(0)
    slots = [rng.integers(0, 40, 500), rng.integers(0, 40, 300)]
    times = [rng.integers(-span, span, 500), rng.integers(-span, span, 300)]
    codes = np.concatenate(pack(slots, times))
    s, t = np.concatenate(slots), np.concatenate(times)
    by_pair = np.lexsort((t, s))
    assert (np.diff(codes[by_pair]) >= 0).all()
    same = (np.diff(s[by_pair]) == 0) & (np.diff(t[by_pair]) == 0)
    assert ((np.diff(codes[by_pair]) == 0) == same).all()
