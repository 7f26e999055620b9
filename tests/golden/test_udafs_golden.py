"""Golden rule for aggregate Python functions: UDAFs written with accumulate / merge /
finish equal DuckDB's built-in equivalents, in tumble, hop and session windows and an
unbounded GROUP BY (both emit modes), at any batch size and bounded disorder, through a
checkpoint and a restore, over a changelog (with ``retract``), and in ``ctx.sql``.

The functions (registered below, for the whole process) and DuckDB's equivalents:
``py_sum`` = ``sum`` (a retracting one; ``py_sum_groups`` the same in the batched form,
over many groups per call), ``py_mean`` = ``avg``, ``py_count`` = ``count``,
``py_median`` = ``median`` (its state is a list of every value: a nested state column),
``py_dot(x, v)`` = ``sum(x * v)`` (two arguments). The rows are those of
``test_aggregates_golden`` (floats are multiples of 1/4, so sums are exact in any order).
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, duckdb_result
from test_aggregates_golden import HALF_S, arrival, assert_close_rows, cut, row_st, stream, to_table

import datum_sql as ds


@ds.udaf(input_types=["BIGINT"], return_type="BIGINT", name="py_sum")
class PySum:
    """sum(v): NULL without a non-NULL value; takes rows back out."""

    state = {"s": "BIGINT", "n": "BIGINT"}
    initial = {"s": 0, "n": 0}

    def accumulate(self, state: dict, v: pa.Array) -> dict:
        return {"s": state["s"] + (pc.sum(v).as_py() or 0), "n": state["n"] + pc.count(v).as_py()}

    def retract(self, state: dict, v: pa.Array) -> dict:
        return {"s": state["s"] - (pc.sum(v).as_py() or 0), "n": state["n"] - pc.count(v).as_py()}

    def merge(self, state: dict, other: dict) -> dict:
        return {"s": state["s"] + other["s"], "n": state["n"] + other["n"]}

    def finish(self, state: dict) -> int | None:
        return state["s"] if state["n"] else None


@ds.udaf(input_types=["BIGINT"], return_type="BIGINT", name="py_sum_groups")
class PySumGroups(PySum):
    """py_sum over many groups per call (the batched form): numpy per group id."""

    def accumulate_groups(self, state: dict, groups: pa.Array, v: pa.Array, sign: int = 1) -> dict:
        n = len(state["s"])
        g, ok = np.asarray(groups), np.asarray(v.is_valid())
        total = np.zeros(n, np.int64)
        np.add.at(total, g, np.asarray(v.fill_null(0)))
        count = np.bincount(g[ok], minlength=n)
        return self.merge_groups(state, {"s": pa.array(sign * total), "n": pa.array(sign * count)})

    def retract_groups(self, state: dict, groups: pa.Array, v: pa.Array) -> dict:
        return self.accumulate_groups(state, groups, v, -1)

    def merge_groups(self, state: dict, other: dict) -> dict:
        return {"s": pc.add(state["s"], other["s"]), "n": pc.add(state["n"], other["n"])}

    def finish_groups(self, state: dict) -> pa.Array:
        return pc.if_else(pc.greater(state["n"], 0), state["s"], pa.scalar(None, pa.int64()))


@ds.udaf(input_types=["DOUBLE"], return_type="DOUBLE", name="py_mean")
class PyMean(PySum):
    state = {"s": "DOUBLE", "n": "BIGINT"}
    initial = {"s": 0.0, "n": 0}

    def finish(self, state: dict) -> float | None:
        return state["s"] / state["n"] if state["n"] else None


@ds.udaf(input_types=["BIGINT"], return_type="BIGINT", state={"n": "BIGINT"}, name="py_count")
class PyCount:
    initial = {"n": 0}

    def accumulate(self, state: dict, v: pa.Array) -> dict:
        return {"n": state["n"] + pc.count(v).as_py()}

    def merge(self, state: dict, other: dict) -> dict:
        return {"n": state["n"] + other["n"]}

    def finish(self, state: dict) -> int:
        return state["n"]


@ds.udaf(input_types=["DOUBLE"], return_type="DOUBLE", name="py_median")
class PyMedian:
    """Keeps every non-NULL value (a list<double> state)."""

    state = {"values": pa.list_(pa.float64())}
    initial = {"values": []}

    def accumulate(self, state: dict, x: pa.Array) -> dict:
        return {"values": state["values"] + x.drop_null().to_pylist()}

    def retract(self, state: dict, x: pa.Array) -> dict:
        values = list(state["values"])
        for value in x.drop_null().to_pylist():
            values.remove(value)
        return {"values": values}

    def merge(self, state: dict, other: dict) -> dict:
        return {"values": state["values"] + other["values"]}

    def finish(self, state: dict) -> float | None:
        values = sorted(state["values"])
        n = len(values)
        if n == 0:
            return None
        return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


@ds.udaf(input_types=["DOUBLE", "BIGINT"], return_type="DOUBLE", name="py_dot")
class PyDot:
    """sum(x * v) over the rows where both are set."""

    state = {"s": "DOUBLE", "n": "BIGINT"}
    initial = {"s": 0.0, "n": 0}

    def accumulate(self, state: dict, x: pa.Array, v: pa.Array) -> dict:
        products = pc.multiply(x, v.cast(pa.float64()))
        return {"s": state["s"] + (pc.sum(products).as_py() or 0.0),
                "n": state["n"] + pc.count(products).as_py()}  # fmt: skip

    def merge(self, state: dict, other: dict) -> dict:
        return {"s": state["s"] + other["s"], "n": state["n"] + other["n"]}

    def finish(self, state: dict) -> float | None:
        return state["s"] if state["n"] else None


#: (streaming SQL, DuckDB SQL) of each aggregate, named.
AGGREGATES = {
    "s": ("py_sum(v)", "CAST(sum(v) AS BIGINT)"),
    "sg": ("py_sum_groups(v)", "CAST(sum(v) AS BIGINT)"),
    "fsg": ("py_sum_groups(v) FILTER (WHERE x < 0)", "CAST(sum(v) FILTER (WHERE x < 0) AS BIGINT)"),
    "m": ("py_mean(x)", "avg(x)"),
    "c": ("py_count(v)", "count(v)"),
    "md": ("py_median(x)", "median(x)"),
    "d": ("py_dot(x, v)", "sum(x * v)"),
    "fs": ("py_sum(v) FILTER (WHERE x > 0)", "CAST(sum(v) FILTER (WHERE x > 0) AS BIGINT)"),
    "fc": ("py_count(v) FILTER (WHERE v > 100)", "count(v) FILTER (WHERE v > 100)"),
}
NAMES = sorted(AGGREGATES)


def agg_list(names: list[str], side: int) -> str:
    return ", ".join(f"{AGGREGATES[n][side]} AS {n}" for n in names)


def query(kind: str, names: list[str], emit: bool) -> tuple[str, str]:
    """(streaming SQL, DuckDB SQL) of ``names`` grouped by k over ``kind``."""
    ours, duck = agg_list(names, 0), agg_list(names, 1)
    close = " EMIT ON WINDOW CLOSE" if emit else ""
    if kind == "group_by":
        return f"SELECT k, {ours} FROM t GROUP BY k", f"SELECT k, {duck} FROM t GROUP BY k"
    if kind == "session":
        gap = 4_000_000
        stream_sql = (
            f"SELECT k, window_start, window_end, {ours} FROM session(t, ts, INTERVAL '4 seconds') "
            f"GROUP BY window_start, window_end, k{close}"
        )
        batch = (
            f"SELECT k, make_timestamp(min(us)) AS window_start, make_timestamp(max(us) + {gap}) "
            f"AS window_end, {duck} FROM (SELECT *, sum(new) OVER (PARTITION BY k ORDER BY us, "
            "new DESC ROWS UNBOUNDED PRECEDING) AS sid FROM (SELECT *, epoch_us(ts) AS us, "
            "CASE WHEN epoch_us(ts) - lag(epoch_us(ts)) OVER (PARTITION BY k ORDER BY ts) "
            f"< {gap} THEN 0 ELSE 1 END AS new FROM t)) GROUP BY k, sid"
        )
        return stream_sql, batch
    slide, size = (10, 10) if kind == "tumble" else (5, 15)
    table = (
        f"tumble(t, ts, INTERVAL '{size} seconds')"
        if kind == "tumble"
        else f"hop(t, ts, INTERVAL '{slide} seconds', INTERVAL '{size} seconds')"
    )
    stream_sql = (
        f"SELECT k, window_start, window_end, {ours} FROM {table} "
        f"GROUP BY window_start, window_end, k{close}"
    )
    s_us, z_us = slide * 1_000_000, size * 1_000_000
    batch = (
        f"SELECT k, make_timestamp(w) AS window_start, make_timestamp(w + {z_us}) AS window_end, "
        f"{duck} FROM (SELECT *, (epoch_us(ts) // {s_us} - r.i) * {s_us} AS w "
        f"FROM t, range({size // slide}) r(i)) WHERE w + {z_us} > epoch_us(ts) GROUP BY w, k"
    )
    return stream_sql, batch


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    rows=st.lists(row_st, max_size=50),
    kind=st.sampled_from(["tumble", "hop", "session", "group_by"]),
    names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True),
    emit=st.booleans(),
    disorder=st.integers(0, 8),
    max_batch=st.integers(1, 10),
    rnd=st.randoms(use_true_random=False),
)
def test_udafs_equal_duckdb(
    rows: list, kind: str, names: list[str], emit: bool, disorder: int, max_batch: int, rnd: Any
) -> None:
    """Any of the functions together, any batch sizes and disorder: the final result
    (EMIT ON WINDOW CLOSE rows, or the changelog applied) equals DuckDB's built-ins."""
    stream_sql, batch_sql = query(kind, names, emit and kind != "group_by")
    table = to_table(rows)
    got = stream(stream_sql, cut(arrival(table, disorder, rnd), rnd, max_batch), disorder)
    assert_close_rows(got, duckdb_result(batch_sql, {"t": table}))


def _rows(rnd: random.Random, n: int) -> pa.Table:
    return to_table(
        [
            (rnd.choice(["a", "b", "c"]), rnd.choice([None, *range(-6, 7)]),
             rnd.randint(-20, 20) / 4 if rnd.random() > 0.1 else None, rnd.randint(0, 120))
            for _ in range(n)
        ]
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["tumble", "hop", "session"])
def test_udafs_in_batch_sql_equal_duckdb(kind: str) -> None:
    """ctx.sql runs the same functions through DataFusion: equal to DuckDB too."""
    stream_sql, batch_sql = query(kind, NAMES, emit=False)
    table = _rows(random.Random(kind), 200)
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", table, event_time="ts")
    assert_close_rows(ctx.sql(stream_sql), duckdb_result(batch_sql, {"t": table}))


RESTORE_CASES = {
    f"{kind}-{'emit' if emit else 'changelog'}": (kind, emit)
    for kind in ("tumble", "hop", "session", "group_by")
    for emit in (True, False)
    if not (emit and kind == "group_by")
}


@pytest.mark.parametrize("case", list(RESTORE_CASES))
def test_udafs_through_checkpoint_and_restore(case: str, tmp_path: Path) -> None:
    """Every function at once over 300 disordered rows, checkpointed half-way (the
    functions' states are Arrow columns of the snapshot), crashed at three quarters and
    resumed from the checkpoint in a new context: the sink ends holding DuckDB's result."""
    kind, emit = RESTORE_CASES[case]
    stream_sql, batch_sql = query(kind, NAMES, emit)
    rnd = random.Random(case)
    batches = cut(arrival(_rows(rnd, 300), 6, rnd), rnd, 12)
    keys = "k" if kind == "group_by" else "k, window_start"
    assert_restore_matches(
        stream_sql,
        batch_sql,
        {"t": batches},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=3 * HALF_S // 1000)},
        allowed_lateness=dt.timedelta(milliseconds=3 * HALF_S // 1000),
        sink="parquet" if emit else "duckdb",
        primary_key=None if emit else keys,
        same=assert_close_rows,
    )


OVER_CHANGELOG = (
    "SELECT b, py_sum(c) AS s, py_median(CAST(c AS DOUBLE)) AS md, py_sum_groups(c) AS sg "
    "FROM (SELECT k, coalesce(v, 0) % 3 AS b, count(*) AS c FROM t GROUP BY k, coalesce(v, 0) % 3) g GROUP BY b"
)
OVER_CHANGELOG_DUCKDB = (
    "SELECT b, CAST(sum(c) AS BIGINT) AS s, median(CAST(c AS DOUBLE)) AS md, "
    "CAST(sum(c) AS BIGINT) AS sg "
    "FROM (SELECT k, coalesce(v, 0) % 3 AS b, count(*) AS c FROM t GROUP BY k, coalesce(v, 0) % 3) g GROUP BY b"
)


def test_retracting_udafs_over_a_changelog_equal_duckdb(tmp_path: Path) -> None:
    """Over the changelog of an unbounded GROUP BY each update retracts the old count
    (``retract``) and adds the new one; through a checkpoint and a restore too."""
    rnd = random.Random(7)
    table = _rows(rnd, 300)
    want = duckdb_result(OVER_CHANGELOG_DUCKDB, {"t": table})
    batches = cut(arrival(table, 0, rnd), rnd, 9)
    assert_same_rows(stream(OVER_CHANGELOG, batches, 0), want)
    assert_restore_matches(
        OVER_CHANGELOG,
        OVER_CHANGELOG_DUCKDB,
        {"t": batches},
        tmp_path / "state",
        event_time={"t": "ts"},
        sink="duckdb",
        primary_key="b",
    )
