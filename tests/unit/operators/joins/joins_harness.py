"""Drive join operators directly: random batches, random interleaving of the two inputs,
per-side watermarks, the end of both inputs, and optionally a snapshot/restore mid-stream."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.operators import operator_class
from datum_sql.types import END_OF_TIME

BASE_US = 1_700_000_000_000_000
SEC = 1_000_000

Step = tuple[Any, ...]


def ts_array(seconds: list[int | None]) -> pa.Array:
    return pa.array([None if s is None else BASE_US + s * SEC for s in seconds], pa.timestamp("us"))


def make(kind: str, config: dict[str, Any], left: pa.Schema, right: pa.Schema) -> Any:
    return operator_class(kind)("join", dict(config), [left, right])


def side_batches(
    table: pa.Table, time_col: str | None, rng: random.Random, disorder_us: int, max_batch: int
) -> list[tuple[pa.RecordBatch, int | None]]:
    """The table in a random arrival order with at most ``disorder_us`` of disorder (none when
    0: ties still arrive in random order), cut into random batch sizes; each batch with the
    watermark after it (running max - disorder) when the side has event time."""
    n = table.num_rows
    perm = list(range(n))
    rng.shuffle(perm)
    if time_col is not None:
        t = table.column(time_col).cast(pa.int64()).to_numpy(zero_copy_only=False)
        jitter = [rng.randint(0, disorder_us) if disorder_us else 0 for _ in range(n)]
        perm.sort(key=lambda i: t[i] + jitter[i])
    ordered = table.take(pa.array(perm, pa.int64()))
    out = []
    pos = 0
    running = None
    while pos < n:
        size = rng.randint(1, max_batch)
        b = ordered.slice(pos, size).combine_chunks().to_batches()[0]
        pos += size
        wm = None
        if time_col is not None:
            mx = int(b.column(time_col).cast(pa.int64()).to_numpy().max())
            running = mx if running is None else max(running, mx)
            wm = running - disorder_us
        out.append((b, wm))
    return out


def stream_steps(
    left: pa.Table,
    right: pa.Table,
    rng: random.Random,
    *,
    left_time: str | None = "ts",
    right_time: str | None = "ts",
    disorder_us: int = 0,
    max_batch: int = 8,
    right_first_end: bool = False,
) -> list[Step]:
    """Batches of both sides interleaved at random, watermarks after each batch, then +inf
    on both sides (random order) and close."""
    sides = [
        side_batches(left, left_time, rng, disorder_us, max_batch),
        side_batches(right, right_time, rng, disorder_us, max_batch),
    ]
    steps: list[Step] = []
    pos = [0, 0]
    last_wm = [None, None]
    ended = [False, False]
    while pos[0] < len(sides[0]) or pos[1] < len(sides[1]):
        choices = [p for p in (0, 1) if pos[p] < len(sides[p])]
        port = rng.choice(choices)
        batch, wm = sides[port][pos[port]]
        pos[port] += 1
        steps.append(("batch", port, batch))
        if wm is not None and (last_wm[port] is None or wm > last_wm[port]):
            last_wm[port] = wm
            steps.append(("wm", port, wm))
        if pos[port] == len(sides[port]) and (right_first_end or rng.random() < 0.5):
            ended[port] = True
            steps.append(("wm", port, END_OF_TIME))
    order = [0, 1]
    rng.shuffle(order)
    for port in order:
        if not ended[port]:
            steps.append(("wm", port, END_OF_TIME))
    steps.append(("close",))
    return steps


def run(
    kind: str,
    config: dict[str, Any],
    left: pa.Schema,
    right: pa.Schema,
    steps: list[Step],
    restore_at: int | None = None,
    observe: Any = None,
) -> pa.Table:
    """All output of the steps; with ``restore_at`` the operator is snapshotted after that
    step and replaced by a fresh one restored from the snapshot."""
    op = make(kind, config, left, right)
    out: list[pa.RecordBatch] = []
    for i, step in enumerate(steps):
        if step[0] == "batch":
            got = op.on_batch(step[2], step[1])
        elif step[0] == "wm":
            got = op.on_watermark(step[2], step[1])
        else:
            got = op.on_close()
        for b in got:
            assert b.schema == op.output_schema
        out += got
        if observe is not None:
            observe(op)
        if restore_at is not None and i == restore_at:
            data = op.snapshot()
            op = make(kind, config, left, right)
            if data is not None:
                op.restore(data)
    return pa.Table.from_batches(out, schema=op.output_schema)


def rows(table: pa.Table, *cols: str) -> list[tuple[Any, ...]]:
    """Sorted tuples of ``cols`` (None sorts first)."""
    data = [table.column(c).to_pylist() for c in cols]
    tuples = list(zip(*data))
    return sorted(
        tuples, key=lambda r: tuple((v is not None, v if v is not None else 0) for v in r)
    )


def ints(values: list[Any]) -> np.ndarray:
    return np.array(values, np.int64)
