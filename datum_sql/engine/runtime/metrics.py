"""Counters a running query keeps, read by ``status()`` from another thread.

Only the runtime thread writes; readers take a copy (ints and floats, so torn reads are
harmless). A bounded history of samples feeds throughput and lag plots.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from datum_sql.types import END_OF_TIME, START_OF_TIME, format_micros


@dataclass
class SourceMetrics:
    table: str
    rows: int = 0
    batches: int = 0
    late_rows: int = 0
    rejected_rows: int = 0
    watermark: int = START_OF_TIME
    max_event_time: int = START_OF_TIME
    finished: bool = False
    idle_splits: list[str] = field(default_factory=list)
    connector: dict[str, Any] = field(default_factory=dict)
    #: What the watermark counts (:func:`~datum_sql.engine.eventtime.watermark_unit`):
    #: "time" is microseconds, shown as a time; any other is a number of column units.
    unit: str = "time"

    def as_dict(self) -> dict[str, Any]:
        # The connector's own figures first: the runtime's live counters win on a clash, and
        # a connector's own count of what the runtime counts is left out (each counter once).
        return {
            **{k: v for k, v in self.connector.items() if k not in _SOURCE_COUNTED},
            "table": self.table,
            "rows": self.rows,
            "late_rows": self.late_rows,
            "rejected_rows": self.rejected_rows,
            "watermark": _format_mark(self.watermark, self.unit),
            "finished": self.finished,
            "idle_splits": list(self.idle_splits),
        }


#: Connector metrics that count what the runtime counts itself (rows, rejected rows).
_SOURCE_COUNTED = frozenset({"rows", "rejected"})
_SINK_COUNTED = frozenset({"rows", "rows_written"})


def _format_mark(mark: int, unit: str) -> str:
    if unit == "time" or mark in (START_OF_TIME, END_OF_TIME):
        return format_micros(mark)
    return str(mark)


@dataclass
class OperatorMetrics:
    kind: str
    rows_in: int = 0
    rows_out: int = 0
    watermark: int = START_OF_TIME
    state_rows: int = 0
    state_bytes: int = 0
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.detail,
            "kind": self.kind,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "watermark": format_micros(self.watermark),
            "state_rows": self.state_rows,
            "state_bytes": self.state_bytes,
        }


@dataclass
class SinkMetrics:
    table: str
    #: A late output or dead-letter sink: its rows are not the query's output.
    side: bool = False
    rows: int = 0
    batches: int = 0
    commits: int = 0
    connector: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        # ``rows`` is the runtime's count of rows written; the connector's own is left out
        own = {k: v for k, v in self.connector.items() if k not in _SINK_COUNTED}
        return {**own, "table": self.table, "rows": self.rows, "commits": self.commits}


@dataclass
class Sample:
    at: float
    rows_in: int
    rows_out: int
    watermark_lag_s: float | None
    state_rows: int


class QueryMetrics:
    def __init__(self) -> None:
        self.started = time.time()
        self.sources: dict[str, SourceMetrics] = {}
        self.operators: dict[str, OperatorMetrics] = {}
        self.sinks: dict[str, SinkMetrics] = {}
        self.history: deque[Sample] = deque(maxlen=3600)
        self.last_checkpoint: dict[str, Any] | None = None
        #: Where the run started from: None = fresh, else the checkpoint it resumed.
        self.recovered_from: dict[str, Any] | None = None

    @property
    def rows_in(self) -> int:
        return sum(s.rows for s in self.sources.values())

    @property
    def rows_out(self) -> int:
        return sum(s.rows for s in self.sinks.values() if not s.side)

    @property
    def late_rows(self) -> int:
        return sum(s.late_rows for s in self.sources.values())

    def sample(self) -> None:
        timed = [s for s in self.sources.values() if s.unit == "time"]  # lag is in seconds
        marks = [s.watermark for s in timed if s.max_event_time != START_OF_TIME]
        lag: float | None = None
        if marks:
            wm = min(marks)
            if wm != START_OF_TIME and not any(s.finished for s in self.sources.values()):
                lag = (max(s.max_event_time for s in timed) - wm) / 1e6
        self.history.append(
            Sample(
                time.time(),
                self.rows_in,
                self.rows_out,
                lag,
                sum(o.state_rows for o in self.operators.values()),
            )
        )
