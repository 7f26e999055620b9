"""Which kept rows a changelog's retractions remove.

A retraction (``-U``/``-D``) carries the whole row it takes back; the state that kept the
row finds an equal one. Rows are compared on every given column exactly (one
:class:`~datum_sql.engine.state.keys.KeyIndex` code per distinct row: NULL equals NULL,
one NaN), and among equal kept rows the first by a given order goes first, each kept row
at most once. Vectorized: one sort of the kept rows' codes, one binary search per
distinct retracted row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from datum_sql.engine.state.keys import KeyIndex


def rows_to_remove(
    kept: list[pa.Array], kept_order: np.ndarray, gone: list[pa.Array]
) -> np.ndarray | None:
    """Indices into the ``kept`` rows (columns), one per row of ``gone`` (the same columns):
    an equal kept row, the least by ``kept_order`` not yet picked. None when a row of
    ``gone`` has no equal kept row left (it was never kept)."""
    index = KeyIndex([c.type for c in kept])
    kept_code, _ = index.slots(kept)
    gone_code, _ = index.slots(gone)
    order = np.lexsort((kept_order, kept_code))
    by_code = kept_code[order]
    uniq, counts = np.unique(gone_code, return_counts=True)
    start = np.searchsorted(by_code, uniq, side="left")
    if (np.searchsorted(by_code, uniq, side="right") - start < counts).any():
        return None
    skip = np.repeat(start - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return order[skip + np.arange(int(counts.sum()))]
