"""Bad input gets a clear error that names what is at fault, and moves no row."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import datum_sql as ds


@pytest.fixture
def ctx() -> ds.Context:
    c = ds.Context(state_dir=None)
    c.register_arrow(
        "orders", pa.table({"id": [1, 2, 3], "amount": [1.5, 2.5, 3.5], "note": ["a", "b", "c"]})
    )
    return c


def test_unknown_table_names_the_nearest(ctx: ds.Context) -> None:
    with pytest.raises(ds.SqlError) as info:
        ctx.execute_streaming("SELECT id\nFROM order")
    err = info.value
    assert "unknown table 'order'" in str(err) and "'orders'" in str(err)
    assert (err.line, err.column) == (2, 6)


def test_unknown_column_names_the_nearest_and_its_position(ctx: ds.Context) -> None:
    with pytest.raises(ds.SqlError) as info:
        ctx.sql("SELECT id, amont FROM orders")
    assert "unknown column 'amont'" in str(info.value) and "'amount'" in str(info.value)
    assert (info.value.line, info.value.column) == (1, 12)
    assert "^" in str(info.value)


def test_ambiguous_and_qualified_columns(ctx: ds.Context) -> None:
    with pytest.raises(ds.SqlError, match="unknown table or alias 'x'"):
        ctx.sql("SELECT x.id FROM orders")


def test_unknown_connector_lists_the_available_ones(ctx: ds.Context) -> None:
    with pytest.raises(ds.PlanError) as info:
        ctx.execute("CREATE SINK s WITH (connector = 'parqet', path = 'x')")
    assert "'parqet'" in str(info.value) and "parquet" in str(info.value)
    assert "Did you mean 'parquet'" in str(info.value)


def test_unknown_option_lists_the_valid_ones(ctx: ds.Context) -> None:
    with pytest.raises(ds.PlanError) as info:
        ctx.execute("CREATE SINK s WITH (connector = 'parquet', pth = 'x')")
    message = str(info.value)
    assert "unknown option 'pth'" in message and "path" in message and "s:" in message


def test_missing_required_option(ctx: ds.Context) -> None:
    with pytest.raises(ds.PlanError, match=r"needs option.*'path'"):
        ctx.execute("CREATE SINK s WITH (connector = 'parquet')")


def test_sink_type_mismatch_is_refused_before_any_row_moves(
    ctx: ds.Context, tmp_path: Path
) -> None:
    ctx.execute(
        f"CREATE SINK typed (id BIGINT, amount BIGINT) WITH (connector = 'parquet', path = '{tmp_path / 'o'}')"
    )
    with pytest.raises(ds.PlanError) as info:
        ctx.execute_streaming("INSERT INTO typed SELECT id, amount FROM orders")
    assert "'amount'" in str(info.value) and "CAST" in str(info.value)
    with pytest.raises(ds.PlanError, match="declares columns"):
        ctx.execute_streaming("INSERT INTO typed SELECT id FROM orders")
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*.parquet"))


def test_widening_into_a_declared_sink_is_fine(ctx: ds.Context, tmp_path: Path) -> None:
    ctx.execute(
        f"CREATE SINK wide (id BIGINT, amount DOUBLE) WITH (connector = 'parquet', path = '{tmp_path / 'w'}')"
    )
    ctx.execute_streaming("INSERT INTO wide SELECT CAST(id AS INT) AS id, amount FROM orders").wait(
        30
    )
    assert ctx.sql("SELECT count(*) AS n FROM wide").column("n").to_pylist() == [3]


def test_insert_into_a_source_is_refused(ctx: ds.Context) -> None:
    with pytest.raises(ds.SqlError, match="is a source, not a sink"):
        ctx.execute_streaming("INSERT INTO orders SELECT id, amount, note FROM orders")


def test_updating_query_into_append_only_sink_says_what_would_work(
    ctx: ds.Context, tmp_path: Path
) -> None:
    ctx.execute(f"CREATE SINK files WITH (connector = 'parquet', path = '{tmp_path / 'f'}')")
    with pytest.raises(ds.PlanError) as info:
        ctx.execute_streaming(
            "INSERT INTO files SELECT note, count(*) AS n FROM orders GROUP BY note"
        )
    assert "EMIT ON WINDOW CLOSE" in str(info.value) and "primary_key" in str(info.value)


def test_order_by_and_limit_are_refused_in_streaming(ctx: ds.Context) -> None:
    with pytest.raises(ds.PlanError, match="ORDER BY"):
        ctx.execute_streaming("SELECT id FROM orders ORDER BY id")
    with pytest.raises(ds.PlanError, match="LIMIT"):
        ctx.execute_streaming("SELECT id FROM orders LIMIT 1")
    assert ctx.sql("SELECT id FROM orders ORDER BY id DESC LIMIT 1").column("id").to_pylist() == [3]


def test_expression_errors_name_the_query(ctx: ds.Context) -> None:
    with pytest.raises(ds.PlanError, match="nofunc"):
        ctx.execute_streaming("SELECT nofunc(id) FROM orders")


def test_unparseable_file_fails_the_query_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("id,amount\n1,2.5\n2,oops\n")
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        f"CREATE SOURCE f (id BIGINT, amount DOUBLE) WITH (connector = 'csv', path = '{bad}')"
    )
    q = ctx.execute_streaming("SELECT id FROM f")
    with pytest.raises(ds.QueryFailed) as info:
        q.wait(30)
    assert "bad.csv" in str(info.value)
    assert isinstance(info.value.__cause__, ds.SourceError)


def test_secrets_never_show(tmp_path: Path) -> None:
    ctx = ds.Context(state_dir=tmp_path / "state")
    ctx.execute(
        "CREATE SOURCE k (v VARCHAR) WITH (connector = 'kafka', topic = 't', "
        "properties.bootstrap.server = '127.0.0.1:1', properties.sasl.password = 'hunter2') "
        "FORMAT PLAIN ENCODE JSON"
    )
    shown = str(ctx.execute("SHOW SOURCES").to_pylist())
    assert "hunter2" not in shown and "******" in shown
    assert "hunter2" not in repr(ctx.catalog.get("k"))
    # stored as given (a restart must still connect), never printed
    assert "hunter2" in (tmp_path / "state" / "catalog.json").read_text()
