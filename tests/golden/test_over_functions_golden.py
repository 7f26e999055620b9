"""Golden matrix of aggregates and window functions used with OVER: every function of the
function list, called as ``f(...) OVER (PARTITION BY k ORDER BY ts <frame>)`` in every frame
shape the engine runs (ROWS n PRECEDING, ROWS CURRENT ROW, ROWS UNBOUNDED PRECEDING, RANGE
INTERVAL PRECEDING, RANGE CURRENT ROW, the default frame), over append-only rows and over a
changelog (a top-1 per ``v``), either works alike (the streaming query's final rows equal
``ctx.sql``'s and DuckDB's) or is refused alike (``ctx.sql`` and the streaming query raise
one PlanError naming the function and why: plan/over_functions.py), with or without ORDER
BY.

Rows: a key with NULL, an int with NULLs, a float in quarters (sums exact either way),
event times unique per row (no two rows are peers, so a ROWS frame and first_value pick the
same rows in every engine), arriving in bounded disorder within the watermark delay, in
batches of random sizes.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from oracle import assert_restore_matches, assert_same_rows, ctx_sql_result, cut, duckdb_result

import datum_sql as ds
from datum_sql.errors import PlanError
from datum_sql.plan.function_list import function_list

TS = pa.timestamp("us", tz="UTC")
BASE = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
HALF_S = 500_000
DELAY = 6  # half-seconds of disorder, within the watermark delay

FRAMES = {
    "rows-2": "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW",
    "rows-current": "ROWS BETWEEN CURRENT ROW AND CURRENT ROW",
    "rows-unbounded": "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
    "range-2s": "RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW",
    "range-current": "RANGE BETWEEN CURRENT ROW AND CURRENT ROW",
    "default": "",
}
#: The aggregates that run over a frame, each with the alias of its column (any_value is
#: DataFusion's smallest value, which DuckDB's any_value is not: tested against ctx.sql).
FRAMED = {
    "n": "count(*)", "nv": "count(v)", "sv": "sum(v)", "sx": "sum(x)", "ax": "avg(x)",
    "mv": "mean(v)", "lo": "min(x)", "hi": "max(v)", "lk": "min(k)", "fv": "first_value(v)",
    "lx": "last_value(x)", "ba": "bool_and(v > 2)", "bo": "bool_or(x < 0)",
}  # fmt: skip
#: The variances and standard deviations in every spelling of the function list.
MOMENTS = {
    "vs": "var_samp(x)", "vp": "var_pop(v)", "ss": "stddev_samp(x)", "sp": "stddev_pop(x)",
    "va": "var(v)", "vr": "variance(x)", "sd": "stddev(v)", "vo": "var_population(x)",
    "ve": "var_sample(x)",
}  # fmt: skip
#: DuckDB's names of the spellings it lacks.
DUCKDB_MOMENTS = {"var": "var_samp", "var_population": "var_pop", "var_sample": "var_samp"}
#: Functions of a row's place that take no frame, and nth_value (which reads the whole
#: partition, so the result is a changelog even over append-only rows).
POSITIONAL = {
    "l2": "lag(v, 2, -1)", "ld": "lead(x, 1, -1)", "rn": "row_number()", "r": "rank()",
    "dr": "dense_rank()", "pr": "percent_rank()", "cd": "cume_dist()", "nt": "ntile(3)",
}  # fmt: skip
#: A changelog: the row of the largest x per v (its rows change as larger ones arrive; x
#: not NULL, which DuckDB and DataFusion order apart).
TOP1 = (
    "(SELECT k, v, x, ts, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY v ORDER BY x DESC, "
    "ts) AS rn FROM t WHERE x IS NOT NULL) WHERE rn = 1) q"
)
INPUTS = {"append": "t", "changelog": TOP1}


def random_rows(seed: int, n: int = 90) -> pa.Table:
    """``n`` rows in arrival order: unique event times (a random permutation of a
    half-second grid) arriving at most :data:`DELAY` half-seconds late."""
    rnd = random.Random(seed)
    times = rnd.sample(range(3 * n), n)
    rows = [(rnd.choice(["a", "b", "b", "c", None]), rnd.choice([None, *range(7)]),
             rnd.choice([None, *range(-8, 9)]), t) for t in times]  # fmt: skip
    rows.sort(key=lambda r: r[3] + rnd.randint(0, DELAY))
    return pa.table({
        "k": pa.array([r[0] for r in rows], pa.string()),
        "v": pa.array([r[1] for r in rows], pa.int64()),
        "x": pa.array([None if r[2] is None else r[2] / 4 for r in rows], pa.float64()),
        "ts": pa.array([BASE + dt.timedelta(microseconds=r[3] * HALF_S) for r in rows], TS),
        "seq": pa.array(range(len(rows)), pa.int64()),
    })  # fmt: skip


def select(calls: dict[str, str], frame: str, source: str) -> str:
    window = f"(PARTITION BY k ORDER BY ts {frame})".replace(" )", ")")
    listed = ", ".join(f"{call} OVER {window} AS {alias}" for alias, call in calls.items())
    return f"SELECT k, v, ts, {listed} FROM {source}"


def duck(sql: str) -> str:
    return sql.replace("INTERVAL '2' SECOND", "INTERVAL 2 SECOND")


def stream(sql: str, table: pa.Table, seed: int) -> pa.Table:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", cut(table, random.Random(seed), 11), schema=table.schema,
                       event_time="ts",
                       watermark=ds.BoundedOutOfOrderness(milliseconds=DELAY * HALF_S // 1000))  # fmt: skip
    try:
        return ctx.execute_streaming(sql).to_arrow(timeout=60)
    finally:
        ctx.close()


def assert_alike(sql: str, seed: int, *, duckdb: bool = True) -> None:
    """The streaming query's final rows equal ctx.sql's (and DuckDB's)."""
    table = random_rows(seed)
    got = stream(sql, table, seed)
    assert got.num_rows > 0
    assert_same_rows(got, ctx_sql_result(sql, {"t": table}, {"t": "ts"}))
    if duckdb:
        assert_same_rows(got, duckdb_result(duck(sql), {"t": table}))


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("source", sorted(INPUTS))
@pytest.mark.parametrize("frame", sorted(FRAMES))
def test_framed_aggregates_work_alike(frame: str, source: str, seed: int) -> None:
    assert_alike(select(FRAMED, FRAMES[frame], INPUTS[source]), seed)


@pytest.mark.parametrize("source", sorted(INPUTS))
@pytest.mark.parametrize("frame", sorted(FRAMES))
def test_nth_value_and_any_value_work_alike(frame: str, source: str) -> None:
    """nth_value over every frame (DuckDB too); any_value, the smallest value, as ctx.sql
    computes it."""
    assert_alike(select({"nx": "nth_value(x, 2)"}, FRAMES[frame], INPUTS[source]), 3)
    sql = select({"av": "any_value(v)"}, FRAMES[frame], INPUTS[source])
    assert_alike(sql, 4, duckdb=False)


@pytest.mark.parametrize("source", sorted(INPUTS))
def test_positional_functions_work_alike(source: str) -> None:
    assert_alike(select(POSITIONAL, "", INPUTS[source]), 5)


@pytest.mark.parametrize("frame", ["rows-unbounded", "range-2s", "default"])
def test_bool_aggregates_through_checkpoint_and_restore(frame: str, tmp_path: Path) -> None:
    """bool_and/bool_or's per-partition counts (unbounded frames) and kept rows (a range
    frame) survive a checkpoint, a crash and a restore."""
    sql = select({"ba": "bool_and(v > 1)", "bo": "bool_or(v > 5)", "nv": "count(v)"},
                 FRAMES[frame], "t")  # fmt: skip
    table = random_rows(6, 300)
    assert_restore_matches(
        sql,
        duck(sql),
        {"t": cut(table, random.Random(6), 12)},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=DELAY * HALF_S // 1000)},
        sink="parquet",
    )


#: The argument list of each aggregate a window refuses, by name.
_TWO = ("corr", "covar", "covar_pop", "covar_samp")
_QUANTILE = ("approx_percentile", "approx_percentile_cont", "percentile_cont", "quantile_cont")


def _call(name: str) -> str:
    if name in _TWO or name.startswith("regr_"):
        return f"{name}(x, v)"
    if name in _QUANTILE:
        return f"{name}(x, 0.5)"
    if name == "string_agg":
        return "string_agg(k, ',' ORDER BY ts)"
    if name in ("grouping", "array_agg") or name.startswith("bit_"):
        return f"{name}(v)"
    return f"{name}(x)"


#: Spellings whose message names the function they are a spelling of.
NAMED_AS = {
    "covar": "covar_samp(", "approx_median": "median(",
    "approx_percentile": "percentile_cont(", "approx_percentile_cont": "percentile_cont(",
    "quantile_cont": "percentile_cont(", "approx_distinct": "count(DISTINCT ...)",
}  # fmt: skip
#: The aggregates a window refuses: all but those above (any_value and mean are spellings
#: of min and avg).
REFUSED = sorted(
    set(function_list()["aggregate"])
    - set(function_list()["window"])
    - {"any_value", "mean", *(c.split("(")[0] for c in MOMENTS.values())}
)
#: Calls refused inside a window whatever the function.
REFUSED_FORMS = {
    "sum(v) FILTER (WHERE v > 2)": "sum() FILTER (WHERE ...)",
    "count(DISTINCT v)": "count(DISTINCT ...)",
    "avg(DISTINCT x)": "avg(DISTINCT ...)",
}
#: Windows of the refusals: with and without ORDER BY, with each kind of frame.
REFUSED_WINDOWS = {
    "rows": "(PARTITION BY k ORDER BY ts ROWS 2 PRECEDING)",
    "range": "(PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND "
    "CURRENT ROW)",
    "default": "(ORDER BY ts)",
    "no-order": "(PARTITION BY k)",
}


def test_the_matrix_holds_every_aggregate_and_window_function() -> None:
    listed = set(function_list()["aggregate"]) | set(function_list()["window"])
    calls = [*FRAMED.values(), *MOMENTS.values(), *POSITIONAL.values()]
    tested = {c.split("(")[0] for c in calls}
    tested |= {"nth_value", "any_value", *REFUSED}
    assert listed == tested


def _refusal(sql: str) -> tuple[str, str]:
    with ds.Context(state_dir=None) as ctx:
        ctx.register_arrow("t", random_rows(7, 20), event_time="ts")
        with pytest.raises(PlanError) as batch:
            ctx.sql(sql)
        with pytest.raises(PlanError) as streamed:
            ctx.execute_streaming(sql)
    return str(batch.value), str(streamed.value)


@pytest.mark.parametrize("source", sorted(INPUTS))
@pytest.mark.parametrize("window", sorted(REFUSED_WINDOWS))
@pytest.mark.parametrize("call", [_call(n) for n in REFUSED] + sorted(REFUSED_FORMS))
def test_refused_alike_naming_the_function(call: str, window: str, source: str) -> None:
    sql = f"SELECT k, {call} OVER {REFUSED_WINDOWS[window]} AS r FROM {INPUTS[source]}"
    batch, streamed = _refusal(sql)
    assert batch == streamed
    name = call.split("(")[0]
    named = REFUSED_FORMS.get(call) or NAMED_AS.get(name, f"{name}(")
    assert named in batch and "OVER (...) is not supported: " in batch, batch


@ds.udaf(input_types=["BIGINT"], return_type="BIGINT", name="over_matrix_sum")
class OverMatrixSum:
    """sum(v) in Python: runs in GROUP BY, is refused as a window function."""

    state = {"s": "BIGINT"}
    initial = {"s": 0}

    def accumulate(self, state: dict, v: pa.Array) -> dict:
        return {"s": state["s"] + (pc.sum(v).as_py() or 0)}

    def retract(self, state: dict, v: pa.Array) -> dict:
        return {"s": state["s"] - (pc.sum(v).as_py() or 0)}

    def merge(self, state: dict, other: dict) -> dict:
        return {"s": state["s"] + other["s"]}

    def finish(self, state: dict) -> int:
        return state["s"]


@pytest.mark.parametrize("source", sorted(INPUTS))
@pytest.mark.parametrize("window", sorted(REFUSED_WINDOWS))
def test_python_aggregates_are_refused_alike_as_window_functions(window: str, source: str) -> None:
    sql = f"SELECT k, over_matrix_sum(v) OVER {REFUSED_WINDOWS[window]} AS r FROM {INPUTS[source]}"
    batch, streamed = _refusal(sql)
    assert batch == streamed
    assert batch.startswith("over_matrix_sum() OVER (...) is not supported: a Python aggregate")
    grouped = f"SELECT k, over_matrix_sum(v) AS r FROM {INPUTS[source]} GROUP BY k"
    assert_alike(grouped, 12, duckdb=False)


def _close(got: pa.Table, want: pa.Table) -> None:
    """Equal rows matched on ``ts`` (unique), floats within 1e-9, compared as squares (the
    variances): the moments are sums of squares, which two engines round apart, and the
    square root of a variance of 1e-15 rounded from 0 is 3e-8."""
    assert got.column_names == want.column_names
    by_ts = {r["ts"]: r for r in want.to_pylist()}
    assert len(by_ts) == want.num_rows == got.num_rows
    for row in got.to_pylist():
        other = by_ts[row["ts"]]
        for col, value in row.items():
            if isinstance(value, float) and other[col] is not None:
                square = other[col] ** 2
                assert abs(value**2 - square) <= 1e-9 * max(1.0, square), (col, row, other)
            else:
                assert value == other[col], (col, row, other)


@pytest.mark.parametrize("seed", [9, 10])
@pytest.mark.parametrize("source", sorted(INPUTS))
@pytest.mark.parametrize("frame", sorted(FRAMES))
def test_moments_work_alike(frame: str, source: str, seed: int) -> None:
    """Every spelling of the variances and standard deviations, streamed, equals ctx.sql
    and DuckDB (its spellings of the same functions) to rounding."""
    table = random_rows(seed)
    sql = select(MOMENTS, FRAMES[frame], INPUTS[source])
    got = stream(sql, table, seed)
    assert got.num_rows > 0
    _close(got, ctx_sql_result(sql, {"t": table}, {"t": "ts"}))
    spelled = {alias: DUCKDB_MOMENTS.get(c.split("(")[0], c.split("(")[0]) + "(" + c.split("(")[1]
               for alias, c in MOMENTS.items()}  # fmt: skip
    _close(got, duckdb_result(duck(select(spelled, FRAMES[frame], INPUTS[source])), {"t": table}))


@pytest.mark.parametrize("frame", ["rows-unbounded", "default"])
def test_moments_through_checkpoint_and_restore(frame: str, tmp_path: Path) -> None:
    """The carried shift, sum and sum of squares per partition survive a restore."""
    sql = select({"vs": "var_samp(x)", "sp": "stddev_pop(v)"}, FRAMES[frame], "t")
    table = random_rows(11, 300)
    assert_restore_matches(
        sql,
        duck(sql),
        {"t": cut(table, random.Random(11), 12)},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=DELAY * HALF_S // 1000)},
        sink="parquet",
        same=_close,
    )
