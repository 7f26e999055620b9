"""Statements the fuzz test found failing with a raw exception, kept as direct tests."""

from __future__ import annotations

import pyarrow as pa
import pytest

import datum_sql as ds


@pytest.fixture
def ctx() -> ds.Context:
    ctx = ds.Context(state_dir=None)
    times = pa.array([1_000_000, 2_000_000], pa.int64()).cast(pa.timestamp("us"))
    ctx.register_arrow("t", pa.table({"a": [1, 2], "ts": times}), event_time="ts")
    return ctx


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM to_timestamp(t, ts)",  # a known function: its first argument is `this`
        "SELECT * FROM upper(t)",
        "SELECT * FROM tumble()",  # no argument at all
        "SELECT * FROM abs(1)",
    ],
)
def test_batch_query_over_a_function_that_is_no_table_function(ctx: ds.Context, sql: str) -> None:
    with pytest.raises(ds.SqlError, match=r"table function|takes 3 arguments"):
        ctx.sql(sql)
