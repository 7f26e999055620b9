"""A side read again on every (re)start (a lookup join's table, a subquery's) never shares
a source node with a stream whose position and state are restored: lowering gives it
nodes of its own, and the runtime refuses a graph where one feeds both."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.engine.jobgraph import JobGraph
from datum_sql.engine.runtime.executor import Executor

T = pa.table({"k": [1, 2, 2], "x": [5, 6, 7]})


def graph(sql: str) -> JobGraph:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", T)
    return ctx.prepare(sql).graph


def source_kinds(g: JobGraph) -> list[str]:
    return [n.kind for n in g.sources]


def test_a_table_read_as_stream_and_as_table_gets_a_source_node_per_reader() -> None:
    assert source_kinds(graph("SELECT a.k, b.x FROM t AS a JOIN t AS b ON a.k = b.k")) == ["t", "t"]
    assert source_kinds(graph("SELECT k FROM t WHERE k IN (SELECT k FROM t)")) == ["t", "t"]
    # two stream readers share one node: the table is read once, at one position
    assert source_kinds(graph("SELECT k FROM t UNION ALL SELECT k FROM t")) == ["t"]


def test_the_runtime_refuses_a_source_feeding_a_reread_side_and_a_restored_one() -> None:
    g = graph("SELECT a.k, b.x FROM t AS a JOIN t AS b ON a.k = b.k")
    stream, table = (n.id for n in g.sources)
    shared = tuple(
        dataclasses.replace(n, inputs=tuple(stream if i == table else i for i in n.inputs))
        for n in g.nodes
        if n.id != table
    )
    with pytest.raises(ds.PlanError, match=rf"{stream} \(t\) feeds both a side read again"):
        Executor(JobGraph(shared, g.settings), {}, {})
    Executor(g, {}, {})  # the lowered graph itself is accepted
