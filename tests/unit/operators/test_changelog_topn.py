"""top_n over a changelog (its input carries ``_op``): every live row is held, a retraction
in the top N lets the next row in, and the changelog it emits, applied, is the top N of
the rows still live."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from datum_sql.engine.changelog import apply_changelog
from datum_sql.engine.operators import operator_class
from datum_sql.errors import QueryFailed

INPUT = pa.schema([("k", pa.string()), ("v", pa.int64()), ("_op", pa.string())])


def make(upper: int = 2, rank: str | None = "rn") -> Any:
    fields = [("k", pa.string()), ("v", pa.int64())]
    fields += [(rank, pa.int64())] if rank else []
    config = {
        "partition": ["k"],
        "order": [{"column": "v", "descending": True, "nulls_first": False}],
        "lower": 1, "upper": upper, "rank_column": rank, "emit": "changelog",
        "schema": pa.schema([*fields, ("_op", pa.string())]),
    }  # fmt: skip
    return operator_class("top_n")("top", config, [INPUT])


def changes(rows: list[tuple[str, int | None, str]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"k": k, "v": v, "_op": op} for k, v, op in rows], schema=INPUT
    )


def ops(out: list[pa.RecordBatch]) -> list[tuple]:
    return [tuple(r.values()) for b in out for r in b.to_pylist()]


def test_a_retraction_in_the_top_lets_the_next_row_in() -> None:
    op = make()
    assert ops(op.on_batch(changes([("a", 5, "+I"), ("a", 3, "+I"), ("a", 1, "+I")]))) == [
        ("a", 5, 1, "+I"),
        ("a", 3, 2, "+I"),
    ]
    # 5 leaves: 3 moves up, 1 (held though below the top 2) comes in
    assert ops(op.on_batch(changes([("a", 5, "-U"), ("a", 2, "+U")]))) == [
        ("a", 5, 1, "-U"),
        ("a", 3, 1, "+U"),
        ("a", 3, 2, "-U"),
        ("a", 2, 2, "+U"),
    ]
    assert ops(op.on_batch(changes([("a", 1, "-D")]))) == []  # below the top: nothing shows
    assert ops(op.on_batch(changes([("a", 3, "-D"), ("a", 2, "-D")]))) == [
        ("a", 3, 1, "-D"),
        ("a", 2, 2, "-D"),
    ]
    assert op.state_size()[0] == 0


def test_applied_changelog_is_the_top_of_the_live_rows_through_a_restore() -> None:
    rnd = random.Random(5)
    op, live, state = make(upper=3, rank=None), [], None
    for step in range(60):
        batch = []
        for _ in range(rnd.randint(1, 6)):
            if live and rnd.random() < 0.4:
                batch.append((*live.pop(rnd.randrange(len(live))), rnd.choice(["-U", "-D"])))
            else:
                row = (rnd.choice("abc"), rnd.randint(0, 20) * 2 + step % 2)  # v unique per k
                while row in live or any(r[:2] == row for r in batch):
                    row = (row[0], row[1] + 41)
                live.append(row)
                batch.append((*row, "+I"))
        if step == 30:
            restored = make(upper=3, rank=None)
            restored.restore(op.snapshot())
            op = restored
        for out in op.on_batch(changes(batch)):
            state = apply_changelog(state, out)
        want = sorted(
            r
            for k in "abc"
            for r in sorted((r for r in live if r[0] == k), key=lambda r: -r[1])[:3]
        )
        assert sorted(tuple(r.values()) for r in state.to_pylist()) == want


def test_a_retraction_of_a_row_it_never_held_fails() -> None:
    op = make()
    op.on_batch(changes([("a", 5, "+I")]))
    with pytest.raises(QueryFailed, match="retracted a row it does not hold"):
        op.on_batch(changes([("a", 4, "-D")]))
