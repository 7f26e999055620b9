"""The %%sql magic, run through a real IPython InteractiveShell: statements of every kind,
context selection, and {var} interpolation that quotes values as literals — an injection
attempt stays a string."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from IPython.core.error import UsageError
from nbtest_support import shell

import datum_sql as ds
from datum_sql.notebook.display import ExplainView
from datum_sql.notebook.magic import interpolate, parse_options, sql_literal

INJECTION = "'; DROP SOURCE t; --"


@pytest.fixture
def ip() -> Any:
    ip = shell()
    ip.reset(new_session=False)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.register_arrow("t", pa.table({"name": ["ann", "bob", "cid"], "n": [1, 2, 3]}))
    ip.user_ns["ctx"] = ctx
    yield ip
    ctx.close()
    ip.reset(new_session=False)


def cell(ip: Any, body: str, line: str = "") -> Any:
    return ip.run_cell_magic("sql", line, body)


def test_injection_attempt_stays_a_string_literal(ip: Any) -> None:
    ip.user_ns["x"] = INJECTION
    out = cell(ip, "SELECT {x} AS v, name FROM t WHERE name <> {x} ORDER BY name")
    assert out.column("v").to_pylist() == [INJECTION] * 3
    # the source is still there and still queried
    assert ip.user_ns["ctx"].catalog.get("t") is not None
    assert cell(ip, "SELECT count(*) AS n FROM t").column("n").to_pylist() == [3]
    # with a backslash and more quotes: still one literal
    ip.user_ns["x"] = "\\'); DROP SOURCE t; --'"
    assert cell(ip, "SELECT {x} AS v").column("v").to_pylist() == ["\\'); DROP SOURCE t; --'"]
    assert ip.user_ns["ctx"].catalog.get("t") is not None


def test_line_magic_does_not_let_ipython_splice_variables(ip: Any) -> None:
    ip.user_ns["x"] = INJECTION
    result = ip.run_cell("%sql --out r SELECT {x} AS v FROM t LIMIT 1")
    result.raise_error()
    assert ip.user_ns["r"].column("v").to_pylist() == [INJECTION]
    result = ip.run_cell("%%sql --out r2\nSELECT {x} AS v, name FROM t WHERE name = {x}")
    result.raise_error()
    assert ip.user_ns["r2"].num_rows == 0
    assert ip.user_ns["ctx"].catalog.get("t") is not None


def test_values_are_quoted_by_type(ip: Any) -> None:
    ip.user_ns.update(
        i=-3, f=2.5, tiny=1e-05, none=None, yes=True, s="it's", d=date(2026, 1, 2),
        ts=datetime(2026, 1, 2, 3, 4, 5, 600000), dec=Decimal("1.25"),
    )  # fmt: skip
    out = cell(
        ip,
        "SELECT {i} AS i, 1 -{i} AS j, {f} AS f, {tiny} AS tiny, {none} AS z, {yes} AS b, "
        "{s} AS s, {d} AS d, {ts} AS ts, {dec} AS dec",
    )
    row = out.to_pylist()[0]
    assert row["i"] == -3 and row["j"] == 4  # "1 -(-3)", never "1 --3" (a comment)
    assert row["f"] == 2.5 and row["tiny"] == pytest.approx(1e-05)
    assert row["z"] is None and row["b"] is True and row["s"] == "it's"
    assert row["d"] == date(2026, 1, 2)
    assert row["ts"] == datetime(2026, 1, 2, 3, 4, 5, 600000)
    assert float(row["dec"]) == 1.25


def test_a_list_becomes_an_in_list_and_braces_in_strings_and_comments_stay(ip: Any) -> None:
    ip.user_ns["names"] = ["ann", "cid"]
    out = cell(
        ip,
        "SELECT name, '{names}' AS raw FROM t -- {names} stays in this comment\n"
        "WHERE name IN {names} ORDER BY name",
    )
    assert out.column("name").to_pylist() == ["ann", "cid"]
    assert out.column("raw").to_pylist() == ["{names}", "{names}"]


def test_sql_literal_forms() -> None:
    assert sql_literal(None) == "NULL"
    assert sql_literal(True) == "TRUE" and sql_literal(np.bool_(False)) == "FALSE"
    assert sql_literal(7) == "7" and sql_literal(-7) == "(-7)" and sql_literal(np.int64(5)) == "5"
    assert sql_literal(float("nan")) == "CAST('NaN' AS DOUBLE PRECISION)"
    assert sql_literal(float("-inf")) == "CAST('-Infinity' AS DOUBLE PRECISION)"
    assert sql_literal(-2.5) == "(-2.5)"
    assert sql_literal("a'b") == "'a''b'"
    assert sql_literal(datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))) == (
        "CAST('2026-01-01 10:00:00' AS TIMESTAMP)"
    )
    assert (
        sql_literal(datetime(2026, 1, 1, tzinfo=UTC)) == "CAST('2026-01-01 00:00:00' AS TIMESTAMP)"
    )
    assert (
        sql_literal(np.datetime64("2026-01-01T00:00:01"))
        == "CAST('2026-01-01 00:00:01' AS TIMESTAMP)"
    )
    assert sql_literal(time(1, 2, 3)) == "CAST('01:02:03' AS TIME)"
    assert sql_literal(timedelta(seconds=5)) == "INTERVAL '5 seconds'"
    assert sql_literal(timedelta(milliseconds=1500)) == "INTERVAL '1500000 microseconds'"
    assert sql_literal((1, "a")) == "(1, 'a')"
    assert sql_literal({3, 1}) == "(1, 3)"
    for bad in (b"bytes", object(), [], {"a": 1}):
        with pytest.raises(TypeError):
            sql_literal(bad)


def test_interpolate_attributes_unknown_names_and_unreadable_sql() -> None:
    class Cfg:
        limit = 2

    assert interpolate("SELECT * FROM t LIMIT {cfg.limit}", {"cfg": Cfg()}) == (
        "SELECT * FROM t LIMIT 2"
    )
    with pytest.raises(NameError, match="missing"):
        interpolate("SELECT {missing}", {})
    # an unterminated string: nothing is replaced (running it reports the SQL error)
    assert interpolate("SELECT '{x}", {"x": 1}) == "SELECT '{x}"
    # quoted identifiers are not placeholders
    assert interpolate('SELECT {"x"}', {"x": 1}) == 'SELECT {"x"}'


def test_ddl_select_show_explain_and_a_script(ip: Any) -> None:
    ip.user_ns["rows"] = 100
    out = cell(
        ip,
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', rows = {rows});\n"
        "SELECT count(*) AS n FROM bids",
    )
    assert out.column("n").to_pylist() == [100]
    shown = cell(ip, "SHOW SOURCES")
    assert isinstance(shown, pa.Table) and set(shown.column("name").to_pylist()) == {"t", "bids"}
    assert cell(ip, "DROP SOURCE bids") is None
    explained = cell(ip, "EXPLAIN SELECT name FROM t WHERE n > 1")
    assert isinstance(explained, ExplainView)
    assert "job graph" in str(explained) and "<svg" in explained._repr_html_()


def test_streaming_statements_return_live_handles_and_out_stores_the_result(ip: Any) -> None:
    q = cell(ip, "SELECT name, n * 10 AS tens FROM t", line="--stream --out handle")
    assert isinstance(q, ds.StreamingQuery) and ip.user_ns["handle"] is q
    assert sorted(q.to_arrow(timeout=30).column("tens").to_pylist()) == [10, 20, 30]
    view = cell(ip, "CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS c FROM t")
    assert isinstance(view, ds.StreamingQuery)
    view.wait(30)
    assert cell(ip, "SELECT c FROM totals").column("c").to_pylist() == [3]


def test_context_selection(ip: Any) -> None:
    other = ds.Context(state_dir=None, checkpoint_interval=None)
    other.register_arrow("only_here", pa.table({"a": [1]}))
    ip.user_ns["other"] = other
    assert cell(ip, "SELECT a FROM only_here", line="-c other").num_rows == 1
    with pytest.raises(UsageError, match="no variable"):
        cell(ip, "SELECT 1", line="--context nope")
    ip.user_ns["notctx"] = 5
    with pytest.raises(UsageError, match=r"not a datum_sql\.Context"):
        cell(ip, "SELECT 1", line="--context notctx")
    ip.user_ns["first"] = ip.user_ns.pop("ctx")
    with pytest.raises(UsageError, match=r"several Contexts \(first, other\)"):
        cell(ip, "SELECT 1")
    del ip.user_ns["other"]
    assert cell(ip, "SELECT count(*) AS n FROM t").column("n").to_pylist() == [3]  # the only one
    del ip.user_ns["first"]
    with pytest.raises(UsageError, match=r"no datum_sql\.Context"):
        cell(ip, "SELECT 1")
    with pytest.raises(UsageError, match="no SQL"):
        cell(ip, "   ")


def test_sql_errors_propagate(ip: Any) -> None:
    with pytest.raises(ds.SqlError):
        cell(ip, "SELEC name FROM t")


def test_parse_options() -> None:
    assert parse_options("-c ctx2 --out r --stream SELECT 1") == (
        {"context": "ctx2", "out": "r", "stream": True},
        "SELECT 1",
    )
    assert parse_options("--out=r") == ({"context": None, "out": "r", "stream": False}, "")
    assert parse_options("SELECT 1 -- comment")[1] == "SELECT 1 -- comment"
    with pytest.raises(UsageError):
        parse_options("--out 1bad")


def test_a_cell_error_shows_the_message_not_the_frames(ip: Any, capsys: Any) -> None:
    capsys.readouterr()
    result = ip.run_cell("%%sql\nSELECT nope FROM t")
    assert isinstance(result.error_in_exec, ds.SqlError)  # the cell fails, with its type
    shown = capsys.readouterr()
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown.out + shown.err)
    assert "SqlError: unknown column 'nope'" in text and "%tb" in text
    assert "Traceback" not in text and "run_sql" not in text and "magic.py" not in text
    # a DatumError raised by Python code in a cell keeps its traceback
    result = ip.run_cell("ctx.sql('SELECT nope FROM t')")
    assert isinstance(result.error_in_exec, ds.SqlError)
    shown = capsys.readouterr()
    assert "Traceback" in shown.out + shown.err or "----> 1" in shown.out + shown.err
    # other errors are untouched
    result = ip.run_cell("1 / 0")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert "ZeroDivisionError" in "".join(capsys.readouterr())
