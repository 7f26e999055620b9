"""Unbounded GROUP BY (kind ``group_aggregate``) and the base of every keyed aggregate.

State: one slot per group (a :class:`~datum_sql.engine.state.keys.KeyIndex` from the key
values to the slot) holding each aggregate's partial. On a batch: one Arrow hash group-by
of the batch gives a partial per distinct group, the index gives their slots, the
partials merge into the state (numpy, vectorized over groups), and the groups whose
values changed are emitted as a changelog: ``+I`` for a new group, ``-U`` old then ``+U``
new for an updated one (nothing when the values did not change). On a watermark:
nothing. Snapshot: the key and partial columns of every slot, Arrow IPC.

Config: ``keys``, ``aggregates`` (see :mod:`.aggregates`), ``schema`` (keys, outputs,
``_op``), optional ``order_column`` (event time for first/last_value; arrival order
without it), ``state_limit_rows`` and ``key_number`` (``{"column"}``: each changelog row
also carries its group's slot in that column, before ``_op``, for a result kept by it).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.arrays import one_array
from datum_sql.engine.changelog import DELETE, INSERT, OP_COLUMN, UPDATE_AFTER, UPDATE_BEFORE
from datum_sql.engine.eventtime import event_micros_masked as event_micros
from datum_sql.engine.operators.aggregates import AggregateSet
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME

__all__ = ["GroupAggregate", "KeyedAggregate", "op_strings"]


def _plain(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A group-key column as the key index sees it: dictionaries decoded, floats
    canonical (``-0.0`` is ``0.0`` and every NaN one NaN, as SQL groups them)."""
    arr = one_array(arr)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_floating(arr.type):
        arr = pc.add(arr, pa.scalar(0.0, arr.type))
        nan = pc.is_nan(arr)
        if pc.any(nan).as_py():
            arr = pc.if_else(nan, pa.scalar(float("nan"), arr.type), arr)
    return arr


class KeyedAggregate(Operator):
    """Shared by the aggregate operators: config, output assembly, changelog, limits."""

    KIND: ClassVar[str] = ""
    #: The input is a changelog: every aggregate can take rows back out.
    RETRACTING: ClassVar[bool] = False

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._schema: pa.Schema = config["schema"]
        self._input: pa.Schema = inputs[0]
        self._keys: list[str] = list(config.get("keys") or [])
        for k in self._keys:
            if self._input.get_field_index(k) < 0:
                raise PlanError(f"{name}: group key {k!r} is not an input column")
        self._key_types = [_value_type(self._input.field(k).type) for k in self._keys]
        self._aggs = AggregateSet(
            config.get("aggregates") or [],
            self._input,
            self._schema,
            name,
            retracting=self.RETRACTING,
        )
        self._limit: int | None = config.get("state_limit_rows")
        self._order_column: str | None = config.get("order_column")
        #: The column numbering each changelog row's key (its slot), if any.
        self._key_number: str | None = (config.get("key_number") or {}).get("column")
        self._seq = 0

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def _expect_columns(self, lead: int, changelog: bool) -> None:
        """The planned schema is ``lead`` columns, the keys, the outputs (and ``_op``)."""
        want = lead + len(self._keys) + len(self._aggs.aggs) + (1 if changelog else 0)
        has_op = self._schema.names[-1] == OP_COLUMN if len(self._schema) else False
        if self._key_number is not None:
            want += 1
            if not changelog or self._schema.names[-2:-1] != [self._key_number]:
                raise PlanError(f"{self.name}: no {self._key_number} column before _op")
        if len(self._schema) != want or has_op != changelog:
            raise PlanError(
                f"{self.name}: output schema {self._schema.names} does not match "
                f"{lead} window column(s), keys {self._keys}, "
                f"{len(self._aggs.aggs)} aggregate(s){' and _op' if changelog else ''}"
            )

    # -- pieces -----------------------------------------------------------------------
    def _group_columns(self, table: pa.Table) -> dict[str, pa.Array]:
        return {f"__g{i}": _plain(table.column(k)) for i, k in enumerate(self._keys)}

    def _order_times(self, table: pa.Table) -> np.ndarray:
        if self._order_column is None:
            return np.zeros(table.num_rows, np.int64)
        t, _ = event_micros(table.column(self._order_column))
        return t

    def _state_rows(self) -> int:
        raise NotImplementedError

    def _check_limit(self) -> None:
        if self._limit is None:
            return
        rows = self._state_rows()
        if rows > self._limit:
            raise QueryFailed(
                f"operator {self.name!r} holds {rows} state rows, over its state limit of "
                f"{self._limit} (state_limit_rows); raise the limit, add a window or reduce "
                "the number of distinct group keys",
                operator=self.name,
            )

    def _batch(
        self, columns: list[pa.Array], ops: pa.Array | None, numbers: np.ndarray | None = None
    ) -> pa.RecordBatch:
        arrays = list(columns)
        if self._key_number is not None:
            assert numbers is not None
            arrays.append(pa.array(numbers, pa.int64()))
        if ops is not None:
            arrays.append(ops)
        out = []
        for arr, field in zip(arrays, self._schema):
            out.append(arr if arr.type == field.type else arr.cast(field.type))
        return pa.RecordBatch.from_arrays(out, schema=self._schema)

    def _changelog(
        self,
        lead: list[pa.Array],
        is_old: np.ndarray,
        before: list[pa.Array],
        after: list[pa.Array],
        slots: np.ndarray | None = None,
    ) -> list[pa.RecordBatch]:
        """Rows for touched slots: ``lead`` (window/keys) and ``after`` values for every
        touched slot, ``before`` values for the old ones (``is_old``): ``-U``/``+U`` pairs
        for changed old slots, then ``+I`` for new ones. One ``take`` per column.
        ``slots``: the touched slots (aligned with ``after``), the rows' key numbers."""
        old_pos = np.flatnonzero(is_old)
        ins = np.flatnonzero(~is_old)
        if len(old_pos) and self._aggs.counts_rows:  # every touched group's count grew
            changed = np.ones(len(old_pos), np.bool_)
        elif len(old_pos):
            old_idx = pa.array(old_pos)
            changed = AggregateSet.changed(before, [a.take(old_idx) for a in after])
        else:
            changed = np.zeros(0, np.bool_)
        upd_b = np.flatnonzero(changed)  # index into before
        upd = old_pos[upd_b]  # index into after / lead
        m, k = len(upd), len(ins)
        if m + k == 0:
            return []
        nb = len(old_pos)
        value_idx = np.empty(2 * m + k, np.int64)
        value_idx[0 : 2 * m : 2] = upd_b
        value_idx[1 : 2 * m : 2] = nb + upd
        value_idx[2 * m :] = nb + ins
        lead_idx = np.empty(2 * m + k, np.int64)
        lead_idx[0 : 2 * m : 2] = upd
        lead_idx[1 : 2 * m : 2] = upd
        lead_idx[2 * m :] = ins
        vi, li = pa.array(value_idx), pa.array(lead_idx)
        values = [
            (pa.concat_arrays([b, a]) if nb else a).take(vi) for b, a in zip(before or after, after)
        ]
        codes = np.zeros(2 * m + k, np.int8)
        codes[0 : 2 * m : 2] = 1
        codes[1 : 2 * m : 2] = 2
        numbers = None if slots is None else slots[lead_idx]
        return [self._batch([*(c.take(li) for c in lead), *values], op_strings(codes), numbers)]


_OPS = np.array([INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE], dtype="S2")


def op_strings(codes: np.ndarray) -> pa.Array:
    """The ``_op`` column for codes 0..3 = +I, -U, +U, -D (built from buffers, no objects)."""
    n = len(codes)
    data = _OPS[codes].tobytes()
    offsets = np.arange(0, 2 * n + 1, 2, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


@register("group_aggregate")
class GroupAggregate(KeyedAggregate):
    """Unbounded GROUP BY: one state slot per group, a changelog per batch."""

    KIND = "group_aggregate"
    STATE_VERSION = 1

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._index = KeyIndex(self._key_types)
        self._expect_columns(0, changelog=True)

    def _state_rows(self) -> int:
        return self._index.n_slots + self._aggs.extra_rows()

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        # The input has ended: an empty global aggregate's row is final now, not only when
        # the whole query ends (a subquery join waits for it before matching any row).
        return self.on_close() if watermark >= END_OF_TIME else []

    def on_close(self) -> list[pa.RecordBatch]:
        """A global aggregate (no GROUP BY keys) over no rows still has its one row, as in
        batch SQL: ``count(*)`` 0, the others NULL; so has each group of ``always_groups``
        (key -> value, the other keys NULL: a grouping set that groups by no key)."""
        if not self._keys:
            columns = [pa.array([0], pa.int8())]
        else:
            groups = self.config.get("always_groups") or []
            if not groups:
                return []
            columns = [
                pa.array([g.get(k) for g in groups], t)
                for k, t in zip(self._keys, self._key_types, strict=True)
            ]
        slots, before_n = self._index.slots(columns)
        slots = slots[slots >= before_n]
        if not len(slots):
            return []
        self._aggs.grow(self._index.n_slots)
        after = self._aggs.finals(slots)
        is_old = np.zeros(len(slots), np.bool_)
        return self._changelog(self._index.keys(slots), is_old, [], after, slots)

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        table = pa.Table.from_batches([batch])
        group = self._group_columns(table) or {"__g": pa.array(np.zeros(n, np.int8))}
        keys, parts = self._aggs.batch_partials(table, group, self._order_times(table), self._seq)
        self._seq += n
        slots, before_n = self._index.slots(keys)
        self._aggs.grow(self._index.n_slots)
        is_old = slots < before_n
        before = self._aggs.finals(slots[is_old]) if is_old.any() else []
        self._aggs.merge(slots, parts)
        self._check_limit()
        after = self._aggs.finals(slots)
        # the batch's distinct keys, aligned with ``slots``: the index holds equal values
        lead = keys if self._keys else []
        return self._changelog(lead, is_old, before, after, slots)

    # -- checkpoints and status -------------------------------------------------------
    def snapshot(self) -> bytes | None:
        cols = {f"key{j}": c for j, c in enumerate(self._index.key_columns())}
        cols.update(self._aggs.state_columns())
        slots = pa.table(cols) if cols else pa.table({"_": pa.nulls(self._index.n_slots)})
        meta = {"seq": self._seq, "n_slots": self._index.n_slots}
        return encode_state(
            self.KIND, self.STATE_VERSION, meta, {"slots": slots, **self._aggs.extra_tables()}
        )

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        slots = tables["slots"]
        n = int(meta["n_slots"])
        keys = [slots.column(f"key{j}").combine_chunks() for j in range(len(self._key_types))]
        self._index.load(keys, n)
        self._aggs.load(slots, tables, n)
        self._seq = int(meta["seq"])

    def state_size(self) -> tuple[int, int]:
        return self._state_rows(), self._index.nbytes + self._aggs.nbytes

    def describe(self) -> dict[str, Any]:
        return {"groups": self._index.n_slots}
