"""The tables of a batch query as scans DataFusion reads as it goes, not tables loaded whole.

``ctx.sql`` over a large file must not hold the file in memory. Each table a query reads
is one of:

- **Parquet files** (a source, or a Parquet sink's committed part files): DataFusion's own
  Parquet reader over exactly the files the connector lists, so DataFusion prunes row
  groups by the query's predicate and reads only the columns the query needs. Taken only
  when it reads what the connector would: every declared column stored in its declared
  type (no cast that could reject a row) and every NOT NULL column free of nulls by the
  files' statistics; otherwise the table is streamed through the connector (below).
- **Streamed through its connector** (CSV, JSON Lines, DuckDB tables and sinks, bounded
  Kafka topics and generators): the connector reads the columns the query needs with its
  own parsing and bad-record policy, into an Arrow IPC file in a temporary directory that
  DataFusion then scans batch by batch; the columns the query does not need are nulls
  DataFusion never reads. A text format has to be parsed whole anyway, so a predicate could
  save no reading there.

Which columns a query needs is DataFusion's own answer: the projection of each table scan
of the query planned over empty tables of the same columns. Arrow tables and materialized
views are already in memory and are read as they are (see :func:`scan`).
"""

from __future__ import annotations

import functools
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from datum_sql.batch.read import TableReader, reader
from datum_sql.catalog import SinkEntry, SourceEntry
from datum_sql.connectors.base import ConnectorSpec, Source, data_batches
from datum_sql.run_sync import run_async

#: What DataFusion needs set to scan an Arrow IPC file batch by batch: split into byte
#: ranges, each range of a file is read into memory whole.
SCAN_CONFIG = {"datafusion.optimizer.repartition_file_scans": "false"}


class Scan(ABC):
    """One table of a batch query: the columns it has and how DataFusion reads it."""

    schema: pa.Schema
    #: the table's connector, for a query that reads it whole after all
    reader: TableReader

    def read_all(self) -> pa.Table:
        return self.reader.read_all()

    @abstractmethod
    def register(self, session: Any, name: str, columns: list[str], spool: str) -> None:
        """Make ``name`` in ``session`` this table (every column of :attr:`schema`), of
        which the query reads only ``columns``; temporary files go under ``spool``."""


def scan(entry: Any, spec: Callable[[SourceEntry | SinkEntry], ConnectorSpec]) -> Scan | None:
    """How a batch query scans ``entry`` (``spec`` makes its connector spec); None for a
    table read whole: Arrow data and views (in memory already), and a file sink with
    nothing committed. PlanError for what a batch query cannot read (see :func:`reader`)."""
    if not isinstance(entry, (SourceEntry, SinkEntry)) or entry.connector == "arrow":
        return None
    found = reader(entry, spec)
    if isinstance(found, pa.Table):
        return None
    if found.connector == "parquet":
        from datum_sql.connectors.files.common import list_files
        from datum_sql.connectors.files.parquet import ParquetSource

        source = found.source
        assert isinstance(source, ParquetSource)
        files = list_files(source.name, source.path, source.EXTENSIONS)
        if files and all(_parquet_as_declared(f, source.table_schema) for f in files):
            return ParquetScan(source.table_schema, found, files)
    return StreamedScan(found.source.schema, found)


def _parquet_as_declared(path: str, schema: pa.Schema) -> bool:
    """Whether DataFusion reads ``path`` as the Parquet connector would: each column of
    ``schema`` stored in its type (so no value can fail a cast), and each NOT NULL one
    without a null by every row group's statistics."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
    except (pa.ArrowException, OSError):
        return False  # the connector says what is wrong with the file
    stored = meta.schema.to_arrow_schema()
    for field in schema:
        i = stored.get_field_index(field.name)
        if i < 0 or stored.field(i).type != field.type:
            return False
        if not field.nullable and not _no_nulls(meta, field.name):
            return False
    return True


def _no_nulls(meta: Any, name: str) -> bool:
    leaves = [i for i in range(meta.num_columns) if meta.schema.column(i).path == name]
    if len(leaves) != 1:
        return False  # a nested column: its statistics are per leaf
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(leaves[0]).statistics
        if stats is None or not stats.has_null_count or stats.null_count:
            return False
    return True


@dataclass
class ParquetScan(Scan):
    """Parquet files read by DataFusion itself (one listing table per file, in a UNION ALL
    view when there are several): projection and predicate pushdown, row-group pruning."""

    schema: pa.Schema
    reader: TableReader
    files: list[str]

    def register(self, session: Any, name: str, columns: list[str], spool: str) -> None:
        if len(self.files) == 1:
            session.register_parquet(_quoted(name), self.files[0], **self._options(self.files[0]))
            return
        frames = []
        for i, path in enumerate(self.files):
            part = _quoted(f"{name}#part{i}")
            session.register_parquet(part, path, **self._options(path))
            frames.append(session.table(part))
        session.register_view(_quoted(name), functools.reduce(lambda a, b: a.union(b), frames))

    def _options(self, path: str) -> dict[str, Any]:
        # the connector takes a named file whatever its extension
        return {"schema": self.schema, "file_extension": os.path.splitext(path)[1]}


@dataclass
class StreamedScan(Scan):
    """Rows read by the table's connector, the needed columns only, into an Arrow IPC file
    DataFusion scans; the other columns are typed nulls it never reads."""

    schema: pa.Schema
    reader: TableReader

    def register(self, session: Any, name: str, columns: list[str], spool: str) -> None:
        from datafusion import col, lit

        # a query reading no column (count(*)) still needs the number of rows
        read = [c for c in self.schema.names if c in columns] or self.schema.names[:1]
        spec = ConnectorSpec(**{**vars(self.reader.spec), "columns": tuple(read)})
        out = pa.schema([self.schema.field(c) for c in read])
        path = os.path.join(spool, f"{len(os.listdir(spool))}.arrow")
        run_async(_spool(self.reader.make(spec), out, path))
        stored = _quoted(f"{name}#spooled")
        session.register_arrow(stored, path)
        frame = session.table(stored).select(
            *(
                col(_quoted(f.name)) if f.name in read else lit(None).cast(f.type).alias(f.name)
                for f in self.schema
            )
        )
        session.register_view(_quoted(name), frame)


async def _spool(source: Source, schema: pa.Schema, path: str) -> None:
    """Every row of ``source`` (its columns of ``schema``) into the IPC file ``path``."""
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        async for batch in data_batches(source):
            writer.write_batch(batch.select(schema.names))


def session_config(scans: Iterable[Scan]) -> Any:
    """The DataFusion session config a session scanning ``scans`` needs (None: the
    defaults)."""
    if not any(isinstance(s, StreamedScan) for s in scans):
        return None
    from datafusion import SessionConfig

    return SessionConfig(SCAN_CONFIG)


def register_scans(session: Any, scans: dict[str, Scan], sql: str, spool: str) -> None:
    """Register each table of ``scans`` (by catalog name) in ``session`` for the query
    ``sql``, reading only the columns DataFusion plans to read of it."""
    for name, table in scans.items():
        register_table(session, name, table.schema.empty_table())
    columns = needed_columns(session.sql(sql).optimized_logical_plan(), scans)
    for name, table in scans.items():
        session.deregister_table(_quoted(name))
        table.register(
            session, name, table.schema.names if columns is None else columns[name], spool
        )


def needed_columns(plan: Any, tables: Iterable[str]) -> dict[str, list[str]] | None:
    """The columns each of ``tables`` is scanned for in DataFusion's optimized logical
    ``plan``; None when some scan is out of reach of the walk (a subquery left inside an
    expression), so that every column must be read."""
    from datafusion.expr import TableScan

    wanted = set(tables)
    found: dict[str, set[str]] = {t: set() for t in wanted}
    scans, stack = 0, [plan]
    while stack:
        node = stack.pop()
        variant = node.to_variant()
        if isinstance(variant, TableScan):
            scans += 1
            table = variant.table_name()
            if table in wanted:
                found[table].update(n for _, n in variant.projection())
        stack.extend(node.inputs())
    if scans != plan.display_indent().count("TableScan:"):
        return None
    return {t: sorted(c) for t, c in found.items()}


def register_table(session: Any, name: str, table: pa.Table) -> None:
    """Register ``table`` as ``name`` in the DataFusion ``session`` (an empty table as one
    empty batch: DataFusion takes no table without a batch)."""
    batches = table.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]
    session.register_record_batches(_quoted(name), [batches])


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
