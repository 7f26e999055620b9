"""Statements the fuzz test found failing with a raw exception, kept as direct tests."""

from __future__ import annotations

from pathlib import Path

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
    with pytest.raises(ds.SqlError, match=r"table function|takes 3 (or 4 )?arguments"):
        ctx.sql(sql)


def test_an_error_about_an_explain_prints_the_statement(ctx: ds.Context) -> None:
    with pytest.raises(ds.SqlError, match=r"EXPLAIN takes a SELECT") as info:
        ctx.execute("EXPLAIN CREATE MATERIALIZED VIEW v AS SELECT a FROM t")
    assert "EXPLAIN CREATE MATERIALIZED VIEW v" in str(info.value)


def test_a_column_of_null_type_is_planned(ctx: ds.Context) -> None:
    """DataFusion types ``coalesce(*)`` as a non-nullable NULL column: planning takes it."""
    with pytest.raises(ds.QueryFailed, match=r"cannot evaluate SELECT COALESCE\(\*\)"):
        ctx.execute_streaming("SELECT COALESCE(*) AS c FROM t").wait(timeout=60)
    with ctx.execute_streaming("SELECT NULL AS n, a FROM t") as q:
        rows = [r for b in q for r in b.to_pylist()]
    assert sorted(rows, key=lambda r: r["a"]) == [{"n": None, "a": 1}, {"n": None, "a": 2}]


def test_a_duckdb_source_whose_path_is_a_directory(ctx: ds.Context, tmp_path: Path) -> None:
    with pytest.raises(ds.SourceError, match=r"cannot open DuckDB file .*Is a directory"):
        ctx.execute(
            f"CREATE SOURCE events WITH (connector = 'duckdb', path = '{tmp_path}', "
            "table = 'events')"
        )
