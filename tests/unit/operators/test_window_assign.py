"""Pure window assignment: tumble, hop panes, cumulate panes, session runs and interval
merging."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datum_sql.engine.operators.windows import assign

times = st.lists(st.integers(-50, 50), min_size=0, max_size=40).map(lambda v: np.array(v, np.int64))


def test_tumble_is_epoch_aligned_and_half_open():
    t = np.array([-11, -10, -1, 0, 9, 10, 19], np.int64)
    assert assign.tumble_start(t, 10).tolist() == [-20, -10, -10, 0, 0, 10, 10]


@settings(max_examples=200, deadline=None)
@given(t=times, size=st.integers(1, 12), slide=st.integers(1, 12))
def test_hop_gives_every_window_that_contains_the_row(t, size, slide):
    rows, starts = assign.hop_starts(t, size, slide)
    got = sorted(zip(rows.tolist(), starts.tolist()))
    want = sorted(
        (i, s)
        for i, x in enumerate(t.tolist())
        for s in range(x - size - slide, x + slide + 1)
        if s % slide == 0 and s <= x < s + size
    )
    assert got == want


def test_hop_with_gaps_drops_rows_outside_every_window():
    rows, starts = assign.hop_starts(np.array([0, 4, 5, 9, 10], np.int64), 4, 5)
    assert list(zip(rows.tolist(), starts.tolist())) == [(0, 0), (2, 5), (4, 10)]


@settings(max_examples=200, deadline=None)
@given(t=times, step=st.integers(1, 6), per=st.integers(1, 5))
def test_cumulate_gives_every_window_that_contains_the_row(t, step, per):
    """Windows [s, s + k * step) for k = 1..size/step, s a multiple of size, holding t."""
    size = step * per
    rows, ends = assign.cumulate_windows(t, step, size)
    got = sorted(zip(rows.tolist(), ends.tolist()))
    want = sorted(
        (i, s + k * step)
        for i, x in enumerate(t.tolist())
        for s in [x // size * size]
        for k in range(1, per + 1)
        if x < s + k * step
    )
    assert got == want
    numbers = ends // step
    starts = assign.cumulate_start(numbers, step, size)
    assert (starts == np.floor_divide(t[rows], size) * size).all()


def test_cumulate_windows_of_a_pane_come_in_end_order():
    # step 2, size 6: the pane [2, 4) is in [0, 4) and [0, 6); [6, 8) opens a new start
    idx, number = assign.cumulate_expand(np.array([1, 3, -1], np.int64), 2, 6)
    assert list(zip(idx.tolist(), (number * 2).tolist())) == [(0, 4), (0, 6), (1, 8), (1, 10),
                                                               (1, 12), (2, 0)]  # fmt: skip
    assert assign.cumulate_start(np.array([2, 3, 4, 0]), 2, 6).tolist() == [0, 0, 6, -6]


def _sessions_by_hand(kid, t, gap):
    out = {}
    for k in set(kid.tolist()):
        ts = sorted(x for kk, x in zip(kid.tolist(), t.tolist()) if kk == k)
        run = [ts[0]]
        groups = []
        for x in ts[1:]:
            if x - run[-1] < gap:
                run.append(x)
            else:
                groups.append((run[0], run[-1]))
                run = [x]
        groups.append((run[0], run[-1]))
        out[k] = groups
    return out


@settings(max_examples=200, deadline=None)
@given(
    t=times.filter(len),
    kids=st.lists(st.integers(0, 2), min_size=40, max_size=40),
    gap=st.integers(1, 10),
)
def test_session_runs_match_a_reference(t, kids, gap):
    kid = np.array(kids[: len(t)], np.int64)
    run, _ = assign.session_runs(kid, t, gap)
    got: dict[int, set] = {}
    for r in set(run.tolist()):
        sel = run == r
        assert len(set(kid[sel].tolist())) == 1
        got.setdefault(int(kid[sel][0]), set()).add((int(t[sel].min()), int(t[sel].max())))
    want = _sessions_by_hand(kid, t, gap)
    assert got == {k: set(v) for k, v in want.items()}


@settings(max_examples=200, deadline=None)
@given(
    iv=st.lists(
        st.tuples(st.integers(0, 2), st.integers(-30, 30), st.integers(1, 10)),
        min_size=0,
        max_size=30,
    )
)
def test_merge_intervals_joins_transitively_overlapping_intervals(iv):
    kid = np.array([k for k, _, _ in iv], np.int64)
    start = np.array([s for _, s, _ in iv], np.int64)
    end = np.array([s + n for _, s, n in iv], np.int64)
    gid = assign.merge_intervals(kid, start, end)
    # reference: union-find on pairwise overlaps of the same key
    parent = list(range(len(iv)))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for i in range(len(iv)):
        for j in range(len(iv)):
            if kid[i] == kid[j] and start[i] < end[j] and start[j] < end[i]:
                parent[find(i)] = find(j)
    for i in range(len(iv)):
        for j in range(len(iv)):
            assert (gid[i] == gid[j]) == (find(i) == find(j))
    if len(iv):
        assert sorted(set(gid.tolist())) == list(range(int(gid.max()) + 1))


def test_merge_intervals_touching_is_not_overlapping():
    gid = assign.merge_intervals(
        np.zeros(3, np.int64), np.array([0, 10, 5], np.int64), np.array([10, 20, 6], np.int64)
    )
    assert gid[0] == gid[2] != gid[1]


@settings(max_examples=300, deadline=None)
@given(t=times, offset=st.integers(-30, 30), pane=st.integers(1, 25), ordered=st.booleans())
def test_pane_numbers_are_the_floor_division_in_order_or_not(t, offset, pane, ordered):
    t = np.sort(t) if ordered else t
    assert assign.pane_numbers(t, offset, pane).tolist() == ((t - offset) // pane).tolist()
