"""Lookup join of a stream with a bounded table (kind ``lookup_join``).

Port 0 is the stream, port 1 a *bounded* table (an Arrow table, a Parquet file, a DuckDB
table — a dimension table) read once, to its end. Until the table has ended (its watermark
reaches +inf, or :meth:`LookupJoin.on_close`), stream batches are buffered — counted
against ``state_limit_rows``; from then on each stream batch is probed right away and the
table is not read again while the query runs.

The table is read afresh each time the query (re)starts (``REREAD_PORTS``): a snapshot holds
only the buffered stream rows, never the table, so a restarted query joins with the table's
current contents — not with a stale copy from its checkpoint.

Probing is vectorized and exact: every key column of the table is reduced to its distinct
values, each row's key tuple to a dense id (a value's position among the distinct values,
then :class:`~datum_sql.engine.state.keys.Int64Map` on packed code pairs), and the table rows
are grouped by id (one sort). A stream batch gets its ids the same way — unknown values have
none — and its partners are the id's row range. The positions of an integer-like column
(integers, dates, times, timestamps, durations) come from a direct-address array while its
values are dense enough (ids), else an ``Int64Map``, built once with the table;
``pyarrow.compute.index_in``, used for the other types, hashes the whole value set again
for every batch it probes. Duplicate keys in the table give one
output row per matching table row (SQL semantics); NULL keys never match. ``kind =
"left"`` keeps unmatched stream rows with NULL table columns. Output is append-only; rows
of one batch are not kept in input order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.operators.base import register
from datum_sql.engine.operators.joins.common import (
    Side,
    TableFirst,
    TwoSidedJoin,
    assemble,
    check_limit,
    common_key_types,
    expand,
)
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import Int64Map
from datum_sql.engine.state.slots import to_numpy
from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME


def _integer_like(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_duration(t)
    )


class _Positions:
    """The distinct non-NULL values of one key column of the table, as dense positions,
    and where a value is among them. Integer-like values: a direct-address array while
    they span at most ``DENSE_SPAN`` times the table's rows (ids, mostly), built without
    hashing; else an :class:`Int64Map`. Other types: ``pyarrow.compute.index_in`` over the
    distinct values."""

    DENSE_SPAN = 8
    DENSE_MIN = 1 << 16

    def __init__(self, col: pa.Array) -> None:
        self.values: pa.Array | None = None
        self._map: Int64Map | None = None
        self._dense: np.ndarray | None = None
        self._lo = 0
        if not _integer_like(col.type):
            self.values = pc.unique(col.drop_null())
            self.n = len(self.values)
            return
        bits, valid = self._bits(col)
        present = bits if valid.all() else bits[valid]
        if len(present):
            lo, hi = int(present.min()), int(present.max())
            if hi - lo < max(self.DENSE_MIN, self.DENSE_SPAN * len(present)):
                seen = np.zeros(hi - lo + 1, np.bool_)
                seen[present - lo] = True
                self._dense = np.where(seen, np.cumsum(seen) - 1, -1).astype(np.int32)
                self._lo = lo
                self.n = int(np.count_nonzero(seen))
                return
        self._map = Int64Map()
        self._map.get_or_add(present)  # ids in order of first appearance
        self.n = self._map.n

    @staticmethod
    def _bits(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        values, valid = to_numpy(col)
        # uint64 above 2**63 wraps to a negative int64: distinct values stay distinct
        return values.astype(np.int64, copy=False), valid

    def _dense_of(self, bits: np.ndarray) -> np.ndarray:
        """Positions of ``bits`` (-1 where not among the values)."""
        assert self._dense is not None
        # wrapping subtraction: exactly the values in [lo, lo + span) land in [0, span)
        rel = (bits - self._lo).view(np.uint64)
        inside = rel < len(self._dense)
        if inside.all():
            return self._dense[rel]
        return np.where(inside, self._dense[np.where(inside, rel, 0)], -1)

    def of(self, col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
        """(position of each row's value, mask of the rows whose value is among them — None
        when every row's is); positions are arbitrary where not found."""
        if self._dense is not None or self._map is not None:
            bits, valid = self._bits(col)
            pos = self._dense_of(bits) if self._dense is not None else self._map.get(bits)  # type: ignore[union-attr]
            found = (pos >= 0) & valid
            if found.all():
                return pos.astype(np.int64, copy=False), None
            return np.where(found, pos, 0).astype(np.int64, copy=False), found
        assert self.values is not None
        codes = pc.index_in(col, value_set=self.values)
        mask = None
        if codes.null_count:
            mask = np.asarray(codes.is_valid())
            codes = codes.fill_null(0)
        return np.asarray(codes.cast(pa.int64())), mask


class _TableIndex:
    """Key tuple → the rows of the table holding it."""

    def __init__(self, side: Side, types: list[pa.DataType], table: pa.Table) -> None:
        self.side = side
        self.types = types
        self.table = table
        cols = side.key_columns(table, types)
        self.values = [_Positions(c) for c in cols]
        self.levels = [Int64Map() for _ in cols[1:]]
        ids, valid = self._ids(cols, add=True)
        rows = np.flatnonzero(valid)
        ids = ids[rows]
        order = np.argsort(ids, kind="stable")
        self.rows = rows[order]
        counts = np.bincount(ids, minlength=self._n_ids())
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        #: No key has two rows (a dimension table's primary key): a probe is a gather.
        self.unique = bool(len(counts) == 0 or counts.max() <= 1)

    def _n_ids(self) -> int:
        return self.levels[-1].n if self.levels else self.values[0].n

    def _ids(self, cols: list[pa.Array], add: bool) -> tuple[np.ndarray, np.ndarray]:
        """(id per row, known mask); ids are -1 / arbitrary where not known."""
        n = len(cols[0])
        ids = np.zeros(n, np.int64)
        known = np.ones(n, np.bool_)
        for j, (col, values) in enumerate(zip(cols, self.values)):
            c, found = values.of(col)
            if found is not None:
                known &= found
            if j == 0:
                ids = c
                continue
            packed = (ids << 32) | c
            level = self.levels[j - 1]
            if add:
                sel = np.flatnonzero(known)
                ids = np.full(n, -1, np.int64)
                ids[sel], _ = level.get_or_add(packed[sel])
            else:
                ids = level.get(packed)
                known &= ids >= 0
        return ids, known

    def probe(self, cols: list[pa.Array]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query row, table row) pairs, and the mask of query rows with a partner. Pairs
        come in query-row order; with :attr:`unique` keys, one per matched query row."""
        ids, known = self._ids(cols, add=False)
        if len(self.offsets) <= 1:
            none = np.zeros(0, np.int64)
            return none, none, np.zeros(len(ids), np.bool_)
        every = bool(known.all())
        if not every:
            ids = np.where(known, ids, 0)
        a = self.offsets[ids]
        b = self.offsets[ids + 1]  # ids < the number of ids: offsets has one more
        if not every:
            b = np.where(known, b, a)
        if self.unique:
            matched = b > a
            qi = np.flatnonzero(matched)
            return qi, self.rows[a[qi]], matched
        qi, pos = expand(a, b)
        return qi, self.rows[pos], b > a


@register("lookup_join")
class LookupJoin(TableFirst, TwoSidedJoin):
    """``stream [LEFT] JOIN dimension_table ON stream.k = table.k``."""

    KIND = "lookup_join"
    STATE_VERSION = 2
    REREAD_PORTS = (1,)
    WHAT = "a lookup join"
    TIMED = False

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        if not self._left.keys:
            raise PlanError(f"{name}: a lookup join needs at least one equality key")
        limit = config.get("state_limit_rows")
        self._limit: int | None = None if limit is None else int(limit)
        self._types = common_key_types(self._left.key_types, self._right.key_types)
        self._loaded = False
        self._buffer: list[pa.Table] = []  # stream batches waiting for the table
        self._buffered = 0
        self._parts: list[pa.Table] = []  # the table, as read
        self._index: _TableIndex | None = None

    def _table(self) -> pa.Table:
        if not self._parts:
            return self._right.schema.empty_table()
        if len(self._parts) > 1:
            self._parts = [pa.concat_tables(self._parts).combine_chunks()]
        return self._parts[0]

    def _build(self) -> None:
        self._loaded = True
        self._index = _TableIndex(self._right, self._types, self._table())

    def _probe(self, table: pa.Table) -> list[pa.RecordBatch]:
        assert self._index is not None
        idx = self._index
        out = []
        cols = self._left.key_columns(table, self._types)
        qi, rows, matched = idx.probe(cols)
        if len(qi):
            # every stream row matched once: the stream's columns pass as they are
            every = idx.unique and len(qi) == table.num_rows
            left = None if every else qi
            out.append(
                assemble(self._schema, self._left, table, left, self._right, idx.table, rows)
            )
        if self._kind == "left" and not matched.all():
            miss = np.flatnonzero(~matched)
            out.append(assemble(self._schema, self._left, table, miss, self._right, None))
        return out

    def _flush(self) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        for table in self._buffer:
            out += self._probe(table)
        self._buffer = []
        self._buffered = 0
        return out

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        if port == 1:
            self._parts.append(self._right.project(batch))
            if self._loaded:  # the table grew after its end: rebuild on the next probe
                self._build()
            return []
        table = self._left.project(batch)
        if not self._loaded:
            self._buffer.append(table)
            self._buffered += table.num_rows
            check_limit(
                self.name,
                "left",
                self._buffered,
                self._limit,
                "stream rows are buffered until the lookup table has been read to its end; "
                "raise the limit or make the table smaller",
            )
            return []
        return self._probe(table)

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        if port == 1 and watermark >= END_OF_TIME and not self._loaded:
            self._build()
            return self._flush()
        return []

    def on_close(self) -> list[pa.RecordBatch]:
        if not self._loaded:
            self._build()
        return self._flush()

    # -- checkpoints and status -------------------------------------------------------
    def snapshot(self) -> bytes | None:
        buffered = (
            pa.concat_tables(self._buffer) if self._buffer else self._left.schema.empty_table()
        )
        return encode_state(self.KIND, self.STATE_VERSION, {}, {"buffer": buffered})

    def restore(self, data: bytes) -> None:
        _, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        buffered = tables["buffer"].cast(self._left.schema)
        self._buffer = [buffered] if buffered.num_rows else []
        self._buffered = buffered.num_rows
        # The table is read again from its start: every stream row waits for its end.
        self._parts = []
        self._loaded = False
        self._index = None
