"""Changelog rows (``_op`` = +I, -U, +U, -D) and how to apply them to a table.

Two ways, after what the plan knows about the changelog:

- **by key** (:class:`UpsertState`), when the plan carries the changelog's upsert key
  (the columns that identify a row: an aggregate's window bounds and group keys): every
  op on a key replaces the key's whole row, ``+I``/``+U`` set it, ``-U``/``-D`` remove
  it — the rule the DuckDB upsert sink applies with its ``primary_key``. The state holds
  one row per live key, maintained as the changelog flows; reading it is a gather.
- **as a multiset** (:func:`apply_changelog`), when no key is known: inserts add one copy
  of a row, retractions remove one copy of an equal row; one vectorized group-by over
  every column, no row loop.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.acero  # Table.group_by imports it on first use: inside a query, once
import pyarrow.compute as pc

from datum_sql.engine.arrays import one_array
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.errors import QueryFailed

OP_COLUMN = "_op"
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "+I", "-U", "+U", "-D"
_WEIGHT = "__weight"
_SETS = pa.array([INSERT, UPDATE_AFTER])
_ALL_OPS = pa.array([INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE])
#: the four ops as two bytes each, read as one uint16 (in the order of the codes)
_OPS_16 = np.frombuffer("".join(_ALL_OPS.to_pylist()).encode(), np.uint16)


def op_codes(
    ops: pa.Array | pa.ChunkedArray,
    name: str,
    where: str = "a changelog",
    operator: str | None = None,
) -> np.ndarray:
    """The code of each ``_op`` value, 0..3 = +I, -U, +U, -D (even codes set a row); a
    value that is none of them fails, naming ``name`` and ``where`` it was met. Plain
    strings of two bytes each are read off their data buffer (no hashing); any other
    layout goes through Arrow's ``index_in``."""
    ops = one_array(ops)
    codes = _two_byte_codes(ops)
    if codes is not None:
        return codes
    which = pc.index_in(ops, _ALL_OPS)
    if which.null_count:
        bad = ops.filter(which.is_null())[0].as_py()
        raise QueryFailed(
            f"{name}: invalid {OP_COLUMN} value {bad!r} in {where}; expected one of +I, -U, +U, -D",
            operator=operator,
        )
    return np.asarray(which).astype(np.int8)


def _two_byte_codes(ops: pa.Array) -> np.ndarray | None:
    """:func:`op_codes` of a ``string`` array without NULLs whose every value is one of
    the four ops; None otherwise (the caller then finds out which value is not)."""
    n = len(ops)
    if ops.type != pa.string() or ops.null_count or n == 0:
        return None
    _, offset_buf, data = ops.buffers()
    offsets = np.frombuffer(offset_buf, np.int32, count=n + 1, offset=4 * ops.offset)
    start = int(offsets[0])
    if int(offsets[-1]) - start != 2 * n or (np.diff(offsets) != 2).any():
        return None
    pairs = np.frombuffer(data, np.uint16, count=n, offset=start)
    codes = np.full(n, -1, np.int8)
    for code, value in enumerate(_OPS_16):
        codes[pairs == value] = code
    return None if (codes < 0).any() else codes


def apply_changelog(state: pa.Table | None, changes: pa.RecordBatch | pa.Table) -> pa.Table:
    """``state`` (no ``_op``) after applying ``changes`` (with ``_op``) as a multiset."""
    if isinstance(changes, pa.RecordBatch):
        changes = pa.Table.from_batches([changes])
    ops = changes.column(OP_COLUMN)
    rows = changes.drop_columns([OP_COLUMN])
    sign = pc.if_else(pc.is_in(ops, _SETS), 1, -1).cast(pa.int64())
    parts = [rows.append_column(_WEIGHT, sign)]
    if state is not None and state.num_rows:
        parts.insert(0, state.append_column(_WEIGHT, pa.array(np.ones(state.num_rows, np.int64))))
    elif state is None and rows.num_rows == 0:
        return rows
    both = pa.concat_tables(parts, promote_options="none")
    keys = [c for c in both.column_names if c != _WEIGHT]
    if not keys:
        return both.drop_columns([_WEIGHT])
    if any(pa.types.is_list(both.schema.field(k).type) for k in keys):
        return _apply_nested(both, keys)
    summed = both.group_by(keys, use_threads=False).aggregate([(_WEIGHT, "sum")])
    weight = summed.column(f"{_WEIGHT}_sum")
    summed = summed.filter(pc.greater(weight, 0))
    counts = np.asarray(summed.column(f"{_WEIGHT}_sum"))
    out = summed.drop_columns([f"{_WEIGHT}_sum"]).select(keys)
    if (counts > 1).any():
        out = out.take(pa.array(np.repeat(np.arange(len(counts)), counts)))
    return out


def _index_column(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A key column as the key index compares it: dictionaries decoded."""
    arr = one_array(arr)
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _last_of_each(slots: np.ndarray, scratch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct slots, in order of their last occurrence; the row of that occurrence):
    O(rows) by direct addressing into ``scratch`` (-1 at every slot, as it is left again),
    whatever the number of slots."""
    rows = np.arange(len(slots), dtype=np.int64)
    np.maximum.at(scratch, slots, rows)
    last = np.flatnonzero(scratch[slots] == rows)
    touched = slots[last]
    scratch[touched] = -1
    return touched, last


class UpsertState:
    """The rows of a changelog applied by ``key``: one row per live key, in order of each
    key's first appearance, maintained batch by batch (memory bounded by the keys).

    Rows live in an append-only store (Arrow batches); ``_pos`` gives each key slot its
    row in the store (-1: no row). Replaced rows stay in the store until it holds more
    dead rows than live ones (plus a batch's worth), then it is compacted: amortized O(1)
    per changelog row; reading every row compacts it too. Keys without a row are dropped
    from the index the same way.

    With ``id_column``, the producer of the changelog numbers its keys itself (its own
    state slots: dense, one per key for the key's life) in that column, so the rows are
    kept by that number instead of by a key index of their own: no key is hashed again,
    and the rows come in the order of those numbers. The column is not a row column.
    """

    #: Dead rows (and dead key slots) tolerated beyond the live ones before compacting.
    SLACK = 1 << 16

    def __init__(
        self,
        schema: pa.Schema,
        key: tuple[str, ...],
        name: str = "query",
        id_column: str | None = None,
    ) -> None:
        self.schema = schema  # the rows, without _op (and the id column)
        self.key = key
        self.name = name
        self.id_column = id_column
        for k in key:
            if schema.get_field_index(k) < 0:
                raise QueryFailed(
                    f"{name}: upsert key column {k!r} is not among the result columns "
                    f"{schema.names}"
                )
        self._index: KeyIndex | None = None
        if id_column is None:
            self._index = KeyIndex([_value_type(schema.field(k).type) for k in key])
        self._n_slots = 0
        self._pos = np.empty(0, np.int64)
        self._last = np.empty(0, np.int64)  # -1 per slot: scratch for _last_of_each
        self._store: list[pa.RecordBatch] = []
        self._store_rows = 0
        self._live = 0
        self._table: pa.Table | None = None  # the store as one table, while unchanged
        self._read: pa.Table | None = None  # the last table() answer, while unchanged

    @property
    def num_rows(self) -> int:
        return self._live

    def apply(self, changes: pa.RecordBatch) -> None:
        """Apply one changelog batch (with ``_op``); within it, each key's last op wins."""
        n = changes.num_rows
        if n == 0:
            return
        sets = op_codes(changes.column(OP_COLUMN), self.name) % 2 == 0  # +I and +U set a row
        slots = self._slots(changes)
        self._grow(self._n_slots)
        touched, rows = _last_of_each(slots, self._last)
        self._live -= int((self._pos[touched] >= 0).sum())
        is_set = sets[rows]
        self._pos[touched[~is_set]] = -1
        set_rows, set_slots = rows[is_set], touched[is_set]
        if len(set_rows):
            drop = [OP_COLUMN] if self.id_column is None else [OP_COLUMN, self.id_column]
            values = changes.drop_columns(drop).take(pa.array(set_rows, pa.int64()))
            self._store.append(values.cast(self.schema) if values.schema != self.schema else values)
            self._pos[set_slots] = self._store_rows + np.arange(len(set_rows), dtype=np.int64)
            self._store_rows += len(set_rows)
            self._live += len(set_rows)
        self._table = self._read = None
        self._compact()

    def _slots(self, changes: pa.RecordBatch) -> np.ndarray:
        """The key slot of each changelog row (new keys get new slots)."""
        if self._index is None:
            assert self.id_column is not None
            ids = changes.column(self.id_column)
            if ids.null_count:
                raise QueryFailed(f"{self.name}: a changelog row has no key number")
            slots = np.asarray(ids).astype(np.int64, copy=False)
            self._n_slots = max(self._n_slots, int(slots.max()) + 1)
            return slots
        if self.key:
            slots, _ = self._index.slots([_index_column(changes.column(k)) for k in self.key])
        else:
            slots, _ = self._index.slots([])
            slots = np.zeros(changes.num_rows, np.int64)
            self._index.n_slots = max(self._index.n_slots, 1)
        self._n_slots = self._index.n_slots
        return slots

    def _grow(self, n_slots: int) -> None:
        if n_slots > len(self._pos):
            grown = np.full(max(n_slots, 2 * len(self._pos)), -1, np.int64)
            grown[: len(self._pos)] = self._pos
            self._pos = grown
            self._last = np.full(len(grown), -1, np.int64)

    def _compact(self) -> None:
        n_slots = self._n_slots
        if self._store_rows > 2 * self._live + self.SLACK:
            self._keep_live()
        if self._index is not None and n_slots > 2 * self._live + self.SLACK:
            keep = np.flatnonzero(self._pos[:n_slots] >= 0)
            self._index.compact(keep)
            self._pos = self._pos[keep].copy()
            self._n_slots = self._index.n_slots

    def _keep_live(self) -> pa.Table:
        """Rewrite the store as its live rows only, in slot order (one chunk); those rows."""
        pos = self._pos[: self._n_slots]
        live = np.flatnonzero(pos >= 0)
        kept = self._stored().take(pa.array(pos[live], pa.int64())).combine_chunks()
        self._store = kept.to_batches() or []
        self._store_rows = kept.num_rows
        self._pos[live] = np.arange(len(live), dtype=np.int64)
        self._table = kept
        return kept

    def _stored(self) -> pa.Table:
        if self._table is None:
            self._table = pa.Table.from_batches(self._store, schema=self.schema)
        return self._table

    def table(self) -> pa.Table:
        """Every live row, in order of each key's first appearance (or of key number);
        the store is compacted to exactly these rows, which a take needed anyway."""
        if self._read is None:
            self._read = self._keep_live()
        return self._read

    def numbered(self) -> pa.Table:
        """:meth:`table` with the key number of each row (``id_column``) after the rows."""
        assert self.id_column is not None
        ids = np.flatnonzero(self._pos[: self._n_slots] >= 0)
        return self.table().append_column(self.id_column, pa.array(ids, pa.int64()))

    def latest(self, n: int) -> pa.Table:
        """The last ``n`` live rows (display): a gather of ``n`` rows, whatever the state."""
        pos = self._pos[: self._n_slots]
        newest = pos[np.flatnonzero(pos >= 0)[-n:]] if n > 0 else pos[:0]
        return self._stored().take(pa.array(newest, pa.int64()))


def _apply_nested(both: pa.Table, keys: list[str]) -> pa.Table:
    """The multiset sum of ``both`` when some columns are lists, which Arrow cannot group
    on: group on an exact stand-in of each list column instead, and keep the first row of
    every group with a positive weight."""
    cols: dict[str, pa.Array] = {}
    for i, k in enumerate(keys):
        col = both.column(k).combine_chunks()
        cols[f"k{i}"] = _list_key(col) if pa.types.is_list(col.type) else col
    cols["row"] = pa.array(np.arange(both.num_rows, dtype=np.int64))
    cols[_WEIGHT] = both.column(_WEIGHT)
    summed = (
        pa.table(cols)
        .group_by([f"k{i}" for i in range(len(keys))], use_threads=False)
        .aggregate([(_WEIGHT, "sum"), ("row", "min")])
    )
    counts = np.asarray(summed.column(f"{_WEIGHT}_sum"))
    rows = np.asarray(summed.column("row_min"))
    live = counts > 0
    rows = np.repeat(rows[live], counts[live])
    return both.select(keys).take(pa.array(np.sort(rows)))


def _list_key(arr: pa.Array) -> pa.Array:
    """A binary array equal where (and only where) the lists of ``arr`` are equal: each
    element's dictionary code (-1 for NULL) as 4 bytes, NULL for a NULL list."""
    offsets = np.asarray(arr.offsets)
    values = arr.values.slice(offsets[0], offsets[-1] - offsets[0])  # aligned with offsets
    if pa.types.is_list(values.type):
        values = _list_key(values)
    codes = pc.fill_null(pc.dictionary_encode(values).indices, -1).cast(pa.int32())
    data = np.asarray(codes).astype("<i4").tobytes()
    offsets = ((offsets - offsets[0]) * 4).astype(np.int32)
    key = pa.Array.from_buffers(
        pa.binary(), len(arr), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    return pc.if_else(arr.is_null(), pa.scalar(None, pa.binary()), key) if arr.null_count else key
