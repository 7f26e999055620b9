"""Joins that receive, hold and emit only the columns read (``plan/prune.py``), as data:
tests/fixtures/plan/pruning.sql lists each case's source columns and join inputs/outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import datum_sql as ds

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "plan" / "pruning.sql"
JOINS = ("lookup_join", "interval_join", "sparse_interval_join", "asof_join", "subquery_join")
WATERMARKED = "(WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)"
#: Ids 1000..1059: some bidders and auctions of the bids have one, some do not.
DIM = pa.table(
    {
        "id": pa.array(range(1000, 1060), pa.int64()),
        "name": [f"n{i % 7}" for i in range(60)],
        "region": [None if i % 5 == 0 else "xy"[i % 2] for i in range(60)],
        "score": [float(i * 3_000_000) for i in range(60)],
    }
)


@pytest.fixture(scope="module")
def ctx() -> Any:
    c = ds.Context(state_dir=None)
    for table, stream in (("bids", "bid"), ("auctions", "auction"), ("persons", "person")):
        c.execute(
            f"CREATE SOURCE {table} {WATERMARKED} "
            f"WITH (connector = 'nexmark', stream = '{stream}', rows = '2000')"
        )
    c.register_arrow("dim", DIM)
    yield c
    c.close()


def _cases() -> list[Any]:
    out = []
    for block in FIXTURE.read_text().split("\n\n"):
        lines = block.strip("\n").splitlines()
        if not lines[0].startswith("-- prune:"):
            continue  # the header comment
        expected = [line[3:] for line in lines[1:] if line.startswith("-- ")]
        sql = "\n".join(line for line in lines[1:] if not line.startswith("-- "))
        out.append(pytest.param(expected, sql, id=lines[0].removeprefix("-- prune: ")[:60]))
    assert len(out) >= 12, "pruning.sql lost its cases"
    return out


def shown(ctx: Any, sql: str) -> list[str]:
    """The source columns and the join inputs and outputs of the job graph of ``sql``."""
    graph = ctx.prepare(sql).graph
    by_id = {n.id: n for n in graph.nodes}
    lines = [f"source {n.kind}: {', '.join(n.schema.names)}" for n in graph.sources]
    for n in graph.nodes:
        if n.kind in JOINS:
            received = " | ".join(", ".join(by_id[i].schema.names) for i in n.inputs)
            lines.append(f"{n.kind}: {received} -> {', '.join(n.schema.names)}")
    return lines


@pytest.mark.parametrize(("expected", "sql"), _cases())
def test_joins_read_and_emit_only_what_is_read(ctx: Any, expected: list[str], sql: str) -> None:
    assert shown(ctx, sql) == expected


@pytest.mark.parametrize(("expected", "sql"), _cases())
def test_pruned_joins_give_the_batch_result(ctx: Any, expected: list[str], sql: str) -> None:
    streamed = ctx.execute_streaming(sql).to_arrow(timeout=120)
    batch = ctx.sql(sql)
    assert streamed.schema.names == batch.schema.names
    key = repr
    assert sorted(streamed.to_pylist(), key=key) == sorted(batch.to_pylist(), key=key)
