"""Pieces shared by the join operators: per-side config, key slots, ordered (key, time)
codes, pair expansion, output assembly and state limits.

Each input side is described by a :class:`Side`: its equality keys, its time column (ASOF
and interval joins) and the ``[input column, output name]`` pairs it contributes to the
output. The rows a join holds are the side's input *projected* on the columns it needs
(:class:`Held`), beside two numpy arrays: the key slot of every row (a
:class:`~datum_sql.engine.state.keys.KeyIndex` shared by both sides, so equal keys get
equal slots whatever the side) and its time as an int64 ordinal (:mod:`~datum_sql.engine.eventtime`: microseconds for
timestamps and dates, the value for integers, unscaled units for decimals).

Sorted state is ordered by ``(slot, time)``; :func:`pack` turns such pairs into one int64
code per row that preserves that order, so one ``numpy.searchsorted`` answers a batch of
"which held rows of this key lie at or before this time" questions at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.arrays import one_array
from datum_sql.engine.eventtime import event_micros_masked as event_micros
from datum_sql.engine.operators.base import Operator
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME, START_OF_TIME, format_micros

__all__ = [
    "Held",
    "Side",
    "assemble",
    "check_limit",
    "common_key_types",
    "compact_keys",
    "expand",
    "pack",
    "residual_pairs",
    "search",
]

_KINDS = ("inner", "left")
#: The pair-position column a residual filter carries along.
_PAIR = "__pair"


def plain(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous, non-dictionary array (a single chunk shared, not copied)."""
    arr = one_array(arr)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def common_key_types(left: list[pa.DataType], right: list[pa.DataType]) -> list[pa.DataType]:
    """One type per key pair that both sides' values are cast to before comparing."""
    out = []
    for lt, rt in zip(left, right):
        lt, rt = _value_type(lt), _value_type(rt)
        if lt == rt:
            out.append(lt)
        elif pa.types.is_integer(lt) and pa.types.is_integer(rt):
            out.append(pa.int64())
        elif (pa.types.is_integer(lt) or pa.types.is_floating(lt)) and (
            pa.types.is_integer(rt) or pa.types.is_floating(rt)
        ):
            out.append(pa.float64())
        elif {lt, rt} <= {pa.string(), pa.large_string()}:
            out.append(pa.large_string())
        elif pa.types.is_timestamp(lt) and pa.types.is_timestamp(rt):
            out.append(pa.timestamp("us", tz=lt.tz))
        else:
            out.append(lt)
    return out


class Side:
    """The config of one input of a join: keys, time column, output columns."""

    def __init__(
        self,
        op_name: str,
        side: str,
        schema: pa.Schema,
        keys: list[str],
        time: str | None,
        columns: list[list[str]] | list[tuple[str, str]],
        time_scale: int | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.side = side
        #: The scale a DECIMAL time column is read at (both sides compare at one scale).
        self.time_scale = time_scale
        self.keys = list(keys)
        self.time = time
        self.columns = [(str(c), str(o)) for c, o in columns]
        #: Other columns the join reads (an interval join's per-row bound).
        self.extra = list(extra or [])
        wanted = [
            *self.keys,
            *([time] if time else []),
            *(c for c, _ in self.columns),
            *self.extra,
        ]
        for col in wanted:
            if schema.get_field_index(col) < 0:
                raise PlanError(
                    f"{op_name}: {side} input has no column {col!r} "
                    f"(it has {', '.join(schema.names)})"
                )
        self.needed = list(dict.fromkeys(wanted))
        self.schema = pa.schema([schema.field(c) for c in self.needed])
        self.key_types = [schema.field(k).type for k in self.keys]

    @classmethod
    def from_config(
        cls, op_name: str, config: dict[str, Any], side: str, schema: pa.Schema, timed: bool
    ) -> Side:
        time = config.get(f"{side}_time") if timed else None
        if timed and not time:
            raise PlanError(f"{op_name}: {side}_time is required")
        return cls(
            op_name,
            side,
            schema,
            list(config.get(f"{side}_keys") or []),
            time,
            list(config.get(f"{side}_columns") or []),
            config.get("time_scale"),
            [config["end_column"]] if timed and config.get("end_side") == side else None,
        )

    def project(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        return table.select(self.needed)

    def key_columns(self, table: pa.Table, types: list[pa.DataType]) -> list[pa.Array]:
        cols = []
        for k, t in zip(self.keys, types):
            col = plain(table.column(k))
            cols.append(col if col.type == t else col.cast(t))
        return cols

    def prepare(
        self, table: pa.Table, index: KeyIndex, types: list[pa.DataType]
    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """(valid mask or None when every row is valid, slots, times) of ``table``; slots and
        times cover the valid rows only — a row is valid when no key and not its time is NULL.
        """
        n = table.num_rows
        cols = self.key_columns(table, types)
        ok: np.ndarray | None = None
        for col in cols:
            if col.null_count:
                v = np.asarray(col.is_valid())
                ok = v if ok is None else ok & v
        if self.time is not None:
            ts, tvalid = event_micros(table.column(self.time), self.time_scale)
            if not tvalid.all():
                ok = tvalid if ok is None else ok & tvalid
        else:
            ts = np.zeros(n, np.int64)
        if ok is not None:
            if ok.all():
                ok = None
            else:
                sel = pa.array(np.flatnonzero(ok), pa.int64())
                cols = [c.take(sel) for c in cols]
                ts = ts[ok]
        if cols:
            slots, _ = index.slots(cols)
        else:  # no keys: one global group
            slots = np.zeros(len(ts), np.int64)
        return ok, slots, np.ascontiguousarray(ts, dtype=np.int64)


class Held:
    """Rows held by one side: projected Arrow table, key slot and event time per row."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.table: pa.Table = schema.empty_table()
        self.slot = np.empty(0, np.int64)
        self.ts = np.empty(0, np.int64)

    def __len__(self) -> int:
        return len(self.slot)

    def set(self, table: pa.Table, slot: np.ndarray, ts: np.ndarray) -> None:
        self.table, self.slot, self.ts = table, slot, ts

    def append(self, table: pa.Table, slot: np.ndarray, ts: np.ndarray) -> None:
        if not len(self):
            self.set(table, slot, ts)
            return
        self.table = pa.concat_tables([self.table, table])
        self.slot = np.concatenate([self.slot, slot])
        self.ts = np.concatenate([self.ts, ts])

    def take(self, idx: np.ndarray) -> None:
        """Keep rows ``idx`` (positions or a boolean mask), in that order."""
        if idx.dtype == np.bool_:
            if idx.all():
                return
            idx = np.flatnonzero(idx)
        self.table = self.table.take(pa.array(idx, pa.int64())).combine_chunks()
        self.slot = self.slot[idx]
        self.ts = self.ts[idx]

    def clear(self) -> None:
        self.set(self.schema.empty_table(), np.empty(0, np.int64), np.empty(0, np.int64))

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes + self.slot.nbytes + self.ts.nbytes)


def pack(slots: list[np.ndarray], times: list[np.ndarray]) -> list[np.ndarray]:
    """int64 codes of ``(slot, time)`` pairs ordered like the pairs, comparable across all
    the given arrays: ``slot * span + (time - min)`` when that fits, else time *ranks*."""
    sizes = [len(t) for t in times]
    if not any(sizes):
        return [np.zeros(0, np.int64) for _ in times]
    lo = min(int(t.min()) for t in times if len(t))
    hi = max(int(t.max()) for t in times if len(t))
    nslots = max((int(s.max()) for s in slots if len(s)), default=0) + 1
    span = hi - lo + 1
    if nslots * span < 2**62:
        return [s * span + (t - lo) for s, t in zip(slots, times)]
    uniq = np.unique(np.concatenate(times))
    k = len(uniq)
    return [s * k + np.searchsorted(uniq, t) for s, t in zip(slots, times)]


def search(held: np.ndarray, queries: np.ndarray, side: str) -> np.ndarray:
    """``numpy.searchsorted`` of many queries: sorted first, which keeps the binary searches
    cache-friendly (numpy reuses the previous bound for increasing queries)."""
    if len(queries) < 1024:
        return np.searchsorted(held, queries, side)  # type: ignore[call-overload]
    order = np.argsort(queries)
    out = np.empty(len(queries), np.int64)
    out[order] = np.searchsorted(held, queries[order], side)  # type: ignore[call-overload]
    return out


def expand(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(i, j)`` with ``a[i] <= j < b[i]``: (query positions, held positions)."""
    counts = np.maximum(b - a, 0)
    total = int(counts.sum())
    qi = np.repeat(np.arange(len(a), dtype=np.int64), counts)
    if total == 0:
        return qi, qi
    starts = np.cumsum(counts) - counts
    hj = a[qi] + (np.arange(total, dtype=np.int64) - starts[qi])
    return qi, hj


def _take(table: pa.Table, idx: np.ndarray | None, valid: np.ndarray | None) -> pa.Table:
    if idx is None:
        return table
    if valid is not None and not valid.all():
        indices = pa.array(np.where(valid, idx, 0), pa.int64(), mask=~valid)
    else:
        indices = pa.array(idx, pa.int64())
    return table.take(indices)


def _gathered(
    table: pa.Table, names: list[str], idx: np.ndarray | None, valid: np.ndarray | None
) -> list[pa.Array]:
    """Columns ``names`` of ``table``'s rows ``idx`` (see :func:`_take`): only the columns
    emitted are gathered (not the keys and times the table holds beside them), and a
    one-chunk result is shared, not copied."""
    taken = _take(table.select(list(dict.fromkeys(names))), idx, valid)
    return [one_array(taken.column(c)) for c in names]


def assemble(
    schema: pa.Schema,
    left: Side,
    left_table: pa.Table,
    left_idx: np.ndarray | None,
    right: Side,
    right_table: pa.Table | None,
    right_idx: np.ndarray | None = None,
    right_valid: np.ndarray | None = None,
) -> pa.RecordBatch:
    """One output batch: ``left_table`` rows ``left_idx`` (all when None) beside
    ``right_table`` rows ``right_idx`` (NULL where ``right_valid`` is False, or everywhere
    when ``right_table`` is None)."""
    n = left_table.num_rows if left_idx is None else len(left_idx)
    arrays = _gathered(left_table, [c for c, _ in left.columns], left_idx, None)
    if right_table is None:
        first = len(left.columns)
        arrays += [pa.nulls(n, schema.field(first + i).type) for i in range(len(right.columns))]
    else:
        arrays += _gathered(right_table, [c for c, _ in right.columns], right_idx, right_valid)
    out = []
    for arr, field in zip(arrays, schema):
        out.append(arr if arr.type == field.type else arr.cast(field.type))
    return pa.RecordBatch.from_arrays(out, schema=schema)


def residual_pairs(batch: pa.RecordBatch, residual: pc.Expression | None) -> np.ndarray | None:
    """Positions of the rows of ``batch`` (joined pairs) that satisfy ``residual`` (a
    predicate over the output columns, compiled at planning; NULL counts as false), or
    None when every row does."""
    if residual is None or batch.num_rows == 0:
        return None
    pos = pa.array(np.arange(batch.num_rows, dtype=np.int64))
    table = pa.Table.from_batches([batch]).append_column(_PAIR, pos)
    try:
        kept = table.filter(residual).column(_PAIR)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise QueryFailed(f"cannot evaluate the join condition {residual}: {exc}") from exc
    if len(kept) == batch.num_rows:
        return None
    return np.asarray(kept.to_numpy(zero_copy_only=False), np.int64)


def keep_residual(
    pairs: pa.RecordBatch, residual: pc.Expression | None, rows: np.ndarray, out: list
) -> np.ndarray:
    """Append the ``pairs`` that pass ``residual`` to ``out``; the entries of ``rows`` (one
    per pair: the held or arriving row it came from) that were kept."""
    kept = residual_pairs(pairs, residual)
    if kept is None:
        out.append(pairs)
        return rows
    if len(kept):
        out.append(pairs.take(pa.array(kept, pa.int64())))
    return rows[kept]


def check_kind(op_name: str, config: dict[str, Any]) -> str:
    kind = config.get("kind") or "inner"
    if kind not in _KINDS:
        raise PlanError(f"{op_name}: join kind must be one of {_KINDS}, got {kind!r}")
    return str(kind)


def check_schema(op_name: str, schema: pa.Schema, left: Side, right: Side) -> None:
    want = [o for _, o in left.columns] + [o for _, o in right.columns]
    if list(schema.names) != want:
        raise PlanError(
            f"{op_name}: output schema {schema.names} does not match left_columns then "
            f"right_columns {want}"
        )
    if len(left.keys) != len(right.keys):
        raise PlanError(
            f"{op_name}: {len(left.keys)} left keys but {len(right.keys)} right keys; "
            "each equality pairs one column of each side"
        )


def check_limit(op_name: str, side: str, rows: int, limit: int | None, hint: str) -> None:
    """:class:`QueryFailed` when ``side`` holds more than ``limit`` rows."""
    if limit is not None and rows > limit:
        raise QueryFailed(
            f"join {op_name!r} holds {rows} rows of its {side} input, over its state limit of "
            f"{limit} rows (state_limit_rows); {hint}",
            operator=op_name,
        )


def compact_keys(index: KeyIndex, helds: list[Held], extra: int = 4096) -> None:
    """Forget the key slots no held row uses once they clearly outnumber the used ones
    (keys seen once on an unbounded stream must not pile up). Slot order is preserved, so
    state sorted by slot stays sorted."""
    if not index.types or index.n_slots <= 2 * sum(len(h) for h in helds) + extra:
        return
    slots = np.concatenate([h.slot for h in helds]) if helds else np.empty(0, np.int64)
    # the slots in use, increasing: a count per slot is linear where a sort is not
    used = np.flatnonzero(np.bincount(slots, minlength=index.n_slots))
    if index.n_slots <= 2 * len(used) + extra:
        return
    remap = index.compact(used)
    for h in helds:
        h.slot = remap[h.slot]


class TwoSidedJoin(Operator):
    """What every join checks first: two inputs, their sides, the output schema, the kind."""

    #: Words for errors ("an ASOF join"); whether both sides carry an event-time column.
    WHAT = "a join"
    TIMED = True

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        if len(inputs) != 2:
            raise PlanError(f"{name}: {self.WHAT} has two inputs, got {len(inputs)}")
        self._schema: pa.Schema = config["schema"]
        self._left = Side.from_config(name, config, "left", inputs[0], timed=self.TIMED)
        self._right = Side.from_config(name, config, "right", inputs[1], timed=self.TIMED)
        check_schema(name, self._schema, self._left, self._right)
        self._kind = check_kind(name, config)
        #: Per port: whether its watermark is in the unit of this side's time column (the
        #: column is its source's watermarked one). Otherwise only the end of the input
        #: (+inf) makes results final.
        self._follows = (
            bool(config.get("left_watermark", True)),
            bool(config.get("right_watermark", True)),
        )

    def format_mark(self, mark: int) -> str:
        """A watermark for status: a time for timestamps and dates, else a number of units."""
        if self.config.get("unit", "us") == "us" or mark in (START_OF_TIME, END_OF_TIME):
            return format_micros(mark)
        return str(mark)

    def usable_watermark(self, watermark: int, port: int) -> int | None:
        """``watermark`` when it bounds this port's time column, else None (ignore it)."""
        if self._follows[port] or watermark >= END_OF_TIME:
            return int(watermark)
        return None

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema


class TableFirst:
    """State shared by the joins that read a bounded table whole before any stream row
    passes (lookup, subquery): the table's parts read so far (``_parts``), the stream rows
    held until then (``_buffer``, ``_buffered`` of them) and whether the table is loaded."""

    _parts: list[pa.Table]
    _buffer: list[Any]
    _buffered: int
    _loaded: bool

    def state_size(self) -> tuple[int, int]:
        table_rows = sum(t.num_rows for t in self._parts)
        nbytes = sum(t.nbytes for t in self._parts) + sum(b.nbytes for b in self._buffer)
        return table_rows + self._buffered, int(nbytes)

    def describe(self) -> dict[str, Any]:
        return {
            "table_loaded": self._loaded,
            "table_rows": sum(t.num_rows for t in self._parts),
            "stream_rows_buffered": self._buffered,
        }
