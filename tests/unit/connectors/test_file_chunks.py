"""Text files are parsed in chunks cut at record boundaries: whatever the quoting (stray
quotes, quoted line ends, doubled quotes, CRLF, blank lines) and wherever the chunks end,
the rows equal those pyarrow reads from the whole file at once."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.files import chunked
from datum_sql.errors import SourceError

SCHEMA = pa.schema([("a", pa.string()), ("b", pa.string())])

fields = st.text(alphabet='ab"\n, ', max_size=6)
lines = st.lists(st.tuples(fields, fields), max_size=25)


def whole_file(path: Path) -> pa.Table | None:
    """What pyarrow reads from the file in one call (None: it refuses the file)."""
    try:
        return pacsv.read_csv(
            path,
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=dict(zip(SCHEMA.names, SCHEMA.types)),
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid:
        return None


def chunked_read(path: Path) -> pa.Table:
    spec = ConnectorSpec(name="inp", options={"path": str(path)}, schema=SCHEMA)
    source = registry.create_source("csv", spec)

    async def run() -> list[pa.RecordBatch]:
        await source.open(None)
        return [b async for b in source.read()]

    return pa.Table.from_batches(asyncio.run(run()), schema=SCHEMA)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=lines, crlf=st.booleans(), chunk=st.integers(1, 40))
def test_chunks_read_what_pyarrow_reads_from_the_whole_file(
    rows: list[tuple[str, str]], crlf: bool, chunk: int
) -> None:
    end = "\r\n" if crlf else "\n"
    text = "a,b" + end + "".join(f"{x},{y}{end}" for x, y in rows)
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(chunked, "CHUNK_BYTES", chunk)
        path = Path(tmp) / "x.csv"
        path.write_text(text, newline="")
        expected = whole_file(path)
        if expected is None:
            with pytest.raises(SourceError):
                chunked_read(path)
        else:
            assert chunked_read(path).to_pylist() == expected.to_pylist()
