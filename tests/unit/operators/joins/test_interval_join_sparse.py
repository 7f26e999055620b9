"""The interval join beside a sparse side (``sparse_interval_join``: rows held as they arrived,
pairs found by time, keys compared on them): DuckDB's range join (inner and LEFT, with
and without keys, residual filters, rows out of order, watermarks, snapshots), whichever
side is sparse; state dropped by watermarks; limits; configs it refuses."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from joins_harness import BASE_US, SEC, make, rows, run, stream_steps
from test_interval_join import RESIDUALS, config, duckdb_expected, tables

from datum_sql.engine.operators.joins.interval import IntervalJoin
from datum_sql.engine.operators.joins.interval_sparse import SparseIntervalJoin
from datum_sql.errors import CheckpointError, PlanError, QueryFailed

KEY = st.one_of(st.none(), st.integers(0, 2))
ROWS = st.lists(st.tuples(KEY, st.integers(0, 30)), max_size=40)


def sparse(cfg: dict[str, Any], side: str = "right", keys: bool = True) -> dict[str, Any]:
    out = {**cfg, "sparse_side": side}
    if not keys:
        out.update(left_keys=[], right_keys=[])
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ROWS,
    ROWS,
    st.sampled_from(["inner", "left"]),
    st.tuples(st.integers(-8, 8), st.integers(0, 10)),
    st.sampled_from(["left", "right"]),
    st.booleans(),
    st.integers(0, 2**32),
    st.sampled_from([0, 0, 4 * SEC]),
    st.integers(1, 10),
    st.one_of(st.none(), st.floats(0, 1)),
    st.sampled_from([None, *RESIDUALS]),
)
def test_sparse_side_join_equals_duckdb(
    left: list[Any],
    right: list[Any],
    kind: str,
    bounds: tuple[int, int],
    side: str,
    keys: bool,
    seed: int,
    disorder: int,
    max_batch: int,
    restore: float | None,
    residual: str | None,
) -> None:
    lower, width = bounds
    base = config(kind, lower, lower + width)
    if residual is not None:
        base["residual"] = RESIDUALS[residual]
    cfg = sparse(base, side, keys)
    lt, rt = tables(left, right)
    steps = stream_steps(lt, rt, random.Random(seed), disorder_us=disorder, max_batch=max_batch)
    restore_at = None if restore is None else int(restore * (len(steps) - 1))
    out = run("sparse_interval_join", cfg, lt.schema, rt.schema, steps, restore_at=restore_at)
    if not keys:  # no equality: every pair in range (NULL keys take part)
        lt = lt.set_column(1, "k", pa.array([0] * lt.num_rows, pa.int64()))
        rt = rt.set_column(1, "k", pa.array([0] * rt.num_rows, pa.int64()))
    extra = None if residual is None else residual
    assert rows(out, "lid", "rid") == duckdb_expected(lt, rt, cfg, extra)


def test_the_sparse_join_is_its_own_kind_and_restores_only_its_own_state() -> None:
    """``sparse_interval_join`` builds the sparse join and ``interval_join`` the join held
    by key, whatever the config says; each restores the snapshots of its own kind only."""
    lt, rt = tables([(1, 1)], [(1, 1)])
    op = make("sparse_interval_join", sparse(config()), lt.schema, rt.schema)
    assert type(op) is SparseIntervalJoin and op.KIND == "sparse_interval_join"
    assert op.describe()["held_by"] == "arrival"
    by_key = make("interval_join", sparse(config()), lt.schema, rt.schema)
    assert type(by_key) is IntervalJoin
    for o in (op, by_key):
        o.on_batch(lt.to_batches()[0], 0)
        o.on_batch(rt.to_batches()[0], 1)
    fresh = make("sparse_interval_join", sparse(config()), lt.schema, rt.schema)
    fresh.restore(op.snapshot())
    assert fresh.describe()["left_rows_held"] == 1
    with pytest.raises(
        CheckpointError, match="'sparse_interval_join' operator, not 'interval_join'"
    ):
        make("interval_join", config(), lt.schema, rt.schema).restore(op.snapshot())
    with pytest.raises(
        CheckpointError, match="'interval_join' operator, not 'sparse_interval_join'"
    ):
        fresh.restore(by_key.snapshot())


def test_held_chunks_go_once_the_other_watermark_passes_them() -> None:
    """Left rows are held until the right watermark passes l.ts - lower, right rows until
    the left watermark passes r.ts + upper; a sparse side's rows share one chunk."""
    lt, rt = tables([(1, s) for s in range(10)], [(1, s) for s in range(3)])
    op = make("sparse_interval_join", sparse(config("inner", -2, 3)), lt.schema, rt.schema)
    op.on_batch(lt.to_batches()[0], 0)
    for batch in rt.to_batches(max_chunksize=1):
        op.on_batch(batch, 1)
    assert op.describe()["left_rows_held"] == 10
    assert op.describe()["right_rows_held"] == 3
    assert len(op._held[1]) == 1  # merged, not one chunk per row
    op.on_watermark(BASE_US + 5 * SEC, 0)  # r.ts + 3 < 5 for r.ts in 0..1: not all yet
    assert op.describe()["right_rows_held"] == 3
    op.on_watermark(BASE_US + 6 * SEC, 0)  # every right row past its limit
    assert op.describe()["right_rows_held"] == 0
    op.on_watermark(BASE_US + 12 * SEC, 1)  # l.ts + 2 < 12 for l.ts < 10: all done
    assert op.describe()["left_rows_held"] == 0


def test_state_limit_names_the_side() -> None:
    lt, rt = tables([(1, s) for s in range(4)], [(1, s) for s in range(4)])
    op = make("sparse_interval_join", sparse(config(limit=3)), lt.schema, rt.schema)
    with pytest.raises(QueryFailed, match=r"left input.*limit of 3"):
        op.on_batch(lt.to_batches()[0], 0)
    op = make("sparse_interval_join", sparse(config(limit=3)), lt.schema, rt.schema)
    with pytest.raises(QueryFailed, match=r"right input.*limit of 3"):
        op.on_batch(rt.to_batches()[0], 1)


def test_configs_it_cannot_run_are_refused() -> None:
    lt, rt = tables([(1, 1)], [(1, 1)])
    with pytest.raises(PlanError, match="lower <= upper"):
        make("sparse_interval_join", sparse(config("inner", 3, 2)), lt.schema, rt.schema)
    with pytest.raises(PlanError, match="sparse_side"):
        make("sparse_interval_join", {**config(), "sparse_side": "both"}, lt.schema, rt.schema)
    strings = lt.set_column(1, "k", pa.array(["a"], pa.string()))
    other = rt.set_column(1, "k", pa.array(["a"], pa.string()))
    with pytest.raises(PlanError, match="int64"):
        make("sparse_interval_join", sparse(config()), strings.schema, other.schema)
