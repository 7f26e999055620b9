"""ctx.sql(sql, params=...): placeholders bound as literals, checked against DuckDB."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.sql.params import bind_params

ROWS = pa.table(
    {
        "id": [1, 2, 3, 4],
        "name": ["a", "o'k", "c; DROP SOURCE t", None],
        "price": [Decimal("1.50"), Decimal("2.25"), Decimal("3.00"), Decimal("4.75")],
        "ts": pa.array([dt.datetime(2024, 1, 1, h) for h in (1, 2, 3, 4)], pa.timestamp("us")),
    }
)


@pytest.fixture
def ctx() -> ds.Context:
    c = ds.Context(state_dir=None)
    c.register_arrow("t", ROWS)
    return c


def _duck(sql: str, params: list[object]) -> list[dict[str, object]]:
    con = duckdb.connect()
    con.register("t", ROWS)
    return [dict(zip(["id"], row, strict=True)) for row in con.execute(sql, params).fetchall()]


def test_named_parameters_equal_duckdb_with_the_same_values(ctx: ds.Context) -> None:
    sql = "SELECT id FROM t WHERE name = :name OR (price > :p AND ts >= :since) ORDER BY id"
    got = ctx.sql(
        sql, params={"name": "o'k", "p": Decimal("2.5"), "since": dt.datetime(2024, 1, 1, 4)}
    )
    want = _duck(
        "SELECT id FROM t WHERE name = ? OR (price > ? AND ts >= ?) ORDER BY id",
        ["o'k", Decimal("2.5"), dt.datetime(2024, 1, 1, 4)],
    )
    assert got.to_pylist() == want == [{"id": 2}, {"id": 4}]


def test_positional_parameters_in_order(ctx: ds.Context) -> None:
    got = ctx.sql("SELECT id FROM t WHERE id > ? AND id < ? ORDER BY id", params=[1, 4])
    assert got.column("id").to_pylist() == [2, 3]
    got = ctx.sql("SELECT id FROM t WHERE id > $2 AND id < $1 ORDER BY id", params=[4, 1])
    assert got.column("id").to_pylist() == [2, 3]


def test_a_value_is_one_literal_whatever_it_holds(ctx: ds.Context) -> None:
    # text that looks like SQL stays a string: it matches the row holding it, nothing else
    sneaky = "c; DROP SOURCE t"
    assert ctx.sql("SELECT id FROM t WHERE name = :n", params={"n": sneaky}).to_pylist() == [
        {"id": 3}
    ]
    assert ctx.sql("SELECT id FROM t WHERE name = :n", params={"n": "x' OR '1'='1"}).num_rows == 0
    assert ctx.sql("SELECT :v AS v", params={"v": "a'b"}).column("v").to_pylist() == ["a'b"]
    assert ctx.catalog.get("t") is not None


def test_a_list_binds_for_in_and_nan_as_a_double(ctx: ds.Context) -> None:
    got = ctx.sql("SELECT id FROM t WHERE id IN :ids ORDER BY id", params={"ids": [4, 1]})
    assert got.column("id").to_pylist() == [1, 4]
    (nan,) = ctx.sql("SELECT :x AS x", params={"x": float("nan")}).column("x").to_pylist()
    assert nan != nan


def test_null_bool_float_and_dates_bind(ctx: ds.Context) -> None:
    got = ctx.sql(
        "SELECT :a IS NULL AS a, :b AS b, :f * 2 AS f, :d AS d",
        params={"a": None, "b": True, "f": 1.25, "d": dt.date(2024, 2, 29)},
    )
    assert got.to_pylist() == [{"a": True, "b": True, "f": 2.5, "d": dt.date(2024, 2, 29)}]


@pytest.mark.parametrize(
    ("sql", "params", "message"),
    [
        ("SELECT :a AS a", {}, "no value for parameter :a"),
        ("SELECT :a AS a", {"a": 1, "b": 2}, "parameter 'b' in params is not used"),
        ("SELECT ? AS a", {"a": 1}, "params is a dict, so the query names its placeholders"),
        ("SELECT :a AS a", [1], "params is a list, so the query's placeholders are positional"),
        ("SELECT ? AS a, ? AS b", [1], "2 positional placeholder"),
        ("SELECT $1 AS a, ? AS b", [1, 2], "mixes \\? and \\$N"),
        ("SELECT :a AS a", {"a": object()}, "parameter :a: a object has no SQL literal"),
        ("SELECT ? AS a", [b"raw"], "parameter 1: a bytes has no SQL literal"),
        ("SELECT :a AS a", {"a": []}, "parameter :a: cannot bind an empty collection"),
        ("SELECT :a AS a", "1", "params is a str"),
        (
            "SELECT :x AS a",
            {"X": 1, "x": 2},
            "params has keys 'X' and 'x', which differ only in case",
        ),
        (
            "SELECT :X AS a, :x AS b",
            {"x": 1},
            "the query has parameters :X and :x, which differ only",
        ),
    ],
)
def test_a_wrong_parameter_is_refused_naming_it(ctx, sql, params, message) -> None:
    with pytest.raises(ds.SqlError, match=message):
        ctx.sql(sql, params=params)


def test_the_bound_text_is_generated_from_the_tree() -> None:
    assert bind_params("SELECT * FROM t WHERE a = :x", {"x": "it's"}) == (
        "SELECT * FROM t WHERE a = 'it''s'"
    )
