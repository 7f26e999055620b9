"""The exactly-once directory sink all formats share: stage, then publish by rename.

Layout of ``path``::

    part-<checkpoint:08d>-<n:04d>-<id>.<ext>   published, complete files (what readers see)
    _staging/<id32>.<ext>                      being written (readers skip "_" names)
    _staging/part-...                          pre-committed: final name, not yet published

``write`` streams rows into the current staging file, rolling to a new one after
``max_file_rows`` rows. The file is written by a thread of the sink's own, fed through a
queue of :data:`QUEUED_BATCHES` batches, so encoding and writing overlap with the query's
processing: ``write`` waits only while the queue is full. A failed write is raised by the
next call (``write``, ``pre_commit``, ``close``), naming the file; every step that stages
or publishes first waits until the queue is written. ``pre_commit`` closes and fsyncs it, gives every file written since
the previous ``pre_commit`` its final name (still inside ``_staging``) and returns the
names of all pre-committed files not yet published, with each file's size and SHA-256: a
checkpoint whose commit never came is carried by the next one, so its rows are not lost.
``commit`` checks every named file against its checksum, then moves them up with
``os.replace`` (atomic: a reader never sees a half-written part); a damaged file fails the
commit before any file moves. A file already moved is skipped, so a commit replayed by
recovery is harmless.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import uuid
from abc import abstractmethod
from typing import Any, ClassVar, Protocol

import pyarrow as pa

from datum_sql.connectors.base import ConnectorSpec, Sink, StagedCheck
from datum_sql.connectors.files.common import fsync_path, int_option
from datum_sql.durable import file_sha256
from datum_sql.errors import SinkError

DEFAULT_MAX_FILE_ROWS = 1_000_000
STAGING_DIR = "_staging"
#: Batches handed to the writer thread that it has not written yet, at most.
QUEUED_BATCHES = 4


class Writer(Protocol):
    def write(self, batch: pa.RecordBatch) -> None: ...

    def close(self) -> None:
        """Finish the file and fsync it."""


class FileSink(Sink):
    """A directory of part files, published once per checkpoint (exactly-once)."""

    EXTENSION: ClassVar[str] = ""
    OPTIONS: ClassVar[dict[str, str]] = {
        "path": "directory of part files (created if missing)",
        "max_file_rows": f"rows per part file before rolling to a new one "
        f"(default {DEFAULT_MAX_FILE_ROWS})",
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("path",)
    EXACTLY_ONCE: ClassVar[bool] = True
    ACCEPTS_CHANGELOG: ClassVar[bool] = False

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        self.path = str(spec.options["path"])
        self.staging = os.path.join(self.path, STAGING_DIR)
        self.max_file_rows = int_option(
            spec.name, spec.options, "max_file_rows", DEFAULT_MAX_FILE_ROWS
        )
        self._schema: pa.Schema | None = spec.schema
        self._writer: Writer | None = None
        self._writer_name = ""
        self._writer_rows = 0
        self._unstaged: list[str] = []  # closed files not yet handed to pre_commit
        self._staged: dict[str, int] = {}  # pre-committed (final name -> checkpoint id)
        self._checksums: dict[str, dict[str, Any]] = {}  # final name -> {"size", "sha256"}
        self._rows_written = 0
        self._files_committed = 0
        self._queue: queue.Queue[pa.RecordBatch | None] = queue.Queue(QUEUED_BATCHES)
        self._thread: threading.Thread | None = None
        #: The writer thread's failure, raised by the next call (it skips later batches).
        self._failure: BaseException | None = None

    # -- format hooks -------------------------------------------------------------------

    @abstractmethod
    def open_writer(self, path: str, schema: pa.Schema) -> Writer:
        """A writer of a new file at ``path``."""

    def check_schema(self, schema: pa.Schema) -> None:
        """Refuse, before any row moves, a schema the format cannot hold."""

    # -- Sink ---------------------------------------------------------------------------

    async def open(self, schema: pa.Schema) -> None:
        self._schema = self.spec.schema or schema
        self.check_schema(self._schema)
        await asyncio.to_thread(os.makedirs, self.staging, exist_ok=True)

    async def write(self, batch: pa.RecordBatch) -> None:
        self._raise_failure()
        if not batch.num_rows:
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._writer_loop, name=f"sink {self.name} writer", daemon=True
            )
            self._thread.start()
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            await asyncio.to_thread(self._queue.put, batch)

    async def pre_commit(self, checkpoint_id: int) -> dict[str, Any]:
        await self._drain()
        await asyncio.to_thread(self._stage, checkpoint_id)
        files = list(self._staged)
        return {"files": files, "checksums": {name: self._checksums[name] for name in files}}

    async def commit(self, checkpoint_id: int, staged: dict[str, Any] | None = None) -> None:
        """Publish ``staged["files"]`` (default: every file pre-committed up to
        ``checkpoint_id``)."""
        if staged is not None:
            files = list(staged.get("files", []))
            checksums = dict(staged.get("checksums", {}))
        else:
            files = [name for name, cid in self._staged.items() if cid <= checkpoint_id]
            checksums = self._checksums
        if files:
            await asyncio.to_thread(self._publish, checkpoint_id, files, checksums)

    async def verify_staged(self, checkpoint_id: int, staged: dict[str, Any]) -> StagedCheck:
        """Each file of ``staged`` is still staged and intact, or already published."""
        return await asyncio.to_thread(self._verify, staged)

    async def abort(self) -> None:
        """Delete what was written since the last ``pre_commit``.

        Pre-committed files stay in ``_staging`` (invisible): their checkpoint may already
        be published, and recovery then commits them. :meth:`discard_uncommitted` removes
        the ones no manifest refers to.
        """
        # the query is failing or stopping already: what the writer did wrong changes nothing
        await self._drain(raise_failure=False)
        self._failure = None
        await asyncio.to_thread(self._close_current)
        doomed, self._unstaged = self._unstaged, []
        await asyncio.to_thread(self._remove, doomed)

    async def discard_uncommitted(self, keep: set[str]) -> None:
        """Delete every staging file except ``keep`` (the staged names of the manifest that
        recovery restores). Call before the first write of a restarted query."""
        names = await asyncio.to_thread(self._staging_names)
        await asyncio.to_thread(self._remove, [n for n in names if n not in keep])
        self._staged = {name: cid for name, cid in self._staged.items() if name in keep}
        self._checksums = {name: c for name, c in self._checksums.items() if name in keep}

    async def close(self) -> None:
        # Rows written after the last pre_commit were never part of a checkpoint: they
        # stay in _staging for discard_uncommitted, like after a crash.
        try:
            await self._drain()
        finally:
            if self._thread is not None:
                self._queue.put(None)
                await asyncio.to_thread(self._thread.join)
                self._thread = None
            if self._writer is not None:
                await asyncio.to_thread(self._close_current)

    def metrics(self) -> dict[str, Any]:
        return {"rows_written": self._rows_written, "files_committed": self._files_committed}

    # -- the writer thread ---------------------------------------------------------------

    async def _drain(self, *, raise_failure: bool = True) -> None:
        """Until the writer thread wrote every queued batch; then its failure, if any."""
        if self._thread is not None and self._queue.unfinished_tasks:
            await asyncio.to_thread(self._queue.join)
        if raise_failure:
            self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure = self._failure
            if isinstance(failure, SinkError):
                raise SinkError(str(failure)) from failure
            raise SinkError(f"sink {self.name!r}: writing failed: {failure!r}") from failure

    def _writer_loop(self) -> None:
        while True:
            batch = self._queue.get()
            try:
                if batch is None:
                    return
                if self._failure is None:
                    self._write(batch)
            except BaseException as exc:  # raised by the next call of the query's side
                self._failure = exc
            finally:
                self._queue.task_done()

    # -- internals (worker threads) -----------------------------------------------------

    def _write(self, batch: pa.RecordBatch) -> None:
        batch = self._conform(batch)
        offset = 0
        while offset < batch.num_rows:
            if self._writer is None:
                self._writer_name = f"{uuid.uuid4().hex}.{self.EXTENSION}"
                target = os.path.join(self.staging, self._writer_name)
                self._sink_io(
                    f"create directory {self.staging}", os.makedirs, self.staging, 0o777, True
                )
                self._writer = self._sink_io(
                    f"create part file {target}", self.open_writer, target, batch.schema
                )
                self._writer_rows = 0
            take = min(batch.num_rows - offset, self.max_file_rows - self._writer_rows)
            self._sink_io(self._writing(), self._writer.write, batch.slice(offset, take))
            offset += take
            self._writer_rows += take
            self._rows_written += take
            if self._writer_rows >= self.max_file_rows:
                self._close_current()

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        schema = self._schema
        if schema is None:
            self._schema = schema = batch.schema
            self.check_schema(schema)
        if batch.schema.equals(schema):
            return batch
        missing = [n for n in schema.names if n not in batch.schema.names]
        if missing:
            raise SinkError(f"sink {self.name!r}: batch lacks column(s) {', '.join(missing)}")
        try:
            return batch.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise SinkError(
                f"sink {self.name!r}: cannot write rows of {batch.schema} as {schema}: {exc}"
            ) from exc

    def _close_current(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            self._sink_io(self._writing(), writer.close)
            self._unstaged.append(self._writer_name)

    def _stage(self, checkpoint_id: int) -> None:
        self._close_current()
        for n, name in enumerate(self._unstaged):
            final = f"part-{checkpoint_id:08d}-{n:04d}-{name[:8]}.{self.EXTENSION}"
            src, path = os.path.join(self.staging, name), os.path.join(self.staging, final)
            self._sink_io(f"stage {src} as {path}", os.replace, src, path)
            self._staged[final] = checkpoint_id
            self._checksums[final] = {
                "size": self._sink_io(_read_back(path), os.path.getsize, path),
                "sha256": self._sink_io(_read_back(path), file_sha256, path),
            }
        if self._unstaged:
            self._sink_io(f"flush directory {self.staging}", fsync_path, self.staging)
        self._unstaged = []

    def _publish(
        self, checkpoint_id: int, files: list[str], checksums: dict[str, dict[str, Any]]
    ) -> None:
        damaged = [d for name in files if (d := self._damage(name, checksums)) is not None]
        if damaged:
            raise SinkError(
                f"sink {self.name!r}: checkpoint {checkpoint_id} not published: "
                + "; ".join(damaged)
            )
        for name in files:
            src, dst = os.path.join(self.staging, name), os.path.join(self.path, name)
            if os.path.exists(src):
                self._sink_io(f"publish staged file {src} as {dst}", os.replace, src, dst)
                self._files_committed += 1
            self._staged.pop(name, None)
            self._checksums.pop(name, None)
        self._sink_io(f"flush directory {self.path}", fsync_path, self.path)

    def _verify(self, staged: dict[str, Any]) -> StagedCheck:
        files = list(staged.get("files", []))
        checksums = dict(staged.get("checksums", {}))
        damaged = [d for name in files if (d := self._damage(name, checksums)) is not None]
        published = any(
            not os.path.exists(os.path.join(self.staging, name))
            and os.path.exists(os.path.join(self.path, name))
            for name in files
        )
        return StagedCheck(tuple(damaged), published)

    def _damage(self, name: str, checksums: dict[str, dict[str, Any]]) -> str | None:
        """Why the staged file ``name`` cannot be published, or None (intact, or published)."""
        src = os.path.join(self.staging, name)
        if not os.path.exists(src):
            if os.path.exists(os.path.join(self.path, name)):
                return None
            return f"staged file {src} is gone and was never published"
        expected = checksums[name]
        size = self._sink_io(_read_back(src), os.path.getsize, src)
        if size != expected["size"]:
            return f"staged file {src} is damaged ({size} bytes, {expected['size']} staged)"
        if self._sink_io(_read_back(src), file_sha256, src) != expected["sha256"]:
            return f"staged file {src} is damaged (checksum mismatch)"
        return None

    def _staging_names(self) -> list[str]:
        if not os.path.isdir(self.staging):
            return []
        return sorted(os.listdir(self.staging))

    def _remove(self, names: list[str]) -> None:
        for name in names:
            try:
                os.remove(os.path.join(self.staging, name))
            except FileNotFoundError:
                pass

    def _writing(self) -> str:
        return f"write part file {os.path.join(self.staging, self._writer_name)}"

    def _sink_io(self, action: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``; an I/O error says which ``action`` failed (naming the file)."""
        try:
            return fn(*args)
        except (pa.ArrowException, OSError) as exc:
            raise SinkError(f"sink {self.name!r}: cannot {action}: {exc}") from exc


def _read_back(path: str) -> str:
    return f"read back staged file {path}"
