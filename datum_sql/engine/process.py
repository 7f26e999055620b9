"""Keyed process functions: a Python handler per key, with state and timers the engine owns.

The engine calls ``handler(activation)`` for one key at a time with an immutable
:class:`Activation` (the key's new rows in event-time order, a read-only view of its
declared state, the timer that fired) and gets back a :class:`ProcessResponse`: rows to
emit, state to set or clear, timers to register or delete. :func:`accept` checks the whole
response (its type, the output columns and types, the declared :class:`ProcessLimits`,
the times of rows and timers) before the engine applies any of it; a violation is a
:class:`ProcessFailure` naming the function, the key and the rule. The handler's own
memory is never read: what the engine holds is checkpointed, restored and authoritative.

Functions live in one process-wide registry, as scalar UDFs do (:mod:`datum_sql.engine.udfs`).
"""

from __future__ import annotations

import copy
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from datum_sql.engine.eventtime import event_micros
from datum_sql.errors import QueryFailed
from datum_sql.types import format_micros

_EPOCH = datetime(1970, 1, 1)  # noqa: DTZ001  (event times are naive UTC)
_MICROSECOND = timedelta(microseconds=1)


class ProcessFailure(QueryFailed):
    """A process function's handler raised, or returned what the engine refuses."""


@dataclass(frozen=True)
class ProcessLimits:
    """Bounds on what one key may hold and one activation may return, enforced before a
    response is accepted (a breach fails the query, naming the key and the limit)."""

    #: Rows one activation may emit.
    max_rows_out: int = 10_000
    #: Arrow-encoded bytes of one key's state values.
    max_state_bytes: int = 64 * 1024
    #: Timers one key may have pending.
    max_timers: int = 100
    #: Timers one key may fire in one advance of the watermark: a timer that re-arms
    #: itself forever would otherwise never let the end of input finish.
    max_firings: int = 10_000

    def __post_init__(self) -> None:
        for name in ("max_rows_out", "max_state_bytes", "max_timers", "max_firings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"ProcessLimits.{name} must be a non-negative int, got {value!r}")


@dataclass(frozen=True)
class Activation:
    """What the handler sees of one key in one call. Nothing in it can be changed."""

    #: The key: its value for one key column, a tuple for several.
    key: Any
    #: The key's new rows (every input column), in event-time order; may be empty.
    rows: pa.RecordBatch
    #: The key's declared state before this call: absent names are not in it, a
    #: present NULL reads as None.
    state: Mapping[str, Any]
    #: The timer that fired (its event time), or None.
    timer: datetime | None
    #: The latest event time this call covers (its last row's, else its timer's): a timer
    #: registered now must be later.
    time: datetime


@dataclass(frozen=True)
class ProcessResponse:
    """What the handler proposes for its key. ``rows``: a pyarrow Table or RecordBatch, or
    a list of dicts, with exactly the declared output columns; ``set``: state values by
    name (None stores a NULL); ``clear``: state names to make absent; ``timers`` and
    ``delete_timers``: event times (datetimes)."""

    rows: Any = None
    set: Mapping[str, Any] = field(default_factory=dict)
    clear: Iterable[str] = ()
    timers: Iterable[Any] = ()
    delete_timers: Iterable[Any] = ()


@dataclass(frozen=True)
class ProcessFunction:
    """``handler`` registered as ``name``: its declared state, output columns (the key
    columns come first, added by the engine), output time column and limits."""

    name: str
    handler: Callable[[Activation], Any]
    state: pa.Schema
    output: pa.Schema
    time: str | None = None
    limits: ProcessLimits = ProcessLimits()

    @cached_property
    def state_types(self) -> dict[str, pa.DataType]:
        """The declared state's types by name (looked up on every call, so built once)."""
        return {f.name: f.type for f in self.state}

    @cached_property
    def state_widths(self) -> dict[str, int | None]:
        """Each declared state's fixed Arrow-encoded width, None where it varies."""
        return {n: _fixed_bytes(t) for n, t in self.state_types.items()}


@dataclass
class Accepted:
    """A checked response: the rows to emit (output columns, no key), the key's state and
    pending timers after it."""

    rows: pa.Table | None
    state: dict[str, Any]
    timers: set[int]


_registry: dict[str, ProcessFunction] = {}
_lock = threading.Lock()


def register(fn: ProcessFunction) -> None:
    with _lock:
        _registry[fn.name] = fn


def registered() -> dict[str, ProcessFunction]:
    with _lock:
        return dict(_registry)


def lookup(name: str, where: str) -> ProcessFunction:
    fn = registered().get(name)
    if fn is None:
        raise ProcessFailure(
            f"process function {name!r} is not registered in this Python process; register "
            "it (ctx.register_process_function) before the query starts",
            operator=where,
        )
    return fn


def call(
    fn: ProcessFunction, activation: Activation, where: str, key_text: Callable[[], str]
) -> Any:
    """The handler's response; its exception as a ProcessFailure with the traceback."""
    try:
        return fn.handler(activation)
    except Exception as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise ProcessFailure(
            f"process function {fn.name}() raised {type(exc).__name__} for key {key_text()}:\n{text}",
            operator=where,
        ) from exc


def accept(
    fn: ProcessFunction,
    response: Any,
    *,
    key_text: Callable[[], str],
    where: str,
    start_us: int,
    time_us: int,
    state: Mapping[str, Any],
    timers: set[int],
) -> Accepted:
    """Check ``response`` whole against ``fn``'s declaration and limits, before anything
    of it is applied. ``start_us``/``time_us``: the first and last event time the
    activation covers; ``state`` and ``timers``: the key's before it."""

    def fail(what: str) -> ProcessFailure:
        return ProcessFailure(
            f"process function {fn.name}(), key {key_text()}: {what}", operator=where
        )

    if not isinstance(response, ProcessResponse):
        raise fail(
            f"the handler must return a datum_sql.ProcessResponse, got {type(response).__name__}"
        )
    limits = fn.limits
    rows = _rows(fn, response.rows, fail)
    if rows is not None:
        if rows.num_rows > limits.max_rows_out:
            raise fail(f"returned {rows.num_rows} rows, over max_rows_out = {limits.max_rows_out}")
        if fn.time is not None and rows.num_rows:
            _check_row_times(rows.column(fn.time), start_us, fn.time, fail)
    new_state = _new_state(fn, response, dict(state), fail)
    widths = fn.state_widths
    size = 0
    for n, v in new_state.items():
        if v is not None:
            width = widths[n]
            size += width if width is not None else _value_bytes(v, fn.state_types[n])
    if size > limits.max_state_bytes:
        raise fail(
            f"its state would hold {size} bytes, over max_state_bytes = {limits.max_state_bytes}"
        )
    new_timers = set(timers)
    for t in _times(response.delete_timers, "delete_timers", fail):
        new_timers.discard(t)
    for t in _times(response.timers, "timers", fail):
        if t <= time_us:
            raise fail(
                f"timer at {format_micros(t)} is not after the activation's time "
                f"{format_micros(time_us)} (its last row, or its timer): a timer must be later "
                "than what the handler has already seen"
            )
        new_timers.add(t)
    if len(new_timers) > limits.max_timers:
        raise fail(
            f"it would have {len(new_timers)} timers pending, over max_timers = {limits.max_timers}"
        )
    return Accepted(rows if rows is not None and rows.num_rows else None, new_state, new_timers)


def _rows(fn: ProcessFunction, rows: Any, fail: Callable[[str], ProcessFailure]) -> pa.Table | None:
    schema = fn.output
    if rows is None:
        return None
    if isinstance(rows, pa.RecordBatch):
        rows = pa.Table.from_batches([rows])
    if isinstance(rows, pa.Table):
        got_schema = rows.schema
        if got_schema.equals(schema) or (
            got_schema.names == schema.names and got_schema.types == schema.types
        ):
            return rows
        if sorted(rows.column_names) != sorted(schema.names):
            raise fail(f"returned rows with columns {rows.column_names}, expected {schema.names}")
        for f in schema:
            got = rows.schema.field(f.name).type
            if got != f.type:
                raise fail(f"returned column {f.name!r} as {got}, expected {f.type}")
        return rows.select(schema.names)
    if isinstance(rows, list | tuple):
        want = set(schema.names)
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise fail(
                    f"row {i} is a {type(row).__name__}, expected a dict of the output columns"
                )
            if set(row) != want:
                missing, extra = sorted(want - set(row)), sorted(set(row) - want)
                raise fail(
                    f"row {i} has columns {sorted(row)}, expected {schema.names}"
                    + (f" (missing {missing})" if missing else "")
                    + (f" (unknown {extra})" if extra else "")
                )
        try:
            return pa.Table.from_pylist(list(rows), schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            raise fail(
                f"returned rows that do not fit the output columns {schema}: {exc}"
            ) from None
    raise fail(
        f"ProcessResponse.rows must be a pyarrow Table or RecordBatch or a list of dicts, "
        f"got {type(rows).__name__}"
    )


def _check_row_times(
    column: pa.ChunkedArray, start_us: int, name: str, fail: Callable[[str], ProcessFailure]
) -> None:
    micros, valid = event_micros(column)
    if valid is not None and not valid.all():
        raise fail(f"returned a row whose time column {name!r} is NULL")
    low = int(micros.min())
    if low < start_us:
        raise fail(
            f"returned a row at {name} = {format_micros(low)}, before the activation's "
            f"first event time {format_micros(start_us)}: output rows must not be earlier than "
            "the rows or timer that produced them (downstream windows have closed before it)"
        )


def _new_state(
    fn: ProcessFunction,
    response: ProcessResponse,
    state: dict[str, Any],
    fail: Callable[[str], ProcessFailure],
) -> dict[str, Any]:
    if not isinstance(response.set, Mapping):
        raise fail(f"ProcessResponse.set must be a dict, got {type(response.set).__name__}")
    if isinstance(response.clear, str) or not isinstance(response.clear, Iterable):
        raise fail("ProcessResponse.clear must be a list of state names")
    clear = list(response.clear)
    types = fn.state_types
    for name in [*response.set, *clear]:
        if not isinstance(name, str) or name not in types:
            raise fail(f"state {name!r} is not declared; declared: {fn.state.names}")
    both = sorted(set(response.set) & set(clear))
    if both:
        raise fail(f"state {both} is both set and cleared")
    for name in clear:
        state.pop(name, None)
    for name, value in response.set.items():
        t = types[name]
        if _native(value, t):
            state[name] = value
            continue
        try:
            state[name] = pa.scalar(value, type=t).as_py()
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            raise fail(
                f"state {name!r} is declared {t}, got a {type(value).__name__} that does not fit"
            ) from None
    return state


def _times(values: Any, what: str, fail: Callable[[str], ProcessFailure]) -> list[int]:
    if isinstance(values, str | datetime) or not isinstance(values, Iterable):
        raise fail(f"ProcessResponse.{what} must be a list of datetimes")
    out = []
    for v in values:
        if type(v) is datetime and v.tzinfo is None:
            out.append((v - _EPOCH) // _MICROSECOND)
            continue
        if isinstance(v, pa.TimestampScalar):
            v = v.cast(pa.timestamp("us", tz=v.type.tz)).as_py()
        if not isinstance(v, datetime):
            raise fail(f"ProcessResponse.{what} holds a {type(v).__name__}, expected a datetime")
        if v.tzinfo is not None:
            v = v.astimezone(UTC).replace(tzinfo=None)
        out.append((v - _EPOCH) // _MICROSECOND)
    return out


#: Python values stored as they are when a state field has this exact Arrow type (what
#: ``pa.scalar(v, t).as_py()`` would give back), checked without building a scalar.
_INT64 = range(-(2**63), 2**63)


def _native(value: Any, t: pa.DataType) -> bool:
    kind = type(value)
    if kind is int:
        return t == pa.int64() and value in _INT64
    if kind is float:
        return t == pa.float64()
    if kind is str:
        return t == pa.string()
    if kind is bool:
        return t == pa.bool_()
    if kind is datetime:
        return t == pa.timestamp("us") and value.tzinfo is None
    return value is None


def _fixed_bytes(t: pa.DataType) -> int | None:
    """A fixed-width type's Arrow-encoded size of one value; None for other types."""
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_primitive(t) or pa.types.is_temporal(t):
        return t.bit_width // 8
    return None


def _value_bytes(value: Any, t: pa.DataType) -> int:
    """A state value's Arrow-encoded size: fixed-width types their width, text and bytes
    their length, anything else its one-element array."""
    if value is None:
        return 0
    width = _fixed_bytes(t)
    if width is not None:
        return width
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bytes):
        return len(value)
    return pa.array([value], t).nbytes


def frozen_state(state: dict[str, Any]) -> Mapping[str, Any]:
    """The read-only view of a key's state a handler receives (nested values copied, so
    that changing them in place changes nothing the engine holds)."""
    return MappingProxyType(
        {k: copy.deepcopy(v) if isinstance(v, list | dict) else v for k, v in state.items()}
    )
