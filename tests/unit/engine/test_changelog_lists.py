"""apply_changelog over list columns (array_agg results), which Arrow cannot group on."""

from __future__ import annotations

import pyarrow as pa

from datum_sql.engine.changelog import apply_changelog


def _changes(lists: list, keys: list, ops: list) -> pa.Table:
    return pa.table(
        {"a": pa.array(lists, pa.list_(pa.int64())), "k": keys, "_op": pa.array(ops, pa.string())}
    )


def test_retractions_remove_one_equal_list_row() -> None:
    state = apply_changelog(
        None,
        _changes([[1, 2], None, [1, 2], [], [1, None], [2, 1]], [1] * 6, ["+I"] * 6),
    )
    assert state.num_rows == 6
    # a sliced batch: offsets that do not start at 0
    retract = _changes([[9], [1, 2], None, [1, None], []], [1] * 5, ["+I"] + ["-U"] * 4).slice(1)
    state = apply_changelog(state, retract)
    rows = sorted(map(repr, state.to_pylist()))
    assert rows == sorted(map(repr, [{"a": [1, 2], "k": 1}, {"a": [2, 1], "k": 1}]))


def test_a_null_list_and_an_empty_list_are_different_rows() -> None:
    state = apply_changelog(None, _changes([None, []], [1, 1], ["+I", "+I"]))
    state = apply_changelog(state, _changes([[]], [1], ["-U"]))
    assert state.to_pylist() == [{"a": None, "k": 1}]
