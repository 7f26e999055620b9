"""DuckDB tables: an exactly-once append or upsert sink, and a bounded source.

Sink protocol. ``write`` buffers Arrow batches in memory. ``pre_commit`` moves the buffer
into an Arrow IPC file under ``<path>.datum-staging/`` (fsynced: a checkpoint's rows must
survive a crash between the manifest and the commit) and returns every staged part not
yet committed, each with its file's SHA-256. ``commit`` applies those parts and records
each part's checkpoint id in ``_datum_commits(sink, checkpoint_id)`` in ONE transaction; a
part whose id is already recorded is skipped, so a commit replayed by recovery is a no-op.
A staged file read back (by recovery) is checked against its checksum first.

Lock. DuckDB lets one process open a database file for writing, and only while no other
process has it open (readers take a shared lock with ``read_only=True``). So the sink holds
the file only while it works on it: ``open`` (to check or create the table) and each
``commit`` connect, run one short transaction and close. Between commits other processes
can read the file. A commit that finds the file held retries with backoff for
``lock_timeout`` (default 30 s), then fails naming the file; the staged parts stay on disk
for the next commit or for recovery. The source opens the file ``read_only=True`` (a shared
lock, so readers never block each other) and waits the same way, for its own
``lock_timeout``, while a commit holds the file. An in-memory database (``path = ':memory:'``) lives
only in its connection, which the sink then keeps until ``close``.

The ``sink`` value is unique per sink instance (checkpoint ids restart with every run, so
the sink's name alone would make a second run's commits look like replays) and travels in
the staged record, so recovery commits under the key of the run that staged the rows.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.connectors.base import ConnectorSpec, Sink, Source, SourceItem, StagedCheck
from datum_sql.connectors.files.common import fsync_path, int_option
from datum_sql.connectors.registry import sink, source
from datum_sql.durable import file_sha256
from datum_sql.errors import PlanError, SinkError, SourceError
from datum_sql.types import parse_duration

COMMITS_TABLE = "_datum_commits"
OP = "_op"
_INSERTS = ("+I", "+U")
_DELETES = ("-D", "-U")
#: How long a commit waits for other connections to release the database file.
DEFAULT_LOCK_TIMEOUT = "30s"
#: First and longest pause between attempts to lock the file.
_RETRY_FIRST_S, _RETRY_MAX_S = 0.01, 0.5
#: Arrow-derived DuckDB type -> table column types it may be written into without loss.
_WIDER = {
    "TINYINT": {"SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT", "DOUBLE"},
    "SMALLINT": {"INTEGER", "BIGINT", "HUGEINT", "FLOAT", "DOUBLE"},
    "INTEGER": {"BIGINT", "HUGEINT", "DOUBLE"},
    "BIGINT": {"HUGEINT"},
    "UTINYINT": {"USMALLINT", "UINTEGER", "UBIGINT", "SMALLINT", "INTEGER", "BIGINT"},
    "USMALLINT": {"UINTEGER", "UBIGINT", "INTEGER", "BIGINT"},
    "UINTEGER": {"UBIGINT", "BIGINT"},
    "FLOAT": {"DOUBLE"},
    "TIMESTAMP_S": {"TIMESTAMP", "TIMESTAMP_MS", "TIMESTAMP_NS"},
    "TIMESTAMP_MS": {"TIMESTAMP", "TIMESTAMP_NS"},
    "TIMESTAMP": {"TIMESTAMP_NS"},
}


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def duckdb_types(con: duckdb.DuckDBPyConnection, schema: pa.Schema) -> list[tuple[str, str]]:
    """(column, DuckDB type) for an Arrow schema, as DuckDB's own Arrow scan maps it."""
    con.register("__datum_probe", schema.empty_table())
    try:
        return [(r[0], r[1]) for r in con.sql("DESCRIBE SELECT * FROM __datum_probe").fetchall()]
    finally:
        con.unregister("__datum_probe")


def _fits(src: str, dst: str) -> bool:
    return src == dst or dst in _WIDER.get(src, ())


def collapse_changelog(rows: pa.Table, keys: list[str]) -> tuple[pa.Table, pa.Table]:
    """(rows to insert-or-replace, keys to delete): the last op of each key.

    Applying a changelog in order, every op on a key overwrites the key's whole state:
    ``+I``/``+U`` set the row, ``-D``/``-U`` remove it. So the state after the batch only
    depends on each key's last op, and the collapsed ops touch distinct keys, which makes
    their application order (and DuckDB's set-at-a-time statements) irrelevant.
    """
    if rows.schema.field(OP).type != pa.string():
        rows = rows.set_column(
            rows.schema.get_field_index(OP), OP, rows.column(OP).cast(pa.string())
        )
    valid = pc.is_in(rows.column(OP), pa.array(_INSERTS + _DELETES))
    if not pc.all(pc.fill_null(valid, False)).as_py():
        bad = rows.filter(pc.invert(pc.fill_null(valid, False))).column(OP)[0].as_py()
        raise ValueError(f"invalid {OP} value {bad!r}; expected one of +I, -U, +U, -D")
    ones = pa.nulls(rows.num_rows, pa.int64()).fill_null(1)
    seq = pc.subtract(pc.cumulative_sum(ones), 1)  # 0..n-1, without numpy
    numbered = rows.select(keys).append_column("__seq", seq)
    last = numbered.group_by(keys).aggregate([("__seq", "max")])
    final = rows.take(last.column("__seq_max"))
    is_delete = pc.is_in(final.column(OP), pa.array(_DELETES))
    upserts = final.filter(pc.invert(is_delete)).drop_columns([OP])
    deletes = final.filter(is_delete).select(keys)
    return upserts, deletes


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _conform(batch: pa.RecordBatch, schema: pa.Schema, who: str) -> pa.RecordBatch:
    if batch.schema.equals(schema):
        return batch
    try:
        return batch.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowException) as exc:
        raise SinkError(f"{who}: cannot take rows of {batch.schema} as {schema}: {exc}") from exc


def _held_elsewhere(exc: duckdb.Error) -> bool:
    """DuckDB's refusal to open a file another connection holds: a lock held by another
    process, or this process's instance opened with another configuration (read-only)."""
    if isinstance(exc, duckdb.ConnectionException):
        return "different configuration" in str(exc)
    return "Could not set lock" in str(exc)


def _lock_timeout(spec: ConnectorSpec, kind: str) -> float:
    """Seconds of the ``lock_timeout`` option (default :data:`DEFAULT_LOCK_TIMEOUT`)."""
    raw = spec.options.get("lock_timeout", DEFAULT_LOCK_TIMEOUT)
    try:
        return parse_duration(raw, what="option 'lock_timeout'").total_seconds()
    except ValueError as exc:
        raise PlanError(f"duckdb {kind} {spec.name!r}: {exc}") from None


def _connect_waiting(
    path: str,
    *,
    read_only: bool,
    timeout: float,
    who: str,
    error: type[SinkError | SourceError],
    hint: str,
) -> duckdb.DuckDBPyConnection:
    """Connect to ``path``, waiting up to ``timeout`` seconds (with backoff) while another
    connection holds the file: a reader in another process or a read-only one in this
    process (for a writer), or a commit in progress (for a reader). ``error`` names ``who``
    when the file cannot be opened, or is still held at the deadline (with ``hint``)."""
    deadline = time.monotonic() + timeout
    pause = _RETRY_FIRST_S
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except duckdb.Error as exc:
            if not _held_elsewhere(exc):
                raise error(f"{who}: cannot open DuckDB file {path!r}: {exc}") from exc
            left = deadline - time.monotonic()
            if left <= 0:
                doing = "reading" if read_only else "writing"
                raise error(
                    f"{who}: could not lock the database file {path} for {doing} within "
                    f"lock_timeout ({timeout:g} s): another connection holds it ({exc}). {hint}"
                ) from exc
            time.sleep(min(pause, left))
            pause = min(pause * 2, _RETRY_MAX_S)


@sink("duckdb")
class DuckDBSink(Sink):
    """Rows into a DuckDB table, exactly once; with ``primary_key``, a changelog upserted.

    The table is created from the query's columns when missing (with the primary key in
    upsert mode); an existing table must take every column without loss, checked in
    :meth:`open` before any row moves.
    """

    OPTIONS: ClassVar[dict[str, str]] = {
        "path": "DuckDB database file (created if missing)",
        "table": "target table in schema main (created from the query's columns if missing)",
        "primary_key": "comma-separated key columns: upsert mode, accepts a changelog",
        "lock_timeout": "how long a commit waits for readers to release the file "
        f"(default {DEFAULT_LOCK_TIMEOUT})",
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("path", "table")
    EXACTLY_ONCE: ClassVar[bool] = True

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        self.path = str(spec.options["path"])
        self.table = str(spec.options["table"])
        keys = str(spec.options.get("primary_key", "")).split(",")
        self.primary_key = [k.strip() for k in keys if k.strip()]
        self.lock_timeout = _lock_timeout(spec, "sink")
        self._run = uuid.uuid4().hex[:12]
        self.commit_key = f"{spec.name}-{self._run}"
        self.staging: str | None = None if self.path == ":memory:" else f"{self.path}.datum-staging"
        #: only for ``:memory:``: a file database is connected to per transaction
        self._memory: duckdb.DuckDBPyConnection | None = None
        self._schema: pa.Schema | None = None
        self._columns: list[str] = []
        self._buffer: list[pa.RecordBatch] = []
        #: pre-committed, not yet committed: checkpoint id -> (staging file, its SHA-256, rows)
        self._parts: dict[int, tuple[str | None, str | None, pa.Table]] = {}
        self._rows_written = 0

    @property
    def accepts_changelog(self) -> bool:
        return bool(self.primary_key)

    def _who(self) -> str:
        return f"duckdb sink {self.name!r} (table {self.table!r} in {self.path})"

    # -- Sink ---------------------------------------------------------------------------

    async def open(self, schema: pa.Schema) -> None:
        await asyncio.to_thread(self._open, schema)

    async def write(self, batch: pa.RecordBatch) -> None:
        if self._schema is None:
            await self.open(batch.schema)
        assert self._schema is not None
        if batch.num_rows:
            self._buffer.append(_conform(batch, self._schema, self._who()))

    async def pre_commit(self, checkpoint_id: int) -> dict[str, Any]:
        if self._buffer:
            rows = pa.Table.from_batches(self._buffer, schema=self._schema)
            self._buffer = []
            file, digest = await asyncio.to_thread(self._stage, checkpoint_id, rows)
            self._parts[checkpoint_id] = (file, digest, rows)
        if not self._parts:
            return {}
        parts = [[cid, file, digest] for cid, (file, digest, _) in sorted(self._parts.items())]
        return {"sink": self.commit_key, "parts": parts}

    async def commit(self, checkpoint_id: int, staged: dict[str, Any] | None = None) -> None:
        """Apply ``staged["parts"]`` (default: every part pre-committed up to
        ``checkpoint_id``) in one transaction; parts already recorded are skipped."""
        key = self.commit_key
        if staged is not None:
            parts = [(int(cid), file, digest) for cid, file, digest in staged.get("parts", [])]
            key = str(staged.get("sink", key))
        else:
            parts = [(c, f, d) for c, (f, d, _) in self._parts.items() if c <= checkpoint_id]
        if parts:
            await asyncio.to_thread(self._commit, key, sorted(parts))

    async def verify_staged(self, checkpoint_id: int, staged: dict[str, Any]) -> StagedCheck:
        """Parts already recorded in ``_datum_commits`` are published; the staging file of
        every other part must match its checksum."""
        return await asyncio.to_thread(self._verify, staged)

    async def abort(self) -> None:
        """Drop rows not yet pre-committed; pre-committed parts stay for recovery (see
        :meth:`discard_uncommitted`)."""
        self._buffer = []

    async def discard_uncommitted(self, keep: set[str]) -> None:
        """Delete the staging files of sinks of this name except ``keep`` (file names of
        the manifest that recovery restores)."""
        self._parts = {c: p for c, p in self._parts.items() if p[0] in keep}
        if self.staging and os.path.isdir(self.staging):
            prefix = f"{_safe(self.name)}@"
            for name in os.listdir(self.staging):
                if name.startswith(prefix) and name not in keep:
                    os.remove(os.path.join(self.staging, name))

    async def close(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None

    def metrics(self) -> dict[str, Any]:
        return {"rows_written": self._rows_written}

    # -- internals (worker thread) ------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the database for one unit of work, closed afterwards (the
        in-memory database's one connection is kept)."""
        if self.path == ":memory:":
            if self._memory is None:
                self._memory = duckdb.connect(self.path)
            yield self._memory
            return
        con = _connect_waiting(
            self.path,
            read_only=False,
            timeout=self.lock_timeout,
            who=self._who(),
            error=SinkError,
            hint="Readers should open it with read_only=True and close it after each read; "
            "the staged rows are kept and committed by the next checkpoint or recovery",
        )
        try:
            yield con
        finally:
            con.close()

    def _open(self, schema: pa.Schema) -> None:
        if OP in schema.names and not self.primary_key:
            raise SinkError(
                f"{self._who()}: the query produces a changelog ({OP} column); set option "
                "primary_key to upsert by key"
            )
        data = pa.schema([f for f in schema if f.name != OP])
        for key in self.primary_key:
            if key not in data.names:
                raise SinkError(
                    f"{self._who()}: primary_key column {key!r} is not among the query's "
                    f"columns ({', '.join(data.names)})"
                )
        self._schema, self._columns = schema, data.names
        if self.staging:
            os.makedirs(self.staging, exist_ok=True)
        with self._connection() as con:
            self._prepare(con, data)

    def _prepare(self, con: duckdb.DuckDBPyConnection, data: pa.Schema) -> None:
        """Check or create the target table and the commits table."""
        try:
            incoming = duckdb_types(con, data)
            exists = con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                "AND schema_name = 'main' AND lower(table_name) = lower(?)",
                [self.table],
            ).fetchone()
            if exists and exists[0]:
                self._check_table(con, incoming)
            else:
                self._create_table(con, incoming)
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {COMMITS_TABLE} (sink VARCHAR NOT NULL, "
                "checkpoint_id BIGINT NOT NULL, PRIMARY KEY (sink, checkpoint_id))"
            )
        except duckdb.Error as exc:
            raise SinkError(f"{self._who()}: cannot prepare the table: {exc}") from exc

    def _create_table(self, con: duckdb.DuckDBPyConnection, cols: list[tuple[str, str]]) -> None:
        defs = [f"{quote(name)} {typ}" for name, typ in cols]
        if self.primary_key:
            defs.append(f"PRIMARY KEY ({', '.join(map(quote, self.primary_key))})")
        con.execute(f"CREATE TABLE {quote(self.table)} ({', '.join(defs)})")

    def _check_table(self, con: duckdb.DuckDBPyConnection, cols: list[tuple[str, str]]) -> None:
        """Every query column must fit a table column; table columns the query lacks must
        be nullable or have a default; in upsert mode the key must be the table's."""
        table = {r[0].lower(): r for r in con.execute(f"DESCRIBE {quote(self.table)}").fetchall()}
        for name, typ in cols:
            have = table.get(name.lower())
            if have is None:
                raise SinkError(
                    f"{self._who()}: the table has no column {name!r} (it has "
                    f"{', '.join(r[0] for r in table.values())}); add it or drop the table"
                )
            if not _fits(typ, have[1]):
                raise SinkError(
                    f"{self._who()}: column {name!r} is {have[1]} in the table but the query "
                    f"produces {typ}; cast it in the query or drop the table"
                )
        produced = {name.lower() for name, _ in cols}
        for lname, (name, _, null, _, default, *_) in table.items():
            if lname not in produced and null == "NO" and default is None:
                raise SinkError(
                    f"{self._who()}: the table's NOT NULL column {name!r} is not produced "
                    "by the query"
                )
        if self.primary_key:
            constraints = con.execute(
                "SELECT constraint_column_names FROM duckdb_constraints() WHERE "
                "database_name = current_database() AND schema_name = 'main' AND "
                "lower(table_name) = lower(?) AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
                [self.table],
            ).fetchall()
            want = sorted(k.lower() for k in self.primary_key)
            if not any(sorted(c.lower() for c in row[0]) == want for row in constraints):
                raise SinkError(
                    f"{self._who()}: the table has no PRIMARY KEY or UNIQUE constraint on "
                    f"({', '.join(self.primary_key)}), needed to upsert by option primary_key"
                )

    def _stage(self, checkpoint_id: int, rows: pa.Table) -> tuple[str | None, str | None]:
        """The staging file's name and SHA-256 (None, None for an in-memory database)."""
        if self.staging is None:
            return None, None  # an in-memory database does not outlive the process anyway
        name = f"{_safe(self.name)}@{self._run}-{checkpoint_id:08d}.arrow"
        path = os.path.join(self.staging, name)
        try:
            with pa.OSFile(path, "wb") as out, pa.ipc.new_file(out, rows.schema) as writer:
                writer.write_table(rows)
            fsync_path(path)
            fsync_path(self.staging)
            return name, file_sha256(path)
        except (OSError, pa.ArrowException) as exc:
            raise SinkError(f"{self._who()}: cannot stage rows in {path}: {exc}") from exc

    def _verify(self, staged: dict[str, Any]) -> StagedCheck:
        parts = [(int(cid), file, digest) for cid, file, digest in staged.get("parts", [])]
        if self._schema is None or not parts:
            return StagedCheck()
        key = str(staged.get("sink", self.commit_key))
        with self._connection() as con:
            done = self._done(con, key, [c for c, _, _ in parts])
        damaged = [
            problem
            for cid, file, digest in parts
            if cid not in done and (problem := self._damage(cid, file, digest)) is not None
        ]
        return StagedCheck(tuple(damaged), published=bool(done))

    def _damage(self, checkpoint_id: int, file: str | None, digest: str | None) -> str | None:
        """Why a part's staging file cannot be committed, or None when it is intact."""
        if file is None:
            return None  # an in-memory database: nothing was staged on disk
        path = os.path.join(self.staging or "", file)
        what = f"staged file {path} (checkpoint {checkpoint_id})"
        if not os.path.exists(path):
            return f"{what} is gone and was never committed"
        if file_sha256(path) != digest:
            return f"{what} is damaged (checksum mismatch)"
        return None

    def _load(self, checkpoint_id: int, file: str | None, digest: str | None) -> pa.Table:
        if checkpoint_id in self._parts:
            return self._parts[checkpoint_id][2]
        if file is None:
            raise SinkError(
                f"{self._who()}: the staged rows of checkpoint {checkpoint_id} were kept in "
                "memory only and are gone"
            )
        problem = self._damage(checkpoint_id, file, digest)
        if problem is not None:
            raise SinkError(f"{self._who()}: {problem}")
        path = os.path.join(self.staging or "", file)
        try:
            with pa.memory_map(path) as source:
                return pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowException) as exc:
            raise SinkError(f"{self._who()}: cannot read staged file {path}: {exc}") from exc

    @staticmethod
    def _done(con: duckdb.DuckDBPyConnection, key: str, checkpoint_ids: list[int]) -> set[int]:
        """The checkpoint ids among ``checkpoint_ids`` already committed under ``key``."""
        return {
            r[0]
            for r in con.execute(
                f"SELECT checkpoint_id FROM {COMMITS_TABLE} WHERE sink = ? "
                "AND checkpoint_id BETWEEN ? AND ?",
                [key, min(checkpoint_ids), max(checkpoint_ids)],
            ).fetchall()
        }

    def _commit(self, key: str, parts: list[tuple[int, str | None, str | None]]) -> None:
        if self._schema is None:
            raise SinkError(f"{self._who()}: commit before open")
        with self._connection() as con:
            n = self._transaction(con, key, parts)
        self._rows_written += n
        for c, f, _ in parts:
            self._parts.pop(c, None)
            if f and self.staging:
                try:
                    os.remove(os.path.join(self.staging, f))
                except FileNotFoundError:
                    pass

    def _transaction(
        self,
        con: duckdb.DuckDBPyConnection,
        key: str,
        parts: list[tuple[int, str | None, str | None]],
    ) -> int:
        """Apply the parts not yet recorded under ``key``, and record them, in one
        transaction; the number of rows applied."""
        con.execute("BEGIN TRANSACTION")
        try:
            done = self._done(con, key, [c for c, _, _ in parts])
            todo = [(c, f, d) for c, f, d in parts if c not in done]
            n = 0
            if todo:
                rows = pa.concat_tables([self._load(c, f, d) for c, f, d in todo])
                n = rows.num_rows
                self._apply(con, rows)
                con.executemany(
                    f"INSERT INTO {COMMITS_TABLE} VALUES (?, ?)",
                    [[key, c] for c, _, _ in todo],
                )
            con.execute("COMMIT")
        except BaseException as exc:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                pass  # the failed statement already ended the transaction
            if isinstance(exc, duckdb.Error):
                raise SinkError(f"{self._who()}: commit failed: {exc}") from exc
            raise
        return n

    def _apply(self, con: duckdb.DuckDBPyConnection, rows: pa.Table) -> None:
        cols = ", ".join(map(quote, self._columns))
        target = quote(self.table)
        if not self.primary_key:
            con.register("__datum_rows", rows)
            try:
                con.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM __datum_rows")
            finally:
                con.unregister("__datum_rows")
            return
        if OP not in rows.column_names:
            rows = rows.append_column(OP, pa.nulls(rows.num_rows, pa.string()).fill_null("+I"))
        try:
            upserts, deletes = collapse_changelog(rows, self.primary_key)
        except ValueError as exc:
            raise SinkError(f"{self._who()}: {exc}") from exc
        keys = self.primary_key
        if deletes.num_rows:
            match = " AND ".join(f"{target}.{quote(k)} = d.{quote(k)}" for k in keys)
            con.register("__datum_deletes", deletes)
            try:
                con.execute(f"DELETE FROM {target} USING __datum_deletes d WHERE {match}")
            finally:
                con.unregister("__datum_deletes")
        if upserts.num_rows:
            others = [c for c in self._columns if c not in keys]
            action = (
                "DO UPDATE SET " + ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in others)
                if others
                else "DO NOTHING"
            )
            con.register("__datum_rows", upserts)
            try:
                con.execute(
                    f"INSERT INTO {target} ({cols}) SELECT {cols} FROM __datum_rows "
                    f"ON CONFLICT ({', '.join(map(quote, keys))}) {action}"
                )
            finally:
                con.unregister("__datum_rows")


@source("duckdb")
class DuckDBSource(Source):
    """A DuckDB table read once, in insertion order, as Arrow batches (a bounded lookup or
    dimension table). Position ``{"row": n}``: a resume skips ``n`` rows."""

    OPTIONS: ClassVar[dict[str, str]] = {
        "path": "DuckDB database file",
        "table": "table to read (schema main)",
        "batch_size": "most rows per batch (default 65536)",
        "lock_timeout": "how long opening the file waits for a sink's commit to release it "
        f"(default {DEFAULT_LOCK_TIMEOUT})",
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("path", "table")

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        self.path = str(spec.options["path"])
        self.table = str(spec.options["table"])
        self.batch_size = int_option(spec.name, spec.options, "batch_size", 65_536)
        self.lock_timeout = _lock_timeout(spec, "source")
        self._row = 0
        if self.path != ":memory:" and not os.path.exists(self.path):
            raise SourceError(f"source {self.name!r}: DuckDB file {self.path!r} does not exist")
        self._schema = self._table_schema()
        if spec.columns is not None:  # only what the query reads
            self._schema = pa.schema([f for f in self._schema if f.name in spec.columns])

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def _columns(self) -> str:
        named = self.spec.schema is not None or self.spec.columns is not None
        return ", ".join(map(quote, self._schema.names)) if named else "*"

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """Connect read-only (a shared lock: a running DuckDB sink can still commit between
        reads), waiting up to ``lock_timeout`` while a commit holds the file."""
        return _connect_waiting(
            self.path,
            read_only=self.path != ":memory:",  # DuckDB has no read-only in-memory database
            timeout=self.lock_timeout,
            who=f"source {self.name!r}",
            error=SourceError,
            hint="A writer holds it for longer than one commit",
        )

    def _table_schema(self) -> pa.Schema:
        con = self._connect()
        try:
            actual = con.sql(f"SELECT * FROM {quote(self.table)} LIMIT 0").to_arrow_table().schema
        except duckdb.Error as exc:
            raise SourceError(
                f"source {self.name!r}: cannot read table {self.table!r} in {self.path}: {exc}"
            ) from exc
        finally:
            con.close()
        declared = self.spec.schema
        if declared is not None:
            missing = [n for n in declared.names if n not in actual.names]
            if missing:
                raise SourceError(
                    f"source {self.name!r}: table {self.table!r} has no column "
                    f"{missing[0]!r} (it has {', '.join(actual.names)})"
                )
            return declared
        return actual

    async def open(self, position: dict[str, Any] | None) -> None:
        self._row = int((position or {}).get("row", 0))

    def position(self) -> dict[str, Any]:
        return {"row": self._row}

    async def read(self) -> AsyncIterator[SourceItem]:
        con = await asyncio.to_thread(self._connect)
        try:
            sql = f"SELECT {self._columns()} FROM {quote(self.table)} OFFSET {self._row}"
            try:
                reader = await asyncio.to_thread(
                    lambda: con.sql(sql).to_arrow_reader(self.batch_size)
                )
                batches = iter(reader)
                while (batch := await asyncio.to_thread(next, batches, None)) is not None:
                    if batch.num_rows:
                        batch = batch.cast(self._schema)
                        self._row += batch.num_rows
                        yield batch
            except (duckdb.Error, pa.ArrowException) as exc:
                raise SourceError(
                    f"source {self.name!r}: reading table {self.table!r} in {self.path} "
                    f"failed after row {self._row}: {exc}"
                ) from exc
        finally:
            con.close()
