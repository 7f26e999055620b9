"""The file source all formats share: listing, positions, change detection, the
bad-record policy, and conforming rows to the declared columns.

A format opens each file as a :class:`FileReader`, which yields :class:`Block`\\ s of parsed
rows, names where a row came from, and fingerprints what it read. Everything else is here,
vectorized over a block: valid UTF-8 in text columns, casts to the declared types, NOT NULL
columns. A row that fails any of them (or that the format could not parse) follows
``bad_records``: ``fail`` (default) yields the rows before it and raises
:class:`~datum_sql.errors.SourceError` naming the file, the line (or row) and the reason;
``skip`` counts it; ``dead_letter`` also hands it to the runtime as
:class:`~datum_sql.connectors.base.RejectedRecords` (raw record, reason, ``file:line``) for
the sink ``dead_letter.sink``.

Order and position
------------------
Files are read in order of modification time, then name, each once. The position is
``{"done": [fingerprint, ...], "file": path, "read": fingerprint, "at": {...}, "row": k,
"rejected": j, "incremental": {...}}``: the files read to their end, each with a fingerprint
of what was read (size, modification time, a checksum); the file being read, a fingerprint
of it up to the end of the block being read, where that block starts (the reader's ``at``),
how many input rows of that block were yielded and below which row its rejected rows were
handed over. Blocks are replayed from ``at``, so a resume neither repeats nor skips a row or a
rejected record.

On :meth:`open` (and, in ``continuous`` mode, at every listing) every fingerprint is checked
against the file as it is now. A new file is read whatever its name; rows appended to a text
file are read from where the last read ended; a file changed otherwise (rewritten, truncated)
is a loud error, never rows silently skipped, unless ``incremental.column`` is set: then a
changed file is read again and only rows above the highest value an earlier pass read pass.
A read file that was deleted is fine: its rows were read.
"""

from __future__ import annotations

import asyncio
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from datum_sql.connectors.base import ConnectorSpec, RejectedRecords, Source, SourceItem
from datum_sql.connectors.files.common import (
    bad_records_option,
    int_option,
    list_files,
    uncastable_rows,
)
from datum_sql.connectors.files.incremental import Incremental
from datum_sql.connectors.text import has_text, invalid_utf8
from datum_sql.errors import PlanError, SourceError
from datum_sql.types import parse_duration

DEFAULT_BATCH_SIZE = 65_536
DEFAULT_DISCOVERY_INTERVAL_S = 10.0
SCAN_MODES = ("bounded", "continuous")
#: ``ConnectorSpec.extra`` key: (first, end) file names; only files whose names sort in
#: ``[first, end)`` are read (a replay of a range of files).
FILE_NAMES = "file_names"
_END = object()

#: What the dead-letter sink receives per rejected record (the runtime keeps the first three).
REJECTED_SCHEMA = pa.schema(
    [
        ("raw", pa.binary()),
        ("reason", pa.string()),
        ("position", pa.string()),
        ("file", pa.string()),
    ]
)


@dataclass
class Block:
    """Consecutive input rows of one file, parsed but not yet checked against the schema.

    ``n`` input rows (CSV rows, JSON lines, Parquet rows; blank lines are none): the rows of
    ``table`` (in the format's read types) parsed, ``bad`` holds the (input index, reason) of
    those that did not, and ``rows`` the input index of each table row when some did not
    (``None``: table row i is input row i). ``at`` is where a reader resumes to replay this
    block. ``read`` fingerprints the file through the end of this block (checked by
    :meth:`FileSource.changes` before a resume inside it). ``exact`` is False when a table
    row's input index is only assumed (a text format's fast path):
    :meth:`FileReader.exact` redoes the block before a row is named.
    """

    at: dict[str, Any]
    read: dict[str, Any]
    n: int
    table: pa.Table
    rows: np.ndarray | None = None
    bad: list[tuple[int, str]] = field(default_factory=list)
    exact: bool = True
    #: The columns of the table's schema the block carries and is checked in (None: all);
    #: a reader leaves out only columns the query does not read that cannot reject a row.
    columns: list[str] | None = None


@dataclass(frozen=True)
class Origin:
    """Where an input row came from: its raw record, ``where`` for messages (``x.csv, line
    3``) and ``position`` for the dead-letter sink (``x.csv:3``)."""

    raw: bytes
    where: str
    position: str


class FileReader(ABC):
    """One file being read, from its start or from a block's ``at``; iterating yields
    :class:`Block`\\ s (in a worker thread)."""

    def __iter__(self) -> Iterator[Block]:
        return self

    @abstractmethod
    def __next__(self) -> Block: ...

    def exact(self, block: Block) -> Block:
        """``block`` with every table row's input index known (see :attr:`Block.exact`)."""
        return block

    @property
    def ended(self) -> bool:
        """True when it is known, without reading, that no block follows."""
        return False

    @abstractmethod
    def origins(self, block: Block, rows: list[int]) -> list[Origin]:
        """Where the input rows ``rows`` of ``block`` came from."""

    @abstractmethod
    def fingerprint(self) -> dict[str, Any]:
        """What was read of the file, after its last block: JSON-able, checked by
        :meth:`FileSource.changes`."""

    def close(self) -> None:
        """Release the file."""


@dataclass
class _Decoded:
    """A block checked against the schema: ``table`` holds its good rows (conformed),
    ``rows`` their input indices (None: all ``n``), ``rejected`` the bad ones in order.
    Under ``fail`` the block ends before its first bad row, which is ``failure``."""

    at: dict[str, Any]
    read: dict[str, Any]
    n: int
    table: pa.Table
    rows: np.ndarray | None
    rejected: list[tuple[int, str, Origin]]
    failure: tuple[int, str, Origin] | None = None


@dataclass(frozen=True)
class Changed:
    """How a file differs from what a fingerprint recorded of it: ``why`` (for messages),
    and whether rows were only ``appended`` after what was read (read on from there)."""

    why: str
    appended: bool = False


class FileSource(Source):
    """Rows of the files ``path`` names, in order of modification time then name, as batches
    of at most ``batch_size`` rows.

    Every batch has :attr:`schema`: the declared columns (matched by name, then cast) or,
    without a declaration, the schema of the first file (:attr:`table_schema`), cut to the
    columns the query reads. Rows are still checked in every column that can reject one.
    ``scan.mode = 'continuous'`` lists ``path`` again every ``discovery_interval`` and reads
    what appeared (new files, rows appended) instead of ending.
    """

    EXTENSIONS: ClassVar[tuple[str, ...]] = ()
    OPTIONS: ClassVar[dict[str, str]] = {
        "path": "a file, a directory (its files of this format) or a glob",
        "batch_size": f"most rows per batch (default {DEFAULT_BATCH_SIZE})",
        "bad_records": "fail (default), skip or dead_letter: what a row that cannot be read "
        "(or breaks NOT NULL) does",
        "dead_letter.sink": "with bad_records = 'dead_letter': the sink receiving rejected rows",
        "scan.mode": "bounded (default): read the files there are, then end; continuous: keep "
        "reading new files and appended rows as they appear",
        "discovery_interval": "with scan.mode = 'continuous': how often the path is listed "
        f"again (default {DEFAULT_DISCOVERY_INTERVAL_S:g} seconds)",
        "incremental.column": "read only rows whose value in this column is above the highest "
        "an earlier run read (for files rewritten rather than appended to)",
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("path",)

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        options = spec.options
        self.path = str(options["path"])
        self.batch_size = int_option(spec.name, options, "batch_size", DEFAULT_BATCH_SIZE)
        self.bad_records = bad_records_option(spec.name, options)
        mode = str(options.get("scan.mode", "bounded")).lower()
        if mode not in SCAN_MODES:
            raise PlanError(
                f"{spec.name}: option 'scan.mode' must be one of {', '.join(SCAN_MODES)}, "
                f"got {options['scan.mode']!r}"
            )
        #: True: keep listing ``path`` for new files and rows instead of ending
        self.continuous = mode == "continuous"
        self.discovery_interval_s = _interval(spec.name, options)
        files = self._listing()
        self._todo: list[tuple[str, dict[str, Any] | None]] = [(p, None) for p in files]
        #: path -> fingerprint of what was read of it, in the order the files were read
        self._done: dict[str, dict[str, Any]] = {}
        self._reading: dict[str, Any] | None = None  # "file", "read", "at", "row", "rejected"
        self._resume: dict[str, Any] | None = None
        self._rows = 0
        self._rejected = 0
        if spec.schema is not None:
            self._schema = spec.schema
        elif files:
            try:
                self._schema = self.infer_schema(files[0])
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise SourceError(f"source {self.name!r}: cannot read {files[0]}: {exc}") from exc
        else:
            raise SourceError(
                f"source {self.name!r}: no files at {self.path!r} to infer the columns from; "
                "declare the columns or add a file"
            )
        column = options.get("incremental.column")
        self._incremental = (
            Incremental(spec.name, str(column), self._schema) if column is not None else None
        )
        self._out = (
            self._schema
            if spec.columns is None
            else pa.schema([f for f in self._schema if f.name in spec.columns])
        )

    @property
    def schema(self) -> pa.Schema:
        return self._out

    @property
    def table_schema(self) -> pa.Schema:
        """Every column of the table, read or not: what rows are checked against."""
        return self._schema

    @property
    def bounded(self) -> bool:
        return not self.continuous

    @property
    def wanted(self) -> list[str]:
        """The columns a reader must give: those of :attr:`schema` and the incremental one."""
        names = self.schema.names
        if self._incremental is not None and self._incremental.column not in names:
            return [n for n in self._schema.names if n in names or n == self._incremental.column]
        return names

    # -- format hooks -------------------------------------------------------------------

    @abstractmethod
    def infer_schema(self, path: str) -> pa.Schema:
        """The schema of one file (metadata or its first block)."""

    @abstractmethod
    def open_reader(self, path: str, at: dict[str, Any] | None) -> FileReader:
        """``path`` from its start, or from the block that started at ``at``."""

    @abstractmethod
    def changes(self, path: str, read: dict[str, Any]) -> Changed | None:
        """How ``path`` differs from what a :meth:`FileReader.fingerprint` recorded of it
        (None: not at all, or only in what was not read yet)."""

    def tail(self, read: dict[str, Any]) -> dict[str, Any]:
        """Where a reader resumes to read the rows appended after what ``read`` (a
        fingerprint whose :meth:`changes` say ``appended``) recorded."""
        raise NotImplementedError(f"{type(self).__name__} files are never appended to")

    # -- Source -------------------------------------------------------------------------

    async def open(self, position: dict[str, Any] | None) -> None:
        # The path is listed again: files may have appeared since the source was made.
        self._done, self._reading, self._resume = {}, None, None
        if position:
            self._todo = []
            await asyncio.to_thread(self._restore, position)
        else:
            self._todo = [(p, None) for p in await asyncio.to_thread(self._listing)]

    def position(self) -> dict[str, Any]:
        pos: dict[str, Any] = {"done": list(self._done.values())}
        if self._reading is not None:
            pos.update(self._reading)
        if self._incremental is not None:
            pos["incremental"] = self._incremental.position()
        return pos

    async def read(self) -> AsyncIterator[SourceItem]:
        while True:
            while self._todo:
                path, tail = self._todo[0]
                resume, self._resume = self._resume, None
                at = resume["at"] if resume else tail
                # One worker call opens the file and decodes its first block, and none is
                # made to learn that a reader that knows it has ended has: with many small
                # files, the round trips to the worker thread were most of the time.
                reader, decoded = await asyncio.to_thread(self._first_block, path, at)
                # From its first row on, a file is the one being read, not one done before.
                self._done.pop(path, None)
                try:
                    skip_row = resume["row"] if resume else 0
                    skip_rejected = resume["rejected"] if resume else 0
                    while decoded is not None:
                        for item in self._items(path, decoded, skip_row, skip_rejected):
                            yield item
                        # counted from ``at``: the blocks of a resumed reader may be cut otherwise
                        skip_row = max(skip_row - decoded.n, 0)
                        skip_rejected = max(skip_rejected - decoded.n, 0)
                        decoded = (
                            None
                            if reader.ended
                            else await asyncio.to_thread(self._decode, reader, path)
                        )
                    done = {"path": path, **reader.fingerprint()}
                finally:
                    reader.close()
                self._done[path] = done
                self._todo.pop(0)
                self._reading = None
            if self._incremental is not None:
                self._incremental.pass_done()
            if not self.continuous:
                return
            await asyncio.sleep(self.discovery_interval_s)
            await asyncio.to_thread(self._discover)

    def metrics(self) -> dict[str, Any]:
        return {
            "files": len(self._done) + len(self._todo),
            "files_read": len(self._done),
            "file": self._reading["file"] if self._reading else None,
            "rows": self._rows,
            "rejected": self._rejected,
        }

    # -- listing and resuming -------------------------------------------------------------

    def _listing(self) -> list[str]:
        """The files ``path`` names now, in reading order: modification time, then name."""
        files = list_files(self.name, self.path, self.EXTENSIONS)
        names = self.spec.extra.get(FILE_NAMES)
        if names is not None:
            files = [p for p in files if names[0] <= os.path.basename(p) < names[1]]
        stamped = []
        for path in files:
            try:
                stamped.append((os.stat(path).st_mtime_ns, path))
            except FileNotFoundError:
                continue  # gone between the listing and the stat: never seen
        return [path for _, path in sorted(stamped)]

    def _restore(self, position: dict[str, Any]) -> None:
        """Check ``position`` against the files as they are now; resume after it."""
        if self._incremental is not None:
            self._incremental.restore(position.get("incremental"))
        self._done = {read["path"]: read for read in position.get("done", [])}
        current = position.get("file")
        if current is not None:
            if not os.path.exists(current):
                raise SourceError(
                    f"source {self.name!r}: cannot resume: {current} was being read at the "
                    "checkpoint and is gone; start over with fresh=True (CLI: --fresh)"
                )
            change = self._change(current, position["read"])
            if change is not None and not change.appended:
                raise self._changed_error(current, change)
            self._resume = {k: position[k] for k in ("at", "row", "rejected")}
            self._reading = {k: position[k] for k in ("file", "read", "at", "row", "rejected")}
        self._todo = [(current, None)] if current is not None else []
        self._discover()

    def _discover(self) -> None:
        """Add to what is to be read the files that appeared and the rows appended to files
        read before; a read file changed otherwise fails (see the module docstring)."""
        listed = self._listing()
        seen = set(listed)
        for gone in [p for p in self._done if p not in seen]:
            del self._done[gone]  # read, then deleted: its rows were read
        waiting = {p for p, _ in self._todo}
        found: list[tuple[int, str, dict[str, Any] | None]] = []
        for path in listed:
            if path in waiting:
                continue
            tail = None
            read = self._done.get(path)
            if read is not None:
                change = self._change(path, read)
                if change is None:
                    continue
                if change.appended:
                    tail = self.tail(read)
                elif self._incremental is None:
                    raise self._changed_error(path, change)
            try:
                found.append((os.stat(path).st_mtime_ns, path, tail))
            except FileNotFoundError:
                continue
        self._todo.extend((path, tail) for _, path, tail in sorted(found, key=lambda f: f[:2]))

    def _change(self, path: str, read: dict[str, Any]) -> Changed | None:
        try:
            return self.changes(path, read)
        except OSError as exc:
            raise SourceError(f"source {self.name!r}: cannot check {path}: {exc}") from exc

    def _changed_error(self, path: str, change: Changed) -> SourceError:
        return SourceError(
            f"source {self.name!r}: {path} changed after this query read it: {change.why}. "
            "Resuming would skip or repeat its rows. To read everything again, start the query "
            "over with fresh=True (CLI: --fresh; the sink keeps what earlier runs wrote); to "
            "add rows, append them or put them in a new file; for files rewritten whole, set "
            "'incremental.column' to a column that grows"
        )

    # -- reading --------------------------------------------------------------------------

    def _open_reader(self, path: str, at: dict[str, Any] | None) -> FileReader:
        try:
            return self.open_reader(path, at)
        except FileNotFoundError:
            raise SourceError(
                f"source {self.name!r}: {path} vanished before it was read to its end; the "
                "rows it held were not read (move files into the directory only once written, "
                "and remove them only after the query read them)"
            ) from None
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise SourceError(f"source {self.name!r}: cannot read {path}: {exc}") from exc

    def _first_block(
        self, path: str, at: dict[str, Any] | None
    ) -> tuple[FileReader, _Decoded | None]:
        """``path`` opened at ``at``, and its first block (in a worker thread)."""
        reader = self._open_reader(path, at)
        try:
            return reader, self._decode(reader, path)
        except BaseException:
            reader.close()
            raise

    def _decode(self, reader: FileReader, path: str) -> _Decoded | None:
        """The next block of ``reader``, checked against the schema (in a worker thread)."""
        try:
            block = next(reader, None)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise SourceError(f"source {self.name!r}: cannot read {path}: {exc}") from exc
        if block is None:
            return None
        first_only = self.bad_records == "fail"
        bad, keep = self._check(block, path, first_only)
        if bad and not block.exact:
            block = reader.exact(block)
            bad, keep = self._check(block, path, first_only)
        if not bad:
            return self._above_mark(
                _Decoded(block.at, block.read, block.n, block.table, block.rows, [])
            )
        rows = block.rows if block.rows is not None else np.arange(block.n, dtype=np.int64)
        if first_only:
            row, reason = bad[0]
            cut = int(np.searchsorted(rows, row))
            failure = (row, reason, reader.origins(block, [row])[0])
            table = block.table.slice(0, cut)
            return self._above_mark(
                _Decoded(block.at, block.read, row, table, rows[:cut], [], failure)
            )
        origins = reader.origins(block, [r for r, _ in bad])
        rejected = [(r, why, o) for (r, why), o in zip(bad, origins)]
        table = block.table.filter(pa.array(keep))
        return self._above_mark(
            _Decoded(block.at, block.read, block.n, table, rows[keep], rejected)
        )

    def _above_mark(self, decoded: _Decoded) -> _Decoded:
        """``decoded`` (its good rows as read) conformed, less the rows at or below the
        incremental mark."""
        keep = None
        if self._incremental is not None:
            values = decoded.table.column(self._incremental.column)
            if values.type != self._incremental.type:  # read as text, say: every row casts
                values = values.cast(self._incremental.type)
            keep = self._incremental.above_mark(values)
        table = decoded.table if keep is None else decoded.table.filter(pa.array(keep))
        decoded.table = self._conform(table)
        if keep is not None:
            rows = (
                decoded.rows if decoded.rows is not None else np.arange(decoded.n, dtype=np.int64)
            )
            decoded.rows = rows[keep]
        return decoded

    def _check(
        self, block: Block, path: str, first_only: bool
    ) -> tuple[list[tuple[int, str]], np.ndarray]:
        """The (input index, reason) of every bad row of ``block``, sorted (or only the
        first, if ``first_only``), and a mask of the table rows that are good."""
        table = block.table
        reasons: dict[int, str] = {}  # table row -> the first reason it fails
        for f in self._schema:
            if block.columns is not None and f.name not in block.columns:
                continue
            idx = table.schema.get_field_index(f.name)
            if idx < 0:
                raise SourceError(
                    f"source {self.name!r}: {path} has no column {f.name!r} "
                    f"(it has {', '.join(table.schema.names)})"
                )
            column = table.column(idx)
            # Only where the declared column holds text: BYTEA values are any bytes.
            for i in invalid_utf8(column).tolist() if has_text(f.type) else ():
                reasons.setdefault(i, f"column {f.name!r} is not valid UTF-8")
            if column.type != f.type:
                try:
                    column = column.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    for i in uncastable_rows(column, f.type, first_only=first_only):
                        value = _show(column, i)
                        reasons.setdefault(i, f"column {f.name!r}: cannot read {value} as {f.type}")
            incremental = self._incremental is not None and f.name == self._incremental.column
            if (incremental or not f.nullable) and column.null_count:
                what = "the incremental column" if incremental else "NOT NULL column"
                nulls = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))
                for i in nulls[:1].tolist() if first_only else nulls.tolist():
                    reasons.setdefault(i, f"missing value for {what} {f.name!r}")
        keep = np.ones(table.num_rows, dtype=bool)
        if not reasons and not block.bad:
            return [], keep
        keep[list(reasons)] = False
        rows = block.rows
        found = [(int(i if rows is None else rows[i]), why) for i, why in reasons.items()]
        bad = sorted(block.bad + found)
        return (bad[:1] if first_only else bad), keep

    def _conform(self, table: pa.Table) -> pa.Table:
        """The output columns of ``table`` by name, cast (every row is known to cast)."""
        columns = []
        for f in self._out:
            column = table.column(f.name)
            columns.append(column if column.type == f.type else column.cast(f.type))
        return pa.Table.from_arrays(columns, schema=self._out).combine_chunks()

    def _items(
        self,
        path: str,
        decoded: _Decoded,
        skip_row: int,
        skip_rejected: int,
    ) -> Iterator[SourceItem]:
        """The items of one block, in input order, ``batch_size`` input rows at a time: the
        range's rejected rows (position: past them), then its good rows (position: past the
        range). Rows below ``skip_row`` and rejected rows below ``skip_rejected`` were
        handed over before a resume."""
        rejected_rows = np.asarray([r for r, _, _ in decoded.rejected], dtype=np.int64)
        state = {"file": path, "read": decoded.read, "at": decoded.at, "row": skip_row}
        state["rejected"] = skip_rejected
        start = skip_row
        while start < decoded.n:
            end = min(start + self.batch_size, decoded.n)
            good = self._good(decoded, start, end)
            lo, hi = np.searchsorted(rejected_rows, [max(start, skip_rejected), end])
            if hi > lo:
                batch = _rejected_batch(path, decoded.rejected[lo:hi])
                self._rejected += batch.num_rows
                state["row"] = start if good is not None else end
                state["rejected"] = int(rejected_rows[hi - 1]) + 1
                self._reading = dict(state)
                yield RejectedRecords(batch)
            state["row"] = end
            self._reading = dict(state)
            if good is not None:
                self._rows += good.num_rows
                yield good
            start = end
        if decoded.failure is not None:
            _, reason, origin = decoded.failure
            raise SourceError(
                f"source {self.name!r}: {origin.where}: {reason.rstrip('.')}. "
                "Set bad_records = 'skip' or 'dead_letter' to go on past bad records"
            )

    def _good(self, decoded: _Decoded, start: int, end: int) -> pa.RecordBatch | None:
        """The good rows of input rows [start, end) of ``decoded`` (None: there are none)."""
        if decoded.rows is None:
            lo, hi = start, end
        else:
            lo, hi = (int(i) for i in np.searchsorted(decoded.rows, [start, end]))
        if hi <= lo:
            return None
        # the table's columns are single chunks (see _conform): one batch
        return decoded.table.slice(lo, hi - lo).to_batches()[0]


def _interval(table: str, options: dict[str, Any]) -> float:
    raw = options.get("discovery_interval", DEFAULT_DISCOVERY_INTERVAL_S)
    try:
        seconds = parse_duration(raw, what="'discovery_interval'").total_seconds()
    except ValueError as exc:
        raise PlanError(f"{table}: option {exc}") from None
    if seconds <= 0:
        raise PlanError(f"{table}: option 'discovery_interval' must be positive, got {raw!r}")
    return seconds


def _rejected_batch(path: str, rejected: list[tuple[int, str, Origin]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([o.raw for _, _, o in rejected], pa.binary()),
            pa.array([why for _, why, _ in rejected], pa.string()),
            pa.array([o.position for _, _, o in rejected], pa.string()),
            pa.array([path] * len(rejected), pa.string()),
        ],
        schema=REJECTED_SCHEMA,
    )


def _show(column: pa.Array | pa.ChunkedArray, i: int) -> str:
    """A value for a message (bytes as such when they are not text)."""
    value = column[i]
    try:
        return repr(value.as_py())
    except UnicodeDecodeError:
        return repr(value.cast(pa.binary()).as_py())
