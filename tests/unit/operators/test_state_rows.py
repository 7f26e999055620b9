"""RowStore and SlotLists, the state of a top-N: rows by id, per-partition lists of ids."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from datum_sql.engine.state.rows import RowStore, SlotLists

SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string())])


def _rows(start: int, n: int) -> pa.Table:
    i = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"i": i, "s": [f"r{v}" for v in i.tolist()]}, schema=SCHEMA)


def test_row_store_takes_any_rows_in_order_from_few_tables(monkeypatch) -> None:
    """Appends merge by tiers: the store stays a few single-chunk tables (a take from a
    table of many chunks would concatenate them all), and takes answer in request order."""
    monkeypatch.setattr(RowStore, "MERGE_ROWS", 4)
    store = RowStore(SCHEMA)
    rng = np.random.default_rng(2)
    n = 0
    for _ in range(300):
        k = int(rng.integers(0, 9))
        assert store.append(_rows(n, k)) == n
        n += k
        assert len(store._parts) <= 4 * RowStore.TIER
        assert all(len(p.column(0).chunks) == 1 for p in store._parts)
        ids = rng.integers(0, max(n, 1), 20) if n else np.empty(0, np.int64)
        got = store.take(ids)
        assert got.column("i").to_pylist() == ids.tolist()
        assert got.column("s").to_pylist() == [f"r{v}" for v in ids.tolist()]
    assert len(store._parts) < 3 * RowStore.TIER  # tiers, not one table per append
    assert store.take(np.array([5, 1]), ["s"]).to_pylist() == [{"s": "r5"}, {"s": "r1"}]
    keep = np.arange(0, n, 3)
    store.keep(keep)
    assert store.n == len(keep) and len(store._parts) == 1
    assert store.take(np.array([0, 2])).column("i").to_pylist() == [0, 6]


def test_slot_lists_gather_and_rewrite_only_the_lists_asked_for() -> None:
    lists = SlotLists(min_capacity=2)
    lists.grow(4)
    lists.write(np.array([0, 2]), np.array([2, 1]), np.array([10, 11, 12]))
    ids, owner = lists.gather(np.array([2, 0]))
    assert ids.tolist() == [12, 10, 11] and owner.tolist() == [2, 0, 0]
    lists.write(np.array([0]), np.array([5]), np.array([1, 2, 3, 4, 5]))  # outgrows its room
    lists.write(np.array([2]), np.array([0]), np.array([], np.int64))
    assert lists.gather(np.array([0, 1, 2]))[0].tolist() == [1, 2, 3, 4, 5]
    assert lists.total == 5
    lists.renumber(np.arange(10) * 10)
    assert lists.gather(np.array([0]))[0].tolist() == [10, 20, 30, 40, 50]
    lists.grow(6)
    lists.write(np.array([5]), np.array([1]), np.array([7]))
    lists.keep_slots(np.array([0, 5]))
    assert lists.n_slots == 2
    assert lists.gather(np.array([1, 0]))[0].tolist() == [7, 10, 20, 30, 40, 50]


def test_slot_lists_reclaim_the_room_left_behind(monkeypatch) -> None:
    """Lists that keep moving (outgrowing their room) leave space behind; it is reclaimed
    once it exceeds the space in use, the lists unchanged."""
    monkeypatch.setattr(SlotLists, "SLACK", 8)
    lists = SlotLists(min_capacity=1)
    lists.grow(50)
    rng = np.random.default_rng(4)
    want: dict[int, list[int]] = {s: [] for s in range(50)}
    packs = 0
    for _ in range(400):
        slots = np.unique(rng.integers(0, 50, 5))
        counts = rng.integers(0, 40, len(slots))
        before = lists.used
        ids = rng.integers(0, 10**6, int(counts.sum()))
        lists.write(slots, counts, ids)
        at = 0
        for s, c in zip(slots.tolist(), counts.tolist(), strict=True):
            want[s] = ids[at : at + c].tolist()
            at += c
        assert lists.used <= 2 * lists.total + 8
        packs += lists.used < before
    got, _ = lists.gather(np.arange(50))
    assert got.tolist() == [i for s in range(50) for i in want[s]]
    assert lists.total == sum(len(v) for v in want.values())
    assert packs > 0
