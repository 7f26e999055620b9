"""Exact, vectorized maps from group keys to dense slot numbers.

:class:`Coder` maps the values of one column to dense int64 codes (NULL gets a code of its
own, as SQL ``GROUP BY`` puts NULLs in one group). Fixed-width values are compared by
their bits (floats canonicalised: ``-0.0`` = ``0.0``, one NaN) through a sorted numpy
array and binary search; other types (strings, decimals, ...) are dictionary-encoded by
Arrow and only each batch's *distinct* values touch a Python dict.

:class:`KeyIndex` maps a tuple of key columns to slots: the codes of the first column,
then one :class:`Int64Map` per further column on ``(id so far << 32) | code``, and a final
array from the last id to the slot. Slots are handed out in order of first appearance and
can be compacted (dropping purged groups); the index keeps the key values of every slot.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.arrays import one_array
from datum_sql.engine.state.slots import from_numpy, numpy_dtype, to_numpy

_CODE_LIMIT = 2**31 - 1


#: from this many queries on, binary searches run over the queries sorted
_SORT_QUERIES = 1024


class Int64Map:
    """int64 → dense id, exact; new keys get ids in order of first appearance.

    While the keys span a small range (at most 4x their count, or 65536), a
    direct-address array answers lookups in O(1) — the common case of integer ids and
    window numbers — and new keys are told apart by direct addressing too. Past that, the
    keys are held sorted (binary search), and one sort of a batch's queries serves
    both the lookup and telling its new keys apart. The sorted keys are two runs: a large
    one, and a small one that takes the new keys and is merged into the large one once it
    outgrows an eighth of it, so adding a batch's keys moves memory in proportion to the
    small run, not to every key (a merge, in proportion to every key, comes only after the
    keys grew by an eighth).
    """

    _DENSE_MIN = 1 << 16
    _RUN_MIN = 4096

    def __init__(self) -> None:
        self._by_id = np.empty(16, np.int64)  # key of each id, ids 0..n-1
        self.n = 0
        self._min = self._max = 0
        self._lo = 0
        self._dense: np.ndarray | None = np.full(0, -1, np.int64)  # None: sparse
        #: sparse: (sorted keys, their ids), the large run then the small one
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []

    @property
    def nbytes(self) -> int:
        dense = 0 if self._dense is None else self._dense.nbytes
        runs = sum(k.nbytes + i.nbytes for k, i in self._runs)
        return int(self._by_id.nbytes + dense + runs)

    def _lookup(self, xs: np.ndarray, out: np.ndarray, rows: np.ndarray | None) -> None:
        """``out[rows] = `` the ids of ``xs`` found in the runs (``rows`` None: in place)."""
        for keys, ids in self._runs:
            if len(keys) == 0:
                continue
            pos = np.searchsorted(keys, xs)
            np.minimum(pos, len(keys) - 1, out=pos)
            found = keys[pos] == xs
            out[found if rows is None else rows[found]] = ids[pos[found]]

    def get(self, x: np.ndarray) -> np.ndarray:
        """Ids of ``x`` (-1 where unknown)."""
        if self.n == 0 or len(x) == 0:
            return np.full(len(x), -1, np.int64)
        d = self._dense
        if d is not None:
            lo, hi = self._lo, self._lo + len(d) - 1
            xmin, xmax = int(x.min()), int(x.max())
            if lo <= xmin and xmax <= hi:
                return d[x - lo]
            inside = (x >= lo) & (x <= hi)
            out = np.full(len(x), -1, np.int64)
            out[inside] = d[x[inside] - lo]
            return out
        out = np.full(len(x), -1, np.int64)
        if len(x) < _SORT_QUERIES:
            self._lookup(x, out, None)
        else:
            order = np.argsort(x)
            self._lookup(x[order], out, order)
        return out

    def get_or_add(
        self, x: np.ndarray, fresh: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids of ``x``, positions in ``x`` of the first appearance of each new id).

        ``fresh`` marks rows the caller knows to hold a key that is not in the map and on
        no other row: they are not looked up, and get the new ids after the other rows'."""
        if fresh is not None and fresh.any():
            return self._fresh_get_or_add(x, fresh)
        if self._dense is None and len(x) >= _SORT_QUERIES:
            if x[0] == x.min() == x.max():  # one key (a window bound in a batch): one lookup
                found, first = self.get_or_add(x[:1])
                return np.full(len(x), found[0], np.int64), first
            return self._sorted_get_or_add(x)
        out = self.get(x)
        missing = np.flatnonzero(out < 0)
        if len(missing) == 0:
            return out, missing
        mx = x[missing]
        lo, hi = int(mx.min()), int(mx.max())
        if hi - lo <= 4 * len(mx) + self._DENSE_MIN:
            uniq, inverse, first = dense_unique(mx - lo, hi - lo + 1)
            uniq = uniq + lo
            sorting = None
        else:
            order = np.argsort(mx)
            uniq, by_rank, first, sorting = _runs_by_first(mx[order], order, len(mx))
            inverse = np.empty(len(mx), np.int64)
            inverse[order] = by_rank
        new_ids = self._add(uniq, sorting)
        out[missing] = new_ids[inverse]
        return out, missing[first]

    def _fresh_get_or_add(self, x: np.ndarray, fresh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = np.empty(len(x), np.int64)
        rest = np.flatnonzero(~fresh)
        firsts = []
        if len(rest):
            out[rest], first = self.get_or_add(x[rest])
            firsts.append(rest[first])
        rows = np.flatnonzero(fresh)
        out[rows] = self._add(x[rows])
        firsts.append(rows)
        return out, np.concatenate(firsts) if len(firsts) > 1 else rows

    def _sorted_get_or_add(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sparse keys, many queries: one sort of ``x`` orders the binary searches (sorted
        queries stay in cache) and groups the new keys, numbered by first appearance."""
        order = np.argsort(x)
        xs = x[order]
        out = np.full(len(x), -1, np.int64)
        self._lookup(xs, out, order)
        new = out[order] < 0
        if not new.any():
            return out, np.empty(0, np.int64)
        rows = order[new]  # the rows of new keys, sorted by key
        uniq, inverse, first, sorting = _runs_by_first(xs[new], rows, len(x))
        new_ids = self._add(uniq, sorting)
        out[rows] = new_ids[inverse]
        return out, first

    def _add(self, uniq: np.ndarray, sorting: np.ndarray | None = None) -> np.ndarray:
        """Give the distinct new keys ``uniq`` the next ids, in order; returns the ids.
        ``sorting``, when known, orders ``uniq`` by key (``uniq[sorting]`` is sorted)."""
        start, self.n = self.n, self.n + len(uniq)
        if self.n > len(self._by_id):
            grown = np.empty(max(self.n, 2 * len(self._by_id)), np.int64)
            grown[:start] = self._by_id[:start]
            self._by_id = grown
        self._by_id[start : self.n] = uniq
        new_ids = np.arange(start, self.n, dtype=np.int64)
        lo, hi = int(uniq.min()), int(uniq.max())
        if start:
            lo, hi = min(lo, self._min), max(hi, self._max)
        self._min, self._max = lo, hi
        if self._dense is not None and hi - lo + 1 <= max(self._DENSE_MIN, 4 * self.n):
            self._update_dense(uniq, new_ids)
            return new_ids
        if self._dense is not None:  # sparse from now on: every key is held sorted
            self._dense = None
            by_id = self._by_id[: self.n]
            order = np.argsort(by_id)
            self._runs = [(by_id[order], order.astype(np.int64))]
            return new_ids
        if sorting is None and not (uniq[1:] > uniq[:-1]).all():
            sorting = np.argsort(uniq)
        new = (uniq, new_ids) if sorting is None else (uniq[sorting], new_ids[sorting])
        big = self._runs[0]
        small = _merge_runs(self._runs[1], new) if len(self._runs) > 1 else new
        if len(small[0]) > max(self._RUN_MIN, len(big[0]) // 8):
            big, small = _merge_runs(big, small), (new[0][:0], new[1][:0])
        self._runs = [big, small]
        return new_ids

    def _update_dense(self, uniq: np.ndarray, new_ids: np.ndarray) -> None:
        lo, hi = self._min, self._max
        d = self._dense
        if d is not None and len(d) and lo >= self._lo and hi < self._lo + len(d):
            d[uniq - self._lo] = new_ids
            return
        # (re)allocate with head room on both sides, then fill from every key
        span = hi - lo + 1
        pad = span // 2 + 16
        new_lo = max(lo - pad, -(2**63))
        size = min(span + 2 * pad, 2**63 - new_lo)  # new_lo .. int64 max at most
        d = np.full(size, -1, np.int64)
        d[self._by_id[: self.n] - new_lo] = np.arange(self.n, dtype=np.int64)
        self._lo, self._dense = new_lo, d


def _fresh_once(ids: np.ndarray, before: int, after: int) -> np.ndarray | None:
    """Rows whose id is new (``before`` <= id < ``after``) and on no other row; None when
    no id is new."""
    if after == before:
        return None
    new = ids >= before
    fresh = ids[new]
    if _increasing(fresh):  # each new id on one row (a key per row): nothing to count
        return new
    count = np.bincount(fresh - before, minlength=after - before)
    if (count == 1).all():
        return new
    once = new.copy()
    once[new] = count[ids[new] - before] == 1
    return once


def _merge_runs(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted runs of distinct keys (and their ids) as one: ``b`` goes where a binary
    search of ``a`` puts it, ``a`` fills the rest (one pass, no sort)."""
    n, m = len(a[0]), len(b[0])
    at = np.searchsorted(a[0], b[0]) + np.arange(m, dtype=np.int64)
    rest = np.ones(n + m, np.bool_)
    rest[at] = False
    keys, ids = np.empty(n + m, np.int64), np.empty(n + m, np.int64)
    keys[at], ids[at] = b
    keys[rest], ids[rest] = a
    return keys, ids


def _runs_by_first(
    xs: np.ndarray, rows: np.ndarray, n_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Distinct values of sorted ``xs`` (``rows``: the row of each, distinct, below
    ``n_rows``) in order of first appearance: (values, inverse into ``xs``, first row of
    each value, the order that sorts the values back)."""
    head = np.empty(len(xs), np.bool_)
    head[:1] = True
    np.not_equal(xs[1:], xs[:-1], out=head[1:])
    starts = np.flatnonzero(head)
    first = np.minimum.reduceat(rows, starts) if len(starts) < len(xs) else rows
    k = len(starts)
    if 8 * k >= n_rows:  # many values: rank their first rows by a pass over the rows
        mark = np.zeros(n_rows, np.bool_)
        mark[first] = True
        rank = (np.cumsum(mark) - 1)[first]
        by_first = np.empty(k, np.int64)
        by_first[rank] = np.arange(k, dtype=np.int64)
    else:
        by_first = np.argsort(first)
        rank = np.empty(k, np.int64)
        rank[by_first] = np.arange(k, dtype=np.int64)
    inverse = rank[np.cumsum(head) - 1] if k < len(xs) else rank
    return xs[starts[by_first]], inverse, first[by_first], rank


def _increasing(x: np.ndarray) -> bool:
    """Whether ``x`` (ints) is strictly increasing; a repeat within the span of its ends
    (window numbers, a few groups) is told in O(1)."""
    n = len(x)
    if n < 2:
        return n == 1
    return int(x[-1]) - int(x[0]) >= n - 1 and bool((x[1:] > x[:-1]).all())


def dense_unique(x: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct values of ``x`` (ints in [0, bound)) in order of first appearance:
    (values, inverse, index of each value's first appearance). O(len(x) + bound), no sort,
    while ``bound`` is small beside ``len(x)``; past that, one sort of ``x``."""
    n = len(x)
    if _increasing(x):  # distinct already, in order (new ids, new slots): nothing to count
        rows = np.arange(n, dtype=np.int64)
        return x, rows, rows
    if bound > 8 * n + 65536:
        order = np.argsort(x)
        values, by_rank, heads, _ = _runs_by_first(x[order], order, n)
        inverse = np.empty(n, np.int64)
        inverse[order] = by_rank
        return values, inverse, heads
    first = np.full(bound, n, np.int64)
    rows = np.arange(n, dtype=np.int64)
    np.minimum.at(first, x, rows)
    # a row is its value's head when it is that value's first row: heads come in row
    # order, which is the order of first appearance (no sort)
    heads = np.flatnonzero(first[x] == rows)
    values = x[heads]
    rank = np.empty(bound, np.int64)
    rank[values] = np.arange(len(values), dtype=np.int64)
    return values, rank[x], heads


def int64_exact(t: pa.DataType) -> bool:
    """Whether values of type ``t`` compare equal exactly when their int64 views do."""
    if pa.types.is_integer(t):
        return t != pa.uint64()
    return (
        pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_duration(t)
    )


def direct_groups(
    columns: list[pa.Array], n: int, compact: bool = True
) -> tuple[np.ndarray, int, list[pa.Array], np.ndarray, np.ndarray | None] | None:
    """Batch-local grouping by direct addressing, for integer-like key columns whose
    values span a small range (ids, window numbers): (group id per row, group count,
    key columns per present group, row count per group, the present groups). Groups are
    numbered in key order; NULL is a key of its own.

    ``compact``: the ids of the present groups are dense (the last item is None). Without
    it, a row's id is its code in the key space (no pass over the rows to renumber them):
    the counts cover every code, and the caller keeps the present ones (the last item).
    None when a column is not integer-like or the key space is too sparse."""
    if n == 0 or not columns:
        return None
    limit = max(8 * n, 1 << 16)
    codes = np.empty(0, np.int64)  # set by the first column
    bound = 1
    specs = []
    for col in columns:
        if not int64_exact(col.type):
            return None
        v, ok = to_numpy(col)
        v = v.astype(np.int64, copy=False)
        all_ok = col.null_count == 0
        valid_v = v if all_ok else v[ok]
        lo, hi = (int(valid_v.min()), int(valid_v.max())) if len(valid_v) else (0, -1)
        span = hi - lo + 1
        card = span + (0 if all_ok else 1)
        if bound * card > limit:
            return None
        with np.errstate(over="ignore"):
            c = v - lo if all_ok else np.where(ok, v - lo, span)
        codes = c if bound == 1 else codes * card + c
        bound *= card
        specs.append((lo, span, card, all_ok, col.type))
    kept = None
    if bound == 1:  # one group (a batch within one window): nothing to count
        uniq, gid = np.zeros(1, np.int64), np.zeros(n, np.int64)
        sizes = np.full(1, n, np.int64)
    else:
        counts = np.bincount(codes, minlength=bound)
        present = counts > 0
        uniq = np.flatnonzero(present)
        if compact:  # renumber by scatter and gather (a cumsum over the bins is slower)
            renumber = np.empty(bound, np.int64)
            renumber[uniq] = np.arange(len(uniq), dtype=np.int64)
            gid, sizes = renumber[codes], counts[uniq]
        else:
            gid, sizes = codes, counts
            kept = None if len(uniq) == bound else uniq
    keys: list[pa.Array] = []
    rest = uniq
    for lo, span, card, all_ok, t in reversed(specs):
        part, rest = rest % card, rest // card
        with np.errstate(over="ignore"):
            values = (part + lo).astype(numpy_dtype(t))
        keys.append(from_numpy(values, None if all_ok else part != span, t))
    keys.reverse()
    n_groups = len(uniq) if compact else bound
    return gid, n_groups, keys, sizes.astype(np.int64, copy=False), kept


def local_ids(columns: list[pa.Array]) -> tuple[np.ndarray, int]:
    """Dense ids (first-appearance order) of the distinct rows of ``columns`` — a
    batch-local grouping by Arrow hashing, NULL = NULL; ``(zeros, 1)`` for no columns."""
    n = len(columns[0]) if columns else 0
    if not columns:
        return np.zeros(n, np.int64), min(n, 1)
    ids: np.ndarray | None = None
    card = 1
    for col in columns:
        try:
            enc = pc.dictionary_encode(col, null_encoding="encode")
            codes = np.asarray(enc.indices.cast(pa.int64()))
            k = len(enc.dictionary)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            codes = Coder(col.type).codes(col)
            k = int(codes.max()) + 1 if n else 0
        if ids is None:
            ids, card = codes, k
            continue
        packed = ids * k + codes
        if card * k <= 4 * n + 65536:
            uniq, ids, _ = dense_unique(packed, card * k)
        else:
            uniq, inverse = np.unique(packed, return_inverse=True)
            ids = inverse.reshape(-1)
        card = len(uniq)
    assert ids is not None
    uniq, ids, _ = dense_unique(ids, card)  # renumber in first-appearance order
    return ids, len(uniq)


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return ("__list", *(_hashable(x) for x in v))
    if isinstance(v, dict):
        return ("__struct", *((k, _hashable(x)) for k, x in v.items()))
    return v


class Coder:
    """Values of one Arrow type → dense int64 codes (NULL included), exact."""

    def __init__(self, type: pa.DataType) -> None:
        self.type = type
        self.numeric = numpy_dtype(type) is not None
        self.n = 0
        self.null_code = -1
        self._map = Int64Map()
        self._id_code = np.empty(0, np.int64)
        self._dict: dict[Any, int] = {}

    def _bits(self, arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        values, valid = to_numpy(arr)
        if values.dtype.kind == "f":
            v = values.astype(np.float64) + 0.0  # -0.0 -> 0.0
            v[np.isnan(v)] = np.nan
            return v.view(np.int64), valid
        return values.astype(np.int64, copy=False), valid

    def encode(self, arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """(codes, rows of ``arr`` where each new code first appeared, in code order)."""
        codes, new_rows = self._encode(arr)
        allnew = np.concatenate(new_rows) if new_rows else np.empty(0, np.int64)
        if len(allnew):
            allnew = allnew[np.argsort(codes[allnew])]  # distinct codes
        return codes, allnew

    def codes(self, arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The code of every value of ``arr`` (new values get the next codes)."""
        return self._encode(arr)[0]

    def _encode(self, arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[np.ndarray]]:
        arr = one_array(arr)
        if arr.type != self.type:
            arr = arr.cast(self.type)
        n = len(arr)
        codes = np.empty(n, np.int64)
        new_rows: list[np.ndarray] = []
        if self.numeric:
            bits, valid = self._bits(arr)
            all_valid = bool(valid.all())
            x = bits if all_valid else bits[valid]
            before = self._map.n
            ids, first = self._map.get_or_add(x)
            # map ids (shared space with the null code) to codes
            codes_valid = self._ids_to_codes(ids, before)
            new_rows.append(first if all_valid else np.flatnonzero(valid)[first])
            if all_valid:
                codes = codes_valid
            else:
                codes[valid] = codes_valid
                null_rows = np.flatnonzero(~valid)
                codes[null_rows] = self._null(int(null_rows[0]), new_rows)
        else:
            self._encode_generic(arr, codes, new_rows)
        if self.n > _CODE_LIMIT:
            raise OverflowError("more than 2**31 distinct key values in one column")
        return codes, new_rows

    # ids from the Int64Map are dense over non-null values; codes also count the NULL code,
    # and until a NULL comes, a value's code is its id
    def _ids_to_codes(self, ids: np.ndarray, before: int) -> np.ndarray:
        n_ids = self._map.n
        if self.null_code < 0:
            self.n = n_ids
            return ids
        if n_ids > before:
            if n_ids > len(self._id_code):
                grown = np.empty(max(n_ids, 2 * len(self._id_code)), np.int64)
                grown[:before] = self._id_code[:before]
                self._id_code = grown
            self._id_code[before:n_ids] = self.n + np.arange(n_ids - before, dtype=np.int64)
            self.n += n_ids - before
        return self._id_code[ids] if len(ids) else ids

    def _null(self, row: int, new_rows: list[np.ndarray]) -> int:
        if self.null_code < 0:
            if self.numeric:  # from now on codes and ids differ: keep the code of each id
                self._id_code = np.arange(self._map.n, dtype=np.int64)
            self.null_code = self.n
            self.n += 1
            new_rows.append(np.array([row], np.int64))
        return self.null_code

    def _encode_generic(self, arr: pa.Array, codes: np.ndarray, new_rows: list[np.ndarray]) -> None:
        try:
            enc = pc.dictionary_encode(arr, null_encoding="encode")
            uniques = enc.dictionary.to_pylist()
            indices = np.asarray(enc.indices.cast(pa.int64()))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            values = arr.to_pylist()
            table: dict[Any, int] = {}
            indices = np.empty(len(values), np.int64)
            uniques = []
            for i, v in enumerate(values):  # only for types Arrow cannot hash
                h = _hashable(v)
                j = table.get(h)
                if j is None:
                    j = table[h] = len(uniques)
                    uniques.append(v)
                indices[i] = j
        ucodes = np.empty(len(uniques), np.int64)
        fresh: list[int] = []
        for j, v in enumerate(uniques):
            if v is None:
                if self.null_code < 0:
                    self.null_code = self.n
                    self.n += 1
                    fresh.append(j)
                ucodes[j] = self.null_code
                continue
            h = _hashable(v)
            c = self._dict.get(h)
            if c is None:
                c = self._dict[h] = self.n
                self.n += 1
                fresh.append(j)
            ucodes[j] = c
        if len(indices):
            codes[:] = ucodes[indices]
        if fresh:
            first = np.full(len(uniques), -1, np.int64)
            # first row of each unique: reversed assignment keeps the smallest index
            rev = np.arange(len(indices) - 1, -1, -1)
            first[indices[rev]] = rev
            new_rows.append(first[np.array(fresh, np.int64)])


class KeyIndex:
    """Tuples of key columns → dense slots 0..n_slots-1, with the key values kept per slot."""

    def __init__(self, types: list[pa.DataType]) -> None:
        self.types = list(types)
        #: batches left before grouping first is tried again (see slots)
        self._skip_grouping = 0
        self._reset()

    def _reset(self) -> None:
        self._coders = [Coder(t) for t in self.types]
        self._levels = [Int64Map() for _ in self.types[1:]]
        self._slot_of = np.empty(0, np.int64)
        self._top = 0
        self.n_slots = 0
        self._chunks: list[list[pa.Array]] = [[] for _ in self.types]
        self._combined: list[pa.Array] | None = None

    #: from this many rows on, small-span integer keys are grouped first (see slots)
    _GROUP_FIRST = 4096
    #: batches that skip grouping first after one whose keys were mostly distinct
    _SKIP_AFTER_DISTINCT = 8

    def slots(self, columns: list[pa.Array]) -> tuple[np.ndarray, int]:
        """(slot of each row, slot count before the call: slots >= it are new).

        Many rows of small-span integer keys (ids, window numbers) are grouped first by
        direct addressing; only their distinct keys, in order of first appearance, are
        looked up, so the slots are the same as row by row. A batch whose keys were
        mostly distinct (a key per row, or a caller's distinct groups) makes the next
        ``_SKIP_AFTER_DISTINCT`` batches skip that pass, which would not pay either."""
        before = self.n_slots
        n = len(columns[0]) if columns else 0
        if not self.types:
            if n and self.n_slots == 0:
                self.n_slots = 1
            return np.zeros(n, np.int64), before
        if n >= self._GROUP_FIRST and self._skip_grouping:
            self._skip_grouping -= 1
        elif n >= self._GROUP_FIRST:
            direct = direct_groups(columns, n)
            if direct is not None and 4 * direct[1] <= n:
                gid, n_groups, keys, _, _ = direct
                firsts, inverse, _ = dense_unique(gid, n_groups)
                order = pa.array(firsts, pa.int64())
                slots, _ = self._slots([k.take(order) for k in keys], before)
                return slots[inverse], before
            if direct is not None:
                self._skip_grouping = self._SKIP_AFTER_DISTINCT
        return self._slots(columns, before)

    def _slots(
        self, columns: list[pa.Array], before: int, distinct: bool = False
    ) -> tuple[np.ndarray, int]:
        """``distinct``: the rows are distinct keys (a rebuild), each new at the last level."""
        # A row whose code (or id so far) is new and on no other row holds a new key of
        # its own at the next level: no lookup there ("fresh", e.g. a key per row).
        coder = self._coders[0]
        n0 = coder.n
        ids = coder.codes(columns[0])
        fresh = _fresh_once(ids, n0, coder.n) if len(self.types) > 1 else None
        for j in range(1, len(self.types)):
            coder, level = self._coders[j], self._levels[j - 1]
            n0, n1 = coder.n, level.n
            codes = coder.codes(columns[j])
            new_codes = _fresh_once(codes, n0, coder.n)
            if new_codes is not None:
                fresh = new_codes if fresh is None else fresh | new_codes
            if distinct and j == len(self.types) - 1:
                fresh = np.ones(len(codes), np.bool_)
            ids, _ = level.get_or_add((ids << 32) | codes, fresh)
            fresh = _fresh_once(ids, n1, level.n)
        top = self._coders[0].n if len(self.types) == 1 else self._levels[-1].n
        self._top = top
        if top > len(self._slot_of):
            grown = np.full(max(top, 2 * len(self._slot_of)), -1, np.int64)
            grown[: len(self._slot_of)] = self._slot_of
            self._slot_of = grown
        slots = self._slot_of[ids]
        missing = np.flatnonzero(slots < 0)
        if len(missing):
            uniq, inverse, first = dense_unique(ids[missing], top)
            new = before + np.arange(len(uniq), dtype=np.int64)
            self._slot_of[uniq] = new
            slots[missing] = new[inverse]
            rows = pa.array(missing[first], pa.int64())
            for j, col in enumerate(columns):
                self._chunks[j].append(col.take(rows))
            self._combined = None
            self.n_slots += len(uniq)
        return slots, before

    def key_columns(self) -> list[pa.Array]:
        """The key values of every slot, in slot order."""
        if self._combined is None:
            self._combined = [
                pa.concat_arrays(ch) if ch else pa.array([], t)
                for ch, t in zip(self._chunks, self.types)
            ]
            self._chunks = [[c] for c in self._combined]
        return self._combined

    def keys(self, slots: np.ndarray) -> list[pa.Array]:
        idx = pa.array(slots, pa.int64())
        return [c.take(idx) for c in self.key_columns()]

    def compact(self, keep: np.ndarray) -> np.ndarray:
        """Keep slots ``keep`` (increasing), renumbered in order; returns old → new (-1 = gone)."""
        remap = np.full(self.n_slots, -1, np.int64)
        remap[keep] = np.arange(len(keep), dtype=np.int64)
        if not self.types:
            self.n_slots = len(keep)
            return remap
        cols = self.key_columns()
        idx = pa.array(keep, pa.int64())
        kept = [c.take(idx) for c in cols]
        if self._top > 4 * len(keep) + 4096:
            self._reset()  # drop codes of purged keys: rebuild from what is left
            if len(keep):
                self._slots(kept, 0, distinct=True)
            return remap
        live = np.flatnonzero(self._slot_of[: self._top] >= 0)
        self._slot_of[live] = remap[self._slot_of[live]]
        self._chunks = [[c] for c in kept]
        self._combined = kept
        self.n_slots = len(keep)
        return remap

    def load(self, columns: list[pa.Array], n_slots: int) -> None:
        """Rebuild from key columns (row i becomes slot i)."""
        self._reset()
        if not self.types:
            self.n_slots = n_slots
        elif n_slots:
            self._slots(columns, 0, distinct=True)

    @property
    def nbytes(self) -> int:
        total = sum(c.nbytes for ch in self._chunks for c in ch) + self._slot_of.nbytes
        total += sum(m.nbytes for m in self._levels)
        total += sum(c._map.nbytes + c._id_code.nbytes for c in self._coders)
        return int(total)
