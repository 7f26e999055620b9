"""Expressions compiled to kernels at planning give DataFusion's answer, row for row.

Tests as data: each expression of ``COMPILED`` must compile and, through the Calc
operator, return what DataFusion returns for the same SELECT (values, types, NULLs), or
fail with DataFusion's own error; each of ``NOT_COMPILED`` has no exact kernel translation
and must stay with DataFusion.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

import datum_sql as ds
from datum_sql.engine.expressions import Call
from datum_sql.engine.operators.stateless import Calc
from datum_sql.plan.compile import compile_select
from datum_sql.plan.engines import DataFusion
from datum_sql.plan.infer import infer_schema
from datum_sql.sql.dialect import Datum

MIN, MAX = -(2**63), 2**63 - 1
#: Long enough IN lists to be one hash lookup (is_in), not comparisons OR-ed.
MANY = ", ".join(str(v) for v in range(-7, 30))
MANY_TEXT = ", ".join(f"'{c}'" for c in "abcdefghijklmnopqrstuvwxyz") + ", 'aB'"
BATCH = pa.record_batch(
    {
        "i": pa.array([MAX, -7, 7, None, 0, MIN, 123 * 5], pa.int64()),
        "j": pa.array([2, 2, -2, 1, 3, -1, None], pa.int64()),
        "s": pa.array([1, -2, 3, 4, None, 2147483647, -2147483648], pa.int32()),
        "nz": pa.array([3, -3, 5, None, 7, 1, 2], pa.int64()),
        "f": pa.array([1.5, -2.5, -0.0, None, math.nan, math.inf, 0.0], pa.float64()),
        "g": pa.array([math.nan, 0.0, 0.0, 1.0, math.nan, -math.inf, -0.0], pa.float64()),
        "t": pa.array(["aB", "ß", None, "x_y", "É%", "a\nb", ""], pa.string()),
        "b": pa.array([True, False, None, True, False, None, True], pa.bool_()),
        "ts": pa.array([0, 1, None, 5, -3, 2, 2], pa.timestamp("us")),
        "tz": pa.array([0, 1, None, 5, -3, 2, 2], pa.timestamp("us", tz="UTC")),
        "tz2": pa.array([1, 1, 3, None, -4, 2, 9], pa.timestamp("us", tz="UTC")),
        "d": pa.array([dt.date(2024, 1, 1), None, dt.date(1969, 12, 31)] * 2 + [None]),
    }
)

COMPILED = [
    "i", "i + 1", "i - 1", "i * 2", "-i", "s + 1", "s + s", "s * 2147483647", "s - s - s",
    "i * 908 / 1000", "i / j", "i / nz", "s / 2", "i % nz", "i % j", "i % 123 = 0", "i % 123", "i % 7", "i % 1",
    "i % -3", "i % 9223372036854775807", "j % 2", "(i - 1) % 5",
    # no negative dividend (NULLs among them): the unsigned division
    "CASE WHEN i >= 0 THEN i END % 7", "CASE WHEN i >= 0 THEN i END % 123 = 0",
    "CASE WHEN i >= 0 THEN i END % 9223372036854775807", "CASE WHEN i >= 0 THEN i END % 1",
    "-7 % 3", "i / 0", "i % 0", "s % 3", "i / 2.0", "f + 1", "f * g", "f / g", "f / 0",
    "f - i", "i + f", "f = g", "f <> g", "f < g", "f <= g", "f > g", "f >= g", "f = 0.0",
    "f > 0", "i > f", "f IN (0.0, 1.5)", "f BETWEEN -1 AND 2", "i = 7", "i <> 7",
    "i < j", "s >= i", "i = 1.5", "t = 'aB'", "t < 'b'", "t >= t", "b = TRUE", "NOT b",
    "b AND i > 0", "b OR i > 0", "NOT (i > 0) OR b", "i IS NULL", "i IS NOT NULL",
    "NOT t IS NULL", "i IN (7, -7)", "i NOT IN (7, -7)", "s IN (1, 3)", f"i IN ({MANY})", f"s IN ({MANY}, 99999999999)",
    f"t IN ({MANY_TEXT})", " OR ".join(f"i = {v}" for v in range(-7, 30)),
    "i = 7 OR i = -7 OR i = 0", "t = 'aB' OR t = 'x'", "(i = 7 OR i = 0) OR j = 2", "t IN ('aB', 'x_y')",
    "i BETWEEN -10 AND 10", "i NOT BETWEEN -10 AND 10", "t LIKE 'a%'", "t LIKE '%b'",
    "t LIKE 'x_y'", "t LIKE '_'", "t NOT LIKE '%'", "t LIKE 'a%b'", "ts = ts", "ts < ts",
    "tz < tz2", "tz = tz2", "d = d", "CAST(s AS BIGINT)", "CAST(i AS INT)",
    "CAST(s AS SMALLINT)", "CAST(i AS DOUBLE)", "CAST(s AS VARCHAR)", "CAST(i AS TEXT)",
    "CAST(i AS BIGINT)", "coalesce(i, j)", "coalesce(t, t)", "length(t)",
    "char_length(t)", "CASE WHEN i > 0 THEN j END", "CASE WHEN b THEN s END",
    "CASE WHEN i > 0 THEN 1 WHEN i < 0 THEN -1 ELSE 0 END", "CASE WHEN f > 0 THEN t END",
    "CASE WHEN i IS NULL THEN i ELSE j END", "NAMED_STRUCT('v', i, 'o0', t)",
    "NOT i IS NULL", "t NOT LIKE 'a%'", "i IS NOT NULL AND t IS NOT NULL", "1", "'x'", "TRUE", "1 + 2",
    "-(i)", "(i + 1) * (j - 1)",
]  # fmt: skip

NOT_COMPILED = [
    "upper(t)", "lower(t)", "f % 2.0", "CAST(f AS BIGINT)", "CAST(f AS VARCHAR)",
    "CAST(t AS BIGINT)", "TRY_CAST(i AS INT)", "t ILIKE 'a%'", "t LIKE 'a\\%'",
    "CASE WHEN j > 0 THEN i / j END", "CASE i WHEN 7 THEN 1 END", "coalesce(s, 0)",
    "tz = ts", "ts + INTERVAL '1 second'", "abs(i)", "i + 99999999999999999999",
    "t || 'x'", "NULL", "concat(t, t)", "i IN (1, NULL)", "b IS TRUE", "i IS DISTINCT FROM j",
    "NAMED_STRUCT('v', CAST(s AS VARCHAR), 'o0', f)",
]  # fmt: skip


def _select(expression: str) -> tuple[exp.Select, pa.Schema]:
    sql = f'SELECT {expression} AS x FROM input AS "r"'
    select = sqlglot.parse_one(sql, read=DataFusion)
    assert isinstance(select, exp.Select)
    out = infer_schema(select.sql(dialect=DataFusion), {"input": BATCH.schema}, stateless=True)
    return select, out


def _run(config: dict[str, Any]) -> pa.Table | str:
    try:
        out = Calc("c", config, [BATCH.schema]).on_batch(BATCH)
        return pa.Table.from_batches(out, schema=config["schema"])
    except ds.QueryFailed as exc:
        return str(exc)


def _same(a: pa.Table | str, b: pa.Table | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if not a.schema.equals(b.schema):
        return False
    # NaN is not equal to itself in to_pylist() comparisons: compare its text
    return repr(a.to_pylist()) == repr(b.to_pylist())


@pytest.mark.parametrize("expression", COMPILED)
def test_compiled_expression_equals_datafusion(expression: str) -> None:
    select, out = _select(expression)
    program = compile_select(select, "r", BATCH.schema, out)
    assert program is not None, f"{expression} did not compile"
    sql = select.sql(dialect=DataFusion)
    base = {"sql": sql, "schema": out, "query": expression}
    compiled = _run({**base, "program": program})
    datafusion = _run(base)
    assert _same(compiled, datafusion), f"{expression}: {compiled} != {datafusion}"


FILTERS = [
    "i % 123 = 0", "i = 7 OR i = 0 OR i = 615", "t IN ('aB', '')", f"i IN ({MANY}, 615)", "i / nz > 1", "i % 0 = 1", "f = g", "f < g", "f >= g", "f > 0",
    "f IN (0.0, 1.5)", "t LIKE 'a%'", "t NOT LIKE 'a%'", "b", "NOT b", "b OR i > 0",
    "i IS NOT NULL AND t IS NOT NULL", "i BETWEEN -10 AND 10", "tz < tz2", "d = d",
    "CASE WHEN i > 0 THEN b ELSE NOT b END", "coalesce(b, FALSE)", "1 = 1", "1 = 0",
]  # fmt: skip


@pytest.mark.parametrize(
    ("expression", "kernel"),
    [
        ("i = 7 OR i = 0 OR i = 615", "in"),  # integers: the in kernel compares a few values
        ("s IN (1, 3)", "in"),
        (f"i IN ({MANY})", "in"),
        ("t = 'aB' OR t = ''", "or"),  # text: a few values are comparisons OR-ed
        (f"t IN ({MANY_TEXT})", "in"),
        ("i = 7 OR j = 0", "or"),
    ],
)
def test_value_lists_compile_to_the_in_kernel_over_integers(expression: str, kernel: str) -> None:
    select, out = _select(expression)
    program = compile_select(select, "r", BATCH.schema, out)
    assert program is not None and isinstance(program.columns[0], Call)
    assert program.columns[0].function == kernel


@pytest.mark.parametrize("expression", FILTERS)
def test_compiled_filter_equals_datafusion(expression: str) -> None:
    """Boolean expressions as a WHERE: NULL drops the row; a constant keeps all or none."""
    sql = f'SELECT i, t FROM input AS "r" WHERE {expression}'
    select = sqlglot.parse_one(sql, read=DataFusion)
    assert isinstance(select, exp.Select)
    out = infer_schema(sql, {"input": BATCH.schema}, stateless=True)
    program = compile_select(select, "r", BATCH.schema, out)
    assert program is not None, f"{expression} did not compile"
    base = {"sql": select.sql(dialect=DataFusion), "schema": out, "query": sql}
    compiled, datafusion = _run({**base, "program": program}), _run(base)
    assert _same(compiled, datafusion), f"{expression}: {compiled} != {datafusion}"


@pytest.mark.parametrize("expression", NOT_COMPILED)
def test_expression_without_exact_kernels_stays_with_datafusion(expression: str) -> None:
    try:
        select, out = _select(expression)
    except ds.PlanError:  # DataFusion refuses it too: nothing to compile
        return
    assert compile_select(select, "r", BATCH.schema, out) is None


def test_a_query_runs_its_compiled_program_and_fails_with_datafusions_words() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", pa.table({"a": [10, 20, 30], "b": [1, 0, 2]}), batch_size=2)
    ok = ctx.execute_streaming("SELECT a * 2 AS x FROM t WHERE a > 10")
    assert ok.to_arrow(timeout=60).column("x").to_pylist() == [40, 60]
    calc = next(n for n in ok.executor.graph.nodes if n.kind == "calc")
    assert calc.config["program"] is not None
    bad = ctx.execute_streaming("SELECT a / b AS x FROM t")
    with pytest.raises(ds.QueryFailed, match=r"cannot evaluate SELECT a / b AS x FROM t: "
                       r"Divide by zero error"):  # fmt: skip
        bad.wait(60)


def test_a_select_of_no_columns_keeps_its_row_count() -> None:
    """``count(*)`` over a filter reads no column: its pre-projection keeps only rows."""
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", pa.table({"a": list(range(10))}), batch_size=3)
    sql = "SELECT count(*) AS n FROM t WHERE a > 2"
    q = ctx.execute_streaming(sql)
    assert q.to_arrow(timeout=60).column("n").to_pylist() == [7]
    assert any(n.config.get("program") for n in q.executor.graph.nodes if n.kind == "calc")


# -- to_char: fixed-width date parts computed by kernels ---------------------------------

US = 1_000_000
#: Leap days, the ends of years 0 and 9999, pre-1970 instants, NULLs, sub-second digits.
INSTANTS = [
    0,
    -1,
    None,
    951_782_400 * US,
    951_868_799 * US + 999_999,
    -2_203_891_200 * US + 1,
    -62_167_219_200 * US,
    253_402_300_799 * US + 999_999,
    1_700_000_000 * US + 123_456,
    -30_610_224_000 * US + 43_200 * US,
    4_107_542_400 * US - 1,
    None,
    68_169_600 * US,
]
ZONED = [v if v is None or abs(v) < 9_000_000_000 * US else 0 for v in INSTANTS]
TIMES = pa.record_batch(
    {
        "ts": pa.array(INSTANTS, pa.timestamp("us")),
        "ms": pa.array([None if v is None else v // 1000 for v in INSTANTS], pa.timestamp("ms")),
        "sec": pa.array([None if v is None else v // US for v in INSTANTS], pa.timestamp("s")),
        "ns": pa.array([None if v is None else v * 1000 for v in ZONED], pa.timestamp("ns")),
        "utc": pa.array(ZONED, pa.timestamp("us", tz="UTC")),
        "d": pa.array([None if v is None else v // (86_400 * US) for v in INSTANTS], pa.date32()),
    }
)
TO_CHAR_FORMATS = [
    "YYYY-MM-DD", "HH:MI", "HH24:MI:SS", "YYYY-MM-DD HH24:MI:SS.US", "YY DDD HH12 AM pm",
    "MS Mon Dy", '"at" HH24"h" 100%', "DD/MM/YYYY", "hh24:mi:ss.ms", "PM Mon",
]  # fmt: skip
TO_CHAR = [
    f"to_char({c}, '{f}')" for c in ("ts", "ms", "sec", "ns", "utc") for f in TO_CHAR_FORMATS
]
TO_CHAR += [f"to_char(d, '{f}')" for f in ("YYYY-MM-DD", "DD Mon YY", "DDD Dy")]
TO_CHAR_NOT_COMPILED = [
    "to_char(ts, 'FMDD')", "to_char(ts, 'FMMonth')", "to_char(ts, 'IYYY-IW')",
    "to_char(ts, 'ID')", "to_char(d, 'HH24')", "to_char(ny, 'YYYY')", "to_char(ist, 'HH24')",
]  # fmt: skip
TIMES_ZONED = TIMES.append_column(
    "ny", pa.array(ZONED, pa.timestamp("us", tz="America/New_York"))
).append_column("ist", pa.array(ZONED, pa.timestamp("us", tz="+05:30")))


def _datum_select(expression: str, schema: pa.Schema) -> tuple[exp.Select, pa.Schema, str]:
    """The SELECT as the planner holds it (the Datum dialect keeps PostgreSQL templates)."""
    select = sqlglot.parse_one(f'SELECT {expression} AS x FROM input AS "r"', read=Datum)
    assert isinstance(select, exp.Select)
    sql = select.sql(dialect=DataFusion)
    return select, infer_schema(sql, {"input": schema}, stateless=True), sql


def _calc(config: dict[str, Any], batch: pa.RecordBatch) -> pa.Table | str:
    try:
        out = Calc("c", config, [batch.schema]).on_batch(batch)
        return pa.Table.from_batches(out, schema=config["schema"])
    except ds.QueryFailed as exc:
        return str(exc)


@pytest.mark.parametrize("expression", TO_CHAR)
def test_to_char_compiles_and_equals_datafusion(expression: str) -> None:
    """Row for row, DataFusion's text; a batch with a year outside 0-9999 (chrono's sign or
    fifth digit) or a zoned instant outside nanoseconds is DataFusion's to evaluate."""
    select, out, sql = _datum_select(expression, TIMES.schema)
    program = compile_select(select, "r", TIMES.schema, out)
    assert program is not None, f"{expression} did not compile"
    base = {"sql": sql, "schema": out, "query": expression}
    in_range = TIMES.filter(pa.array([v is None or abs(v) < 9e15 for v in INSTANTS]))
    assert in_range.num_rows > 8
    assert program.run(in_range).num_rows == in_range.num_rows  # the kernels, no fallback
    for batch in (TIMES, in_range):
        compiled, datafusion = _calc({**base, "program": program}, batch), _calc(base, batch)
        assert _same(compiled, datafusion), f"{expression}: {compiled} != {datafusion}"


def test_to_char_outside_its_years_is_datafusions() -> None:
    late = pa.record_batch({"ts": pa.array([0, 253_402_300_800 * US, None], pa.timestamp("us"))})
    select, out, sql = _datum_select("to_char(ts, 'YYYY-MM-DD')", late.schema)
    program = compile_select(select, "r", late.schema, out)
    assert program is not None
    compiled = _calc({"sql": sql, "schema": out, "program": program}, late)
    assert isinstance(compiled, pa.Table)
    assert compiled.column("x").to_pylist() == ["1970-01-01", "+10000-01-01", None]


@pytest.mark.parametrize("expression", TO_CHAR_NOT_COMPILED)
def test_to_char_without_fixed_width_kernels_stays_with_datafusion(expression: str) -> None:
    select, out, _ = _datum_select(expression, TIMES_ZONED.schema)
    assert compile_select(select, "r", TIMES_ZONED.schema, out) is None
