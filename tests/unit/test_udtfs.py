"""Python table functions: ``LATERAL f(t.x)`` equals the hand-computed expansion, streamed
in several batch sizes and in batch; zero output rows, NULL arguments, literal arguments;
failures and wrong output name the function, what was expected and what came; calls the
planner cannot type are PlanErrors before anything runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest

import datum_sql as ds
from datum_sql.testing import run_query, sorted_rows

CALLS: list[int] = []


@ds.table_function(input_types=["VARCHAR"], output_schema={"word": "VARCHAR", "pos": "INT"})
def split_words(s: pa.Array) -> pa.Table:
    """Each space-separated word of each text, with its position in the text."""
    CALLS.append(len(s))
    lists = pc.split_pattern(s, " ")
    parents = pc.list_parent_indices(lists)
    starts = pc.take(pc.cumulative_sum(pc.fill_null(pc.list_value_length(lists), 0)), parents)
    lengths = pc.take(pc.fill_null(pc.list_value_length(lists), 0), parents)
    pos = pc.subtract(pa.array(range(len(parents)), pa.int64()), pc.subtract(starts, lengths))
    return pa.table(
        {"word": pc.list_flatten(lists), "pos": pos.cast(pa.int32()), "input_row": parents}
    )


@ds.table_function(
    input_types=["BIGINT", "VARCHAR"], output_schema=[("i", "BIGINT"), ("tag", "VARCHAR")]
)
def repeat_tag(n: pa.Array, tag: pa.Array) -> Iterator[pa.Table]:
    """``n`` rows per input row, a per-row Python loop (the function's own choice)."""
    for row, (count, label) in enumerate(zip(n.to_pylist(), tag.to_pylist(), strict=True)):
        if count:
            yield pa.table(
                {"i": list(range(count)), "tag": [label] * count, "input_row": [row] * count}
            )


T = pa.table(
    {
        "k": pa.array(range(12), pa.int64()),
        "s": ["a b", None, "", "c", "d e f", "a", None, "b b", "x", "", "y z", "q"],
        "n": pa.array([2, 0, None, 1, 3, 0, 1, None, 2, 1, 0, 4], pa.int64()),
        "ts": pa.array([i * 1_000_000 for i in range(12)], pa.timestamp("us")),
    }
)
U = pa.table({"k": pa.array([0, 3, 4, 8], pa.int64()), "label": ["zero", "three", "four", "eight"]})


def _words(rows: list[dict]) -> list[tuple]:
    """The hand-computed expansion of split_words over ``rows``."""
    return sorted(
        (r["k"], w, p) for r in rows if r["s"] is not None for p, w in enumerate(r["s"].split(" "))
    )


def _ctx() -> ds.Context:
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.register_arrow("t", T, event_time="ts")
    ctx.register_arrow("u", U)
    return ctx


def _streamed(sql: str, batch_size: int) -> list[tuple]:
    return sorted_rows(run_query(sql, {"t": T, "u": U}, batch_size=batch_size).final)


@pytest.mark.parametrize("batch_size", [1, 5, 1000])
def test_lateral_equals_the_hand_computed_expansion(batch_size: int) -> None:
    want = _words(T.to_pylist())
    for sql in (
        "SELECT t.k, w.word, w.pos FROM t, LATERAL split_words(t.s) AS w",
        "SELECT t.k, w.word, w.pos FROM t CROSS JOIN LATERAL split_words(t.s) AS w",
        "SELECT k, word, pos FROM t, split_words(s) AS w",
    ):
        assert _streamed(sql, batch_size) == want
        assert sorted_rows(_ctx().sql(sql)) == want


def test_a_call_per_batch_not_per_row() -> None:
    CALLS.clear()
    _streamed("SELECT w.word FROM t, LATERAL split_words(t.s) AS w", 5)
    assert sorted(CALLS) == [2, 5, 5]


def test_zero_output_rows_and_null_arguments() -> None:
    rows = T.to_pylist()
    want = sorted((r["k"], i, "x") for r in rows for i in range(r["n"] or 0))
    inner = "SELECT t.k, r.i, r.tag FROM t, LATERAL repeat_tag(t.n, 'x') AS r"
    assert _streamed(inner, 4) == want
    assert sorted_rows(_ctx().sql(inner)) == want
    # LEFT JOIN LATERAL ... ON TRUE keeps a row for which the function yields nothing
    empty = [(r["k"], None, None) for r in rows if not r["n"]]
    left = "SELECT t.k, r.i, r.tag FROM t LEFT JOIN LATERAL repeat_tag(t.n, 'x') AS r ON TRUE"
    for got in (_streamed(left, 4), sorted_rows(_ctx().sql(left))):
        assert sorted(got, key=repr) == sorted(want + empty, key=repr)


def test_column_aliases_where_and_expressions_as_arguments() -> None:
    sql = (
        "SELECT t.k, w.w AS word FROM t, LATERAL split_words(upper(t.s)) AS w(w, p) "
        "WHERE w.p = 0 AND t.k > 2"
    )
    want = sorted((k, w.upper()) for k, w, p in _words(T.to_pylist()) if p == 0 and k > 2)
    assert _streamed(sql, 3) == want
    assert sorted_rows(_ctx().sql(sql)) == want


def test_literal_arguments_are_a_bounded_table() -> None:
    want = [(0, "a"), (1, "a"), (2, "a")]
    sql = "SELECT * FROM repeat_tag(3, 'a')"
    assert sorted_rows(_ctx().sql(sql)) == want
    assert sorted_rows(_ctx().execute_streaming(sql).to_arrow(timeout=60)) == want
    sql = "SELECT r.i * 10 AS j FROM repeat_tag(4, 'b') AS r WHERE r.i > 0"
    assert sorted_rows(_ctx().sql(sql)) == [(10,), (20,), (30,)]
    assert sorted_rows(_ctx().execute_streaming(sql).to_arrow(timeout=60)) == [(10,), (20,), (30,)]


def test_lateral_after_a_join_and_before_an_aggregate() -> None:
    labels = dict(zip(U.column("k").to_pylist(), U.column("label").to_pylist(), strict=True))
    want = sorted(
        (labels[k], sum(1 for kk, _, _ in _words(T.to_pylist()) if kk == k))
        for k in labels
        if any(kk == k for kk, _, _ in _words(T.to_pylist()))
    )
    sql = (
        "SELECT u.label, count(*) AS words FROM t JOIN u ON t.k = u.k, "
        "LATERAL split_words(t.s) AS w GROUP BY u.label"
    )
    assert _streamed(sql, 4) == want
    assert sorted_rows(_ctx().sql(sql)) == want


def test_batch_order_by_and_limit_sort_the_result() -> None:
    got = _ctx().sql(
        "SELECT t.k, w.word FROM t, LATERAL split_words(t.s) AS w ORDER BY k DESC, word LIMIT 3"
    )
    assert got.to_pylist() == [
        {"k": 11, "word": "q"}, {"k": 10, "word": "y"}, {"k": 10, "word": "z"},
    ]  # fmt: skip


def test_explain_shows_the_lateral_step() -> None:
    text = _ctx().explain("SELECT t.k, w.word FROM t, LATERAL split_words(t.s) AS w")
    assert "LATERAL split_words" in text and "lateral_table_function" in text


def _boom(s: pa.Array) -> Iterator[pa.Table]:
    yield from ()
    raise ZeroDivisionError("boom in the table function")


def test_an_exception_fails_the_query_with_its_traceback() -> None:
    ds.table_function(input_types=["VARCHAR"], output_schema={"x": "BIGINT"}, name="explode_boom")(
        _boom
    )
    sql = "SELECT t.k, b.x FROM t, LATERAL explode_boom(t.s) AS b"
    with pytest.raises(ds.QueryFailed) as info:
        run_query(sql, {"t": T})
    text = str(info.value)
    assert "explode_boom()" in text and "ZeroDivisionError" in text and "_boom" in text
    assert info.value.operator and info.value.operator.startswith("lateral")
    ctx = _ctx()
    with pytest.raises(ds.QueryFailed, match=r"explode_boom\(\).*ZeroDivisionError"):
        ctx.sql(sql)
    assert ctx.sql("SELECT count(*) AS n FROM t").column("n").to_pylist() == [12]


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda s: pa.table({"x": [1], "input_row": [0]}),
         r"bad_out\(\) yielded columns \(x, input_row\), expected \(word, input_row\)"),
        (lambda s: pa.table({"word": [1], "input_row": [0]}),
         r"bad_out\(\) yielded column 'word' of type int64, expected string"),
        (lambda s: pa.table({"word": ["a"], "input_row": [len(s)]}),
         r"bad_out\(\) yielded input_row \d+, expected 0 to \d+ \(the positions of the \d+ input rows"),
        (lambda s: pa.table({"word": ["a"], "input_row": pa.array([None], pa.int64())}),
         r"bad_out\(\) yielded a null input_row"),
        (lambda s: pa.array(["a"]),
         r"bad_out\(\) must yield pyarrow RecordBatches or Tables of \(word, input_row\), got StringArray"),
    ],
)  # fmt: skip
def test_wrong_output_names_the_function_expected_and_got(fn: object, message: str) -> None:
    ds.table_function(input_types=["VARCHAR"], output_schema={"word": "VARCHAR"}, name="bad_out")(
        fn  # type: ignore[arg-type]
    )
    sql = "SELECT t.k, b.word FROM t, LATERAL bad_out(t.s) AS b"
    with pytest.raises(ds.QueryFailed, match=message) as info:
        run_query(sql, {"t": T})
    assert info.value.operator
    with pytest.raises(ds.QueryFailed, match=message):
        _ctx().sql(sql)


def test_calls_the_planner_cannot_type_are_plan_errors_before_running() -> None:
    CALLS.clear()
    ctx = _ctx()
    for sql, message in (
        ("SELECT * FROM t, LATERAL no_such_fn(t.s) AS f", r"unknown table function no_such_fn\(\)"),
        ("SELECT * FROM t, LATERAL split_words(t.s, t.k) AS w",
         r"split_words\(\) takes 1 argument\(s\) \(VARCHAR\), got 2"),
        ("SELECT * FROM t, LATERAL split_words(t.k) AS w",
         r"split_words\(\) argument 1 \(.*k\) is BIGINT, expected VARCHAR"),
        ("SELECT * FROM t, LATERAL split_words(t.s) AS w(a)",
         r"names 1 columns; split_words\(\) returns 2: word, pos"),
        ("SELECT * FROM t LEFT JOIN LATERAL split_words(t.s) AS w ON w.pos = 0",
         r"LEFT JOIN LATERAL split_words\(\) takes ON TRUE"),
        ("SELECT a.k, w.word FROM (SELECT s AS k, count(*) AS c FROM t GROUP BY s) AS a, "
         "LATERAL split_words(a.k) AS w", r"split_words\(\): a table function reads append-only"),
    ):  # fmt: skip
        with pytest.raises(ds.PlanError, match=message):
            ctx.execute_streaming(sql)
        with pytest.raises(ds.PlanError, match=message):
            ctx.sql(sql)
    assert CALLS == []
    with pytest.raises(ds.SqlError, match=r"unknown table function no_such_fn\(\).*registered"):
        ctx.sql("SELECT * FROM no_such_fn(1)")


def test_registration_errors_are_plan_errors() -> None:
    ctx = _ctx()
    with pytest.raises(ds.PlanError, match="unknown type 'NOTATYPE' for the argument 1"):
        ctx.register_table_function("f1", split_words, ["NOTATYPE"], {"a": "BIGINT"})
    with pytest.raises(ds.PlanError, match="unknown type 'NOPE' for the output column 'a'"):
        ctx.register_table_function("f2", split_words, ["BIGINT"], {"a": "NOPE"})
    with pytest.raises(ds.PlanError, match="'input_row' cannot be an output column"):
        ctx.register_table_function("f3", split_words, ["BIGINT"], {"input_row": "BIGINT"})
    with pytest.raises(ds.PlanError, match="at least one argument"):
        ctx.register_table_function("f4", split_words, [], {"a": "BIGINT"})
    with pytest.raises(ds.PlanError, match="built-in"):
        ctx.register_table_function("tumble", split_words, ["BIGINT"], {"a": "BIGINT"})
    with pytest.raises(ds.PlanError, match="output_schema declares no column"):
        ctx.register_table_function("f5", split_words, ["BIGINT"], {})


def test_create_function_returns_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mytables.py").write_text(
        textwrap.dedent("""
        import pyarrow as pa
        import pyarrow.compute as pc

        def chars(s):
            lists = pa.array([list(x) if x else [] for x in s.to_pylist()], pa.list_(pa.string()))
            return pa.table({"c": pc.list_flatten(lists), "input_row": pc.list_parent_indices(lists)})
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mytables", None)
    ctx = _ctx()
    ctx.execute(
        "CREATE FUNCTION chars(s VARCHAR) RETURNS TABLE (c VARCHAR) LANGUAGE python "
        "AS 'mytables:chars'"
    )
    got = ctx.sql("SELECT t.k, x.c FROM t, LATERAL chars(t.s) AS x WHERE t.k = 4")
    assert sorted_rows(got) == [(4, " "), (4, " "), (4, "d"), (4, "e"), (4, "f")]
    with pytest.raises(ds.PlanError, match="RETURNS TABLE needs its columns"):
        ctx.execute(
            "CREATE FUNCTION c2(s VARCHAR) RETURNS TABLE LANGUAGE python AS 'mytables:chars'"
        )


def test_create_function_returns_table_in_a_script_run_by_the_cli(tmp_path: Path) -> None:
    (tmp_path / "wordfns.py").write_text(
        "import pyarrow as pa\nimport pyarrow.compute as pc\n\n\ndef words(s):\n"
        "    lists = pc.split_pattern(s, ' ')\n"
        "    return pa.table({'word': pc.list_flatten(lists), "
        "'input_row': pc.list_parent_indices(lists)})\n"
    )
    (tmp_path / "in.csv").write_text("id,text\n1,ann bob\n2,cy\n")
    out = tmp_path / "out"
    (tmp_path / "job.sql").write_text(f"""
        CREATE FUNCTION words(s VARCHAR) RETURNS TABLE (word VARCHAR)
            LANGUAGE python AS 'wordfns:words';
        CREATE SOURCE lines (id BIGINT, text VARCHAR)
            WITH (connector = 'csv', path = '{tmp_path / "in.csv"}');
        CREATE SINK out WITH (connector = 'parquet', path = '{out}');
        INSERT INTO out SELECT l.id, w.word FROM lines AS l, LATERAL words(l.text) AS w;
    """)
    result = subprocess.run(
        [sys.executable, "-m", "datum_sql.cli", "run", "job.sql", "--state-dir", "state"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    got = pads.dataset(str(out), format="parquet").to_table()
    assert sorted_rows(got) == [(1, "ann"), (1, "bob"), (2, "cy")]


def test_a_batch_query_the_engine_cannot_run_says_why() -> None:
    sql = "SELECT w.word FROM t, LATERAL split_words(t.s) AS w UNION SELECT s FROM t"
    with pytest.raises(
        ds.PlanError, match=r"has a table function, so it runs on the streaming engine.*UNION"
    ):
        _ctx().sql(sql)


def test_verify_compares_batch_and_streaming() -> None:
    ctx = _ctx()
    assert ctx.verify("SELECT t.k, w.word FROM t, LATERAL split_words(t.s) AS w")
    assert ctx.verify("SELECT * FROM repeat_tag(2, 'v')")
