"""KeyIndex / Coder / Int64Map: exact, vectorized key → slot maps, and slot columns."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from datum_sql.engine.state import keys as keys_module
from datum_sql.engine.state.keys import (
    Int64Map,
    KeyIndex,
    dense_unique,
    direct_groups,
    local_ids,
)
from datum_sql.engine.state.slots import SlotColumn


@settings(max_examples=100, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-5, 40), max_size=30), max_size=6
    )
)
def test_int64_map_is_exact_with_first_appearance_ids(batches):
    m = Int64Map()
    ref: dict[int, int] = {}
    for values in batches:
        x = np.array(values, np.int64)
        ids, first = m.get_or_add(x)
        for v, i in zip(values, ids.tolist()):
            ref.setdefault(v, len(ref))
            assert ref[v] == i
        assert [int(x[f]) for f in first] == [v for v, i in ref.items() if i >= m.n - len(first)]


def test_int64_map_switches_between_dense_and_sorted():
    m = Int64Map()
    m.get_or_add(np.arange(1000, dtype=np.int64))
    assert m._dense is not None
    m.get_or_add(np.array([10**15], np.int64))
    assert m._dense is None
    assert m.get(np.array([999, 10**15, 5000], np.int64)).tolist() == [999, 1000, -1]


keys_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab"])),
        st.one_of(st.none(), st.integers(-3, 3)),
        st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, float("nan")])),
    ),
    max_size=25,
)


def _canon(row):
    out = []
    for v in row:
        if isinstance(v, float):
            v = "nan" if v != v else v + 0.0
        out.append(v)
    return tuple(out)


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(keys_strategy, max_size=5), drop=st.data())
def test_key_index_assigns_one_slot_per_sql_group(batches, drop):
    types = [pa.string(), pa.int64(), pa.float64()]
    idx = KeyIndex(types)
    ref: dict[tuple, int] = {}
    for rows in batches:
        cols = [pa.array([r[j] for r in rows], t) for j, t in enumerate(types)]
        slots, before = idx.slots(cols) if rows else (np.zeros(0, np.int64), idx.n_slots)
        for r, s in zip(rows, slots.tolist()):
            key = _canon(r)
            if key not in ref:
                ref[key] = len(ref)
                assert s >= before
            assert ref[key] == s
        assert idx.n_slots == len(ref)
        # the kept key values read back as the groups
        stored = list(zip(*(c.to_pylist() for c in idx.key_columns())))
        assert [_canon(r) for r in stored] == list(ref)
        # compaction drops some slots and renumbers the rest in order
        keep = np.array(
            sorted(drop.draw(st.sets(st.integers(0, max(len(ref) - 1, 0)), max_size=len(ref)))),
            np.int64,
        )
        keep = keep[keep < len(ref)]
        remap = idx.compact(keep)
        kept = [k for k, s in ref.items() if s in set(keep.tolist())]
        ref = {k: int(remap[s]) for k, s in ref.items() if remap[s] >= 0}
        assert list(ref) == kept and list(ref.values()) == list(range(len(kept)))


def test_key_index_rebuilds_after_many_purges():
    idx = KeyIndex([pa.int64()])
    for i in range(100):
        slots, before = idx.slots([pa.array(np.arange(i * 1000, i * 1000 + 1000, dtype=np.int64))])
        assert slots.tolist() == list(range(before, before + 1000))
        idx.compact(np.arange(idx.n_slots - 500, idx.n_slots, dtype=np.int64))  # newest 500
    assert idx.n_slots == 500
    assert idx._top < 10_000  # codes of purged keys were forgotten
    slots, before = idx.slots([pa.array([99_999, 5], pa.int64())])
    assert slots.tolist() == [499, 500] and before == 500


def test_key_index_without_columns_has_one_slot():
    idx = KeyIndex([])
    slots, before = idx.slots([pa.array([1, 2, 3])])
    assert slots.tolist() == [0, 0, 0] and before == 0 and idx.n_slots == 1
    slots, before = idx.slots([pa.array([1, 2])])
    assert slots.tolist() == [0, 0] and before == 1


def test_decimal_and_nested_keys():
    idx = KeyIndex([pa.decimal128(5, 2), pa.list_(pa.int64())])
    cols = [
        pa.array([Decimal("1.00"), Decimal("1.00"), None], pa.decimal128(5, 2)),
        pa.array([[1, 2], [1, 2], None], pa.list_(pa.int64())),
    ]
    slots, _ = idx.slots(cols)
    assert slots.tolist() == [0, 0, 1]


def test_dense_unique_and_local_ids():
    values, inverse, first = dense_unique(np.array([5, 3, 5, 0, 3], np.int64), 8)
    assert values.tolist() == [5, 3, 0]
    assert inverse.tolist() == [0, 1, 0, 2, 1]
    assert first.tolist() == [0, 1, 3]
    ids, n = local_ids([pa.array(["a", None, "a", None]), pa.array([1, 1, 1, 2])])
    assert ids.tolist() == [0, 1, 0, 2] and n == 3


def test_slot_columns_numpy_and_arrow_backed():
    for t, fill, vals in [
        (pa.int64(), 0, pa.array([7, None], pa.int64())),
        (
            pa.timestamp("us", tz="UTC"),
            None,
            pa.array([1, None], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        ),
        (pa.string(), None, pa.array(["x", None])),
        (pa.bool_(), None, pa.array([True, None])),
    ]:
        col = SlotColumn(t, fill)
        col.grow(3)
        col.set(np.array([2, 0]), vals)
        got = col.gather(np.array([0, 1, 2]))
        assert got.type == t
        assert got.to_pylist() == [vals[1].as_py(), fill, vals[0].as_py()]
        col.compact(np.array([0, 2]))
        assert col.to_arrow().to_pylist() == [vals[1].as_py(), vals[0].as_py()]
        other = SlotColumn(t, fill)
        other.load(col.to_arrow())
        assert other.to_arrow().equals(col.to_arrow())


def test_direct_groups_for_small_span_integer_keys():
    ts = pa.array([10, 20, 10, None], pa.int64()).cast(pa.timestamp("us"))
    k = pa.array([-2, 3, -2, 3], pa.int32())
    gid, n, keys, sizes, present = direct_groups([ts, k], 4)
    assert n == 3 and gid.tolist() == [0, 1, 0, 2] and sizes.tolist() == [2, 1, 1]
    assert present is None
    assert keys[0].type == pa.timestamp("us") and keys[1].type == pa.int32()
    assert keys[0].cast(pa.int64()).to_pylist() == [10, 20, None]
    assert keys[1].to_pylist() == [-2, 3, 3]
    big = pa.array([0, 2**40], pa.int64())
    assert direct_groups([big], 2) is None  # too sparse: the hash path takes it
    assert direct_groups([pa.array(["a"])], 1) is None
    extreme = pa.array([-(2**63), None, -(2**63) + 1], pa.int64())
    gid, n, keys, sizes, _ = direct_groups([extreme], 3)
    assert keys[0].to_pylist() == [-(2**63), -(2**63) + 1, None]
    assert sizes.tolist() == [1, 1, 1]
    one = direct_groups([pa.array([7, 7, 7], pa.int64())], 3)
    assert one is not None and one[1] == 1 and one[3].tolist() == [3]


def test_direct_groups_can_leave_rows_numbered_by_their_code():
    """Without compacting, a row's id is its key's code (no renumbering pass): ids and
    counts cover the whole key space, and the present groups say which to keep."""
    k = pa.array([5, 9, 5, 7, 9, 9], pa.int64())
    gid, n, keys, sizes, present = direct_groups([k], 6, compact=False)
    assert n == 5 and gid.tolist() == [0, 4, 0, 2, 4, 4]
    assert sizes.tolist() == [2, 0, 1, 0, 3] and present.tolist() == [0, 2, 4]
    assert keys[0].to_pylist() == [5, 7, 9]
    dense = direct_groups([pa.array([1, 2, 1], pa.int64())], 3, compact=False)
    assert dense is not None and dense[1] == 2 and dense[4] is None  # every code present


def test_int64_map_looks_many_keys_up_exactly_with_sorted_searches(monkeypatch):
    """Many lookups into a large sorted map run as one search over the sorted queries:
    random-order binary searches miss the cache at every step."""
    rng = np.random.default_rng(7)
    m = Int64Map()
    ref: dict[int, int] = {}
    searched: list[np.ndarray] = []
    real = np.searchsorted

    def spy(a, v, *args, **kwargs):
        searched.append(np.asarray(v))
        return real(a, v, *args, **kwargs)

    monkeypatch.setattr(np, "searchsorted", spy)
    for _ in range(4):
        values = rng.integers(-(2**62), 2**62, 5000)
        values[::7] = values[3]  # repeats within the batch
        ids, _ = m.get_or_add(values)
        for v, i in zip(values.tolist(), ids.tolist()):
            assert ref.setdefault(v, len(ref)) == i
    assert m._dense is None and all(len(q) < 1024 or (np.diff(q) >= 0).all() for q in searched)
    probe = np.concatenate([rng.integers(-(2**62), 2**62, 2000), np.array(list(ref)[:3000])])
    rng.shuffle(probe)
    expected = [ref.get(v, -1) for v in probe.tolist()]
    assert m.get(probe).tolist() == expected


def test_int64_map_adds_many_sparse_keys_with_one_sort_per_batch(monkeypatch):
    """A large batch into a sparse map: one sort of the queries finds the known keys and
    groups the new ones (repeats numbered by first appearance), with no np.unique."""
    rng = np.random.default_rng(11)
    m = Int64Map()
    ref: dict[int, int] = {}
    sorts: list[int] = []
    real_argsort = np.argsort

    def argsort(a, *args, **kwargs):
        sorts.append(len(a))
        return real_argsort(a, *args, **kwargs)

    def no_unique(*args, **kwargs):
        raise AssertionError("np.unique sorts the batch a second time")

    monkeypatch.setattr(np, "argsort", argsort)
    monkeypatch.setattr(np, "unique", no_unique)
    known = rng.integers(-(2**62), 2**62, 3000)
    for step in range(5):
        values = np.concatenate([rng.integers(-(2**62), 2**62, 4000), known[: 800 * step]])
        values[::5] = values[2]  # repeats of one new key
        values = values[rng.permutation(len(values))]
        sorts.clear()
        ids, first = m.get_or_add(values)
        new = [v for v in dict.fromkeys(values.tolist()) if v not in ref]
        for v, i in zip(values.tolist(), ids.tolist()):
            assert ref.setdefault(v, len(ref)) == i
        assert values[first].tolist() == new
        assert m._dense is None or step == 0
        if step:
            assert sum(1 for n in sorts if n == len(values)) == 1
        known = np.concatenate([known, values[:100]])


def test_int64_map_adds_keys_to_a_small_run_and_merges_it_into_the_large_one(monkeypatch):
    """New sparse keys go to a small sorted run: the large run is not rewritten (moved in
    memory) for every batch, only once the small run outgrew an eighth of it; ids stay the
    first-appearance ids throughout, across merges."""
    monkeypatch.setattr(Int64Map, "_RUN_MIN", 16)
    rng = np.random.default_rng(11)
    m = Int64Map()
    ref: dict[int, int] = {}
    large_rewrites = 0
    for step in range(60):
        values = rng.integers(-(2**62), 2**62, int(rng.integers(1, 300)))
        values[::5] = values[0]  # repeats within the batch
        if ref and step % 3 == 0:  # and keys seen before
            values[1::4] = rng.choice(np.array(list(ref)), len(values[1::4]))
        large = m._runs[0][0] if m._runs else None
        ids, first = m.get_or_add(values)
        expect = [ref.setdefault(v, len(ref)) for v in values.tolist()]
        assert ids.tolist() == expect
        assert [int(values[f]) for f in first] == list(ref)[m.n - len(first) :]
        large_rewrites += large is not None and m._runs[0][0] is not large
        assert len(m._runs[1][0]) <= max(16, len(m._runs[0][0]) // 8) if len(m._runs) > 1 else True
    assert 0 < large_rewrites < 20  # the large run was merged into a few times, not 60
    probe = np.concatenate([rng.integers(-(2**62), 2**62, 500), np.array(list(ref))])
    rng.shuffle(probe)
    assert m.get(probe).tolist() == [ref.get(v, -1) for v in probe.tolist()]


def test_dense_unique_sorts_when_its_bound_is_far_larger_than_the_values():
    """The same answer either way: values in first-appearance order, inverse, first rows."""
    rng = np.random.default_rng(5)
    for n, bound in [(40, 10**7), (3000, 50), (200, 70_000 + 8 * 200)]:
        x = rng.integers(0, bound, n)
        x[::3] = x[1]
        values, inverse, first = dense_unique(x, bound)
        order = list(dict.fromkeys(x.tolist()))
        assert values.tolist() == order
        assert inverse.tolist() == [order.index(v) for v in x.tolist()]
        assert first.tolist() == [x.tolist().index(v) for v in order]


def test_key_index_groups_many_small_span_integer_rows_first_with_the_same_slots(monkeypatch):
    """Grouping first looks up only the distinct keys, in order of first appearance: the
    slots and the kept key values are those of a row-by-row lookup (NULLs, timestamps and
    a second column included)."""
    rng = np.random.default_rng(9)
    batches = []
    for b in range(6):
        n = 6000
        k = pa.array(rng.integers(100 * b, 100 * b + 300, n), mask=rng.random(n) < 0.01)
        t = pa.array(rng.integers(0, 3, n), pa.timestamp("us"))
        batches.append([k, t])
    grouped, direct = KeyIndex([pa.int64(), pa.timestamp("us")]), []
    seen = []
    real = KeyIndex._slots

    def spy(self, columns, before):
        seen.append(len(columns[0]))
        return real(self, columns, before)

    monkeypatch.setattr(KeyIndex, "_slots", spy)
    for cols in batches:
        direct.append(grouped.slots(cols))
    assert max(seen) < 6000  # looked up distinct keys, not every row
    monkeypatch.setattr(KeyIndex, "_GROUP_FIRST", 10**9)
    row_by_row = KeyIndex([pa.int64(), pa.timestamp("us")])
    for cols, (slots, before) in zip(batches, direct, strict=True):
        want, want_before = row_by_row.slots(cols)
        assert before == want_before and slots.tolist() == want.tolist()
    for a, b in zip(grouped.key_columns(), row_by_row.key_columns(), strict=True):
        assert a.equals(b)


def _reference_slots(ref: dict[tuple, int], rows: list[tuple]) -> list[int]:
    return [ref.setdefault(r, len(ref)) for r in rows]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_windows=st.integers(1, 3))
def test_key_index_with_large_batches_of_fresh_repeated_and_constant_keys(seed, n_windows):
    """Batches past the sorted-search size: a sparse first column (window ends, constant
    in some batches), ids new on one row each, repeated ones and strings: slots as a dict
    numbers the groups, whichever path (fresh keys, one constant key, sorted searches)."""
    rng = np.random.default_rng(seed)
    idx = KeyIndex([pa.int64(), pa.int64(), pa.string()])
    ref: dict[tuple, int] = {}
    next_id = 0
    for b in range(5):
        n = 3000
        ends = (b + rng.integers(0, n_windows, n)) * 10_000_000 + 1_700_000_000_000_000
        fresh = np.arange(next_id, next_id + n, dtype=np.int64)[rng.permutation(n)]
        next_id += n
        ids = np.where(rng.random(n) < 0.5, fresh, rng.integers(0, max(next_id // 2, 1), n))
        names = np.array(["ann", "bo", "cy"])[rng.integers(0, 3, n)]
        cols = [pa.array(ends), pa.array(ids), pa.array(names)]
        slots, before = idx.slots(cols)
        rows = list(zip(ends.tolist(), ids.tolist(), names.tolist()))
        assert slots.tolist() == _reference_slots(ref, rows)
        assert idx.n_slots == len(ref) and before <= idx.n_slots
    stored = list(zip(*(c.to_pylist() for c in idx.key_columns())))
    assert stored == list(ref)


def test_int64_map_fresh_rows_get_new_ids_without_a_lookup():
    m = Int64Map()
    m.get_or_add(np.array([5, 10**12, 7], np.int64))  # sparse from here on
    x = np.array([7, 10**13, 5, 10**14, 7], np.int64)
    fresh = np.array([False, True, False, True, False])
    ids, first = m.get_or_add(x, fresh)
    assert ids.tolist() == [2, 3, 0, 4, 2]
    assert first.tolist() == [1, 3]
    assert m.get(np.array([10**14, 10**13, 8], np.int64)).tolist() == [4, 3, -1]


def test_int64_map_looks_a_constant_batch_up_once():
    m = Int64Map()
    m.get_or_add(np.array([1, 10**15], np.int64))
    assert m._dense is None
    ids, first = m.get_or_add(np.full(5000, 3 * 10**15, np.int64))
    assert set(ids.tolist()) == {2} and first.tolist() == [0]
    ids, first = m.get_or_add(np.full(5000, 10**15, np.int64))
    assert set(ids.tolist()) == {1} and len(first) == 0


def test_one_key_column_skips_the_fresh_key_count(monkeypatch):
    """Rows holding a key of their own only spare lookups at the next key level: with one
    key column there is none, so the count of new ids is not made."""
    calls: list[int] = []
    real = keys_module._fresh_once

    def spy(ids, before, after):
        calls.append(len(ids))
        return real(ids, before, after)

    monkeypatch.setattr(keys_module, "_fresh_once", spy)
    one = KeyIndex([pa.int64()])
    slots, _ = one.slots([pa.array([4, 8, 4], pa.int64())])
    assert slots.tolist() == [0, 1, 0] and calls == []
    two = KeyIndex([pa.int64(), pa.string()])
    slots, _ = two.slots([pa.array([4, 8, 4], pa.int64()), pa.array(["a", "b", "a"])])
    assert slots.tolist() == [0, 1, 0] and calls  # the second level uses the count


def test_increasing_keys_take_the_no_count_path_with_the_same_answers():
    """Strictly increasing values (new ids, new slots) skip the counting in dense_unique and
    the fresh-key count; values that span as far without rising (a repeat, a step back)
    still count: the answers are those of a first-appearance dict either way."""
    for x in ([3, 4, 9, 12], [3, 9, 4, 12], [3, 3, 9, 12], [0, 5, 5, 5, 9], [7], []):
        arr = np.array(x, np.int64)
        values, inverse, first = dense_unique(arr, 16)
        order = list(dict.fromkeys(x))
        assert values.tolist() == order
        assert inverse.tolist() == [order.index(v) for v in x]
        assert first.tolist() == [x.index(v) for v in order]
    idx = KeyIndex([pa.int64(), pa.int64(), pa.string()])
    ref: dict[tuple, int] = {}
    next_id = 1000
    for b in range(4):  # a row per new id, in order, then a batch that repeats some
        n = 5000
        ids = np.arange(next_id, next_id + n, dtype=np.int64)
        if b == 3:
            ids[::7] = ids[1]
        next_id += n
        windows = (ids // 2000).astype(np.int64)
        names = np.array(["ann", "bo", "cy"])[ids % 3]
        slots, _ = idx.slots([pa.array(windows), pa.array(ids), pa.array(names)])
        rows = list(zip(windows.tolist(), ids.tolist(), names.tolist()))
        assert slots.tolist() == _reference_slots(ref, rows)
    assert list(zip(*(c.to_pylist() for c in idx.key_columns()))) == list(ref)


def test_mostly_distinct_keys_skip_grouping_first_for_a_few_batches(monkeypatch):
    """A batch whose small-span integer keys are mostly distinct makes the next batches
    skip the grouping pass (it would not pay), then it is tried again; the slots are those
    of a row-by-row lookup throughout."""
    calls: list[int] = []
    real = keys_module.direct_groups

    def spy(columns, n, compact=True):
        calls.append(n)
        return real(columns, n, compact)

    monkeypatch.setattr(keys_module, "direct_groups", spy)
    skip = KeyIndex._SKIP_AFTER_DISTINCT
    n = 5000
    distinct = np.arange(n, dtype=np.int64)
    few = [
        np.repeat(np.arange(10 * b, 10 * b + 10, dtype=np.int64), n // 10) for b in range(skip + 2)
    ]
    batches = [distinct, *few]
    idx = KeyIndex([pa.int64()])
    ref: dict[tuple, int] = {}
    for x in batches:
        slots, _ = idx.slots([pa.array(x)])
        assert slots.tolist() == _reference_slots(ref, [(v,) for v in x.tolist()])
    # tried on the distinct batch, skipped for the next `skip`, then tried on each again
    assert len(calls) == 3
