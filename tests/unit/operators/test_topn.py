"""top_n driven directly with batches and watermarks: the changelog it emits, window
closing, bounded state, snapshots and limits."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from datum_sql.engine.changelog import apply_changelog
from datum_sql.engine.operators import operator_class
from datum_sql.engine.state.codec import encode_state
from datum_sql.errors import CheckpointError, PlanError, QueryFailed
from datum_sql.types import END_OF_TIME

TS = pa.timestamp("us")
INPUT = pa.schema([("k", pa.string()), ("v", pa.int64()), ("we", TS)])
T0 = dt.datetime(2024, 1, 1)
S = 1_000_000
T0_US = int((T0 - dt.datetime(1970, 1, 1)).total_seconds()) * S


def make(emit: str = "changelog", upper: int = 2, rank: str | None = "rn", **extra: Any) -> Any:
    names = [*INPUT.names, *([rank] if rank else []), *(["_op"] if emit == "changelog" else [])]
    types = [
        *INPUT.types,
        *([pa.int64()] if rank else []),
        *([pa.string()] if emit == "changelog" else []),
    ]
    config = {
        "partition": ["k", "we"] if emit == "window_close" else ["k"],
        "order": [{"column": "v", "descending": True, "nulls_first": True}],
        "lower": 1, "upper": upper, "rank_column": rank, "emit": emit,
        "schema": pa.schema(list(zip(names, types, strict=True))),
        **({"window_end": "we"} if emit == "window_close" else {}),
        **extra,
    }  # fmt: skip
    return operator_class("top_n")("top", config, [INPUT])


def batch(rows: list[tuple]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"k": k, "v": v, "we": T0 + dt.timedelta(seconds=w)} for k, v, w in rows], schema=INPUT
    )


def rows(out: list[pa.RecordBatch], *cols: str) -> list[tuple]:
    t = pa.Table.from_batches(out) if out else None
    if t is None:
        return []
    return list(zip(*(t.column(c).to_pylist() for c in cols), strict=True))


def test_changelog_per_rank_with_ties_to_the_first_arrival() -> None:
    op = make()
    assert rows(op.on_batch(batch([("a", 5, 0), ("a", 3, 0)])), "v", "rn", "_op") == [
        (5, 1, "+I"),
        (3, 2, "+I"),
    ]
    # 5 again ties with the held 5: it arrived later, so it ranks second; 3 falls out
    assert rows(op.on_batch(batch([("a", 5, 0), ("b", 1, 0)])), "k", "v", "rn", "_op") == [
        ("a", 3, 2, "-U"),
        ("a", 5, 2, "+U"),
        ("b", 1, 1, "+I"),
    ]
    # a NULL sorts first under DESC NULLS FIRST: both held rows move down a rank
    out = op.on_batch(batch([("a", None, 0)]))
    assert rows(out, "v", "rn", "_op") == [
        (5, 1, "-U"),
        (None, 1, "+U"),
        (5, 2, "-U"),
        (5, 2, "+U"),
    ]
    assert op.state_size()[0] == 3  # two rows for a, one for b: never more than N per key
    assert op.on_watermark(END_OF_TIME) == [] and op.on_close() == []


def test_without_rank_only_entering_and_leaving_rows() -> None:
    """A row replaced at the same rank is an update (-U/+U), as deduplication emits."""
    op = make(upper=1, rank=None)
    op.on_batch(batch([("a", 1, 0)]))
    assert rows(op.on_batch(batch([("a", 0, 0)])), "v", "_op") == []
    assert rows(op.on_batch(batch([("a", 4, 0)])), "v", "_op") == [(1, "-U"), (4, "+U")]
    op = make(upper=2, rank=None)
    op.on_batch(batch([("a", 5, 0), ("a", 3, 0)]))
    # 9 enters at rank 1, 5 only moves down (not shown), 3 leaves from rank 2
    assert rows(op.on_batch(batch([("a", 9, 0)])), "v", "_op") == [(9, "+I"), (3, "-D")]


def test_rank_range_shows_only_its_ranks() -> None:
    op = make(upper=3, lower=2)
    log = [*op.on_batch(batch([("a", 9, 0), ("a", 8, 0)])), *op.on_batch(batch([("a", 10, 0)]))]
    final = apply_changelog(None, pa.Table.from_batches(log))
    assert sorted(zip(final.column("v").to_pylist(), final.column("rn").to_pylist())) == [
        (8, 3),
        (9, 2),
    ]


def test_window_close_emits_final_rows_once_and_drops_them() -> None:
    op = make("window_close", upper=1)
    assert op.on_batch(batch([("a", 1, 10), ("a", 7, 10), ("a", 2, 20), ("b", 0, 10)])) == []
    assert op.on_watermark(T0_US + 9 * S) == []
    out = op.on_watermark(T0_US + 10 * S)  # the window ending at 10 s is complete
    assert rows(out, "k", "v", "rn") == [("a", 7, 1), ("b", 0, 1)]
    assert op.state_size()[0] == 1
    assert rows(op.on_close(), "k", "v") == [("a", 2)]
    assert op.state_size()[0] == 0


def test_window_close_waits_for_allowed_lateness() -> None:
    op = make("window_close", upper=1, allowed_lateness_us=3 * S)
    op.on_batch(batch([("a", 1, 10)]))
    assert op.on_watermark(T0_US + 12 * S) == []
    assert rows(op.on_watermark(T0_US + 13 * S), "v") == [(1,)]


@pytest.mark.parametrize("emit", ["changelog", "window_close"])
def test_snapshot_restore_continues_like_an_uninterrupted_run(emit: str) -> None:
    rng = np.random.default_rng(3)
    data = [
        batch([(str(rng.integers(3)), int(rng.integers(5)), int(rng.integers(3)) * 10)
               for _ in range(int(rng.integers(1, 6)))])
        for _ in range(30)
    ]  # fmt: skip
    whole, first = make(emit), make(emit)
    want = [b for d in data for b in whole.on_batch(d)] + whole.on_close()
    got = [b for d in data[:15] for b in first.on_batch(d)]
    second = make(emit)
    second.restore(first.snapshot())
    got += [b for d in data[15:] for b in second.on_batch(d)] + second.on_close()
    assert pa.Table.from_batches(got).equals(pa.Table.from_batches(want))


def test_restore_refuses_another_state_version() -> None:
    op = make()
    with pytest.raises(CheckpointError, match="state version 99"):
        op.restore(encode_state("top_n", 99, {}, {}))


def test_state_limit_fails_the_query() -> None:
    op = make(upper=5, state_limit_rows=3)
    with pytest.raises(QueryFailed, match="state limit of 3"):
        op.on_batch(batch([("a", i, 0) for i in range(4)]))


def test_config_is_checked() -> None:
    with pytest.raises(PlanError, match="lower <= upper"):
        make(lower=3, upper=2)
    with pytest.raises(PlanError, match="not an input column"):
        make(order=[{"column": "nope", "descending": False, "nulls_first": False}])


@pytest.mark.parametrize(
    ("function", "want"),
    [("rank", [(9, 1), (9, 1), (7, 3)]), ("dense_rank", [(9, 1), (9, 1), (7, 2), (5, 3)])],
)
def test_rank_and_dense_rank_share_ranks_among_ties(function: str, want: list) -> None:
    op = make(upper=3, function=function)
    log = [
        *op.on_batch(batch([("a", 7, 0), ("a", 9, 0)])),
        *op.on_batch(batch([("a", 5, 0), ("a", 9, 0)])),
    ]
    final = apply_changelog(None, pa.Table.from_batches(log))
    got = sorted(
        zip(final.column("v").to_pylist(), final.column("rn").to_pylist()),
        key=lambda r: (r[1], -r[0]),
    )
    assert got == want
    assert op.state_size()[0] == len(want)  # rows ranked past 3 are gone for good


def test_a_batch_reads_only_the_rows_of_the_partitions_it_touches(monkeypatch) -> None:
    """Held rows are listed per partition: ranking a batch reads the held rows of its
    partitions, not a scan of every held row; the emitted rows equal a fresh ranking."""
    from datum_sql.engine.state.rows import RowStore

    op = make(upper=3)
    op.on_batch(batch([(f"p{i}", v, 0) for i in range(500) for v in range(4)]))
    assert op.state_size()[0] == 1500
    read: list[int] = []
    real = RowStore.take

    def spy(self, ids, columns=None):
        read.append(len(ids))
        return real(self, ids, columns)

    monkeypatch.setattr(RowStore, "take", spy)
    out = op.on_batch(batch([("p7", 10, 0), ("p9", 2, 0)]))
    assert max(read) <= 6  # the three held rows of p7 and of p9
    assert rows(out, "k", "v", "rn", "_op") == [
        ("p7", 3, 1, "-U"), ("p7", 10, 1, "+U"), ("p7", 2, 2, "-U"), ("p7", 3, 2, "+U"),
        ("p7", 1, 3, "-U"), ("p7", 2, 3, "+U"),
        ("p9", 1, 3, "-U"), ("p9", 2, 3, "+U"),  # ties with the held 2, arrived later
    ]  # fmt: skip
