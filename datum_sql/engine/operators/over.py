"""Over-window aggregates (kind ``over_aggregate``): ``agg(x) OVER (PARTITION BY p ORDER BY
t <frame>)`` over an append-only input whose watermark bounds ``t``.

Each input row comes out once, with its aggregates appended, when the watermark passes its
time: every row that can still arrive is at or after the watermark, so the row's frame
(rows before it and its peers, never rows after) is complete. Rows with equal ``t`` in a
partition are ordered by arrival (the order the input delivered them).

Frames (config ``frame``): ``{"mode": "rows", "preceding": n}`` (``n`` rows before and the
current row), ``{"mode": "range", "preceding": d}`` (rows with ``t`` in ``[t - d, t]``, ``d``
in the time column's ordinal unit: microseconds for a timestamp), ``"preceding": None``
(from the partition's first row: ``UNBOUNDED PRECEDING``). A range frame's current row
includes its peers (equal ``t``), a rows frame's does not.

State: the rows waiting for the watermark; per partition, the final rows later frames still
need (the last ``n`` rows; the rows within ``d`` of the watermark; the last rows ``lag``
reaches), and for unbounded frames a running count and sum per aggregate plus the rows
that hold the partition's first value, min and max. A range partition without such rows is
dropped from state. On a watermark: the waiting rows it makes final are sorted with their
partitions' kept rows (one sort), frames are index ranges into that run, and every
aggregate is a vectorized prefix-sum or sparse-table query (see ``over_frames``). Output:
the final rows in event-time order (arrival order among equal times), append-only.
Snapshot: waiting rows, kept rows and per-partition sums, Arrow IPC.

Config: ``partition``, ``time_column``, ``frame``, ``calls`` (``{"func", "input",
"output"}``, and for ``lag`` the ``offset`` and a ``default`` column), ``allowed_lateness_us``,
``state_limit_rows``. Functions: count_star, count, sum, avg, bool_and, bool_or, var_samp,
var_pop, stddev_samp, stddev_pop, min, max, first_value, last_value, lag, row_number (the
last two ignore the frame).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.eventtime import ordinals
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.operators.over_frames import (
    NULL_CODE,
    Codes,
    Partitions,
    count_before,
    prefix,
    range_extreme,
    running_extreme,
)
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME, START_OF_TIME

#: The variances and standard deviations: from the count, sum and sum of squares of the
#: values less a shift per partition (its first value), which keeps the squares small.
MOMENTS = ("var_samp", "var_pop", "stddev_samp", "stddev_pop")
FUNCTIONS = (
    "count_star", "count", "sum", "avg", "bool_and", "bool_or", *MOMENTS, "min", "max",
    "first_value", "last_value", "lag", "row_number",
)  # fmt: skip
#: Functions that read the rows after the current one or the partition's size: only a run
#: holding whole partitions (``over_changelog``) evaluates them.
_RANKING = ("rank", "dense_rank", "percent_rank", "cume_dist", "ntile")
WHOLE_PARTITION = (*_RANKING, "lead", "nth_value")
#: Functions whose running count and sum an unbounded frame carries per partition
#: (bool_and/bool_or: the count of values and of true values).
_SUMMED = ("count", "sum", "avg", "bool_and", "bool_or", *MOMENTS)
_SEQ = "__over_seq"
_EMPTY = np.empty(0, np.int64)


@dataclass(frozen=True)
class OverCall:
    func: str
    input: str | None
    output: str
    offset: int = 1
    default: str | None = None


def plain(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


@dataclass
class Run:
    """One release: kept and newly final rows sorted by (partition, time, arrival)."""

    rows: pa.Table
    slot: np.ndarray
    ts: np.ndarray
    seq: np.ndarray
    new: np.ndarray  # bool: made final now
    parts: Partitions
    #: Index of each row's partition's first newly final row.
    first_new: np.ndarray


@dataclass(frozen=True)
class Carry:
    """Per partition slot: rows made final before this run, and for unbounded frames the
    count and sum of each summed call over them; for the :data:`MOMENTS` the sum is of the
    values less ``shift`` (set when the count leaves 0), beside the sum of their squares."""

    seen: np.ndarray
    count: dict[str, np.ndarray]
    sum: dict[str, np.ndarray]
    squares: dict[str, np.ndarray]
    shift: dict[str, np.ndarray]


class FrameEvaluator:
    """The values of the calls over their frames for rows of a run (one vectorized pass
    per call): shared by the append-only and the changelog operators."""

    def __init__(
        self,
        name: str,
        mode: str,
        preceding: int | None,
        calls: list[OverCall],
        schema: pa.Schema,
        out: pa.Schema,
        *,
        whole: bool = False,
    ) -> None:
        """``schema``: the run's rows; ``out``: a schema holding each call's output;
        ``whole``: every run holds whole partitions (then :data:`WHOLE_PARTITION` too)."""
        self.name = name
        self._types = {c.output: out.field(c.output).type for c in calls}
        self.mode = mode
        self.preceding = None if preceding is None else int(preceding)
        self.calls = calls
        names = set(schema.names)
        used = [c.input for c in calls if c.input] + [c.default for c in calls if c.default]
        for col in used:
            if col not in names:
                raise PlanError(f"{name}: column {col!r} is not an input column")
        if mode not in ("rows", "range"):
            raise PlanError(f"{name}: frame mode must be rows or range, got {mode!r}")
        known = FUNCTIONS + WHOLE_PARTITION if whole else FUNCTIONS
        for c in calls:
            if c.func not in known:
                raise PlanError(f"{name}: function {c.func!r} is not one of {known}")
            if c.func in ("lag", "lead") and c.offset < 0:
                raise PlanError(f"{name}: {c.func} offset must be >= 0, got {c.offset}")
            if c.func in ("ntile", "nth_value") and c.offset < 1:
                raise PlanError(f"{name}: {c.func} needs a positive argument, got {c.offset}")

    @property
    def unbounded(self) -> bool:
        return self.preceding is None

    def values(self, run: Run, at: np.ndarray, carry: Carry | None) -> list[pa.Array]:
        """One array per call for rows ``at`` of ``run``; ``carry``: what earlier runs
        contributed (None: the run holds whole partitions)."""
        lo, hi = self.frames(run, at)
        slot = run.slot[at]
        rownum = at - run.first_new[at]  # 0-based, in the partition
        if carry is not None:
            rownum = rownum + carry.seen[slot]
        carried = carry if carry is not None and self.unbounded else None
        return [self._value(c, run, at, lo, hi, slot, rownum, carried) for c in self.calls]

    def frames(self, run: Run, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``[lo, hi]`` of the frame of each row ``at`` (unbounded: from the first newly
        final row of the partition, the rest is carried)."""
        p = self.preceding
        if self.mode == "rows":
            hi = at
            lo = run.first_new[at] if p is None else np.maximum(run.parts.start[at], at - p)
            return lo, hi
        hi = count_before(run.slot, run.ts, run.slot[at], run.ts[at], inclusive=True) - 1
        if p is None:
            return run.first_new[at], hi
        lo = count_before(run.slot, run.ts, run.slot[at], run.ts[at] - p, inclusive=False)
        return lo, hi

    def _value(
        self,
        call: OverCall,
        run: Run,
        at: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        slot: np.ndarray,
        rownum: np.ndarray,
        carry: Carry | None,
    ) -> pa.Array:
        f = call.func
        if f == "row_number":
            return pa.array(rownum + 1, pa.int64())
        if f in _RANKING:
            return _ranking(f, run, at, rownum, call.offset)
        if f == "count_star":
            n = hi - lo + 1
            return pa.array(n + carry.seen[slot] if carry is not None else n, pa.int64())
        col = plain(run.rows.column(call.input))
        if f == "nth_value":
            target = (run.parts.start[at] if self.unbounded else lo) + call.offset - 1
            has = target <= hi
            return pc.if_else(pa.array(has), col.take(pa.array(np.where(has, target, 0))), None)
        if f in ("lag", "lead"):
            if f == "lag":
                target, has = at - call.offset, rownum >= call.offset
            else:
                target = at + call.offset
                has = target <= run.parts.end[at]
            kind = self._types[call.output]  # the default may widen the type
            got = col.take(pa.array(np.where(has, target, 0))).cast(kind)
            if call.default is None:
                return pc.if_else(pa.array(has), got, pa.scalar(None, kind))
            fallback = plain(run.rows.column(call.default)).take(pa.array(at))
            fallback = fallback.cast(kind, safe=False)  # as DataFusion casts it
            return pc.if_else(pa.array(has), got, fallback)
        if f in ("first_value", "last_value"):
            start = run.parts.start[at] if self.unbounded else lo
            return col.take(pa.array(start if f == "first_value" else hi))
        if f in ("min", "max"):
            return self._extreme(col, run, at, lo, hi, low=f == "min")
        valid = np.asarray(col.is_valid()) if col.null_count else np.ones(len(col), bool)
        count = prefix(valid.astype(np.int64))
        n = count[hi + 1] - count[lo]
        if carry is not None:
            n = n + carry.count[call.output][slot]
        if f == "count":
            return pa.array(n, pa.int64())
        if f in MOMENTS:
            return _moment(f, run, col, valid, n, (lo, hi, slot), carry, call, self.name)
        values = _numbers(col, call, self.name)
        sums = prefix(np.where(valid, values, 0))
        total = sums[hi + 1] - sums[lo]
        if carry is not None:
            total = total + carry.sum[call.output][slot]
        if f == "avg":
            return pa.array(total / np.maximum(n, 1), pa.float64(), mask=n == 0)
        if f == "bool_and":  # every value of the frame is true: as many true as values
            return pa.array(total == n, pa.bool_(), mask=n == 0)
        if f == "bool_or":
            return pa.array(total > 0, pa.bool_(), mask=n == 0)
        return pa.array(total, mask=n == 0)

    def _extreme(
        self, col: pa.Array, run: Run, at: np.ndarray, lo: np.ndarray, hi: np.ndarray, *, low: bool
    ) -> pa.Array:
        codes = Codes.of(col)
        masked = codes.masked(low=low)
        if self.unbounded:  # the partition's kept rows hold its min and max so far
            best = running_extreme(masked, run.parts, low=low)
            got = best[hi]
        else:
            got = range_extreme(masked, lo, hi, low=low)
        none = (got == NULL_CODE) | (got == 0)
        picked = col.take(pa.array(codes.row_of[np.where(none, 0, got)]))
        return pc.if_else(pa.array(none), pa.scalar(None, col.type), picked)


@register("over_aggregate")
class OverAggregate(Operator):
    """Appends frame aggregates to each row once the watermark makes it final."""

    CLOSES_ON_WATERMARK = True
    KIND = "over_aggregate"
    STATE_VERSION = 1

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._input: pa.Schema = inputs[0]
        self._schema: pa.Schema = config["schema"]
        self._partition: list[str] = list(config.get("partition") or [])
        self._time: str = config["time_column"]
        frame = config["frame"]
        self._mode: str = frame["mode"]
        pre = frame.get("preceding")
        self._preceding: int | None = None if pre is None else int(pre)
        self._calls = [OverCall(**c) for c in config["calls"]]
        self._lateness = int(config.get("allowed_lateness_us") or 0)
        limit = config.get("state_limit_rows")
        self._limit: int | None = None if limit is None else int(limit)
        self._check_config()
        self._evaluator = FrameEvaluator(
            name, self._mode, self._preceding, self._calls, self._input, self._schema
        )
        self._lag = max([c.offset for c in self._calls if c.func == "lag"], default=0)
        types = [plain_type(self._input.field(c).type) for c in self._partition]
        self._index = KeyIndex(types or [pa.int8()])
        self._waiting = self._input.empty_table()
        self._w_ts, self._w_seq = _EMPTY, _EMPTY
        self._kept = self._input.empty_table()
        self._k_slot, self._k_ts, self._k_seq = _EMPTY, _EMPTY, _EMPTY
        #: per slot: rows made final so far, and per summed call its count and sum
        self._seen = _EMPTY
        self._count: dict[str, np.ndarray] = {}
        self._sum: dict[str, np.ndarray] = {}
        self._squares: dict[str, np.ndarray] = {}
        self._shift: dict[str, np.ndarray] = {}
        self._next_seq = 0
        self._wm = START_OF_TIME

    def _check_config(self) -> None:
        names = set(self._input.names)
        used = [*self._partition, self._time]
        used += [c.input for c in self._calls if c.input] + [
            c.default for c in self._calls if c.default
        ]
        for col in used:
            if col not in names:
                raise PlanError(f"{self.name}: column {col!r} is not an input column")
        if self._mode not in ("rows", "range"):
            raise PlanError(f"{self.name}: frame mode must be rows or range, got {self._mode!r}")
        for c in self._calls:
            if c.func not in FUNCTIONS:
                raise PlanError(f"{self.name}: function {c.func!r} is not one of {FUNCTIONS}")
            if c.func == "lag" and c.offset < 0:
                raise PlanError(f"{self.name}: lag offset must be >= 0, got {c.offset}")
        want = [*self._input.names, *(c.output for c in self._calls)]
        if self._schema.names != want:
            raise PlanError(f"{self.name}: output schema {self._schema.names} is not {want}")

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    @property
    def _unbounded(self) -> bool:
        return self._preceding is None

    def _keys(self, table: pa.Table) -> list[pa.Array]:
        if not self._partition:
            return [pa.array(np.zeros(table.num_rows, np.int8))]
        return [plain(table.column(c)) for c in self._partition]

    def _times(self, table: pa.Table) -> np.ndarray:
        ts, valid = ordinals(table.column(self._time))
        if valid is not None and not valid.all():
            raise QueryFailed(
                f"operator {self.name!r}: NULL in the ORDER BY column {self._time!r}, which "
                "carries event time",
                operator=self.name,
            )
        return ts.astype(np.int64, copy=False)

    # -- batches and watermarks ---------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        table = pa.Table.from_batches([batch])
        self._w_ts = np.concatenate([self._w_ts, self._times(table)])
        self._w_seq = np.concatenate([self._w_seq, np.arange(self._next_seq, self._next_seq + n)])
        self._next_seq += n
        self._waiting = (
            pa.concat_tables([self._waiting, table]) if self._waiting.num_rows else table
        )
        if len(self._waiting.column(0).chunks) > 16:
            self._waiting = self._waiting.combine_chunks()
        self._check_limit()
        return []

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        self._wm = max(self._wm, watermark)
        if watermark >= END_OF_TIME:
            return self._release(END_OF_TIME)
        return self._release(max(watermark - self._lateness, START_OF_TIME))

    def on_close(self) -> list[pa.RecordBatch]:
        return self._release(END_OF_TIME)

    def _release(self, threshold: int) -> list[pa.RecordBatch]:
        if not len(self._w_ts):
            return []
        done = self._w_ts < threshold if threshold < END_OF_TIME else np.ones(len(self._w_ts), bool)
        if not done.any():
            return []
        ready, rest = np.flatnonzero(done), np.flatnonzero(~done)
        fresh = self._waiting.take(pa.array(ready))
        f_ts, f_seq = self._w_ts[ready], self._w_seq[ready]
        self._waiting = self._waiting.take(pa.array(rest)).combine_chunks()
        self._w_ts, self._w_seq = self._w_ts[rest], self._w_seq[rest]
        f_slot, _ = self._index.slots(self._keys(fresh))
        self._grow(self._index.n_slots)
        run = self._run(fresh, f_slot, f_ts, f_seq)
        out = self._emit(run)
        self._advance(run, threshold)
        return out

    def _run(self, fresh: pa.Table, slot: np.ndarray, ts: np.ndarray, seq: np.ndarray) -> Run:
        rows = pa.concat_tables([self._kept, fresh.select(self._input.names)])
        a_slot = np.concatenate([self._k_slot, slot])
        a_ts = np.concatenate([self._k_ts, ts])
        a_seq = np.concatenate([self._k_seq, seq])
        new = np.concatenate([np.zeros(len(self._k_slot), bool), np.ones(len(slot), bool)])
        order = np.lexsort((a_seq, a_ts, a_slot))
        rows = rows.take(pa.array(order)).combine_chunks()
        a_slot, a_ts, a_seq, new = a_slot[order], a_ts[order], a_seq[order], new[order]
        parts = Partitions.of(a_slot)
        kept_before = np.cumsum(~new)  # kept rows up to and including each row
        kept_in_part = kept_before[parts.end] - kept_before[parts.start] + (~new[parts.start])
        return Run(rows, a_slot, a_ts, a_seq, new, parts, parts.start + kept_in_part)

    def _emit(self, run: Run) -> list[pa.RecordBatch]:
        at = np.flatnonzero(run.new)
        at = at[np.lexsort((run.seq[at], run.ts[at]))]  # event-time order, then arrival
        arrays = [c.combine_chunks() for c in run.rows.take(pa.array(at)).columns]
        arrays += self._evaluator.values(run, at, self._carry())
        out = [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, self._schema)]
        return [pa.RecordBatch.from_arrays(out, schema=self._schema)]

    # -- state --------------------------------------------------------------------------
    def _carry(self) -> Carry:
        return Carry(self._seen, self._count, self._sum, self._squares, self._shift)

    def _grow(self, n_slots: int) -> None:
        if n_slots <= len(self._seen):
            return
        size = max(n_slots, 2 * len(self._seen))

        def grown(a: np.ndarray) -> np.ndarray:
            out = np.zeros(size, a.dtype)
            out[: len(a)] = a
            return out

        self._seen = grown(self._seen)
        if not self._unbounded:
            return
        for c in self._calls:
            if c.func in _SUMMED:
                self._count[c.output] = grown(self._count.get(c.output, _EMPTY))
                kind = _sum_dtype(self._input.field(c.input).type) if c.input else np.int64
                if c.func in MOMENTS:
                    kind = np.float64
                    for carried in (self._squares, self._shift):
                        carried[c.output] = grown(carried.get(c.output, np.empty(0, kind)))
                self._sum[c.output] = grown(self._sum.get(c.output, np.empty(0, kind)))

    def _advance(self, run: Run, threshold: int) -> None:
        """Carry the released rows into the per-partition sums and keep what later frames
        need (nothing at the end of input)."""
        new = np.flatnonzero(run.new)
        slots = run.slot[new]
        if self._unbounded:
            for c in self._calls:
                if c.func not in _SUMMED:
                    continue
                if c.func in MOMENTS:
                    self._carry_moments(run, c)
                col = plain(run.rows.column(c.input)).take(pa.array(new))
                valid = np.asarray(col.is_valid()) if col.null_count else np.ones(len(col), bool)
                np.add.at(self._count[c.output], slots, valid.astype(np.int64))
                if c.func not in ("count", *MOMENTS):
                    values = _numbers(col, c, self.name)
                    np.add.at(self._sum[c.output], slots, np.where(valid, values, 0))
        np.add.at(self._seen, slots, 1)
        if threshold >= END_OF_TIME:
            keep = _EMPTY
        else:
            keep = np.flatnonzero(self._keep_mask(run, threshold))
        self._kept = run.rows.take(pa.array(keep)).combine_chunks()
        self._k_slot, self._k_ts, self._k_seq = run.slot[keep], run.ts[keep], run.seq[keep]
        counted = any(c.func in ("lag", "row_number") for c in self._calls)
        if self._mode == "range" and not self._unbounded and not counted:
            self._purge_partitions()

    def _carry_moments(self, run: Run, call: OverCall) -> None:
        """Add the newly final rows' shifted values and their squares to the carried sums
        (a partition counted for the first time takes the shift its rows had)."""
        col = plain(run.rows.column(call.input))
        valid = np.asarray(col.is_valid()) if col.null_count else np.ones(len(col), bool)
        values = _numbers(col, call, self.name).astype(np.float64, copy=False)
        shift = shifts(run, values, valid, self._carry(), call.output)
        new = np.flatnonzero(run.new & valid)
        slots = run.slot[new]
        self._shift[call.output][slots] = shift[new]
        d = values[new] - shift[new]
        np.add.at(self._sum[call.output], slots, d)
        np.add.at(self._squares[call.output], slots, d * d)

    def _keep_mask(self, run: Run, threshold: int) -> np.ndarray:
        idx = np.arange(len(run.slot), dtype=np.int64)
        after = run.parts.end - idx  # rows after this one in its partition
        tail = self._lag
        if self._mode == "rows" and self._preceding is not None:
            tail = max(tail, self._preceding)
        keep = after < tail
        if self._mode == "range" and self._preceding is not None:
            keep |= run.ts >= threshold - self._preceding
        if self._unbounded:
            keep |= self._pinned(run)
        return keep

    def _pinned(self, run: Run) -> np.ndarray:
        """Rows an unbounded frame reads again: each partition's first row and the rows
        holding its min and max of each min/max aggregate."""
        out = np.zeros(len(run.slot), bool)
        for c in self._calls:
            if c.func == "first_value":
                out[run.parts.start] = True
            elif c.func in ("min", "max"):
                masked = Codes.of(plain(run.rows.column(c.input))).masked(low=c.func == "min")
                best = running_extreme(masked, run.parts, low=c.func == "min")[run.parts.end]
                hit = np.flatnonzero(masked == best)
                first = hit[np.unique(run.parts.number[hit], return_index=True)[1]]
                out[first] = True
        return out

    def _purge_partitions(self) -> None:
        live = np.unique(self._k_slot)
        if len(live) * 2 + 1024 > self._index.n_slots:
            return
        remap = self._index.compact(live)
        self._k_slot = remap[self._k_slot]
        self._seen = self._seen[live]

    def _check_limit(self) -> None:
        if self._limit is not None and self.state_size()[0] > self._limit:
            raise QueryFailed(
                f"operator {self.name!r} holds {self.state_size()[0]} rows (waiting for the "
                f"watermark or inside frames), over its state limit of {self._limit} "
                "(state_limit_rows); raise the limit, shorten the frame or lower the "
                "watermark delay",
                operator=self.name,
            )

    def snapshot(self) -> bytes | None:
        waiting = self._waiting.append_column(_SEQ, pa.array(self._w_seq, pa.int64()))
        kept = self._kept.append_column(_SEQ, pa.array(self._k_seq, pa.int64()))
        n = self._index.n_slots
        sums: dict[str, Any] = {f"k{i}": c for i, c in enumerate(self._index.key_columns())}
        sums["seen"] = pa.array(self._seen[:n])
        for name, a in self._count.items():
            sums[f"count:{name}"] = pa.array(a[:n])
        for name, a in self._sum.items():
            sums[f"sum:{name}"] = pa.array(a[:n])
        for name, a in self._squares.items():
            sums[f"squares:{name}"] = pa.array(a[:n])
        for name, a in self._shift.items():
            sums[f"shift:{name}"] = pa.array(a[:n])
        meta = {"next_seq": self._next_seq, "watermark": self._wm, "slots": n}
        tables = {"waiting": waiting, "kept": kept, "partitions": pa.table(sums)}
        return encode_state(self.KIND, self.STATE_VERSION, meta, tables)

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        parts = tables["partitions"]
        n = int(meta["slots"])
        self._index = KeyIndex(self._index.types)
        keys = [parts.column(f"k{i}").combine_chunks() for i in range(len(self._index.types))]
        self._index.load(keys, n)
        self._seen = np.asarray(parts.column("seen")).astype(np.int64)
        self._count = {k[6:]: np.asarray(parts.column(k)).copy() for k in parts.column_names
                       if k.startswith("count:")}  # fmt: skip
        self._sum = {k[4:]: np.asarray(parts.column(k)).copy() for k in parts.column_names
                     if k.startswith("sum:")}  # fmt: skip
        self._squares = {k[8:]: np.asarray(parts.column(k)).copy() for k in parts.column_names
                         if k.startswith("squares:")}  # fmt: skip
        self._shift = {k[6:]: np.asarray(parts.column(k)).copy() for k in parts.column_names
                       if k.startswith("shift:")}  # fmt: skip
        waiting, kept = tables["waiting"], tables["kept"]
        self._w_seq = np.asarray(waiting.column(_SEQ)).astype(np.int64)
        self._waiting = waiting.drop_columns([_SEQ]).cast(self._input).combine_chunks()
        self._w_ts = self._times(self._waiting)
        self._k_seq = np.asarray(kept.column(_SEQ)).astype(np.int64)
        self._kept = kept.drop_columns([_SEQ]).cast(self._input).combine_chunks()
        self._k_ts = self._times(self._kept)
        self._k_slot = (
            self._index.slots(self._keys(self._kept))[0] if self._kept.num_rows else _EMPTY
        )
        self._grow(self._index.n_slots)
        self._next_seq = int(meta["next_seq"])
        self._wm = int(meta["watermark"])

    def state_size(self) -> tuple[int, int]:
        rows = len(self._w_ts) + len(self._k_ts)
        return rows, int(self._waiting.nbytes + self._kept.nbytes + self._index.nbytes)

    def describe(self) -> dict[str, Any]:
        return {"rows_waiting": len(self._w_ts), "rows_in_frames": len(self._k_ts),
                "partitions": self._index.n_slots}  # fmt: skip


def _ranking(f: str, run: Run, at: np.ndarray, rownum: np.ndarray, buckets: int) -> pa.Array:
    """rank, dense_rank, percent_rank, cume_dist or ntile(``buckets``) of rows ``at`` of a
    run of whole partitions; peers are rows with equal ``run.ts``."""
    start, size = run.parts.start[at], run.parts.end[at] - run.parts.start[at] + 1
    if f == "ntile":  # the first size % buckets tiles hold one row more
        q, r = size // buckets, size % buckets
        big = r * (q + 1)
        tile = np.where(rownum < big, rownum // (q + 1), r + (rownum - big) // np.maximum(q, 1))
        return pa.array(tile + 1, pa.uint64())
    if f == "dense_rank":
        first = np.ones(len(run.ts), np.int64)
        first[1:] = (run.ts[1:] != run.ts[:-1]) | (run.slot[1:] != run.slot[:-1])
        distinct = np.cumsum(first)
        return pa.array(distinct[at] - distinct[start] + 1, pa.uint64())
    inclusive = f == "cume_dist"
    before = count_before(run.slot, run.ts, run.slot[at], run.ts[at], inclusive=inclusive)
    if f == "rank":
        return pa.array(before - start + 1, pa.uint64())
    if f == "cume_dist":
        return pa.array((before - start) / size, pa.float64())
    return pa.array((before - start) / np.maximum(size - 1, 1), pa.float64())


def shifts(
    run: Run, values: np.ndarray, valid: np.ndarray, carry: Carry | None, output: str
) -> np.ndarray:
    """The shift of each row of ``run`` for a moment call: its partition's carried shift
    if earlier rows were counted, else the partition's first valid value in the run."""
    hit = np.flatnonzero(valid)
    part = run.parts.number[hit]
    first = hit[np.unique(part, return_index=True)[1]]
    per_part = np.zeros(len(run.parts.start), np.float64)
    per_part[run.parts.number[first]] = values[first]
    out = per_part[run.parts.number]
    if carry is None:
        return out
    counted = carry.count[output][run.slot] > 0
    return np.where(counted, carry.shift[output][run.slot], out)


def _moment(
    f: str,
    run: Run,
    col: pa.Array,
    valid: np.ndarray,
    n: np.ndarray,
    frames: tuple[np.ndarray, np.ndarray, np.ndarray],
    carry: Carry | None,
    call: OverCall,
    name: str,
) -> pa.Array:
    """var_samp/var_pop/stddev_samp/stddev_pop over ``frames`` (``lo``, ``hi`` and the
    partition slot of each row, with ``n`` values, carried ones included): the sum of
    squared deviations is ``S2 - S1^2 / n`` of the shifted values."""
    lo, hi, slot = frames
    values = _numbers(col, call, name).astype(np.float64, copy=False)
    d = np.where(valid, values - shifts(run, values, valid, carry, call.output), 0.0)
    s1, s2 = prefix(d), prefix(d * d)
    a, b = s1[hi + 1] - s1[lo], s2[hi + 1] - s2[lo]
    if carry is not None:
        a = a + carry.sum[call.output][slot]
        b = b + carry.squares[call.output][slot]
    m2 = np.maximum(b - a * a / np.maximum(n, 1), 0.0)
    ddof = 1 if f.endswith("_samp") else 0
    out = m2 / np.maximum(n - ddof, 1)
    if f.startswith("stddev"):
        out = np.sqrt(out)
    return pa.array(out, pa.float64(), mask=n <= ddof if ddof else n == 0)


def _numbers(col: pa.Array, call: OverCall, name: str) -> np.ndarray:
    """A sum's or average's input as numpy (NULLs as 0)."""
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return np.asarray(col.cast(pa.int64()).fill_null(0))
    if pa.types.is_floating(t):
        return np.asarray(col.cast(pa.float64()).fill_null(0.0))
    raise PlanError(f"{name}: {call.func}({call.input}) needs a number, not {t}")


def _sum_dtype(t: pa.DataType) -> type:
    return np.float64 if pa.types.is_floating(t) else np.int64


def plain_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t
