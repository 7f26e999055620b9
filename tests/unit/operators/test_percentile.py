"""The one percentile_cont interpolation both paths call (datum_sql/engine/percentile.py)
and the one bit_xor(DISTINCT) (datum_sql/engine/xor_distinct.py)."""

from __future__ import annotations

import decimal
import math

import datafusion
import numpy as np
import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.engine import percentile, xor_distinct


def test_ctx_sql_interpolates_exactly_as_streaming() -> None:
    """DataFusion's own percentile_cont gives 1.899999 for the 0.3 percentile of 1..4 (it
    rounds the fraction); ctx.sql gives 1.9, as streaming and DuckDB do."""
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow(
        "t", pa.table({"v": pa.array([1, 2, 3, 4], pa.int64()), "x": [10.0, 20.5, 43.7, 44.5]})
    )
    sql = (
        "SELECT percentile_cont(0.3) WITHIN GROUP (ORDER BY v) AS a, approx_percentile_cont(v, "
        "0.3) AS b, quantile_cont(x, 0.75) AS c, percentile_cont(x, 0.75) AS d FROM t"
    )
    want = [{"a": 1.9, "b": 1.9, "c": 43.7 + (44.5 - 43.7) * 0.25, "d": 43.7 + 0.8 * 0.25}]
    assert want[0]["c"] == want[0]["d"]
    assert ctx.sql(sql).to_pylist() == want
    assert ctx.execute_streaming(sql).to_arrow(timeout=30).to_pylist() == want


def test_interpolation_of_ranks() -> None:
    """q = 0 and 1 are the extremes, an exact rank reads one value, NULL-free empty
    groups have no result, NaN sorts last, -0.0 is 0.0."""
    v = np.array([5.0, 1.0, 3.0, np.nan, 2.0, -0.0, 7.0])
    g = np.array([0, 0, 0, 2, 2, 3, 3])
    for q, want in [(0.0, [1.0, 2.0, 0.0]), (1.0, [5.0, np.nan, 7.0]), (0.5, [3.0, np.nan, 3.5])]:
        out, has = percentile.interpolate(v, g, 4, q)
        assert has.tolist() == [True, False, True, True]
        got = out[[0, 2, 3]].tolist()
        assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(got, want))
    out, _ = percentile.interpolate(np.array([-0.0]), np.array([0]), 1, 0.5)
    assert math.copysign(1, out[0]) == 1.0


def test_copies_give_the_values_repeated() -> None:
    """The streaming state holds each distinct value with its count: the same result as
    the values written out, which the batch path has."""
    rng = np.random.default_rng(5)
    v = rng.integers(-4, 4, 300).astype(np.float64)
    g = rng.integers(0, 20, 300)
    copies = rng.integers(1, 4, 300)
    for q in (0.0, 0.1, 0.5, 0.77, 1.0):
        a = percentile.interpolate(v, g, 21, q, copies)
        b = percentile.interpolate(np.repeat(v, copies), np.repeat(g, copies), 21, q)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_lists_skip_nulls_and_null_lists() -> None:
    lists = pa.array([[3.0, None, 1.0], None, [None], [], [2.0, 4.0]], pa.list_(pa.float64()))
    q = pa.array([0.5] * 5)
    assert percentile.of_lists(lists, q).to_pylist() == [2.0, None, None, None, 3.0]
    assert percentile.of_lists(lists.slice(3), q.slice(3)).to_pylist() == [None, 3.0]


def test_decimals_read_as_datafusion_casts_them() -> None:
    """pyarrow's decimal-to-double cast differs from DataFusion's in the last bit of some
    values: both paths use DataFusion's, which the batch SQL's CAST applies."""
    rng = np.random.default_rng(2)
    for precision, scale in [(18, 6), (38, 10), (20, 19)]:
        unscaled = rng.integers(-(10**17), 10**17, 2000)
        arr = pa.array(
            [decimal.Decimal(int(i)).scaleb(-scale) for i in unscaled],
            pa.decimal128(precision, scale),
        )
        ctx = datafusion.SessionContext()
        ctx.register_record_batches("t", [pa.table({"i": range(len(arr)), "d": arr}).to_batches()])
        sql = "SELECT CAST(d AS DOUBLE) AS f FROM t ORDER BY i"
        want = np.asarray(ctx.sql(sql).to_arrow_table()["f"])
        assert np.array_equal(percentile.as_float64(arr), want)


@pytest.mark.parametrize("t", list(xor_distinct.TYPES.values()), ids=str)
def test_xor_of_lists_keeps_the_type(t: pa.DataType) -> None:
    top = 2 ** (t.bit_width - (1 if pa.types.is_signed_integer(t) else 0)) - 1
    lists = pa.array([[top, 1, None], None, [5]], pa.list_(t))
    assert xor_distinct.of_lists(lists, t).to_pylist() == [top ^ 1, None, 5]
    assert xor_distinct.of_lists(lists, t).type == t
