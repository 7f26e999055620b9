"""over_changelog over an append-only input (every row an insert): rank and its kin, lead,
ntile and nth_value re-evaluated per touched partition, emitted as -D/+I differences."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from datum_sql.engine.changelog import OP_COLUMN, apply_changelog
from datum_sql.engine.operators import operator_class
from datum_sql.errors import PlanError

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("o", pa.int64())])
CALLS = [
    {"func": "rank", "input": None, "output": "r", "type": pa.uint64()},
    {"func": "dense_rank", "input": None, "output": "dr", "type": pa.uint64()},
    {"func": "percent_rank", "input": None, "output": "pr", "type": pa.float64()},
    {"func": "cume_dist", "input": None, "output": "cd", "type": pa.float64()},
    {"func": "ntile", "input": None, "output": "nt", "type": pa.uint64(), "offset": 2},
    {"func": "lead", "input": "v", "output": "ld", "type": pa.int64(), "offset": 1},
    {"func": "nth_value", "input": "v", "output": "nv", "type": pa.int64(), "offset": 2},
]


def make(calls: list[dict[str, Any]], kind: str = "over_changelog") -> Any:
    calls = [dict(c) for c in calls]
    out = [*SCHEMA, *(pa.field(c["output"], c.pop("type")) for c in calls)]
    if kind == "over_changelog":
        out.append(pa.field(OP_COLUMN, pa.string()))
    return operator_class(kind)(
        "over",
        {"partition": ["k"], "time_column": "o", "frame": {"mode": "range", "preceding": None},
         "calls": calls, "schema": pa.schema(out)},
        [SCHEMA],
    )  # fmt: skip


def batch(*rows: tuple[str, int, int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([dict(zip("kvo", r, strict=True)) for r in rows], SCHEMA)


def final(batches: list[pa.RecordBatch]) -> list[tuple]:
    table = apply_changelog(None, pa.Table.from_batches(batches))
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_ranks_lead_ntile_nth_value_follow_each_arrival() -> None:
    op = make(CALLS)
    first = op.on_batch(batch(("a", 1, 10), ("a", 2, 30), ("b", 9, 5)))
    assert final(first) == [
        ("a", 1, 10, 1, 1, 0.0, 0.5, 1, 2, None),
        ("a", 2, 30, 2, 2, 1.0, 1.0, 2, None, 2),
        ("b", 9, 5, 1, 1, 0.0, 1.0, 1, None, None),
    ]
    # o=20 between the two rows of a, and a peer of o=30: every row of a changes, b does not
    second = op.on_batch(batch(("a", 3, 20), ("a", 4, 30)))
    assert {r[OP_COLUMN] for r in pa.Table.from_batches(second).to_pylist()} == {"-D", "+I"}
    assert all(r["k"] == "a" for r in pa.Table.from_batches(second).to_pylist())
    assert final(first + second) == [
        ("a", 1, 10, 1, 1, 0.0, 0.25, 1, 3, None),
        ("a", 2, 30, 3, 3, 2 / 3, 1.0, 2, 4, 3),
        ("a", 3, 20, 2, 2, 1 / 3, 0.5, 1, 2, 3),
        ("a", 4, 30, 3, 3, 2 / 3, 1.0, 2, None, 3),
        ("b", 9, 5, 1, 1, 0.0, 1.0, 1, None, None),
    ]


def test_snapshot_resumes_to_the_same_changes() -> None:
    op = make(CALLS)
    op.on_batch(batch(("a", 1, 10), ("a", 2, 30)))
    resumed = make(CALLS)
    resumed.restore(op.snapshot())
    nxt = batch(("a", 3, 20))
    assert final(resumed.on_batch(nxt)) == final(op.on_batch(nxt))
    assert resumed.state_size()[0] == 3


def test_whole_partition_functions_are_refused_where_rows_are_final() -> None:
    with pytest.raises(PlanError, match="function 'rank' is not one of"):
        make(CALLS[:1], kind="over_aggregate")
    with pytest.raises(PlanError, match="ntile needs a positive argument, got 0"):
        make([{**CALLS[4], "offset": 0}])
