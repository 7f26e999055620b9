"""over_aggregate driven directly: rows wait for the watermark and come out once, in time
order, with their frame's aggregates; state holds only what later frames need; a snapshot
taken in the middle resumes to the same output; the state limit fails loudly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from datum_sql.engine.operators import operator_class
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("ts", pa.timestamp("us"))])


def make(mode: str, preceding: int | None, calls: list[dict[str, Any]], **config: Any) -> Any:
    out = pa.schema([*SCHEMA, *(pa.field(c["output"], c.pop("type")) for c in calls)])
    return operator_class("over_aggregate")(
        "over",
        {"partition": ["k"], "time_column": "ts", "frame": {"mode": mode, "preceding": preceding},
         "calls": calls, "schema": out, **config},
        [SCHEMA],
    )  # fmt: skip


def batch(*rows: tuple[str | None, int | None, int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "k": [r[0] for r in rows],
            "v": [r[1] for r in rows],
            "ts": pa.array([r[2] for r in rows], pa.int64()).cast(SCHEMA.field("ts").type),
        },
        schema=SCHEMA,
    )


def out(batches: list[pa.RecordBatch], *cols: str) -> list[tuple]:
    return [tuple(r[c] for c in cols) for b in batches for r in b.to_pylist()]


def sum_call(**extra: Any) -> dict[str, Any]:
    return {"func": "sum", "input": "v", "output": "s", "type": pa.int64(), **extra}


def test_rows_wait_for_the_watermark_and_come_out_in_time_order() -> None:
    op = make("rows", 1, [sum_call()])
    assert op.on_batch(batch(("a", 1, 30), ("a", 2, 10), ("b", 5, 10), ("a", 3, 20))) == []
    assert op.on_watermark(10) == []  # a row at 10 may still arrive
    assert out(op.on_watermark(21), "v", "s") == [(2, 2), (5, 5), (3, 5)]
    op.on_batch(batch(("a", 4, 30)))
    # 1 and 4 tie at 30: arrival order, so 4's frame is (1, 4)
    assert out(op.on_watermark(END_OF_TIME), "v", "s") == [(1, 4), (4, 5)]


def test_rows_frame_keeps_n_rows_per_partition() -> None:
    op = make("rows", 2, [sum_call()])
    for t in range(0, 1000, 10):
        op.on_batch(batch(("a", 1, t), ("b", 1, t)))
        op.on_watermark(t + 1)
    assert op.state_size()[0] == 4  # two rows per partition
    assert out(op.on_watermark(END_OF_TIME), "s") == []


def test_range_frame_is_purged_by_the_watermark() -> None:
    op = make("range", 50, [sum_call(), {"func": "count_star", "input": None, "output": "n",
                                         "type": pa.int64()}])  # fmt: skip
    for i in range(2000):  # a new partition every row: old ones leave the state
        op.on_batch(batch((f"k{i % 1000}", 1, i * 10)))
        got = op.on_watermark(i * 10 + 1)
        assert out(got, "s", "n") == [(1, 1)]
    rows, _ = op.state_size()
    assert rows <= 6
    assert op.describe()["partitions"] < 1100


def test_unbounded_frame_carries_sums_and_extremes() -> None:
    calls = [
        sum_call(),
        {"func": "min", "input": "v", "output": "lo", "type": pa.int64()},
        {"func": "first_value", "input": "v", "output": "f", "type": pa.int64()},
        {"func": "lag", "input": "v", "output": "l", "type": pa.int64(), "offset": 2},
    ]
    op = make("rows", None, calls)
    seen = []
    for i, v in enumerate([5, 3, None, 8, 1, 9, 2]):
        op.on_batch(batch(("a", v, i)))
        seen += out(op.on_watermark(i + 1), "s", "lo", "f", "l")
    assert seen == [(5, 5, 5, None), (8, 3, 5, None), (8, 3, 5, 5), (16, 3, 5, 3),
                    (17, 1, 5, None), (26, 1, 5, 8), (28, 1, 5, 1)]  # fmt: skip
    assert op.state_size()[0] <= 4  # first row, min row, last two rows for lag


def test_snapshot_in_the_middle_resumes_to_the_same_output() -> None:
    def feed(op: Any, parts: list[pa.RecordBatch]) -> list[tuple]:
        got = []
        for i, b in enumerate(parts):
            op.on_batch(b)
            got += out(op.on_watermark(i * 10 + 5), "k", "v", "s", "mx")
        return got

    def fresh() -> Any:
        mx = {"func": "max", "input": "v", "output": "mx", "type": pa.int64()}
        return make("range", 15, [sum_call(), mx])

    parts = [batch(("a", i, i * 10), (None, i * 2, i * 10 + 3), ("a", None, i * 10 + 1))
             for i in range(12)]  # fmt: skip
    whole = feed(fresh(), parts) + out(fresh().on_close(), "k", "v", "s", "mx")
    first = fresh()
    head = feed(first, parts[:6])
    again = fresh()
    again.restore(first.snapshot())
    tail = []
    for i, b in enumerate(parts[6:], start=6):
        again.on_batch(b)
        tail += out(again.on_watermark(i * 10 + 5), "k", "v", "s", "mx")
    assert head + tail == whole[: len(head) + len(tail)]
    assert (None, 22, 42, 22) in tail  # NULL is a partition of its own


def _moment_calls() -> list[dict[str, Any]]:
    return [{"func": f, "input": "v", "output": f, "type": pa.float64()}
            for f in ("var_samp", "var_pop", "stddev_samp", "stddev_pop")]  # fmt: skip


def test_moments_of_large_values_carry_a_shift_across_watermarks_and_a_snapshot() -> None:
    """Values of 1e12 and deviations of 1..3: the sums of shifted values keep every digit
    (unshifted squares of 1e24 would lose them), through five releases and a restore."""
    base = 10**12
    values = [None if d is None else base + d for d in (1, 3, 2, None, 3, 1, 1, 2, 3, 2)]
    op = make("rows", None, _moment_calls())
    got = []
    for i, v in enumerate(values):
        if i == 5:
            resumed = make("rows", None, _moment_calls())
            resumed.restore(op.snapshot())
            op = resumed
        op.on_batch(batch(("a", v, i * 10)))
        if i % 2:
            got += out(op.on_watermark(i * 10 + 1), "var_samp", "var_pop", "stddev_pop")
    assert len(got) == len(values)
    for i, (samp, pop, sd) in enumerate(got):
        seen = np.array([float(v - base) for v in values[: i + 1] if v is not None])
        want_samp = float(np.var(seen, ddof=1)) if len(seen) > 1 else None
        assert (
            samp == pytest.approx(want_samp, abs=1e-12) if want_samp is not None else samp is None
        )
        assert pop == pytest.approx(float(np.var(seen)), abs=1e-12)
        assert sd == pytest.approx(float(np.std(seen)), abs=1e-12)


def test_moments_and_bools_over_a_range_frame() -> None:
    calls = [*_moment_calls(),
             {"func": "bool_and", "input": "p", "output": "all", "type": pa.bool_()},
             {"func": "bool_or", "input": "p", "output": "any", "type": pa.bool_()}]  # fmt: skip
    schema = pa.schema([*SCHEMA, ("p", pa.bool_())])
    out_schema = pa.schema([*schema, *(pa.field(c["output"], c.pop("type")) for c in calls)])
    op = operator_class("over_aggregate")(
        "over",
        {"partition": ["k"], "time_column": "ts", "frame": {"mode": "range", "preceding": 10},
         "calls": calls, "schema": out_schema},
        [schema],
    )  # fmt: skip
    rows = [("a", 4, 0, True), ("a", None, 5, None), ("a", 6, 10, False), ("a", 6, 30, True)]
    op.on_batch(pa.RecordBatch.from_pydict({
        "k": [r[0] for r in rows], "v": [r[1] for r in rows],
        "ts": pa.array([r[2] for r in rows], pa.int64()).cast(SCHEMA.field("ts").type),
        "p": [r[3] for r in rows]}, schema=schema))  # fmt: skip
    got = out(op.on_close(), "var_samp", "var_pop", "stddev_samp", "all", "any")
    assert got == [
        (None, 0.0, None, True, True),  # one value; bool_and of (true)
        (None, 0.0, None, True, True),  # the NULLs are skipped
        (2.0, 1.0, 2**0.5, False, True),  # 4 and 6 (ts 0..10)
        (None, 0.0, None, True, True),  # ts 30 alone
    ]


def test_state_limit_fails_loudly() -> None:
    op = make("rows", 1, [sum_call()], state_limit_rows=3)
    with pytest.raises(QueryFailed, match="state limit of 3"):
        op.on_batch(batch(("a", 1, 1), ("a", 1, 2), ("a", 1, 3), ("a", 1, 4)))


def test_bad_config_is_refused() -> None:
    with pytest.raises(PlanError, match="'nope' is not an input column"):
        make("rows", 1, [{"func": "sum", "input": "nope", "output": "s", "type": pa.int64()}])
    with pytest.raises(PlanError, match="function 'median'"):
        make("rows", 1, [{"func": "median", "input": "v", "output": "s", "type": pa.int64()}])
