"""Arrow helpers shared by the data path."""

from __future__ import annotations

import pyarrow as pa


def one_array(x: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``x`` as one contiguous array: a column of a one-batch table is its chunk, shared,
    not copied (``combine_chunks`` copies even a single chunk)."""
    if not isinstance(x, pa.ChunkedArray):
        return x
    return x.chunk(0) if x.num_chunks == 1 else x.combine_chunks()
