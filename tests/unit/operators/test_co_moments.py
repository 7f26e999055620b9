"""The co-moment aggregates (corr, covar_*, regr_*) where rounding and non-finite values
decide the answer: a constant column keeps a spread of exactly 0 whatever the batches
(and after retractions leave equal values), so corr and regr_slope are NULL as in
``ctx.sql``, not a quotient of rounding errors; a two-input call needs both columns."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest
from agg_testkit import INPUT, make
from test_changelog_aggregate import batch as changelog_batch
from test_changelog_aggregate import make as changelog_make

import datum_sql as ds
from datum_sql.engine.operators import operator_class
from datum_sql.errors import PlanError

#: regr_*(vi, vf): y is vi, x is vf.
CALLS = [
    ("corr", "c"), ("regr_slope", "sl"), ("regr_intercept", "ic"), ("regr_r2", "r2"),
    ("regr_sxx", "sxx"), ("regr_sxy", "sxy"), ("regr_avgx", "ax"), ("regr_count", "n"),
    ("covar_pop", "cp"),
]  # fmt: skip
TYPES = {"n": pa.int64()}


def _group_op() -> Any:
    aggs = [{"func": f, "input": "vi", "input2": "vf", "output": o} for f, o in CALLS]
    schema = pa.schema([(o, TYPES.get(o, pa.float64())) for _, o in CALLS] + [("_op", pa.string())])
    return make("group_aggregate", {"keys": [], "aggregates": aggs, "state_limit_rows": None,
                                    "schema": schema})  # fmt: skip


def _batch(vi: list[int | None], vf: list[float | None]) -> pa.RecordBatch:
    n = len(vi)
    cols = {
        "ts": pa.array(range(n), pa.int64()).cast(pa.timestamp("us")),
        "k1": pa.array(["a"] * n, pa.string()),
        "k2": pa.array([0] * n, pa.int64()),
        "vi": pa.array(vi, pa.int64()),
        "vf": pa.array(vf, pa.float64()),
    }
    return pa.RecordBatch.from_pydict(cols, schema=INPUT)


def _last(outputs: list[pa.RecordBatch]) -> dict[str, Any]:
    rows = [r for b in outputs for r in b.to_pylist() if r["_op"] in ("+I", "+U")]
    return rows[-1]


def _batch_sql(vi: list[int | None], vf: list[float | None]) -> dict[str, Any]:
    """ctx.sql of the same calls over the same rows (DataFusion's running update)."""
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", pa.table({"vi": pa.array(vi, pa.int64()), "vf": pa.array(vf)}))
    sql = ", ".join(f"{f}(vi, vf) AS {o}" for f, o in CALLS)
    return ctx.sql(f"SELECT {sql} FROM t").to_pylist()[0]


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    for k, w in want.items():
        g = got[k]
        if isinstance(w, float) and math.isnan(w):
            assert isinstance(g, float) and math.isnan(g), (k, g, w)
        elif isinstance(w, float):
            assert g is not None and math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-12), (k, g, w)
        else:
            assert g == w, (k, g, w)


@pytest.mark.parametrize("sizes", [[7], [1] * 7, [3, 4], [2, 5], [1, 2, 4]])
@pytest.mark.parametrize("fast", [True, False])
def test_a_constant_x_that_sums_inexactly_keeps_no_spread(sizes, fast, monkeypatch):
    """0.1 seven times sums to 0.7000000000000001: the mean is anchored to 0.1 in each
    batch's partial and in the merge of partials, so regr_sxx is exactly 0 and corr,
    regr_slope, regr_intercept and regr_r2 are NULL, as ctx.sql says."""
    vi = [3, 1, 4, 1, 5, 9, 2]
    vf = [0.1] * 7
    op = _group_op()
    if not fast:
        op._aggs.fast = False  # the Arrow group-by's partial, as for string keys
    outs, pos = [], 0
    for k in sizes:
        outs += op.on_batch(_batch(vi[pos : pos + k], vf[pos : pos + k]))
        pos += k
    got = _last(outs)
    assert (got["sxx"], got["sxy"], got["ax"], got["n"]) == (0.0, 0.0, 0.1, 7)
    assert got["c"] is None and got["sl"] is None and got["ic"] is None and got["r2"] is None
    _same(got, _batch_sql(vi, vf))


def test_equal_values_left_after_retractions_keep_no_spread():
    """Rows of other x values retracted, then more of the one value added: the spread the
    subtractions leave below their rounding is 0, and the rounded mean merges with the
    new value's exact one as one value: regr_slope and corr stay NULL."""
    calls = [(f, ("vi", "vf"), o, TYPES.get(o, pa.float64()), "", None) for f, o in CALLS]
    op = changelog_make([], calls)
    rows = [(1, "a", 0, 3, 0.1), (2, "a", 0, 1, 0.7), (3, "a", 0, 4, 0.1), (4, "a", 0, 2, 0.35)]
    outs = op.on_batch(changelog_batch(rows, ["+I"] * 4))
    assert _last(outs)["sl"] is not None
    outs = op.on_batch(changelog_batch([rows[1], rows[3]], ["-U", "-D"]))
    got = _last(outs)
    assert (got["n"], got["sxx"], got["sxy"]) == (2, 0.0, 0.0)
    assert got["sl"] is None and got["c"] is None and got["r2"] is None
    assert math.isclose(got["ax"], 0.1, rel_tol=1e-15)
    outs = op.on_batch(changelog_batch([(5, "a", 0, 8, 0.1)], ["+I"]))
    got = _last(outs)
    assert (got["n"], got["sxx"], got["sxy"]) == (3, 0.0, 0.0)
    assert got["sl"] is None and got["c"] is None
    _same(got, _batch_sql([3, 4, 8], [0.1, 0.1, 0.1]))


@pytest.mark.parametrize(
    "vf",
    [[float("nan")], [float("inf")], [1.0, float("nan"), 3.0], [1.0, float("inf"), 3.0],
     [float("inf"), float("inf")]],
    ids=["one NaN", "one inf", "a NaN", "an inf", "two inf"],
)  # fmt: skip
def test_non_finite_x_whatever_the_batches(vf):
    """A NaN or an infinity: the spreads are NaN (also of a single value, as DataFusion's),
    the mean of two or more is NaN in every batch split, corr is NULL."""
    vi = list(range(len(vf)))
    results = []
    for sizes in ([len(vf)], [1] * len(vf)):
        op, outs, pos = _group_op(), [], 0
        for k in sizes:
            outs += op.on_batch(_batch(vi[pos : pos + k], vf[pos : pos + k]))
            pos += k
        results.append(_last(outs))
    for got in results:
        assert math.isnan(got["sxx"]) and math.isnan(got["sxy"]) and math.isnan(got["cp"])
        assert got["c"] is None
        want_ax = vf[0] if len(vf) == 1 else float("nan")
        assert got["ax"] == want_ax or (math.isnan(want_ax) and math.isnan(got["ax"]))
    want = _batch_sql(vi, vf)
    assert want["c"] is None and math.isnan(want["sxx"]) and math.isnan(want["sxy"])


def test_two_input_calls_need_both_numeric_columns():
    schema = pa.schema([("c", pa.float64()), ("_op", pa.string())])

    def op(spec: dict[str, Any], input_schema: pa.Schema = INPUT) -> Any:
        config = {"keys": [], "aggregates": [spec], "state_limit_rows": None, "schema": schema}
        return operator_class("group_aggregate")("agg", config, [input_schema])

    with pytest.raises(PlanError, match="aggregate corr takes 2 input column"):
        op({"func": "corr", "input": "vi", "output": "c"})
    with pytest.raises(PlanError, match="aggregate var_samp takes 1 input column"):
        op({"func": "var_samp", "input": "vi", "input2": "vf", "output": "c"})
    with pytest.raises(PlanError, match=r"regr_slope of string \(its second argument\)"):
        op({"func": "regr_slope", "input": "vi", "input2": "k1", "output": "c"})
