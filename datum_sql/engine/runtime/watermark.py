"""Event time at the edge of the query: per-row watermarks, late rows, idle splits.

The watermark a row meets is ``max(event time of earlier rows of its split) - delay``
(a running maximum, so batch sizes never change the answer). A row strictly below that
watermark minus the allowed lateness is late. A source's watermark is the minimum over
its splits that are not idle; when every split is idle it is their maximum, so a quiet
source never holds a window open forever.

Event times and watermarks are int64 ordinals of the event-time column
(:mod:`~datum_sql.engine.eventtime`): microseconds for a TIMESTAMP or DATE, the value for an
integer (``WATERMARK FOR seq AS seq - 5``), unscaled units for a DECIMAL; the delay is in
the same unit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from datum_sql.engine.eventtime import NO_TIME, event_micros, ordinals, watermark_unit
from datum_sql.errors import SchemaError
from datum_sql.types import END_OF_TIME, START_OF_TIME, Watermark


@dataclass
class SplitResult:
    on_time: pa.RecordBatch
    late: pa.RecordBatch | None
    #: For each late row, the watermark it met (microseconds).
    late_watermarks: np.ndarray | None


class _Split:
    __slots__ = ("last_seen", "max_time")

    def __init__(self) -> None:
        self.max_time = START_OF_TIME
        self.last_seen = time.monotonic()


class SourceClock:
    """Tracks one source's event time per split and cuts its batches into on-time and late."""

    def __init__(
        self,
        event_time: str | None,
        delay_us: int | None = 0,
        *,
        allowed_lateness_us: int = 0,
        idle_timeout_s: float | None = None,
        column_type: pa.DataType | None = None,
    ) -> None:
        self.event_time = event_time
        #: The event-time column's type, and what its watermark counts
        #: (:func:`~datum_sql.engine.eventtime.watermark_unit`).
        self.column_type = column_type
        self.unit = watermark_unit(column_type)
        #: None: the watermark is not derived from event times, only provided by the source.
        self.derived = delay_us is not None
        self.delay_us = delay_us or 0
        #: The latest watermark the source provided itself (a marker).
        self.provided_watermark = START_OF_TIME
        self.allowed_lateness_us = allowed_lateness_us
        self.idle_timeout_s = idle_timeout_s
        self.splits: dict[str, _Split] = {}
        self.watermark = START_OF_TIME
        self.ended = False
        self.created = time.monotonic()

    def split_batch(self, batch: pa.RecordBatch, split: str = "") -> SplitResult:
        """Cut ``batch`` of ``split`` into its on-time rows and its late rows."""
        state = self.splits.get(split)
        if state is None:
            state = self.splits[split] = _Split()
        state.last_seen = time.monotonic()
        if self.event_time is None or batch.num_rows == 0:
            return SplitResult(batch, None, None)
        t, valid = event_micros(batch.column(self.event_time))
        if not self.derived:
            return self._cut_by_provided(batch, t, valid, state)
        offset = self.delay_us + self.allowed_lateness_us
        prior = max(state.max_time, NO_TIME)
        # running[i] = max event time of this split up to and including row i. In-order
        # data (the common case) is its own running maximum: skip the slow accumulate.
        src = t if valid is None else np.where(valid, t, NO_TIME)
        if src[0] >= prior and bool((src[1:] >= src[:-1]).all()):
            running = src
            provided = self.provided_watermark - self.allowed_lateness_us
            if (
                valid is None
                and offset >= 0
                and (self.provided_watermark <= START_OF_TIME or t[0] >= provided)
            ):
                # In order and not below either watermark at its first row: no row is late.
                if running[-1] > NO_TIME:
                    state.max_time = max(state.max_time, int(running[-1]))
                return SplitResult(batch, None, None)
        else:
            running = np.maximum.accumulate(src)
            np.maximum(running, prior, out=running)
        late = np.empty(len(t), dtype=bool)
        late[0] = prior > NO_TIME and t[0] < prior - offset
        np.less(t[1:], running[:-1] - offset, out=late[1:])
        if self.provided_watermark > START_OF_TIME:
            late |= t < self.provided_watermark - self.allowed_lateness_us
        if valid is not None:
            late |= ~valid
        if running[-1] > NO_TIME:
            state.max_time = max(state.max_time, int(running[-1]))
        if not late.any():
            return SplitResult(batch, None, None)
        before = np.empty_like(running)
        before[0] = prior
        before[1:] = running[:-1]
        met = np.where(before > NO_TIME, before - self.delay_us, START_OF_TIME)
        met = np.maximum(met, self.provided_watermark)
        return SplitResult(batch.filter(pa.array(~late)), batch.filter(pa.array(late)), met[late])

    def _cut_by_provided(
        self, batch: pa.RecordBatch, t: np.ndarray, valid: np.ndarray | None, state: _Split
    ) -> SplitResult:
        """Late = below the watermark the source itself provided (minus allowed lateness)."""
        if valid is None:
            state.max_time = max(state.max_time, int(t.max()))
        elif valid.any():
            state.max_time = max(state.max_time, int(t[valid].max()))
        late = (
            t < self.provided_watermark - self.allowed_lateness_us
            if self.provided_watermark > START_OF_TIME
            else np.zeros(len(t), bool)
        )
        if valid is not None:
            late |= ~valid
        if not late.any():
            return SplitResult(batch, None, None)
        met = np.full(int(late.sum()), self.provided_watermark, dtype=np.int64)
        return SplitResult(batch.filter(pa.array(~late)), batch.filter(pa.array(late)), met)

    def end_split(self, split: str) -> None:
        """``split`` yields nothing more: it no longer holds the watermark back."""
        self.splits.pop(split, None)

    def split_watermark(self, split: str) -> int:
        s = self.splits.get(split)
        if not self.derived or s is None or s.max_time == START_OF_TIME:
            return START_OF_TIME
        return s.max_time - self.delay_us

    def advance(self, now: float | None = None) -> int:
        """Recompute the source watermark (monotone); returns it."""
        if self.ended:
            return self.watermark
        if self.event_time is None or not self.splits:
            return self.watermark
        now = time.monotonic() if now is None else now
        marks = {k: self.split_watermark(k) for k in self.splits}
        active = marks
        if self.idle_timeout_s is not None:
            active = {
                k: v
                for k, v in marks.items()
                if now - self.splits[k].last_seen < self.idle_timeout_s
            }
        candidate = min(active.values()) if active else max(marks.values())
        candidate = max(candidate, self.provided_watermark)
        if candidate > self.watermark:
            self.watermark = candidate
        return self.watermark

    def marker(self, mark: Watermark) -> int:
        """The ordinal of a source-provided marker: a datetime (or microseconds) for a
        TIMESTAMP, a value of the column's type otherwise (``Watermark(5)`` for a sequence
        number, ``Watermark(Decimal("1.5"))``, ``Watermark(date(...))``)."""
        t = self.column_type
        if t is None or pa.types.is_timestamp(t):
            return mark.micros
        try:
            values, _ = ordinals(pa.array([mark.timestamp], t))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise SchemaError(
                f"watermark marker {mark.timestamp!r} is not a value of the event-time column "
                f"{self.event_time!r} ({t})"
            ) from exc
        return int(values[0])

    def provided(self, micros: int) -> int:
        """A source-provided watermark marker (never moves backwards)."""
        self.provided_watermark = max(self.provided_watermark, micros)
        if micros > self.watermark:
            self.watermark = micros
        return self.watermark

    def end(self) -> int:
        self.ended = True
        self.watermark = END_OF_TIME
        return self.watermark

    def fully_idle(self, now: float | None = None) -> bool:
        """No split of this source yielded rows for its idle timeout (or it has none yet)."""
        if self.idle_timeout_s is None or self.ended:
            return False
        now = time.monotonic() if now is None else now
        if not self.splits:
            return now - self.created >= self.idle_timeout_s
        return all(now - s.last_seen >= self.idle_timeout_s for s in self.splits.values())

    def idle_splits(self, now: float | None = None) -> list[str]:
        if self.idle_timeout_s is None:
            return []
        now = time.monotonic() if now is None else now
        return [k for k, s in self.splits.items() if now - s.last_seen >= self.idle_timeout_s]

    def snapshot(self) -> dict:
        return {
            "watermark": self.watermark,
            "splits": {k: s.max_time for k, s in self.splits.items()},
        }

    def restore(self, doc: dict) -> None:
        self.watermark = int(doc.get("watermark", START_OF_TIME))
        for k, v in doc.get("splits", {}).items():
            s = self.splits[k] = _Split()
            s.max_time = int(v)
