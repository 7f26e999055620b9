"""Aggregate Python functions: registration errors are PlanErrors, a failing or mistyped
function fails the query naming it and the operator, the engine owns the state (Arrow
columns in the snapshot, restored equal), NULLs reach the function, groups are handed
over whole, and CREATE AGGREGATE FUNCTION works in scripts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import datum_sql as ds
from datum_sql.engine.operators.aggregate import GroupAggregate
from datum_sql.engine.state.codec import decode_state
from datum_sql.testing import run_query, sorted_rows

CALLS: list[int] = []


class Total:
    """sum(v) and the number of NULLs it saw; counts its accumulate calls in CALLS."""

    state = {"s": "BIGINT", "nulls": "BIGINT"}
    initial = {"s": 0, "nulls": 0}

    def accumulate(self, state: dict, v: pa.Array) -> dict:
        CALLS.append(len(v))
        return {"s": state["s"] + (pc.sum(v).as_py() or 0), "nulls": state["nulls"] + v.null_count}

    def merge(self, state: dict, other: dict) -> dict:
        return {"s": state["s"] + other["s"], "nulls": state["nulls"] + other["nulls"]}

    def finish(self, state: dict) -> str:
        return f"{state['s']}/{state['nulls']}"


ds.udaf(input_types=["BIGINT"], return_type="VARCHAR", name="total_nulls")(Total)

T = pa.table(
    {
        "k": pa.array([i % 3 for i in range(30)], pa.int64()),
        "v": pa.array([None if i % 7 == 0 else i for i in range(30)], pa.int64()),
        "ts": pa.array([i * 1_000_000 for i in range(30)], pa.timestamp("us")),
    }
)


def _want() -> list[tuple[int, str]]:
    out = []
    for k in range(3):
        vs = [v for kk, v in zip(T["k"].to_pylist(), T["v"].to_pylist(), strict=True) if kk == k]
        out.append((k, f"{sum(v for v in vs if v is not None)}/{vs.count(None)}"))
    return out


def _ctx() -> ds.Context:
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.register_arrow("t", T, event_time="ts")
    return ctx


def test_groups_are_accumulated_whole_and_nulls_reach_the_function() -> None:
    """One accumulate call per group of a batch (never per row), NULLs included, in
    streaming and in ctx.sql."""
    sql = "SELECT k, total_nulls(v) AS t FROM t GROUP BY k"
    CALLS.clear()
    got = run_query(sql, {"t": T}, batch_size=10).final
    assert sorted_rows(got) == _want()
    assert len(CALLS) == 3 * 3 and sum(CALLS) == 30  # 3 batches of 3 groups
    assert sorted_rows(_ctx().sql(sql)) == _want()


def test_a_global_aggregate_over_no_rows_finishes_the_initial_state() -> None:
    empty = T.slice(0, 0)
    sql = "SELECT total_nulls(v) AS t FROM t"
    assert run_query(sql, {"t": empty}).final.to_pylist() == [{"t": "0/0"}]
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", empty)
    assert ctx.sql(sql).to_pylist() == [{"t": "0/0"}]
    # a group whose rows FILTER leaves out holds the initial state too
    filtered = "SELECT k, total_nulls(v) FILTER (WHERE v > 100) AS t FROM t GROUP BY k"
    assert sorted_rows(run_query(filtered, {"t": T}).final) == [(0, "0/0"), (1, "0/0"), (2, "0/0")]
    assert sorted_rows(_ctx().sql(filtered)) == [(0, "0/0"), (1, "0/0"), (2, "0/0")]


def _operator() -> GroupAggregate:
    schema = pa.schema([("k", pa.int64()), ("a", pa.struct([("a0", pa.int64())]))])
    out = pa.schema([("k", pa.int64()), ("o", pa.string()), ("_op", pa.string())])
    config = {
        "keys": ["k"],
        "aggregates": [
            {"func": "python", "input": "a", "output": "o", "params": {"function": "total_nulls"}}
        ],
        "schema": out,
    }
    return GroupAggregate("agg", config, [schema])


def _batch(keys: list[int], values: list[int | None]) -> pa.RecordBatch:
    args = pa.StructArray.from_arrays([pa.array(values, pa.int64())], ["a0"])
    return pa.RecordBatch.from_arrays([pa.array(keys, pa.int64()), args], ["k", "a"])


def test_the_state_is_arrow_columns_in_the_snapshot_and_restores_equal() -> None:
    op = _operator()
    op.on_batch(_batch([1, 1, 2], [5, None, 7]))
    _, tables = decode_state(op.snapshot(), "group_aggregate", 1)
    slots = tables["slots"]
    assert slots.schema.field("agg0_0").type == pa.int64()  # s
    assert slots.schema.field("agg0_1").type == pa.int64()  # nulls
    assert slots.schema.field("agg0_2").type == pa.bool_()  # the slot holds rows
    assert sorted(zip(slots["key0"].to_pylist(), slots["agg0_0"].to_pylist())) == [(1, 5), (2, 7)]
    restored = _operator()
    restored.restore(op.snapshot())
    assert restored.snapshot() == op.snapshot()
    out = restored.on_batch(_batch([1], [10]))
    assert out[0].to_pylist() == [
        {"k": 1, "o": "5/1", "_op": "-U"},
        {"k": 1, "o": "15/1", "_op": "+U"},
    ]


def test_a_checkpoint_of_another_state_declaration_is_refused() -> None:
    op = _operator()
    op.on_batch(_batch([1], [5]))
    data = op.snapshot()
    assert data is not None
    ds.udaf(input_types=["BIGINT"], return_type="VARCHAR", name="total_nulls",
            state={"s": "DOUBLE", "nulls": "BIGINT"})(Total)  # fmt: skip
    try:
        with pytest.raises(ds.CheckpointError, match=r"total_nulls\(\) as \['int64', 'int64', "
                           r"'bool'\], but the function now declares \['double'"):  # fmt: skip
            _operator().restore(data)
    finally:
        ds.udaf(input_types=["BIGINT"], return_type="VARCHAR", name="total_nulls")(Total)


class Boom(Total):
    def accumulate(self, state: dict, v: pa.Array) -> dict:
        raise ZeroDivisionError("boom in accumulate")


class Misfit(Total):
    def accumulate(self, state: dict, v: pa.Array) -> dict:
        return {"s": "text", "nulls": 0}


class Truncating(Total):
    def accumulate(self, state: dict, v: pa.Array) -> dict:
        return {"s": 1.5, "nulls": 0}


class Keyless(Total):
    def accumulate(self, state: dict, v: pa.Array) -> dict:
        return {"s": 1}


class BadFinish(Total):
    def finish(self, state: dict) -> Any:
        return 12


class ShortGroups(Total):
    def accumulate_groups(self, state: dict, groups: pa.Array, v: pa.Array) -> dict:
        return {"s": state["s"][:0], "nulls": state["nulls"][:0]}


class FloatGroups(Total):
    def accumulate_groups(self, state: dict, groups: pa.Array, v: pa.Array) -> dict:
        return {"s": pc.cast(state["s"], pa.float64()), "nulls": state["nulls"]}


class ListGroups(Total):
    def finish_groups(self, state: dict) -> Any:
        return ["0/0"] * len(state["s"])


def test_an_exception_fails_the_query_naming_function_and_operator() -> None:
    ds.udaf(input_types=["BIGINT"], return_type="VARCHAR", name="boom_agg")(Boom)
    sql = "SELECT k, boom_agg(v) AS t FROM t GROUP BY k"
    with pytest.raises(ds.QueryFailed) as info:
        run_query(sql, {"t": T})
    text = str(info.value)
    assert "boom_agg()" in text and "accumulate raised ZeroDivisionError" in text
    assert "boom in accumulate" in text and "Traceback" in text
    assert info.value.operator and info.value.operator in text
    ctx = _ctx()
    with pytest.raises(ds.QueryFailed, match=r"boom_agg\(\) accumulate raised ZeroDivisionError"):
        ctx.sql(sql)
    assert ctx.sql("SELECT count(*) AS n FROM t").column("n").to_pylist() == [30]
    assert sorted_rows(ctx.execute_streaming(
        "SELECT k, total_nulls(v) AS t FROM t GROUP BY k").to_arrow(timeout=60)) == _want()  # fmt: skip


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (Misfit, r"accumulate returned 's' as string, expected int64"),
        (Truncating, r"accumulate returned 's' as double, expected int64"),
        (Keyless, r"accumulate must return the state as a dict with keys \['s', 'nulls'\]"),
        (BadFinish, r"finish returned int64, expected string"),
        (ShortGroups, r"accumulate_groups returned 's' as 0 rows, expected \d+ \(one per group\)"),
        (FloatGroups, r"accumulate_groups returned 's' as double, expected int64"),
        (ListGroups, r"finish_groups returned list, expected a pyarrow.Array of string"),
    ],
)
def test_a_wrong_state_or_result_names_function_expected_and_got(cls: type, message: str) -> None:
    name = f"bad_{cls.__name__.lower()}"
    ds.udaf(input_types=["BIGINT"], return_type="VARCHAR", name=name)(cls)
    sql = f"SELECT k, {name}(v) AS t FROM t GROUP BY k"
    with pytest.raises(ds.QueryFailed, match=rf"{name}\(\) {message}"):
        run_query(sql, {"t": T})
    with pytest.raises(ds.QueryFailed, match=rf"{name}\(\) {message}"):
        _ctx().sql(sql)


class NoMerge:
    state = {"s": "BIGINT"}

    def accumulate(self, state: dict, v: pa.Array) -> dict:
        return state

    def finish(self, state: dict) -> int:
        return 0


class OneArg(Total):
    def accumulate(self, state: dict) -> dict:  # type: ignore[override]
        return state


class NeedsArgs(Total):
    def __init__(self, scale: int) -> None:
        self.scale = scale


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_types": ["NOTATYPE"]}, "unknown type 'NOTATYPE' for the argument 1"),
        ({"return_type": "NOPE"}, "unknown type 'NOPE' for the return type"),
        ({"state": {"s": "NOPE"}}, "unknown type 'NOPE' for the state field 's'"),
        ({"state": {}}, "the state needs at least one field"),
        ({"initial": {"s": "x", "nulls": 0}}, r"initial 's' is string, expected int64"),
        ({"initial": {"other": 1}}, "initial names \\['other'\\], which are not state fields"),
        ({"impl": NoMerge}, r"NoMerge has no method merge\(state, other\)"),
        ({"impl": OneArg}, r"accumulate\(\) must take \(state, \*args\) — 2 positional"),
        ({"impl": NeedsArgs}, r"cannot create NeedsArgs\(\) without arguments"),
        ({"input_types": []}, "input_types must be a list of types"),
        ({"name": "sum"}, "is a built-in SQL function"),
        ({"name": "not valid"}, "must be a plain identifier"),
    ],
)
def test_registration_errors_are_plan_errors(kwargs: dict, message: str) -> None:
    args = {"name": "reg_check", "impl": Total, "input_types": ["BIGINT"],
            "return_type": "VARCHAR", "state": None, "initial": None} | kwargs  # fmt: skip
    with pytest.raises(ds.PlanError, match=message):
        _ctx().register_udaf(**args)


def test_scalar_and_aggregate_functions_do_not_share_a_name() -> None:
    ctx = _ctx()
    ctx.register_udf("scalar_only", lambda x: x, ["BIGINT"], "BIGINT")
    with pytest.raises(ds.PlanError, match="registered as a scalar function"):
        ctx.register_udaf("scalar_only", Total, ["BIGINT"], "VARCHAR")
    with pytest.raises(ds.PlanError, match="registered as an aggregate function"):
        ctx.register_udf("total_nulls", lambda x: x, ["BIGINT"], "BIGINT")


def test_calls_the_planner_refuses() -> None:
    ctx = _ctx()
    wrong = r"no function total_nulls\(BIGINT, BIGINT\); it takes total_nulls\(BIGINT\)"
    with pytest.raises(ds.PlanError, match=wrong):
        ctx.execute_streaming("SELECT total_nulls(v, v) AS t FROM t")
    with pytest.raises(ds.PlanError, match=wrong):
        ctx.sql("SELECT total_nulls(v, v) AS t FROM t")
    with pytest.raises(ds.PlanError, match=r"total_nulls\(DISTINCT \.\.\.\)"):
        ctx.execute_streaming("SELECT total_nulls(DISTINCT v) AS t FROM t")
    with pytest.raises(ds.PlanError, match="total_nulls"):
        ctx.execute_streaming("SELECT total_nulls(CAST(v AS VARCHAR)) AS t FROM t")
    with pytest.raises(ds.PlanError, match=r"total_nulls\(\) OVER \(\.\.\.\) is not supported"):
        ctx.execute_streaming("SELECT k, total_nulls(v) OVER (PARTITION BY k ORDER BY ts) FROM t")


def test_over_a_changelog_without_retract_is_refused_saying_what_to_add() -> None:
    sql = "SELECT total_nulls(c) AS t FROM (SELECT k, count(*) AS c FROM t GROUP BY k) g"
    with pytest.raises(ds.PlanError, match=r"reads a changelog.*no retract\(state, \*args\) "
                       r"method; add one to Total"):  # fmt: skip
        _ctx().execute_streaming(sql)


def test_create_aggregate_function_imports_module_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "myaggs.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("myaggs", None)
    ctx = _ctx()
    ctx.execute(
        "CREATE AGGREGATE FUNCTION span(v BIGINT) RETURNS BIGINT LANGUAGE python AS 'myaggs:Span'"
    )
    got = ctx.sql("SELECT k, span(v) AS s FROM t GROUP BY k ORDER BY k").column("s").to_pylist()
    assert got == [27 - 3, 25 - 1, 29 - 2]  # 0, 7, 28 are NULL
    with pytest.raises(ds.PlanError, match="has no class 'Nope'"):
        ctx.execute(
            "CREATE AGGREGATE FUNCTION f(v BIGINT) RETURNS BIGINT LANGUAGE python AS 'myaggs:Nope'"
        )
    with pytest.raises(ds.PlanError, match="declare its state"):
        ctx.execute(
            "CREATE AGGREGATE FUNCTION f(v BIGINT) RETURNS BIGINT LANGUAGE python AS 'myaggs:NoState'"
        )


MODULE = """
    import pyarrow.compute as pc

    class Span:
        '''max(v) - min(v)'''
        state = {"lo": "BIGINT", "hi": "BIGINT"}

        def accumulate(self, state, v):
            lo, hi = pc.min_max(v).values()
            return self.merge(state, {"lo": lo.as_py(), "hi": hi.as_py()})

        def merge(self, a, b):
            los = [x for x in (a["lo"], b["lo"]) if x is not None]
            his = [x for x in (a["hi"], b["hi"]) if x is not None]
            return {"lo": min(los) if los else None, "hi": max(his) if his else None}

        def finish(self, state):
            return None if state["lo"] is None else state["hi"] - state["lo"]

    class NoState(Span):
        state = None
"""


def test_create_aggregate_function_in_a_script_run_by_the_cli(tmp_path: Path) -> None:
    (tmp_path / "myaggs.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "in.csv").write_text("k,v\n1,5\n1,9\n2,4\n1,2\n")
    out = tmp_path / "out"
    (tmp_path / "job.sql").write_text(f"""
        CREATE AGGREGATE FUNCTION span(v BIGINT) RETURNS BIGINT LANGUAGE python AS 'myaggs:Span';
        CREATE SOURCE nums (k BIGINT, v BIGINT) WITH (connector = 'csv', path = '{tmp_path / "in.csv"}');
        CREATE SINK spans WITH (connector = 'duckdb', path = '{out}.duckdb', table = 'spans', primary_key = 'k');
        INSERT INTO spans SELECT k, span(v) AS s FROM nums GROUP BY k;
    """)  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "datum_sql.cli", "run", "job.sql", "--state-dir", "state"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    con = duckdb.connect(f"{out}.duckdb", read_only=True)
    assert sorted(con.sql("SELECT k, s FROM spans").fetchall()) == [(1, 7), (2, 0)]
    con.close()
