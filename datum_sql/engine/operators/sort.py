"""Event-time sort (kind ``event_time_sort``): ``EMIT ON WINDOW CLOSE`` on a query without
windows emits each row once the watermark has passed its event time, in event-time order.

State: the rows whose event time the watermark has not passed yet, in arrival order. On
a batch: its rows join the state; nothing is emitted. On a watermark ``wm``: every held
row with ``time < wm - allowed_lateness_us`` is final — a row still to come is on time,
so its time is at least that — and is emitted, sorted by time (a stable sort: equal times
keep their arrival order). The end of input (+inf) emits the rest. Output: the input rows
unchanged (append-only). Snapshot: the held rows, Arrow IPC.

Config: ``time_column`` (a timestamp column of the input), ``allowed_lateness_us``,
``state_limit_rows``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.eventtime import NO_TIME, event_micros
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME, START_OF_TIME


@register("event_time_sort")
class EventTimeSort(Operator):
    """Holds rows until the watermark passes their event time; emits them in time order."""

    CLOSES_ON_WATERMARK = True
    KIND = "event_time_sort"
    STATE_VERSION = 1

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._schema: pa.Schema = inputs[0]
        self._time: str = config["time_column"]
        index = self._schema.get_field_index(self._time)
        if index < 0 or not pa.types.is_timestamp(self._schema.field(index).type):
            raise PlanError(f"{name}: time column {self._time!r} is not a timestamp input column")
        self._lateness = int(config.get("allowed_lateness_us") or 0)
        limit = config.get("state_limit_rows")
        self._limit: int | None = None if limit is None else int(limit)
        self._rows = self._schema.empty_table()
        self._ts = np.empty(0, np.int64)
        self._wm = START_OF_TIME

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        ts, valid = event_micros(batch.column(self._time))
        self._hold(
            pa.Table.from_batches([batch]), ts if valid is None else np.where(valid, ts, NO_TIME)
        )
        if self._limit is not None and len(self._ts) > self._limit:
            raise QueryFailed(
                f"operator {self.name!r} holds {len(self._ts)} rows waiting for the watermark, "
                f"over its state limit of {self._limit} (state_limit_rows); raise the limit or "
                "lower the watermark delay",
                operator=self.name,
            )
        return []

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        self._wm = max(self._wm, watermark)
        if watermark >= END_OF_TIME:
            return self._release(END_OF_TIME)
        return self._release(max(watermark - self._lateness, START_OF_TIME))

    def on_close(self) -> list[pa.RecordBatch]:
        return self._release(END_OF_TIME)

    def _release(self, threshold: int) -> list[pa.RecordBatch]:
        if not len(self._ts):
            return []
        done = self._ts < threshold if threshold < END_OF_TIME else np.ones(len(self._ts), np.bool_)
        if not done.any():
            return []
        ready = np.flatnonzero(done)
        ready = ready[np.argsort(self._ts[ready], kind="stable")]
        out = self._rows.take(pa.array(ready)).combine_chunks()
        rest = np.flatnonzero(~done)
        self._rows = self._rows.take(pa.array(rest)).combine_chunks()
        self._ts = self._ts[rest]
        return out.to_batches() if out.num_rows else []

    def _hold(self, rows: pa.Table, ts: np.ndarray) -> None:
        self._rows = pa.concat_tables([self._rows, rows]) if self._rows.num_rows else rows
        if len(self._rows.column(0).chunks) > 16:
            self._rows = self._rows.combine_chunks()
        self._ts = np.concatenate([self._ts, ts])

    def snapshot(self) -> bytes | None:
        meta = {"watermark": self._wm}
        return encode_state(self.KIND, self.STATE_VERSION, meta, {"rows": self._rows})

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        rows = tables["rows"].cast(self._schema)
        ts, valid = event_micros(rows.column(self._time))
        self._rows = rows.combine_chunks()
        self._ts = (ts if valid is None else np.where(valid, ts, NO_TIME)).astype(np.int64)
        self._wm = int(meta["watermark"])

    def state_size(self) -> tuple[int, int]:
        return len(self._ts), int(self._rows.nbytes)

    def describe(self) -> dict[str, Any]:
        return {"rows_waiting": len(self._ts)}
