"""invalid_utf8 finds exactly the values that are not UTF-8, however they are nested."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from datum_sql.connectors.text import has_text, invalid_utf8

RAW = [b"ok", b"q\xff", b"", None, b"\xc3", "ü€".encode(), b"\xc3\xa9"]
BAD = [1, 4]


def strings(raw: list[bytes | None] = RAW) -> pa.Array:
    """A string array holding ``raw`` as is (no UTF-8 check), like a JSON reader's output."""
    return pa.array(raw, pa.binary()).view(pa.string())


def test_flat_strings_binary_and_slices() -> None:
    assert invalid_utf8(strings()).tolist() == BAD
    assert invalid_utf8(pa.array(RAW, pa.binary())).tolist() == BAD
    assert invalid_utf8(pa.array(RAW, pa.large_binary()).view(pa.large_string())).tolist() == BAD
    assert invalid_utf8(strings().slice(2)).tolist() == [2]
    assert invalid_utf8(pa.chunked_array([strings(), strings()])).tolist() == BAD + [
        7 + i for i in BAD
    ]
    assert invalid_utf8(pa.array(["fine", None])).tolist() == []


def test_nested_values_are_named_by_their_row() -> None:
    offsets = pa.array([0, 2, 2, 5, 7])
    lists = pa.ListArray.from_arrays(offsets, strings())
    assert invalid_utf8(lists).tolist() == [0, 2]
    assert invalid_utf8(lists.slice(1)).tolist() == [1]
    structs = pa.StructArray.from_arrays([strings(), pa.array(range(7))], ["s", "n"])
    assert invalid_utf8(structs).tolist() == BAD
    keys = pa.array([str(i) for i in range(7)])
    maps = pa.MapArray.from_arrays(offsets, keys, strings())
    assert invalid_utf8(maps).tolist() == [0, 2]
    codes = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 1, 0]), strings()[:2])
    assert invalid_utf8(codes).tolist() == [1, 3]


def test_types_without_text_are_not_checked() -> None:
    assert not has_text(pa.int64()) and not has_text(pa.list_(pa.binary()))
    assert has_text(pa.struct([("a", pa.list_(pa.string()))]))
    assert invalid_utf8(pa.array([1, 2])).tolist() == []
    nested_bytes = pa.array([[b"\xff"]], pa.list_(pa.binary()))
    assert invalid_utf8(nested_bytes).tolist() == []


@given(st.lists(st.one_of(st.none(), st.binary(max_size=6)), max_size=60))
def test_matches_python_decoding(raw: list[bytes | None]) -> None:
    def bad(v: bytes | None) -> bool:
        try:
            if v is not None:
                v.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False

    assert invalid_utf8(strings(raw)).tolist() == [i for i, v in enumerate(raw) if bad(v)]
