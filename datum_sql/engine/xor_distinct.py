"""``bit_xor(DISTINCT x)``: one computation, which the streaming aggregate and ``ctx.sql``
both call.

DataFusion's own ``bit_xor(DISTINCT x)`` fails ("declared as non-nullable but contains
null values") when the SELECT has another aggregate beside it, so the batch SQL reads
``__datum_bit_xor_distinct_<type>(array_agg(DISTINCT x))`` instead: DataFusion gathers the
distinct values of each group and :func:`xor_groups` combines them. The result has the
input's type (one function per integer type); NULL for a group without values.
"""

from __future__ import annotations

import datafusion
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: The integer types, by the suffix of the batch SQL's function name.
TYPES = {
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(),
}  # fmt: skip
PREFIX = "__datum_bit_xor_distinct_"


def xor_groups(values: pa.Array, group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(the xor of each group's values as int64 words, whether the group has any):
    ``values[i]`` (integers, no NULLs, each once per group) belongs to ``group[i]``."""
    words = np.asarray(values.cast(pa.int64(), safe=False), np.int64)
    out = np.zeros(n_groups, np.int64)
    np.bitwise_xor.at(out, group, words)
    has = np.zeros(n_groups, np.bool_)
    has[group] = True
    return out, has


def of_lists(lists: pa.Array | pa.ChunkedArray, out_type: pa.DataType) -> pa.Array:
    """The xor of each list's non-NULL values (distinct already), typed ``out_type``."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    flat = lists.flatten()
    parents = np.asarray(pc.list_parent_indices(lists))
    ok = np.asarray(flat.is_valid())
    values = flat.filter(pa.array(ok)) if flat.null_count else flat
    out, has = xor_groups(values, parents[ok], len(lists))
    return pa.array(out, pa.int64(), mask=~has).cast(out_type, safe=False)


def name_for(t: pa.DataType) -> str | None:
    """The batch SQL's function for values of type ``t`` (None: not an integer type)."""
    return next((PREFIX + k for k, v in TYPES.items() if v == t), None)


def datafusion_udfs() -> list[datafusion.ScalarUDF]:
    """:func:`of_lists` for each integer type, as the functions the batch SQL calls."""
    return [
        datafusion.udf(
            lambda lists, t=t: of_lists(lists, t), [pa.list_(t)], t, "immutable", PREFIX + k
        )
        for k, t in TYPES.items()
    ]
