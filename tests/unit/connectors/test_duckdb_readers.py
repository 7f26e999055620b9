"""Other processes read a DuckDB sink's file while the job runs: the sink holds the file only
inside a commit, a reader sees committed rows only, and a commit waits (boundedly) for a
reader that holds the file. Readers are child processes opening the file read-only (and, once,
a read-only connection in this process)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec, Sink, Source
from datum_sql.errors import PlanError, SinkError, SourceError

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])

#: Opens the file read-only, prints ``count(*)`` of table t, holds the file until a line
#: arrives on stdin.
HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print(con.sql("SELECT count(*) FROM t").fetchall()[0][0], flush=True)
sys.stdin.readline()
con.close()
"""

#: Opens the file for writing and inserts a row in a transaction, prints ``count(*)`` of
#: table t, holds the file until a line arrives on stdin, then commits.
WRITER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("BEGIN")
con.execute("INSERT INTO t VALUES (99, 'late')")
print(con.sql("SELECT count(*) FROM t").fetchall()[0][0], flush=True)
sys.stdin.readline()
con.execute("COMMIT")
con.close()
"""

#: Reads the sink's table with the documented retry until the job's ``done`` file exists;
#: prints one line per read: rows, distinct ids, max id.
POLLER = """
import os, sys, time, duckdb
path, done = sys.argv[1], sys.argv[2]

def read(sql):
    deadline = time.monotonic() + 60
    while True:
        try:
            con = duckdb.connect(path, read_only=True)
        except (duckdb.IOException, duckdb.ConnectionException):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
            continue
        try:
            return con.sql(sql).fetchall()[0]
        finally:
            con.close()

while not os.path.exists(path):
    time.sleep(0.02)
while not os.path.exists(done):
    try:
        n, distinct, top = read("SELECT count(*), count(DISTINCT id), max(id) FROM t")
    except duckdb.CatalogException:  # the table is created by the sink's open
        continue
    print(n, distinct, -1 if top is None else top, flush=True)
    time.sleep(0.05)
"""


def make_sink(path: str, **options: Any) -> Sink:
    spec = ConnectorSpec(name="out", options={"path": path, "table": "t", **options})
    return registry.create_sink("duckdb", spec)


def rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def count_in_child(db: str) -> int:
    """``count(*)`` of t read by another process, which must get the file at once."""
    out = subprocess.run(
        [sys.executable, "-c", HOLDER, db], input="\n", capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    return int(out.stdout.split()[0])


class Holder:
    """A child process holding the file open (read-only, or with ``WRITER`` for writing)
    until :meth:`release`."""

    def __init__(self, db: str, script: str = HOLDER) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the file is held once the count is printed
        assert line.strip(), self.proc.stderr.read() if self.proc.stderr else ""
        self.count = int(line)

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.wait(timeout=120) == 0


def test_another_process_reads_between_commits_and_sees_committed_rows_only(tmp_path) -> None:
    db = str(tmp_path / "shared.duckdb")

    async def run() -> None:
        sink = make_sink(db)
        await sink.open(SCHEMA)
        assert count_in_child(db) == 0
        await sink.write(rows(5).to_batches()[0])
        await sink.commit(1, await sink.pre_commit(1))
        assert count_in_child(db) == 5
        await sink.write(rows(3, start=5).to_batches()[0])
        staged = await sink.pre_commit(2)  # durable, not yet published
        assert count_in_child(db) == 5
        await sink.commit(2, staged)
        assert count_in_child(db) == 8
        await sink.close()

    asyncio.run(run())


def test_a_commit_waits_for_a_reader_that_holds_the_file(tmp_path) -> None:
    db = str(tmp_path / "shared.duckdb")
    sink = make_sink(db, lock_timeout="120s")
    asyncio.run(sink.open(SCHEMA))
    asyncio.run(sink.write(rows(4).to_batches()[0]))
    staged = asyncio.run(sink.pre_commit(1))
    holder = Holder(db)
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            asyncio.run(sink.commit(1, staged))
        except BaseException as exc:
            errors.append(exc)

    committer = threading.Thread(target=commit)
    committer.start()
    committer.join(timeout=1.0)
    assert committer.is_alive()  # the reader still holds the file: the commit cannot finish
    holder.release()
    committer.join(timeout=120)
    assert not committer.is_alive() and errors == []
    asyncio.run(sink.close())
    assert count_in_child(db) == 4
    assert sink.metrics()["rows_written"] == 4


def test_a_commit_that_never_gets_the_lock_fails_naming_the_file_and_keeps_its_rows(
    tmp_path,
) -> None:
    db = str(tmp_path / "shared.duckdb")

    async def staged_sink() -> tuple[Sink, dict[str, Any]]:
        sink = make_sink(db, lock_timeout="200ms")
        await sink.open(SCHEMA)
        await sink.write(rows(3).to_batches()[0])
        return sink, await sink.pre_commit(1)

    sink, staged = asyncio.run(staged_sink())
    holder = Holder(db)
    try:
        with pytest.raises(SinkError) as failed:
            asyncio.run(sink.commit(1, staged))
    finally:
        holder.release()
    message = str(failed.value)
    assert f"could not lock the database file {db}" in message
    assert "lock_timeout (0.2 s)" in message and "read_only=True" in message
    asyncio.run(sink.commit(1, staged))  # the staged rows were kept: committed once now
    asyncio.run(sink.commit(1, staged))
    asyncio.run(sink.close())
    assert count_in_child(db) == 3


def test_a_bad_lock_timeout_is_a_plan_error(tmp_path) -> None:
    with pytest.raises(PlanError, match=r"duckdb sink 'out'.*'lock_timeout'.*'soon'"):
        make_sink(str(tmp_path / "x.duckdb"), lock_timeout="soon")


def test_a_running_query_is_read_by_another_process(tmp_path: Path) -> None:
    """A paced INSERT with frequent checkpoints; a child process polls the table with the
    documented retry while it runs. Each read sees whole commits: the ids 0..n-1 of a
    sequence, never a torn or uncommitted part; the counts only grow."""
    db, done = tmp_path / "live.duckdb", tmp_path / "done"
    poller = subprocess.Popen(
        [sys.executable, "-c", POLLER, str(db), str(done)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    ctx = ds.Context(state_dir=str(tmp_path / "state"), checkpoint_interval=0.1)
    ctx.execute(
        "CREATE SOURCE seq (id BIGINT, name VARCHAR) WITH (connector = 'datagen', "
        "rows = '5000', events_per_second = '1000', batch_size = '50', "
        "fields.id.kind = 'sequence', fields.id.max = '1000000')"
    )
    ctx.execute(f"CREATE SINK live WITH (connector = 'duckdb', path = '{db}', table = 't')")
    q = ctx.execute_streaming("INSERT INTO live SELECT id, name FROM seq")
    try:
        assert q.wait(timeout=120)
    finally:
        done.touch()
        out, err = poller.communicate(timeout=120)
        ctx.close()
    assert poller.returncode == 0, err
    reads = [tuple(map(int, line.split())) for line in out.splitlines()]
    assert all(n == distinct == top + 1 for n, distinct, top in reads), reads
    counts = [n for n, _, _ in reads]
    assert counts == sorted(counts)
    assert any(0 < n < 5000 for n in counts), counts  # read while the query ran
    assert count_in_child(str(db)) == 5000


def test_a_read_only_connection_in_this_process_is_waited_for_like_another_process(
    tmp_path,
) -> None:
    db = str(tmp_path / "shared.duckdb")
    sink = make_sink(db, lock_timeout="200ms")
    asyncio.run(sink.open(SCHEMA))
    asyncio.run(sink.write(rows(2).to_batches()[0]))
    staged = asyncio.run(sink.pre_commit(1))
    reader = duckdb.connect(db, read_only=True)
    try:
        assert reader.sql("SELECT count(*) FROM t").fetchall() == [(0,)]
        with pytest.raises(SinkError, match=r"could not lock the database file .*shared\.duckdb"):
            asyncio.run(sink.commit(1, staged))
    finally:
        reader.close()
    asyncio.run(sink.commit(1, staged))
    asyncio.run(sink.close())
    assert count_in_child(db) == 2


def make_source(db: str, **options: Any) -> Source:
    spec = ConnectorSpec(name="dim", options={"path": db, "table": "t", **options})
    return registry.create_source("duckdb", spec)


def filled(db: str, n: int) -> None:
    sink = make_sink(db)

    async def run() -> None:
        await sink.open(SCHEMA)
        await sink.write(rows(n).to_batches()[0])
        await sink.commit(1, await sink.pre_commit(1))
        await sink.close()

    asyncio.run(run())


def test_another_process_reads_while_the_source_holds_the_file(tmp_path) -> None:
    """The source's connection is read-only: a shared lock that other readers share."""
    db = str(tmp_path / "shared.duckdb")
    filled(db, 6)

    async def run() -> list[int]:
        source = make_source(db, batch_size=2)
        await source.open(None)
        batches = source.read()
        first = await anext(batches)  # the source holds its connection mid-read
        assert isinstance(first, pa.RecordBatch)
        counted = count_in_child(db)
        rest = [b.num_rows async for b in batches if isinstance(b, pa.RecordBatch)]
        return [first.num_rows, counted, sum(rest)]

    assert asyncio.run(run()) == [2, 6, 4]


def test_the_source_waits_for_a_commit_that_holds_the_file(tmp_path) -> None:
    db = str(tmp_path / "shared.duckdb")
    filled(db, 3)
    writer = Holder(db, WRITER)
    assert writer.count == 4  # the writer's own transaction sees its row
    got: list[pa.Table] = []
    errors: list[BaseException] = []

    def read() -> None:
        async def run() -> pa.Table:
            source = make_source(db, lock_timeout="120s")
            await source.open(None)
            batches = [b async for b in source.read() if isinstance(b, pa.RecordBatch)]
            return pa.Table.from_batches(batches, schema=source.schema)

        try:
            got.append(asyncio.run(run()))
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(timeout=1.0)
    assert reader.is_alive() and errors == []  # waiting for the writer, not failed
    writer.release()
    reader.join(timeout=120)
    assert not reader.is_alive() and errors == []
    assert sorted(got[0].column("id").to_pylist()) == [0, 1, 2, 99]  # read after the commit


def test_a_source_that_never_gets_the_file_fails_naming_it(tmp_path) -> None:
    db = str(tmp_path / "shared.duckdb")
    filled(db, 1)
    writer = Holder(db, WRITER)
    try:
        with pytest.raises(SourceError) as failed:
            make_source(db, lock_timeout="200ms")
    finally:
        writer.release()
    message = str(failed.value)
    assert message.startswith("source 'dim': could not lock the database file")
    assert f"{db} for reading within lock_timeout (0.2 s)" in message
    assert make_source(db).schema == SCHEMA
