"""Keyed process function (kind ``process``): a registered Python handler per key, with
state and event-time timers held by the engine (see :mod:`datum_sql.engine.process`).

State: the input rows the watermark has not passed yet (in arrival order), each key's
declared state values, each key's pending timers (event times), the input watermark.

On a batch: its rows are held; nothing is emitted. On a watermark ``w``: the held rows
with ``time < w`` are final (a row still to come is at ``w`` or later). They are sorted by
key and time (a stable sort: equal times keep their arrival order) and cut into one slice
per key, vectorized. Each key then runs in event-time order: its rows before its next
due timer (``time <= w``) in one call; the timer, in a call with the rows from its time
up to the key's next due timer; and so on, until no row and no due timer is left (timers
registered on the way fire in this pass when due). Every response is checked whole
before any of it is applied. The end of input (+inf) releases every row and fires every
timer. Output: the key columns, then the function's output columns, append-only; rows are
never earlier than the call that made them, so the output time column is bounded by the
input's watermark, forwarded unchanged.

Snapshot: the held rows, the state (one row per key: a value and a presence column per
declared name) and the timers (one row per key and time), Arrow IPC.

Config: ``function`` (a registered name), ``keys``, ``time_column``.
"""

from __future__ import annotations

import heapq
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine import process
from datum_sql.engine.eventtime import event_micros
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.errors import CheckpointError, QueryFailed
from datum_sql.types import END_OF_TIME, START_OF_TIME

Key = tuple[Any, ...]
EPOCH = datetime(1970, 1, 1)  # noqa: DTZ001  (event times are naive UTC)


@register("process")
class ProcessOperator(Operator):
    """Runs a keyed process function's handler over each key's rows and timers."""

    CLOSES_ON_WATERMARK = True
    KIND = "process"
    STATE_VERSION = 1

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._input: pa.Schema = inputs[0]
        self._fn = process.lookup(config["function"], name)
        self._keys: list[str] = list(config["keys"])
        self._time: str = config["time_column"]
        time_type = self._input.field(self._time).type
        self._tz: str | None = time_type.tz  # type: ignore[attr-defined]
        self._zone = pa.scalar(0, time_type).as_py().tzinfo if self._tz else None
        self._key_types = [self._input.field(k).type for k in self._keys]
        self._schema = pa.schema([self._input.field(k) for k in self._keys] + list(self._fn.output))
        self._rows = self._input.empty_table()
        self._ts = np.empty(0, np.int64)
        self._wm = START_OF_TIME
        self._state: dict[Key, dict[str, Any]] = {}
        self._timers: dict[Key, set[int]] = {}
        #: (time, sequence, key) of every timer registered; stale ones are skipped.
        self._heap: list[tuple[int, int, Key]] = []
        self._seq = itertools.count()

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    # -- input --------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        ts, valid = event_micros(batch.column(self._time))
        if valid is not None and not valid.all():
            raise QueryFailed(
                f"process function {self._fn.name}(): a row has a NULL {self._time!r}, "
                "which orders its key's rows and timers",
                operator=self.name,
            )
        if self._wm > START_OF_TIME and int(ts.min()) < self._wm:
            raise QueryFailed(
                f"internal: process function {self._fn.name}() received a row at "
                f"{int(ts.min())}us, behind its input watermark {self._wm}us",
                operator=self.name,
            )
        rows = pa.Table.from_batches([batch])
        self._rows = pa.concat_tables([self._rows, rows]) if self._rows.num_rows else rows
        if self._rows.num_rows and len(self._rows.column(0).chunks) > 16:
            self._rows = self._rows.combine_chunks()
        self._ts = np.concatenate([self._ts, ts])
        return []

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        if watermark <= self._wm:
            return []
        self._wm = watermark
        return self._advance(watermark)

    def on_close(self) -> list[pa.RecordBatch]:
        return self._advance(END_OF_TIME)

    # -- the pass over final rows and due timers -------------------------------------------
    def _advance(self, wm: int) -> list[pa.RecordBatch]:
        ready = self._ts < wm if wm < END_OF_TIME else np.ones(len(self._ts), np.bool_)
        slices: dict[Key, tuple[pa.RecordBatch, np.ndarray]] = {}
        if ready.any():
            slices = self._slices(np.flatnonzero(ready))
            rest = np.flatnonzero(~ready)
            self._rows = self._rows.take(pa.array(rest)).combine_chunks()
            self._ts = self._ts[rest]
        due: dict[Key, None] = {}
        while self._heap and self._heap[0][0] <= wm:
            t, _, key = heapq.heappop(self._heap)
            if t in self._timers.get(key, ()) and key not in slices:
                due[key] = None
        out: list[tuple[Key, pa.Table]] = []
        for key, (rows, ts) in slices.items():
            self._run_key(key, rows, ts, wm, out)
        if due:
            none = pa.RecordBatch.from_pylist([], schema=self._input)
            for key in due:
                self._run_key(key, none, np.empty(0, np.int64), wm, out)
        return self._output(out)

    def _output(self, out: list[tuple[Key, pa.Table]]) -> list[pa.RecordBatch]:
        """The accepted rows, each behind its key's columns (built once, vectorized)."""
        if not out:
            return []
        tables = [t for _, t in out]
        rows = pa.concat_tables(tables).combine_chunks()
        owner = np.repeat(np.arange(len(out)), [t.num_rows for t in tables])
        keys = [
            pa.array([k[i] for k, _ in out], t).take(pa.array(owner))
            for i, t in enumerate(self._key_types)
        ]
        return pa.Table.from_arrays(keys + list(rows.columns), schema=self._schema).to_batches()

    def _reschedule(self) -> None:
        """The heap holds one entry per pending timer (after a restore)."""
        self._heap = [(t, next(self._seq), k) for k, ts in self._timers.items() for t in ts]
        heapq.heapify(self._heap)

    def _slices(self, ready: np.ndarray) -> dict[Key, tuple[pa.RecordBatch, np.ndarray]]:
        """The ready rows by key, each in time order (vectorized sort and cut)."""
        table = self._rows.take(pa.array(ready))
        ts = self._ts[ready]
        table = table.append_column("__ts", pa.array(ts, pa.int64()))
        order = pc.sort_indices(
            table,
            sort_keys=[(k, "ascending") for k in self._keys] + [("__ts", "ascending")],
        )
        table = table.take(order).combine_chunks()
        ts = table.column("__ts").to_numpy()
        batch = table.drop_columns(["__ts"]).to_batches()[0]
        n = batch.num_rows
        change = np.zeros(max(n - 1, 0), np.bool_)
        for k in self._keys:
            col = batch.column(k)
            a, b = col.slice(1), col.slice(0, n - 1)
            ne = pc.fill_null(pc.not_equal(a, b), False)
            change |= np.asarray(pc.or_(ne, pc.xor(pc.is_null(a), pc.is_null(b))))
        starts = np.concatenate([[0], np.flatnonzero(change) + 1, [n]])
        keys = [batch.column(k).take(pa.array(starts[:-1])).to_pylist() for k in self._keys]
        out: dict[Key, tuple[pa.RecordBatch, np.ndarray]] = {}
        for i, key in enumerate(zip(*keys, strict=True)):
            lo, hi = int(starts[i]), int(starts[i + 1])
            out[key] = (batch.slice(lo, hi - lo), ts[lo:hi])
        return out

    def _run_key(
        self, key: Key, rows: pa.RecordBatch, ts: np.ndarray, wm: int,
        out: list[tuple[Key, pa.Table]],
    ) -> None:  # fmt: skip
        """One key's rows and due timers, in event-time order (see the module docstring)."""
        fn = self._fn
        pos, fired = 0, 0
        while True:
            pending = self._timers.get(key)
            nxt = min(pending) if pending else None
            if nxt is not None and nxt > wm:
                nxt = None
            if nxt is None:
                if pos == len(ts):
                    return
                self._activate(key, rows.slice(pos), ts[pos:], None, out)
                pos = len(ts)  # its timers may be due in this pass already
                continue
            cut = int(np.searchsorted(ts, nxt, "left"))
            if cut > pos:
                self._activate(key, rows.slice(pos, cut - pos), ts[pos:cut], None, out)
                pos = cut
                continue
            fired += 1
            if fired > fn.limits.max_firings:
                raise process.ProcessFailure(
                    f"process function {fn.name}(), key {self._key_text(key)}: fired more than "
                    f"max_firings = {fn.limits.max_firings} timers in one advance of the "
                    "watermark; does a timer re-register itself forever?",
                    operator=self.name,
                )
            assert pending is not None
            later = [t for t in pending if nxt < t <= wm] if len(pending) > 1 else None
            end = int(np.searchsorted(ts, min(later), "left")) if later else len(ts)
            self._activate(key, rows.slice(pos, end - pos), ts[pos:end], nxt, out)
            pos = end

    def _activate(
        self, key: Key, rows: pa.RecordBatch, ts: np.ndarray, timer: int | None,
        out: list[tuple[Key, pa.Table]],
    ) -> None:  # fmt: skip
        fn = self._fn
        start = timer if timer is not None else int(ts[0])
        last = int(ts[-1]) if len(ts) else start
        state = self._state.get(key, {})
        before = self._timers.get(key, set())
        pending = before - {timer} if timer is not None else before

        def key_text() -> str:
            return self._key_text(key)

        activation = process.Activation(
            key=key[0] if len(key) == 1 else key,
            rows=rows,
            state=process.frozen_state(state),
            timer=self._datetime(timer) if timer is not None else None,
            time=self._datetime(last),
        )
        response = process.call(fn, activation, self.name, key_text)
        accepted = process.accept(
            fn, response, key_text=key_text, where=self.name, start_us=start, time_us=last,
            state=state, timers=pending,
        )  # fmt: skip
        if accepted.state:
            self._state[key] = accepted.state
        else:
            self._state.pop(key, None)
        for t in accepted.timers - before:
            heapq.heappush(self._heap, (t, next(self._seq), key))
        if accepted.timers:
            self._timers[key] = accepted.timers
        else:
            self._timers.pop(key, None)
        if accepted.rows is not None:
            out.append((key, accepted.rows))

    def _datetime(self, micros: int) -> datetime:
        """An event time as the handler sees it: naive, or aware for a zoned time column."""
        naive = EPOCH + timedelta(microseconds=micros)
        return naive if self._tz is None else naive.replace(tzinfo=UTC).astimezone(self._zone)

    def _key_text(self, key: Key) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in zip(self._keys, key, strict=True))

    # -- checkpoints ----------------------------------------------------------------------
    def snapshot(self) -> bytes | None:
        key_fields = [
            pa.field(f"key.{k}", t) for k, t in zip(self._keys, self._key_types, strict=True)
        ]
        keys = list(self._state)
        state_cols: list[pa.Array] = [
            pa.array([k[i] for k in keys], t) for i, t in enumerate(self._key_types)
        ]
        state_fields = list(key_fields)
        for f in self._fn.state:
            values = [self._state[k].get(f.name) for k in keys]
            state_cols.append(pa.array(values, f.type))
            state_cols.append(pa.array([f.name in self._state[k] for k in keys], pa.bool_()))
            state_fields += [
                pa.field(f"state.{f.name}", f.type),
                pa.field(f"present.{f.name}", pa.bool_()),
            ]
        state = pa.Table.from_arrays(state_cols, schema=pa.schema(state_fields))
        pairs = [(k, t) for k, ts in self._timers.items() for t in sorted(ts)]
        timer_cols = [pa.array([k[i] for k, _ in pairs], t) for i, t in enumerate(self._key_types)]
        timer_cols.append(pa.array([t for _, t in pairs], pa.int64()))
        timers = pa.Table.from_arrays(
            timer_cols, schema=pa.schema([*key_fields, pa.field("time_us", pa.int64())])
        )
        meta = {"watermark": self._wm, "function": self._fn.name, "state": str(self._fn.state)}
        return encode_state(
            self.KIND,
            self.STATE_VERSION,
            meta,
            {"rows": self._rows, "state": state, "timers": timers},
        )

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        if meta.get("state") != str(self._fn.state):
            raise CheckpointError(
                f"process function {self._fn.name}() declares other state than when the "
                f"checkpoint was taken ({meta.get('state')!r} then, {str(self._fn.state)!r} now): "
                "its state cannot carry over; declare it as before, or start over with fresh=True"
            )
        rows = tables["rows"].cast(self._input)
        ts, _ = event_micros(rows.column(self._time))
        self._rows = rows.combine_chunks()
        self._ts = ts.astype(np.int64)
        self._wm = int(meta["watermark"])
        k = len(self._keys)
        self._state = {}
        for row in tables["state"].to_pylist():
            values = list(row.values())
            key = tuple(values[:k])
            self._state[key] = {
                f.name: row[f"state.{f.name}"] for f in self._fn.state if row[f"present.{f.name}"]
            }
        self._timers = {}
        for row in tables["timers"].to_pylist():
            values = list(row.values())
            self._timers.setdefault(tuple(values[:k]), set()).add(int(row["time_us"]))
        self._reschedule()

    def state_size(self) -> tuple[int, int]:
        timers = sum(len(t) for t in self._timers.values())
        return len(self._ts) + len(self._state) + timers, int(self._rows.nbytes)

    def describe(self) -> dict[str, Any]:
        return {
            "rows_waiting": len(self._ts),
            "keys_with_state": len(self._state),
            "timers_pending": sum(len(t) for t in self._timers.values()),
        }


def run_batch(function: str, table: pa.Table, keys: list[str], time_column: str) -> pa.Table:
    """The function over a whole table, as a batch query sees it: the same operator, every
    row in one batch, then the end of input. Rows without a time are left out (a stream
    routes them as late)."""
    table = table.filter(pc.is_valid(table.column(time_column)))
    config = {"function": function, "keys": keys, "time_column": time_column}
    op = ProcessOperator(f"process {function}", config, [table.schema])
    out: list[pa.RecordBatch] = []
    for batch in table.combine_chunks().to_batches():
        out += op.on_batch(batch)
    out += op.on_watermark(END_OF_TIME)
    out += op.on_close()
    return pa.Table.from_batches(out, schema=op.output_schema)
