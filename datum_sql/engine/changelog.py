"""Changelog rows (``_op`` = +I, -U, +U, -D) and how to apply them to a table.

A changelog is applied as a multiset of rows: inserts add one copy of a row, retractions
remove one copy of an equal row. The work is one vectorized group-by, no row loop.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OP_COLUMN = "_op"
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "+I", "-U", "+U", "-D"
_WEIGHT = "__weight"


def apply_changelog(state: pa.Table | None, changes: pa.RecordBatch | pa.Table) -> pa.Table:
    """``state`` (no ``_op``) after applying ``changes`` (with ``_op``)."""
    if isinstance(changes, pa.RecordBatch):
        changes = pa.Table.from_batches([changes])
    ops = changes.column(OP_COLUMN)
    rows = changes.drop_columns([OP_COLUMN])
    sign = pc.if_else(pc.is_in(ops, pa.array([INSERT, UPDATE_AFTER])), 1, -1).cast(pa.int64())
    parts = [rows.append_column(_WEIGHT, sign)]
    if state is not None and state.num_rows:
        parts.insert(0, state.append_column(_WEIGHT, pa.array(np.ones(state.num_rows, np.int64))))
    elif state is None and rows.num_rows == 0:
        return rows
    both = pa.concat_tables(parts, promote_options="none")
    keys = [c for c in both.column_names if c != _WEIGHT]
    if not keys:
        return both.drop_columns([_WEIGHT])
    summed = both.group_by(keys, use_threads=False).aggregate([(_WEIGHT, "sum")])
    weight = summed.column(f"{_WEIGHT}_sum")
    summed = summed.filter(pc.greater(weight, 0))
    counts = np.asarray(summed.column(f"{_WEIGHT}_sum"))
    out = summed.drop_columns([f"{_WEIGHT}_sum"]).select(keys)
    if (counts > 1).any():
        out = out.take(pa.array(np.repeat(np.arange(len(counts)), counts)))
    return out
