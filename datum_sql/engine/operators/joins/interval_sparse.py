"""Interval join beside a sparse input (kind ``sparse_interval_join``).

The planner chooses this operator over ``interval_join``, and names the sparse input in
``sparse_side``, when one input has at most one row per step of its time
column, and so a row of the other input meets a few of its rows by time alone — a
windowed aggregate without GROUP BY keys (one row per window) joined back to the rows it
aggregates (Nexmark q7). Then no key index and no sorted state pays off: each input's
rows are held **as they arrived**, one chunk per batch (its table, times, latest partner
time ``hi`` and int64 key values beside it), and a probe searches each held chunk by
time (the chunk's times sorted once, when they did not arrive in order) and compares the
keys on the pairs found. Holding a batch costs no copy of the rows held before it, and a
watermark drops whole chunks.

The pairs, the rules of emission and of state are those of
:class:`~datum_sql.engine.operators.joins.interval.IntervalJoin` with constant bounds:
a pair matches when the keys are equal and ``r.ts + lower_us <= l.ts <= r.ts +
upper_us``; it is emitted once, when its second row arrives; a left row is held until the
right watermark passes ``l.ts - lower_us`` (LEFT: then emitted with NULL right columns if
nothing matched it), a right row until the left watermark passes ``r.ts + upper_us``.
A held row past its limit can no longer match by time, so a chunk is dropped once all
its rows are past it. Keys must compare as int64 (:func:`~datum_sql.engine.state.keys.int64_exact`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.eventtime import event_micros_masked
from datum_sql.engine.operators.base import register
from datum_sql.engine.operators.joins.common import (
    Side,
    TwoSidedJoin,
    assemble,
    check_limit,
    common_key_types,
    expand,
    keep_residual,
)
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import int64_exact
from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME, START_OF_TIME


class _Chunk:
    """Rows of one side that arrived together: their table, times, latest partner time
    (``hi``), key values as int64, the times in sorted order (``order`` None: they
    arrived sorted) and, for the left side of a LEFT join, whether each row matched."""

    __slots__ = ("_sorted_kv", "hi", "kv", "matched", "max_hi", "order", "sorted_ts", "table", "ts")

    def __init__(
        self,
        table: pa.Table,
        ts: np.ndarray,
        hi: np.ndarray,
        kv: list[np.ndarray],
        matched: np.ndarray | None,
    ) -> None:
        self.table, self.ts, self.hi, self.kv, self.matched = table, ts, hi, kv, matched
        rising = len(ts) < 2 or bool((ts[1:] >= ts[:-1]).all())
        self.order = None if rising else np.argsort(ts, kind="stable")
        self.sorted_ts = ts if self.order is None else ts[self.order]
        self.max_hi = int(hi.max())
        self._sorted_kv: list[np.ndarray] | None = None

    def sorted_kv(self) -> list[np.ndarray]:
        """The key values in the order of ``sorted_ts``."""
        if self._sorted_kv is None:
            self._sorted_kv = self.kv if self.order is None else [k[self.order] for k in self.kv]
        return self._sorted_kv

    def __len__(self) -> int:
        return len(self.ts)


@register("sparse_interval_join")
class SparseIntervalJoin(TwoSidedJoin):
    """``l [LEFT] JOIN r ON l.k = r.k AND l.ts BETWEEN r.ts + lower AND r.ts + upper``
    where one side has few rows per unit of time: rows held as they arrived."""

    CLOSES_ON_WATERMARK = True
    KIND = "sparse_interval_join"
    STATE_VERSION = 1
    WHAT = "an interval join"
    TIMED = True
    #: a chunk of fewer rows than this takes the next batch's rows in (a sparse side
    #: arrives a few rows at a time: it stays one chunk, not one per row)
    MERGE_ROWS = 4096

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        if config.get("sparse_side") not in ("left", "right"):
            raise PlanError(f"{name}: sparse_side must be 'left' or 'right'")
        lower, upper = config.get("lower_us"), config.get("upper_us")
        if config.get("end_side") is not None or lower is None or upper is None:
            raise PlanError(f"{name}: an interval join beside a sparse side needs both bounds")
        self._lower, self._upper = int(lower), int(upper)
        if self._lower > self._upper:
            raise PlanError(f"{name}: an interval join beside a sparse side needs lower <= upper")
        self._types = common_key_types(self._left.key_types, self._right.key_types)
        if not all(int64_exact(t) for t in self._types):
            raise PlanError(
                f"{name}: an interval join beside a sparse side compares keys as int64; "
                f"its key types are {[str(t) for t in self._types]}"
            )
        self._residual = config.get("residual")
        limit = config.get("state_limit_rows")
        self._limit: int | None = None if limit is None else int(limit)
        self._lwm = START_OF_TIME
        self._rwm = START_OF_TIME
        #: per port, the chunks held, in arrival order
        self._held: tuple[list[_Chunk], list[_Chunk]] = ([], [])

    # -- pieces -----------------------------------------------------------------------
    def _prepare(
        self, side: Side, table: pa.Table
    ) -> tuple[np.ndarray | None, pa.Table, np.ndarray, list[np.ndarray]]:
        """(valid mask or None, valid rows, their times, their key values as int64): a row
        is valid when no key and not its time is NULL."""
        cols = side.key_columns(table, self._types)
        ts, ok = event_micros_masked(table.column(side.time), side.time_scale)
        valid: np.ndarray | None = None if ok.all() else ok
        for col in cols:
            if col.null_count:
                v = np.asarray(col.is_valid())
                valid = v if valid is None else valid & v
        kv = [_int64(c) for c in cols]
        if valid is not None:
            table = table.filter(pa.array(valid))
            ts, kv = ts[valid], [k[valid] for k in kv]
        return valid, table, np.ascontiguousarray(ts, dtype=np.int64), kv

    def _probe(
        self, port: int, lo: np.ndarray, hi: np.ndarray, kv: list[np.ndarray]
    ) -> list[tuple[_Chunk, np.ndarray, np.ndarray]]:
        """Per held chunk of the other side: (chunk, query rows, chunk rows) of the pairs
        with equal keys and ``lo <= chunk ts <= hi``."""
        out: list[tuple[_Chunk, np.ndarray, np.ndarray]] = []
        if not len(lo):
            return out
        first, last = int(lo.min()), int(hi.max())
        for chunk in self._held[1 - port]:
            if chunk.sorted_ts[-1] < first or chunk.sorted_ts[0] > last:
                continue
            a = np.searchsorted(chunk.sorted_ts, lo, "left")
            b = np.searchsorted(chunk.sorted_ts, hi, "right")
            span = int(np.maximum(b - a, 0).sum())
            if not span:
                continue
            found = _keys_first(chunk, a, b, kv, span) if kv else None
            if found is None:
                found = _times_first(chunk, a, b, kv)
            qi, at = found
            if len(qi):
                out.append((chunk, qi, at if chunk.order is None else chunk.order[at]))
        return out

    def _hold(
        self,
        port: int,
        table: pa.Table,
        ts: np.ndarray,
        hi: np.ndarray,
        kv: list[np.ndarray],
        matched: np.ndarray | None,
    ) -> None:
        """Hold the rows a later row of the other side can still match (``hi`` at or
        past its watermark)."""
        mark = self._rwm if port == 0 else self._lwm
        if mark >= END_OF_TIME:
            return
        keep = hi >= mark
        if not keep.any():
            return
        if not keep.all():
            table = table.filter(pa.array(keep))
            ts, hi, kv = ts[keep], hi[keep], [k[keep] for k in kv]
            matched = None if matched is None else matched[keep]
        chunks = self._held[port]
        if chunks and len(chunks[-1]) + len(ts) <= self.MERGE_ROWS:
            last = chunks.pop()
            table = pa.concat_tables([last.table, table]).combine_chunks()
            ts, hi = np.concatenate([last.ts, ts]), np.concatenate([last.hi, hi])
            kv = [np.concatenate([a, b]) for a, b in zip(last.kv, kv)]
            if matched is not None:
                assert last.matched is not None
                matched = np.concatenate([last.matched, matched])
        chunks.append(_Chunk(table, ts, hi, kv, matched))

    def _rows_held(self, port: int) -> int:
        """The rows of ``port`` a later row of the other side can still match."""
        mark = self._rwm if port == 0 else self._lwm
        return sum(int(np.count_nonzero(c.hi >= mark)) for c in self._held[port])

    def _check(self) -> None:
        if self._limit is None:
            return
        for port, side in ((0, "left"), (1, "right")):
            check_limit(
                self.name,
                side,
                self._rows_held(port),
                self._limit,
                f"{side} rows are held until the other input's watermark passes the latest "
                "time they can match; raise the limit, narrow the interval or reduce the "
                "watermark delay",
            )

    def _null_right(self, table: pa.Table, rows: np.ndarray | None) -> pa.RecordBatch:
        return assemble(self._schema, self._left, table, rows, self._right, None)

    # -- hooks ------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        out = self._left_batch(batch) if port == 0 else self._right_batch(batch)
        self._check()
        return out

    def _left_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        whole = self._left.project(batch)
        valid, table, ts, kv = self._prepare(self._left, whole)
        if valid is not None and self._kind == "left":
            out.append(self._null_right(whole.filter(pa.array(~valid)), None))
        if not len(ts):
            return out
        # partners: right rows with l.ts - upper <= r.ts <= l.ts - lower
        lo, hi = ts - self._upper, ts - self._lower
        matched = np.zeros(len(ts), np.bool_)
        for chunk, qi, rows in self._probe(0, lo, hi, kv):
            pairs = assemble(self._schema, self._left, table, qi, self._right, chunk.table, rows)
            matched[keep_residual(pairs, self._residual, qi, out)] = True
        left = self._kind == "left"
        self._hold(0, table, ts, hi, kv, matched if left else None)
        if left:
            done = ~matched & (hi < self._rwm) if self._rwm < END_OF_TIME else ~matched
            if done.any():
                out.append(self._null_right(table, np.flatnonzero(done)))
        return out

    def _right_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        _, table, ts, kv = self._prepare(self._right, self._right.project(batch))
        if not len(ts):
            return out
        # partners: left rows with r.ts + lower <= l.ts <= r.ts + upper
        lo, hi = ts + self._lower, ts + self._upper
        for chunk, qi, rows in self._probe(1, lo, hi, kv):
            pairs = assemble(self._schema, self._left, chunk.table, rows, self._right, table, qi)
            kept = keep_residual(pairs, self._residual, rows, out)
            if chunk.matched is not None:
                chunk.matched[kept] = True
        self._hold(1, table, ts, hi, kv, None)
        return out

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        mark = self.usable_watermark(watermark, port)
        if mark is None:
            return []
        if port == 0:
            self._lwm = max(self._lwm, mark)
            self._drop(1, self._lwm)
            return []
        before, self._rwm = self._rwm, max(self._rwm, mark)
        out = self._close_left(before, self._rwm)
        self._drop(0, self._rwm)
        return out

    def _drop(self, port: int, mark: int) -> None:
        """Drop the chunks of ``port`` whose every row is past ``mark``."""
        chunks = self._held[port]
        if mark >= END_OF_TIME:
            chunks.clear()
        elif any(c.max_hi < mark for c in chunks):
            chunks[:] = [c for c in chunks if c.max_hi >= mark]

    def _close_left(self, before: int, mark: int) -> list[pa.RecordBatch]:
        """LEFT: the held left rows no right row can match any more (``hi`` in
        ``[before, mark)``) that matched nothing, with NULL right columns."""
        if self._kind != "left" or mark <= before:
            return []
        out = []
        for chunk in self._held[0]:
            assert chunk.matched is not None
            closing = ~chunk.matched & (chunk.hi >= before)
            if mark < END_OF_TIME:
                closing &= chunk.hi < mark
            if closing.any():
                out.append(self._null_right(chunk.table, np.flatnonzero(closing)))
        return out

    def on_close(self) -> list[pa.RecordBatch]:
        before = self._rwm
        self._rwm = self._lwm = END_OF_TIME
        out = self._close_left(before, END_OF_TIME)
        self._held[0].clear()
        self._held[1].clear()
        return out

    # -- checkpoints and status -------------------------------------------------------
    def _live(self, port: int) -> tuple[pa.Table, np.ndarray]:
        """``port``'s rows a later row of the other side can still match, and whether each
        matched (all False where not tracked)."""
        side = self._left if port == 0 else self._right
        mark = self._rwm if port == 0 else self._lwm
        tables, matched = [], []
        for c in self._held[port]:
            keep = c.hi >= mark
            tables.append(c.table.filter(pa.array(keep)))
            matched.append(
                np.zeros(int(keep.sum()), np.bool_) if c.matched is None else c.matched[keep]
            )
        if not tables:
            return side.schema.empty_table(), np.empty(0, np.bool_)
        return pa.concat_tables(tables).combine_chunks(), np.concatenate(matched)

    def snapshot(self) -> bytes | None:
        left, matched = self._live(0)
        right, _ = self._live(1)
        meta = {"left_watermark": self._lwm, "right_watermark": self._rwm}
        tables = {
            "left": left,
            "left_matched": pa.table({"matched": pa.array(matched, pa.bool_())}),
            "right": right,
        }
        return encode_state(self.KIND, self.STATE_VERSION, meta, tables)

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        self._lwm = int(meta["left_watermark"])
        self._rwm = int(meta["right_watermark"])
        self._held = ([], [])
        matched = tables["left_matched"].column("matched").to_numpy(zero_copy_only=False)
        for port, side in ((0, self._left), (1, self._right)):
            table = tables["left" if port == 0 else "right"].cast(side.schema)
            if not table.num_rows:
                continue
            _, table, ts, kv = self._prepare(side, table)
            hi = ts - self._lower if port == 0 else ts + self._upper
            flags = np.asarray(matched, np.bool_) if port == 0 and self._kind == "left" else None
            self._held[port].append(_Chunk(table, ts, hi, kv, flags))

    def state_size(self) -> tuple[int, int]:
        chunks = [*self._held[0], *self._held[1]]
        rows = sum(len(c) for c in chunks)
        nbytes = sum(c.table.nbytes + c.ts.nbytes * (2 + len(c.kv)) for c in chunks)
        return rows, int(nbytes)

    def describe(self) -> dict[str, Any]:
        return {
            "left_rows_held": sum(len(c) for c in self._held[0]),
            "right_rows_held": sum(len(c) for c in self._held[1]),
            "left_watermark": self.format_mark(self._lwm),
            "right_watermark": self.format_mark(self._rwm),
            "held_by": "arrival",
            "sparse_side": self.config["sparse_side"],
        }


#: a probe looks for its keys first while its queries are at most this many per held
#: row their times meet (few rows of a sparse side against a chunk of the other)
_KEYS_FIRST = 1 / 64


def _times_first(
    chunk: _Chunk, a: np.ndarray, b: np.ndarray, kv: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (query, sorted position) of the positions ``a[q] <= p < b[q]`` with equal
    keys: every pair in time range, then the keys compared on them."""
    qi, at = expand(a, b)
    if kv and len(qi):
        held = chunk.sorted_kv()
        ok = kv[0][qi] == held[0][at]
        for q, h in zip(kv[1:], held[1:]):
            ok &= q[qi] == h[at]
        qi, at = qi[ok], at[ok]
    return qi, at


def _keys_first(
    chunk: _Chunk, a: np.ndarray, b: np.ndarray, kv: list[np.ndarray], span: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The pairs of :func:`_times_first` for a few queries meeting many held rows: the
    held rows in the queries' time ranges whose first key is one of theirs, then a
    (rows x queries) comparison. None when the queries are not few beside the rows."""
    if len(a) > _KEYS_FIRST * span:
        return None
    start, stop = int(a.min()), int(b.max())
    held = chunk.sorted_kv()
    keys = np.unique(kv[0])
    within = held[0][start:stop]
    at = start + np.flatnonzero(within == keys[0] if len(keys) == 1 else np.isin(within, keys))
    if len(at) * len(a) > span:
        return None
    hit = (at[:, None] >= a[None, :]) & (at[:, None] < b[None, :])
    for q, h in zip(kv, held):
        hit &= h[at][:, None] == q[None, :]
    pos, qi = np.nonzero(hit)
    return qi, at[pos]


def _int64(col: pa.Array) -> np.ndarray:
    """An int64 numpy view of a key column (a type :func:`int64_exact` accepts); NULL
    slots hold any value (their rows are dropped)."""
    if pa.types.is_integer(col.type):
        col = col.cast(pa.int64())
    else:
        col = col.view(pa.int64() if col.type.bit_width == 64 else pa.int32()).cast(pa.int64())
    if col.null_count:
        col = col.fill_null(0)
    return np.asarray(col.to_numpy(zero_copy_only=False), np.int64)
