"""What a replay reads: a half-open range ``[start, end)`` of a query's input, in one of
three measures, and each source restricted to it.

- ``time``: event time. Every source with an event-time column reads the rows whose event
  time is in the range (a source that may run unbounded reads what it holds now); a bounded
  source without event time (a dimension table) is read whole.
- ``offsets``: Kafka offsets per partition, ``'partition:0,offset:100;partition:1,offset:80'``
  at both ends, naming the same partitions; partitions not named are not read.
- ``files``: file names: a file source reads the files whose names (not directories) sort in
  the range.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from datum_sql.catalog import SourceEntry
from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec, Source, SourceItem, SplitBatch
from datum_sql.connectors.files.source import FILE_NAMES
from datum_sql.engine.eventtime import event_micros, ordinals
from datum_sql.errors import PlanError
from datum_sql.types import parse_duration, to_micros

KINDS = ("time", "offsets", "files")
FILE_CONNECTORS = ("csv", "jsonl", "parquet")
_OFFSETS = re.compile(
    r"^\s*partition\s*:\s*\d+\s*,\s*offset\s*:\s*\d+(\s*;\s*partition\s*:\s*\d+\s*,\s*offset\s*:\s*\d+)*\s*;?\s*$"
)
_FILE_NAME = re.compile(r"\.(csv|jsonl|json|parquet|pq|parq|gz|bz2|zst|lz4)$", re.I)


@dataclass(frozen=True)
class ReplayRange:
    """``[start, end)`` of a query's input, measured in ``kind`` (see the module docstring)."""

    kind: str
    start: str
    end: str

    @classmethod
    def of(cls, start: Any, end: Any, by: str | None = None) -> ReplayRange:
        """The range from ``start`` to ``end`` (text, a datetime or a number); ``by`` names
        the measure, else it is told from the values: offsets, file names, or event time."""
        lo, hi = _text(start), _text(end)
        kind = by or _kind(lo, hi)
        if kind == "files":  # names, not paths: landing/day-1.csv is day-1.csv
            lo, hi = os.path.basename(lo), os.path.basename(hi)
        if kind not in KINDS:
            raise PlanError(
                f"replay: the range is measured by one of {', '.join(KINDS)}, not {kind!r}"
            )
        rng = cls(kind, lo, hi)
        if kind == "offsets":
            starts, ends = rng.offsets()
            if set(starts) != set(ends):
                raise PlanError(
                    f"replay: --from names partitions {sorted(starts)} and --to {sorted(ends)}; "
                    "both ends of an offset range name the same partitions"
                )
            for p, off in starts.items():
                if off > ends[p]:
                    raise PlanError(
                        f"replay: partition {p} starts at {off}, after its end {ends[p]}"
                    )
        elif kind == "files" and not lo < hi:
            raise PlanError(f"replay: file names from {lo!r} to {hi!r} is an empty range")
        elif kind == "time":
            a, b = _micros(lo), _micros(hi)
            if a is not None and b is not None and not a < b:
                raise PlanError(f"replay: event time from {lo!r} to {hi!r} is an empty range")
        return rng

    def __str__(self) -> str:
        return f"{self.kind} [{self.start}, {self.end})"

    # -- chunks -----------------------------------------------------------------------------

    def chunks(self, every: Any = None, rows: int | None = None) -> list[ReplayRange]:
        """The range cut into consecutive chunks: ``every`` (a duration) of event time, or
        ``rows`` offsets of each partition."""
        if every is not None and rows is not None:
            raise PlanError("replay: chunk by time (--chunk) or by rows (--chunk-rows), not both")
        if every is not None:
            return self._time_chunks(every)
        if rows is not None:
            return self._offset_chunks(rows)
        return [self]

    def _time_chunks(self, every: Any) -> list[ReplayRange]:
        a, b = _micros(self.start), _micros(self.end)
        if self.kind != "time" or a is None or b is None:
            raise PlanError(
                "replay: --chunk cuts a range of event time given as timestamps; "
                f"this range is {self}"
            )
        try:
            step = to_micros(parse_duration(every, what="--chunk"))
        except ValueError as exc:
            raise PlanError(f"replay: {exc}") from None
        if step <= 0:
            raise PlanError(f"replay: --chunk must be positive, got {every!r}")
        cuts = [*range(a, b, step), b]
        return [ReplayRange("time", _show(x), _show(y)) for x, y in itertools.pairwise(cuts)]

    def _offset_chunks(self, rows: int) -> list[ReplayRange]:
        if self.kind != "offsets":
            raise PlanError(
                f"replay: --chunk-rows cuts a range of Kafka offsets; this range is {self}"
            )
        if rows <= 0:
            raise PlanError(f"replay: --chunk-rows must be positive, got {rows}")
        starts, ends = self.offsets()
        n = max((-(-(ends[p] - s) // rows) for p, s in starts.items()), default=0)
        out = []
        for i in range(max(n, 1)):
            lo = {p: min(s + i * rows, ends[p]) for p, s in starts.items()}
            hi = {p: min(s + (i + 1) * rows, ends[p]) for p, s in starts.items()}
            out.append(ReplayRange("offsets", _offset_text(lo), _offset_text(hi)))
        return out

    # -- sources ----------------------------------------------------------------------------

    def offsets(self) -> tuple[dict[int, int], dict[int, int]]:
        return _offsets(self.start, "--from"), _offsets(self.end, "--to")

    def source(self, entry: SourceEntry, spec: ConnectorSpec) -> Source:
        """``entry``'s connector, reading only this range of it."""
        options = spec.options
        restricted = False
        if self.kind == "time" and entry.event_time is not None:
            options.update(registry.READ_TO_NOW.get(entry.connector, {}))
            restricted = True
        elif self.kind == "offsets" and entry.connector == "kafka":
            options["scan.startup.mode"] = "specific-offsets"
            options["scan.startup.specific-offsets"] = self.start
            options["scan.bounded.mode"] = "specific-offsets"
            options["scan.bounded.specific-offsets"] = self.end
            # a replay joins no consumer group (neither the table's nor a query's own) and
            # commits no offset
            options.pop("properties.group.id", None)
            spec.query = None
            restricted = True
        elif self.kind == "files" and entry.connector in FILE_CONNECTORS:
            options["scan.mode"] = "bounded"
            spec.extra[FILE_NAMES] = (self.start, self.end)
            restricted = True
        source = registry.create_source(entry.connector, spec)
        if not source.bounded:
            what = {"time": "no event time", "offsets": "not Kafka", "files": "not files"}[
                self.kind
            ]
            raise PlanError(
                f"replay by {self.kind}: source {entry.name!r} is unbounded and has {what}: the "
                "replay could not tell where its rows of the range end"
            )
        if self.kind == "time" and restricted:
            assert entry.event_time is not None
            return TimeRange(source, entry.event_time, self.start, self.end)
        return source


class TimeRange(Source):
    """A source's rows whose event time is in ``[start, end)``; its markers pass as they are."""

    def __init__(self, inner: Source, column: str, start: str, end: str) -> None:
        super().__init__(inner.spec)
        self.inner = inner
        self.column = column
        field = inner.schema.field(column)
        self.lo, self.hi = (_ordinal(v, field.type, inner.name, column) for v in (start, end))

    @property
    def schema(self) -> pa.Schema:
        return self.inner.schema

    @property
    def bounded(self) -> bool:
        return self.inner.bounded

    async def open(self, position: dict[str, Any] | None) -> None:
        await self.inner.open(position)

    async def read(self) -> AsyncIterator[SourceItem]:
        async for item in self.inner.read():
            if isinstance(item, SplitBatch):
                yield SplitBatch(item.split, self._within(item.batch))
            elif isinstance(item, pa.RecordBatch):
                yield self._within(item)
            else:
                yield item

    def _within(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        t, valid = event_micros(batch.column(self.column))
        keep = (t >= self.lo) & (t < self.hi)
        if valid is not None:
            keep &= valid
        return batch if bool(keep.all()) else batch.filter(pa.array(keep))

    def position(self) -> dict[str, Any]:
        return self.inner.position()

    async def close(self) -> None:
        await self.inner.close()

    def metrics(self) -> dict[str, Any]:
        return self.inner.metrics()


#: Zone-less: range ends are shown as the zone-less timestamps they are read as.
_EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001


def _text(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value).strip()


def _kind(start: str, end: str) -> str:
    if _OFFSETS.match(start) and _OFFSETS.match(end):
        return "offsets"
    if _FILE_NAME.search(start) and _FILE_NAME.search(end):
        return "files"
    return "time"


def _micros(text: str) -> int | None:
    """``text`` as a timestamp in microseconds since the epoch (a zone-less one as is, a
    zoned one in UTC), or None when it is not a timestamp."""
    for t in (pa.timestamp("us"), pa.timestamp("us", tz="UTC")):
        try:
            return int(pa.array([text]).cast(t).cast(pa.int64())[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    return None


def _show(micros: int) -> str:
    return (_EPOCH + dt.timedelta(microseconds=micros)).isoformat(sep=" ")


def _ordinal(text: str, t: pa.DataType, source: str, column: str) -> int:
    """``text`` in the ordinals of an event-time column of type ``t`` (microseconds for
    timestamps and dates, the value for integers)."""
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        micros = _micros(text)
        if micros is not None:
            return micros
        problem = "not a timestamp"
    else:
        try:
            return int(ordinals(pa.array([text]).cast(t))[0][0])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            problem = str(exc)
    raise PlanError(
        f"replay by event time: {text!r} is not a value of source {source!r}'s event-time "
        f"column {column!r} ({t}): {problem}"
    )


def _offsets(text: str, what: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        fields = dict(f.split(":", 1) for f in part.replace(" ", "").split(","))
        try:
            out[int(fields["partition"])] = int(fields["offset"])
        except (KeyError, ValueError):
            raise PlanError(f"replay: {what} {text!r} is not 'partition:P,offset:O;...'") from None
    return out


def _offset_text(offsets: dict[int, int]) -> str:
    return ";".join(f"partition:{p},offset:{o}" for p, o in sorted(offsets.items()))
