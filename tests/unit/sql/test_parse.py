"""Parsing: identity round-trips and error fixtures, plus where each extension lives in the AST."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from datum_sql.errors import SqlError
from datum_sql.sql.dialect import EMIT_WINDOW_CLOSE, Datum, Explain
from datum_sql.sql.parse import parse, parse_one, set_assignment, statement_texts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "parse"


def _identity_cases() -> list:
    cases = []
    lines = (FIXTURES / "identity.sql").read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if line.strip() and not line.startswith("--"):
            cases.append(pytest.param(line, id=f"line{number}"))
    assert len(cases) >= 60, "identity.sql lost its cases"
    return cases


@dataclass
class ErrorCase:
    message: str
    sql: str
    at: tuple[int, int] | None = None
    near: str | None = None


def _error_cases() -> list:
    text = (FIXTURES / "errors.sql").read_text()
    cases = []
    line_number = 1
    for block in text.split("\n\n"):
        start = line_number
        line_number += block.count("\n") + 2
        lines = block.strip("\n").splitlines()
        if not lines or not lines[0].startswith("-- fail:"):
            continue  # the header comment
        case = ErrorCase(message=lines[0].removeprefix("-- fail:").strip(), sql="")
        body = lines[1:]
        while body and body[0].startswith("-- "):
            key, _, value = body.pop(0)[3:].partition(":")
            if key == "at":
                line, column = value.strip().split(":")
                case.at = (int(line), int(column))
            elif key == "near":
                case.near = value.strip()
            else:
                raise AssertionError(f"errors.sql line {start}: unknown meta line {key!r}")
        case.sql = "\n".join(body)
        cases.append(pytest.param(case, id=f"line{start}"))
    assert len(cases) >= 20, "errors.sql lost its cases"
    return cases


@pytest.mark.parametrize("sql", _identity_cases())
def test_identity(sql: str) -> None:
    (statement,) = parse(sql)
    assert not list(statement.find_all(exp.Command))
    assert statement.sql(dialect=Datum) == sql
    # the multi-line (pretty) form parses back to the same tree
    assert parse_one(statement.sql(dialect=Datum, pretty=True)) == statement


@pytest.mark.parametrize("case", _error_cases())
def test_error(case: ErrorCase) -> None:
    with pytest.raises(SqlError) as info:
        parse(case.sql)
    error = info.value
    assert case.message in str(error)
    assert "\x1b" not in str(error)
    if case.at is not None:
        assert (error.line, error.column) == case.at
    if case.near is not None:
        assert error.text == case.near


# -- where the extensions live in the AST ------------------------------------------------------


def test_emit_lateness_and_late_output_are_select_args() -> None:
    select = parse_one(
        "SELECT window_start, COUNT(*) FROM TUMBLE(bids, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start EMIT ON WINDOW CLOSE "
        "ALLOWED LATENESS INTERVAL '5 seconds' LATE ROWS TO late_bids"
    )
    assert isinstance(select, exp.Select)
    assert select.args["emit"] == EMIT_WINDOW_CLOSE == "window_close"
    lateness = select.args["allowed_lateness"]
    assert isinstance(lateness, exp.Interval)
    assert (lateness.name, lateness.unit.name) == ("5", "SECONDS")
    assert select.args["late_output"] == exp.to_identifier("late_bids")
    assert parse_one("SELECT a FROM t GROUP BY a").args.get("emit") is None


def test_streaming_clauses_in_any_order_generate_in_canonical_order() -> None:
    select = parse_one(
        "SELECT a FROM t GROUP BY a LATE ROWS TO l ALLOWED LATENESS INTERVAL '1 SECOND' "
        "EMIT ON WINDOW CLOSE"
    )
    assert select.sql(dialect=Datum) == (
        "SELECT a FROM t GROUP BY a EMIT ON WINDOW CLOSE "
        "ALLOWED LATENESS INTERVAL '1 SECOND' LATE ROWS TO l"
    )


@pytest.mark.parametrize(
    ("sql", "path"),
    [
        ("INSERT INTO s SELECT a FROM t GROUP BY a EMIT ON WINDOW CLOSE", "expression"),
        (
            "CREATE MATERIALIZED VIEW v AS SELECT a FROM t GROUP BY a EMIT ON WINDOW CLOSE",
            "expression",
        ),
        (
            "CREATE SINK s AS SELECT a FROM t GROUP BY a EMIT ON WINDOW CLOSE "
            "WITH (connector='csv')",
            "expression",
        ),
        ("EXPLAIN SELECT a FROM t GROUP BY a EMIT ON WINDOW CLOSE", "this"),
    ],
)
def test_emit_on_the_select_inside_statements(sql: str, path: str) -> None:
    select = parse_one(sql).args[path]
    assert isinstance(select, exp.Select)
    assert select.args["emit"] == EMIT_WINDOW_CLOSE


def test_streaming_words_stay_usable_as_names() -> None:
    select = parse_one("SELECT late, emit FROM t AS late WHERE allowed > 1")
    assert [c.name for c in select.expressions] == ["late", "emit"]
    assert select.args.get("late_output") is None


def test_window_table_functions() -> None:
    for name, arity in (("TUMBLE", 3), ("HOP", 4), ("SESSION", 3)):
        intervals = ", ".join(["INTERVAL '1 SECOND'"] * (arity - 2))
        select = parse_one(f"SELECT * FROM {name.lower()}(bids, ts, {intervals})")
        table = select.args["from_"].this
        assert isinstance(table, exp.Table)
        function = table.this
        assert isinstance(function, exp.Anonymous)
        assert function.name.upper() == name
        assert len(function.expressions) == arity


def test_explain_show_set() -> None:
    explain = parse_one("EXPLAIN INSERT INTO s SELECT a FROM t")
    assert isinstance(explain, Explain)
    assert isinstance(explain.this, exp.Insert)

    for kind in ("SOURCES", "SINKS", "MATERIALIZED VIEWS", "TABLES"):
        show = parse_one(f"show {kind.lower()}")
        assert isinstance(show, exp.Show)
        assert show.name == kind

    for sql in (
        "SET checkpoint_interval = '10 seconds'",
        "SET checkpoint_interval TO '10 seconds'",
    ):
        statement = parse_one(sql)
        assert isinstance(statement, exp.Set)
        name, value = set_assignment(statement)
        assert name == "checkpoint_interval"
        assert value == exp.Literal.string("10 seconds")
    assert set_assignment(parse_one("SET streaming.parallelism = 4"))[0] == "streaming.parallelism"


def test_create_source_parts() -> None:
    create = parse_one(
        "CREATE SOURCE bids (auction BIGINT, ts TIMESTAMP, "
        "WATERMARK FOR ts AS ts - INTERVAL '5 seconds') "
        "INCLUDE key AS k INCLUDE offset WITH (connector='kafka', topic='bids') "
        "FORMAT PLAIN ENCODE JSON"
    )
    assert isinstance(create, exp.Create)
    assert create.kind == "SOURCE"
    assert create.this.this.name == "bids"
    watermark = create.this.find(exp.WatermarkColumnConstraint)
    assert watermark is not None
    assert watermark.this.name == "ts"
    properties = create.args["properties"].expressions
    includes = [(p.name, p.alias or None) for p in properties if isinstance(p, exp.IncludeProperty)]
    assert includes == [("key", "k"), ("offset", None)]
    options = {p.name: p.args["value"].name for p in properties if type(p) is exp.Property}
    assert options == {"connector": "kafka", "topic": "bids"}


def test_create_sink_forms_and_drops() -> None:
    declared = parse_one("CREATE SINK s (a INT, b VARCHAR) WITH (connector='csv', path='out')")
    assert declared.kind == "SINK"
    assert isinstance(declared.this, exp.Schema)
    assert [c.name for c in declared.this.expressions] == ["a", "b"]

    query = parse_one("CREATE SINK s AS SELECT a FROM t WITH (connector='csv', path='out')")
    assert isinstance(query.expression, exp.Select)

    for sql, kind, materialized in (
        ("DROP SOURCE IF EXISTS s", "SOURCE", False),
        ("DROP SINK s", "SINK", False),
        ("DROP MATERIALIZED VIEW v", "VIEW", True),
    ):
        drop = parse_one(sql)
        assert isinstance(drop, exp.Drop)
        assert drop.kind == kind
        assert bool(drop.args.get("materialized")) is materialized


def test_registered_as_datum() -> None:
    assert isinstance(sqlglot.parse_one("SHOW SINKS", read="datum"), exp.Show)


# -- scripts -------------------------------------------------------------------------------------


def test_script_splitting() -> None:
    script = "SELECT 1;;\n-- a comment\nSELECT 'a;b' ;\n  \n"
    assert [s.sql(dialect=Datum, comments=False) for s in parse(script)] == [
        "SELECT 1",
        "SELECT 'a;b'",
    ]
    assert statement_texts(script) == ["SELECT 1", "SELECT 'a;b'"]
    assert parse(" ;; -- nothing\n") == []


def test_parse_one_wants_exactly_one_statement() -> None:
    assert isinstance(parse_one("SELECT 1;"), exp.Select)
    with pytest.raises(SqlError, match="Empty SQL"):
        parse_one("  ; ")
    with pytest.raises(SqlError, match="Expected one statement, found 2") as info:
        parse_one("SELECT 1;\n  SELECT 2")
    assert (info.value.line, info.value.column, info.value.text) == (2, 3, "SELECT")


def test_error_positions_in_a_multi_line_statement() -> None:
    sql = "SELECT a,\n       b\nFROM t\nWHERE a = = 1"
    with pytest.raises(SqlError) as info:
        parse(sql)
    error = info.value
    assert (error.line, error.column, error.text, error.sql) == (4, 11, "=", sql)
    # the message shows the offending line with a caret under the column
    assert str(error).endswith("\n  WHERE a = = 1\n            ^")
