"""Parquet files: source (``connector = 'parquet'``) and exactly-once sink."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.files.common import fsync_path
from datum_sql.connectors.files.sink import FileSink
from datum_sql.connectors.files.source import FileSource
from datum_sql.connectors.registry import sink, source
from datum_sql.errors import PlanError

_COMPRESSIONS = frozenset({"snappy", "zstd", "gzip", "lz4", "brotli", "none"})


@source("parquet")
class ParquetSource(FileSource):
    """Parquet files read with ``iter_batches``; a resume skips whole row groups by metadata."""

    EXTENSIONS = (".parquet", ".pq", ".parq")

    def infer_schema(self, path: str) -> pa.Schema:
        return pq.read_schema(path)

    def open_file(self, path: str, skip: int) -> tuple[Iterator[pa.RecordBatch], int]:
        pf = pq.ParquetFile(path)
        names = set(pf.schema_arrow.names)
        # Columns the file lacks are reported by the shared cast step, naming them.
        columns = [n for n in self.schema.names if n in names]
        groups: list[int] = []
        skipped = 0
        for i in range(pf.metadata.num_row_groups):
            rows = pf.metadata.row_group(i).num_rows
            if not groups and skipped + rows <= skip:
                skipped += rows
            else:
                groups.append(i)
        batches = pf.iter_batches(batch_size=self.batch_size, row_groups=groups, columns=columns)
        return iter(batches), skipped


class _ParquetWriter:
    def __init__(self, path: str, schema: pa.Schema, compression: str) -> None:
        self.path = path
        self._writer = pq.ParquetWriter(path, schema, compression=compression)

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()
        fsync_path(self.path)


@sink("parquet")
class ParquetSink(FileSink):
    """Part files of Parquet (one per ``max_file_rows`` rows or checkpoint)."""

    EXTENSION = "parquet"
    OPTIONS = {
        **FileSink.OPTIONS,
        "compression": "snappy (default), zstd, gzip, lz4, brotli or none",
    }

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        self.compression = str(self.spec.options.get("compression", "snappy")).lower()
        if self.compression not in _COMPRESSIONS:
            raise PlanError(
                f"{self.name}: option 'compression' must be one of "
                f"{', '.join(sorted(_COMPRESSIONS))}, got {self.compression!r}"
            )

    def open_writer(self, path: str, schema: pa.Schema) -> _ParquetWriter:
        return _ParquetWriter(path, schema, self.compression)
