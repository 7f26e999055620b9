"""Scalar Python UDFs: streamed and batch results equal the function applied with pyarrow
to the whole input; failures name the function; registration errors are PlanErrors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest

import datum_sql as ds
from datum_sql.testing import run_query, sorted_rows


def count_char(s: pa.Array, c: pa.Array) -> pa.Array:
    char = c[0].as_py() if len(c) else ""
    kept = pc.utf8_length(pc.replace_substring(s, char, ""))
    return pc.subtract(pc.utf8_length(s), kept).cast(pa.int64())


def bucket(x: pa.Array) -> pa.Array:
    return pc.divide(x, 10).cast(pa.int64())


ds.udf(input_types=["VARCHAR", "VARCHAR"], return_type="BIGINT")(count_char)
ds.udf(input_types=[pa.int64()], return_type=pa.int64(), name="bucket")(bucket)

T = pa.table(
    {
        "k": pa.array(range(40), pa.int64()),
        "s": [["cc", "c", "abc", None, "xyz"][i % 5] for i in range(40)],
        "ts": pa.array([i * 1_000_000 for i in range(40)], pa.timestamp("us")),
    }
)
U = pa.table({"b": pa.array([0, 1, 2, 3], pa.int64()), "label": ["a", "b", "c", "d"]})
COUNTS = count_char(T.column("s").combine_chunks(), pa.array(["c"] * len(T)))
BUCKETS = bucket(T.column("k").combine_chunks())


def _ctx() -> ds.Context:
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.register_arrow("t", T)
    ctx.register_arrow("u", U)
    return ctx


def _both(sql: str, **kw: object) -> list[list[tuple]]:
    streamed = run_query(sql, {"t": T, "u": U}, batch_size=7, **kw).final  # type: ignore[arg-type]
    return [sorted_rows(streamed), sorted_rows(_ctx().sql(sql))]


def test_projection_and_filter() -> None:
    want = sorted(
        (k, n)
        for k, n in zip(T.column("k").to_pylist(), COUNTS.to_pylist(), strict=True)
        if n is not None and n > 0
    )
    sql = "SELECT k, count_char(s, 'c') AS n FROM t WHERE count_char(s, 'c') > 0"
    for got in _both(sql):
        assert got == want


def test_group_by_key() -> None:
    want: dict[int, int] = {}
    for b in BUCKETS.to_pylist():
        want[b] = want.get(b, 0) + 1
    for got in _both("SELECT bucket(k) AS b, count(*) AS c FROM t GROUP BY bucket(k)"):
        assert got == sorted(want.items())


def test_join_condition() -> None:
    labels = dict(zip(U.column("b").to_pylist(), U.column("label").to_pylist(), strict=True))
    want = sorted(
        (k, labels[b]) for k, b in zip(T.column("k").to_pylist(), BUCKETS.to_pylist(), strict=True)
    )
    assert sorted_rows(_ctx().sql("SELECT t.k, u.label FROM t JOIN u ON bucket(t.k) = u.b")) == want
    # Streaming joins match plain columns: the function computes the key beneath the join.
    sql = "SELECT t.k, u.label FROM (SELECT k, bucket(k) AS kb FROM t) AS t JOIN u ON t.kb = u.b"
    for got in _both(sql):
        assert got == want


def test_window_query() -> None:
    per_window: dict[int, int] = {}
    for k, n in zip(T.column("k").to_pylist(), COUNTS.to_pylist(), strict=True):
        per_window[k // 10] = per_window.get(k // 10, 0) + (n or 0)
    sql = (
        "SELECT window_start, sum(count_char(s, 'c')) AS n "
        "FROM tumble(t, ts, INTERVAL '10' SECOND) GROUP BY window_start"
    )
    got = run_query(sql, {"t": T}, event_time={"t": "ts"}, batch_size=7).final
    assert [n for _, n in sorted_rows(got)] == [per_window[w] for w in sorted(per_window)]


#: (query calling UDFs, the same query for DuckDB with built-ins): UDF window arguments,
#: window GROUP BY keys and OVER partition keys.
WINDOW_SHAPES = {
    "tumble_key": (
        "SELECT window_start, bucket(k) AS b, sum(count_char(s, 'c')) AS n "
        "FROM tumble(t, ts, INTERVAL '10' SECOND) GROUP BY window_start, bucket(k)",
        "SELECT time_bucket(INTERVAL 10 SECOND, ts) AS window_start, k // 10 AS b, "
        "sum(length(s) - length(replace(s, 'c', ''))) AS n FROM t GROUP BY 1, 2",
    ),
    "hop_key": (
        "SELECT window_start, bucket(k) AS b, count(*) AS n "
        "FROM hop(t, ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) "
        "GROUP BY window_start, window_end, bucket(k)",
        "SELECT time_bucket(INTERVAL 5 SECOND, ts) - to_seconds(o) AS window_start, "
        "k // 10 AS b, count(*) AS n FROM t CROSS JOIN (VALUES (0), (5)) v(o) GROUP BY 1, 2",
    ),
    "over_partition": (
        "SELECT k, sum(count_char(s, 'c')) OVER (PARTITION BY bucket(k) ORDER BY ts) AS n FROM t",
        "SELECT k, sum(length(s) - length(replace(s, 'c', ''))) "
        "OVER (PARTITION BY k // 10 ORDER BY ts) AS n FROM t",
    ),
}


@pytest.mark.parametrize("shape", sorted(WINDOW_SHAPES))
def test_window_queries_with_udfs_equal_duckdb_builtins(shape: str) -> None:
    sql, builtin = WINDOW_SHAPES[shape]
    con = duckdb.connect()
    con.register("t", T)
    want = sorted_rows(con.sql(builtin).to_arrow_table())
    assert len(want) >= 4
    for size in (1, 7):
        got = run_query(sql, {"t": T}, event_time={"t": "ts"}, batch_size=size).final
        assert sorted_rows(got) == want
    assert sorted_rows(_ctx().sql(sql)) == want


def _failing(x: pa.Array) -> pa.Array:
    raise ZeroDivisionError("boom in the function")


def test_an_exception_fails_the_query_with_its_traceback() -> None:
    ds.udf(input_types=["BIGINT"], return_type="BIGINT", name="blow_up")(_failing)
    with pytest.raises(ds.QueryFailed) as info:
        run_query("SELECT blow_up(k) AS x FROM t", {"t": T})
    text = str(info.value)
    assert "blow_up()" in text and "ZeroDivisionError" in text and "_failing" in text
    assert info.value.operator
    with pytest.raises(ds.QueryFailed, match="blow_up"):
        _ctx().sql("SELECT blow_up(k) AS x FROM t")
    ctx = _ctx()
    with pytest.raises(ds.QueryFailed):
        ctx.sql("SELECT blow_up(k) AS x FROM t")
    assert ctx.sql("SELECT count(*) AS n FROM t").column("n").to_pylist() == [40]


def test_wrong_return_type_and_length_name_expected_and_got() -> None:
    ds.udf(input_types=["BIGINT"], return_type="BIGINT", name="as_text")(
        lambda x: pc.cast(x, pa.string())
    )
    ds.udf(input_types=["BIGINT"], return_type="BIGINT", name="too_short")(lambda x: x[:1])
    with pytest.raises(ds.QueryFailed, match=r"as_text\(\) returned string, expected int64"):
        run_query("SELECT as_text(k) AS x FROM t", {"t": T})
    with pytest.raises(ds.QueryFailed, match=r"too_short\(\) returned 1 rows, expected"):
        _ctx().sql("SELECT too_short(k) AS x FROM t")


def test_registration_errors_are_plan_errors() -> None:
    ctx = _ctx()
    with pytest.raises(ds.PlanError, match="unknown type 'NOTATYPE'"):
        ctx.register_udf("f1", bucket, ["NOTATYPE"], "BIGINT")
    with pytest.raises(ds.PlanError, match="volatility"):
        ctx.register_udf("f2", bucket, ["BIGINT"], "BIGINT", volatility="sometimes")
    with pytest.raises(ds.PlanError, match="built-in"):
        ctx.register_udf("abs", bucket, ["BIGINT"], "BIGINT")
    with pytest.raises(ds.PlanError, match="built-in"):
        ctx.register_udf("explode", bucket, ["BIGINT"], "BIGINT")
    with pytest.raises(ds.PlanError, match="bucket"):
        ctx.sql("SELECT bucket(k, k) AS x FROM t")
    with pytest.raises(ds.PlanError, match="bucket"):
        ctx.execute_streaming("SELECT bucket(k, k) AS x FROM t")


def test_builtin_names_by_type_make_up_all_of_them() -> None:
    from datum_sql.engine import udfs

    by_type = {t: udfs.builtin_names(t) for t in udfs.BUILTIN_TYPES}
    assert "abs" in by_type["SCALAR"] and "abs" not in by_type["AGGREGATE"]
    assert "sum" in by_type["AGGREGATE"] and "row_number" in by_type["WINDOW"]
    assert "generate_series" in by_type["TABLE"]
    assert udfs.builtin_names("AGGREGATE", "WINDOW") == by_type["AGGREGATE"] | by_type["WINDOW"]
    assert udfs.builtin_names() == frozenset().union(*by_type.values())
    with pytest.raises(ValueError, match="unknown function types"):
        udfs.builtin_names("SCALER")


def test_volatile_refused_with_exactly_once(tmp_path: Path) -> None:
    ctx = ds.Context(state_dir=tmp_path / "state")
    ctx.register_arrow("t", T)
    ctx.register_udf("noisy", bucket, ["BIGINT"], "BIGINT", volatility="volatile")
    ctx.execute(f"CREATE SINK out WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    with pytest.raises(ds.PlanError, match=r"exactly once.*noisy\(\).*replay"):
        ctx.execute("INSERT INTO out SELECT k, noisy(k) AS x FROM t")
    with pytest.raises(ds.PlanError, match=r"random\(\)"):
        ctx.execute("INSERT INTO out SELECT k, random() AS x FROM t")


def test_create_function_imports_module_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mychars.py").write_text(
        textwrap.dedent("""
        import pyarrow as pa
        import pyarrow.compute as pc

        def shout(s):
            return pc.utf8_upper(s)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mychars", None)
    ctx = _ctx()
    ctx.execute(
        "CREATE FUNCTION shout(s VARCHAR) RETURNS VARCHAR LANGUAGE python AS 'mychars:shout'"
    )
    got = ctx.sql("SELECT shout(s) AS x FROM t WHERE k < 3 ORDER BY k").column("x").to_pylist()
    assert got == ["CC", "C", "ABC"]
    with pytest.raises(ds.PlanError, match="no function 'nope'"):
        ctx.execute(
            "CREATE FUNCTION f(s VARCHAR) RETURNS VARCHAR LANGUAGE python AS 'mychars:nope'"
        )


def test_create_function_in_a_script_run_by_the_cli(tmp_path: Path) -> None:
    (tmp_path / "textfns.py").write_text(
        "import pyarrow.compute as pc\n\n\ndef shout(s):\n    return pc.utf8_upper(s)\n"
    )
    (tmp_path / "in.csv").write_text("id,name\n1,ann\n2,bob\n")
    out = tmp_path / "out"
    (tmp_path / "job.sql").write_text(f"""
        CREATE FUNCTION shout(s VARCHAR) RETURNS VARCHAR LANGUAGE python AS 'textfns:shout';
        CREATE SOURCE people (id BIGINT, name VARCHAR)
            WITH (connector = 'csv', path = '{tmp_path / "in.csv"}');
        CREATE SINK loud WITH (connector = 'parquet', path = '{out}');
        INSERT INTO loud SELECT id, shout(name) AS name FROM people;
    """)
    result = subprocess.run(
        [sys.executable, "-m", "datum_sql.cli", "run", "job.sql", "--state-dir", "state"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    got = pads.dataset(str(out), format="parquet").to_table()
    assert sorted_rows(got) == [(1, "ANN"), (2, "BOB")]


def test_a_udf_under_a_correlated_not_in_runs_in_batch_as_streamed() -> None:
    # DataFusion cannot plan this NOT IN: ctx.sql runs it on the engine, UDF and all
    sql = "SELECT t.k FROM t WHERE bucket(t.k) NOT IN (SELECT u.b FROM u WHERE u.label = t.s)"
    labels = dict(zip(U.column("label").to_pylist(), U.column("b").to_pylist(), strict=True))
    want = [
        (k,)
        for k, s in zip(T.column("k").to_pylist(), T.column("s").to_pylist(), strict=True)
        if labels.get(s) != k // 10
    ]
    assert len(want) == 38
    for got in _both(sql):
        assert got == want
