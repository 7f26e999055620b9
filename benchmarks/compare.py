"""Are two engines' results the same? Compared as multisets of rows after one normalization.

The normalization, applied to both sides alike:

* columns are matched by name (the order an engine returns them in does not matter); the
  two sides must have the same names;
* integers of any width or sign, and decimals of scale 0 (DuckDB's ``sum`` of BIGINT is a
  HUGEINT, a ``decimal128(38, 0)``), become int64 — a checked cast, so an overflow fails;
* floats and decimals with a scale become float64 rounded to ``FLOAT_DECIMALS`` places;
* timestamps become microseconds (a checked cast: a sub-microsecond part fails) without a
  time zone (a zoned timestamp is kept as its UTC wall time);
* strings of any layout become ``large_string``, dictionaries their values.

After it the column types must agree; the rows of each side are sorted by every column and
the sorted tables compared exactly. Any other type fails loudly rather than compare loosely.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

FLOAT_DECIMALS = 6
EXAMPLES = 3


def _canonical(col: pa.ChunkedArray) -> pa.ChunkedArray:
    t = col.type
    if pa.types.is_dictionary(t):
        return _canonical(col.cast(t.value_type))
    if pa.types.is_integer(t) or (pa.types.is_decimal(t) and t.scale == 0):
        return col.cast(pa.int64())
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return pc.round(col.cast(pa.float64()), FLOAT_DECIMALS)
    if pa.types.is_timestamp(t):
        return col.cast(pa.timestamp(t.unit)).cast(pa.timestamp("us"))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return col.cast(pa.large_string())
    if pa.types.is_boolean(t) or pa.types.is_date(t) or pa.types.is_null(t):
        return col
    raise TypeError(f"result column of type {t} has no normalization for comparing results")


def normalize(table: pa.Table) -> pa.Table:
    """``table`` with every column in its canonical type (see the module doc)."""
    return pa.table({name: _canonical(table.column(name)) for name in table.column_names})


def sorted_rows(table: pa.Table) -> pa.Table:
    if table.num_columns == 0 or table.num_rows == 0:
        return table
    return table.sort_by([(name, "ascending") for name in table.column_names]).combine_chunks()


def canonical(table: pa.Table) -> pa.Table:
    """Normalized and sorted by every column: equal multisets give equal tables."""
    if len(set(table.column_names)) != table.num_columns:
        raise ValueError(f"result has duplicate column names: {table.column_names}")
    return sorted_rows(normalize(table))


def compare(result: pa.Table, reference: pa.Table) -> dict[str, Any]:
    """A verdict on ``result`` against ``reference`` (both already :func:`canonical`)."""
    verdict: dict[str, Any] = {
        "equal": False,
        "rows": result.num_rows,
        "reference_rows": reference.num_rows,
        "reason": None,
    }
    if set(result.column_names) != set(reference.column_names):
        verdict["reason"] = (
            f"columns differ: {sorted(result.column_names)} vs {sorted(reference.column_names)}"
        )
        return verdict
    result = sorted_rows(result.select(reference.column_names))
    if result.schema != reference.schema:
        pairs = [
            f"{f.name}: {f.type} vs {reference.schema.field(f.name).type}"
            for f in result.schema
            if f.type != reference.schema.field(f.name).type
        ]
        verdict["reason"] = "column types differ after normalization: " + "; ".join(pairs)
        return verdict
    if result.equals(reference):
        verdict["equal"] = True
        return verdict
    verdict.update(difference(result, reference))
    verdict["reason"] = (
        f"{verdict['missing']:,} reference rows missing, {verdict['extra']:,} rows not in the "
        f"reference (multiset difference)"
    )
    return verdict


def difference(result: pa.Table, reference: pa.Table) -> dict[str, Any]:
    """How two same-schema tables differ: multiset differences both ways, a few examples."""
    import duckdb  # the describing tool for a failure, never the judge of equality

    con = duckdb.connect()
    con.register("res", result)
    con.register("ref", reference)

    def rows(sql: str) -> tuple[int, list[str]]:
        diff = f"SELECT * FROM {sql}"
        ((n,),) = con.execute(f"SELECT count(*) FROM ({diff})").fetchall()
        examples = [repr(r) for r in con.execute(f"{diff} LIMIT {EXAMPLES}").fetchall()]
        return int(n), examples

    missing, missing_examples = rows("ref EXCEPT ALL SELECT * FROM res")
    extra, extra_examples = rows("res EXCEPT ALL SELECT * FROM ref")
    return {
        "missing": missing,
        "extra": extra,
        "missing_examples": missing_examples,
        "extra_examples": extra_examples,
    }


def compare_files(reference: str, results: list[str]) -> dict[str, Any]:
    """Child entry: each Arrow IPC result file against the reference file."""
    ref = canonical(read(reference))
    verdicts = []
    for path in results:
        try:
            verdicts.append(compare(canonical(read(path)), ref))
        except (TypeError, ValueError, pa.ArrowInvalid) as exc:
            verdicts.append({"equal": False, "reason": f"cannot compare: {exc}"})
    return {"verdicts": verdicts}


def read(path: str) -> pa.Table:
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).read_all()


def write(table: pa.Table, path: str) -> None:
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


__all__ = ["FLOAT_DECIMALS", "canonical", "compare", "compare_files", "normalize", "read", "write"]
