"""Equal operators on the same inputs run once (plan/share.py): which merge, which stay
apart, and that the shared graph's result is the batch result."""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.engine.jobgraph import Node
from datum_sql.plan.share import share_equal_operators

TS = pa.timestamp("us")
BASE = dt.datetime(2024, 1, 1)
HOP = "hop(t, ts, INTERVAL '2' SECOND, INTERVAL '6' SECOND)"
#: Nexmark q5's shape: one hop aggregate spelled twice, joined on its window start
TWICE = f"""SELECT a.k, a.n FROM (
    SELECT k, count(*) AS n, window_start AS ws FROM {HOP} GROUP BY window_start, k
) AS a JOIN (
    SELECT max(c.n) AS top, c.ws2 FROM (
        SELECT count(*) AS n, window_start AS ws2 FROM {HOP} GROUP BY k, window_start
    ) AS c GROUP BY c.ws2
) AS m ON a.ws = m.ws2 AND a.n >= m.top"""
TWICE_DUCKDB = """WITH counts AS (
    SELECT k, count(*) AS n, ws FROM (
        SELECT k, make_timestamp((epoch_us(ts) // 2000000 - r) * 2000000) AS ws
        FROM t, range(3) AS w(r)
    ) GROUP BY ws, k),
maxes AS (SELECT max(n) AS top, ws AS ws2 FROM counts GROUP BY ws)
SELECT c.k, c.n FROM counts c JOIN maxes m ON c.ws = m.ws2 AND c.n >= m.top"""


def _table() -> pa.Table:
    seconds = [0.5, 1.0, 1.5, 2.5, 3.0, 3.1, 4.0, 5.5, 6.0, 7.2, 8.8, 9.0, 9.5, 11.0, 12.5]
    keys = ["a", "b", "a", "c", "b", "b", "a", "c", "c", "a", "b", "b", "a", "c", "a"]
    ts = [BASE + dt.timedelta(seconds=s) for s in seconds]
    return pa.table({"k": keys, "ts": pa.array(ts, TS)})


@pytest.fixture
def ctx() -> Any:
    c = ds.Context(state_dir=None)
    table = _table()
    c.register_arrow("t", table, event_time="ts", watermark=ds.BoundedOutOfOrderness(),
                     batch_size=4)  # fmt: skip
    yield c
    c.close()


def _kinds(graph: Any) -> list[str]:
    return [n.kind for n in graph.operators]


def test_a_subquery_spelled_twice_aggregates_once(ctx: Any) -> None:
    graph = ctx.prepare(TWICE).graph
    hops = [n for n in graph.operators if n.config.get("window", {}).get("kind") == "hop"]
    assert len(hops) == 1
    consumers = [n for n in graph.nodes if hops[0].id in n.inputs]
    assert len(consumers) == 2  # both sides of the join read the one aggregate
    ids = {n.id for n in graph.nodes}
    assert all(i in ids for n in graph.nodes for i in n.inputs)


def test_the_shared_graph_gives_the_batch_result(ctx: Any) -> None:
    got = ctx.execute_streaming(TWICE).to_arrow()
    con = duckdb.connect()
    con.register("t", _table())
    want = con.sql(TWICE_DUCKDB).to_arrow_table()
    assert sorted(got.to_pylist(), key=str) == sorted(want.to_pylist(), key=str)
    assert got.num_rows > 0


def test_a_union_of_a_query_with_itself_keeps_both_copies(ctx: Any) -> None:
    sql = "SELECT k, ts FROM t WHERE k <> 'c' UNION ALL SELECT k, ts FROM t"
    graph = ctx.prepare(sql).graph
    union = next(n for n in graph.operators if n.kind == "union")
    assert len(set(union.inputs)) == 2
    sql = "SELECT k FROM t UNION ALL SELECT k FROM t"
    graph = ctx.prepare(sql).graph
    union = next(n for n in graph.operators if n.kind == "union")
    assert union.inputs[0] == union.inputs[1]  # one producer on both ports
    got = ctx.execute_streaming(sql).to_arrow()
    con = duckdb.connect()
    con.register("t", _table())
    want = con.sql(sql).to_arrow_table()
    assert sorted(got.column("k").to_pylist()) == sorted(want.column("k").to_pylist())
    assert got.num_rows == 2 * _table().num_rows


def test_different_windows_stay_apart(ctx: Any) -> None:
    other = TWICE.replace("INTERVAL '6' SECOND", "INTERVAL '4' SECOND", 1)
    graph = ctx.prepare(other).graph
    hops = [n for n in graph.operators if n.config.get("window", {}).get("kind") == "hop"]
    assert len(hops) == 2


#: the rows each call of ``counted``'s accumulate received
ACCUMULATED: list[int] = []


@ds.udaf(input_types=["VARCHAR"], return_type="BIGINT", name="counted")
class Counted:
    """count(k), noting every accumulate call in ACCUMULATED (a side effect per call)."""

    state = {"n": "BIGINT"}
    initial = {"n": 0}

    def accumulate(self, state: dict, k: pa.Array) -> dict:
        ACCUMULATED.append(len(k))
        return {"n": state["n"] + len(k)}

    def merge(self, state: dict, other: dict) -> dict:
        return {"n": state["n"] + other["n"]}

    def finish(self, state: dict) -> int:
        return state["n"]


def test_python_aggregates_spelled_twice_run_twice(ctx: Any) -> None:
    """A Python aggregate is code the text does not describe (it may keep state or have
    side effects): each spelling runs its own copy, fed every row, and the result is the
    batch result."""
    sql = TWICE.replace("count(*)", "counted(k)")
    graph = ctx.prepare(sql).graph
    hops = [n for n in graph.operators if n.config.get("window", {}).get("kind") == "hop"]
    assert len(hops) == 2 and hops[0].config == hops[1].config
    ACCUMULATED.clear()
    once = f"SELECT k, counted(k) AS n, window_start AS ws FROM {HOP} GROUP BY window_start, k"
    ctx.execute_streaming(once).to_arrow()
    rows_once = sum(ACCUMULATED)
    ACCUMULATED.clear()
    got = ctx.execute_streaming(sql).to_arrow()
    assert rows_once > 0 and sum(ACCUMULATED) == 2 * rows_once
    con = duckdb.connect()
    con.register("t", _table())
    want = con.sql(TWICE_DUCKDB).to_arrow_table()
    assert sorted(got.to_pylist(), key=str) == sorted(want.to_pylist(), key=str)


def _node(id: str, kind: str, inputs: tuple[str, ...], **config: Any) -> Node:
    role = "source" if not inputs else "operator"
    return Node(id=id, role=role, kind=kind, config=config, inputs=inputs)


def test_only_deterministic_kinds_merge_and_consumers_follow_the_first_copy() -> None:
    nodes = [
        _node("source_0", "t", ()),
        _node("calc_1", "calc", ("source_0",), sql="SELECT random() AS r FROM input"),
        _node("calc_2", "calc", ("source_0",), sql="SELECT random() AS r FROM input"),
        _node("project_3", "project", ("source_0",), columns=[["k", "k"]]),
        _node("project_4", "project", ("source_0",), columns=[["k", "k"]]),
        _node("lag_5", "watermark_lag", ("project_4",), lag_us=5),
        _node("lag_6", "watermark_lag", ("project_3",), lag_us=5),
        _node("union_7", "union", ("calc_1", "calc_2", "lag_5", "lag_6")),
    ]
    out = {n.id: n for n in share_equal_operators(nodes)}
    assert "calc_2" in out  # a calc may call a volatile function: never merged
    assert "project_4" not in out and "lag_6" not in out
    assert out["lag_5"].inputs == ("project_3",)
    assert out["union_7"].inputs == ("calc_1", "calc_2", "lag_5", "lag_5")


def test_aggregates_merge_unless_one_of_their_calls_is_python() -> None:
    python = [{"func": "python", "input": "a", "output": "x", "params": {"function": "f"}}]
    builtin = [{"func": "sum", "input": "a", "output": "x"}]
    nodes = [
        _node("source_0", "t", ()),
        _node("agg_1", "group_aggregate", ("source_0",), keys=["k"], aggregates=builtin),
        _node("agg_2", "group_aggregate", ("source_0",), keys=["k"], aggregates=builtin),
        _node("agg_3", "group_aggregate", ("source_0",), keys=["k"], aggregates=python),
        _node("agg_4", "group_aggregate", ("source_0",), keys=["k"], aggregates=python),
        _node("union_5", "union", ("agg_1", "agg_2", "agg_3", "agg_4")),
    ]
    out = {n.id: n for n in share_equal_operators(nodes)}
    assert "agg_2" not in out and {"agg_3", "agg_4"} <= set(out)
    assert out["union_5"].inputs == ("agg_1", "agg_1", "agg_3", "agg_4")


def test_grouping_sets_read_one_pre_projection(ctx: Any) -> None:
    """ROLLUP's copies of the rows (one per set) all read the one pre-projection of the
    source, so a filter or an expression in it runs once per row."""
    graph = ctx.prepare("SELECT k, count(*) AS n FROM t WHERE k <> 'c' GROUP BY ROLLUP(k)").graph
    union = next(n for n in graph.operators if n.kind == "union")
    copies = [n for n in graph.nodes if n.id in union.inputs]
    assert len(copies) == 2
    assert len({c.inputs for c in copies}) == 1
    pre = next(n for n in graph.nodes if n.id == copies[0].inputs[0])
    assert "WHERE" in pre.config["sql"]
    assert [n for n in graph.operators if "WHERE" in n.config.get("sql", "")] == [pre]
