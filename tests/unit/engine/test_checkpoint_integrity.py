"""Checkpoint integrity: the manifest and every staged sink file are checksummed, verified
before anything is restored or published, and a damaged one is never published silently.

A crash between two commit steps is simulated in-process: the runtime's crash point raises
at the chosen step, the query fails there (manifest written, sinks not yet committed), and a
new Context on the same ``state_dir`` recovers, as a restarted process would.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datum_sql as ds
from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec
from datum_sql.engine.runtime import executor
from datum_sql.engine.runtime.checkpoint import MANIFEST, CheckpointStore, Manifest
from datum_sql.errors import CheckpointError, SinkError

QUERY = "INSERT INTO out SELECT id FROM t"
CHECKPOINTS = ("queries", "insert_into_out", "checkpoints")


class Crash(Exception):
    """The process 'dies' at a commit step."""


def _crash_at(monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    def crash_point(reached: str) -> None:
        if reached == point:
            raise Crash(point)

    monkeypatch.setattr(executor, "crash_point", crash_point)


def _run(state: Path, sink: str, rows: int) -> ds.StreamingQuery:
    """One run of the query over ids 0..rows-1 into the sink ``out`` (created once)."""
    ctx = ds.Context(state_dir=state, checkpoint_interval=None)
    ctx.register_arrow("t", pa.table({"id": pa.array(range(rows), pa.int64())}), batch_size=100)
    ctx.execute(f"CREATE SINK IF NOT EXISTS out WITH ({sink})")
    q = ctx.execute_streaming(QUERY)
    try:
        ended = q.wait(60)
    except ds.DatumError:
        ended = True  # failed: the tests look at q.state and q.error
    assert ended, "the query did not end"
    return q


def _parquet_ids(out: Path) -> list[int]:
    files = sorted(out.glob("*.parquet"))
    return sorted(i for f in files for i in pq.read_table(f).column("id").to_pylist())


def _crashed_run(state: Path, sink: str, rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that publishes its final checkpoint's manifest, then dies before any sink commit."""
    _crash_at(monkeypatch, "after_manifest")
    q = _run(state, sink, rows)
    assert q.state == "failed" and isinstance(q.error.__cause__, Crash)
    monkeypatch.setattr(executor, "crash_point", lambda reached: None)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# -- the manifest ---------------------------------------------------------------------------


def _manifest(cid: int, rows: int) -> Manifest:
    return Manifest(
        checkpoint_id=cid,
        fingerprint="f",
        created_at=0.0,
        positions={"t": {"rows": rows}},
        clocks={},
        watermarks={},
        staged={},
    )


def test_an_edited_manifest_is_skipped_for_the_previous_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.write(_manifest(1, 2000), {"op": b"state one"})
    store.write(_manifest(2, 3400), {"op": b"state two"})
    path = tmp_path / "chk-00000002" / MANIFEST
    path.write_text(path.read_text().replace('"rows": 3400', '"rows": 4400'))
    recovered = store.latest()
    assert recovered is not None
    assert recovered.manifest.checkpoint_id == 1
    assert recovered.manifest.positions == {"t": {"rows": 2000}}
    assert recovered.states == {"op": b"state one"}
    assert len(recovered.skipped) == 1
    assert str(path) in recovered.skipped[0] and "checksum mismatch" in recovered.skipped[0]


def test_an_edited_source_position_does_not_skip_rows(tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    sink = f"connector = 'parquet', path = '{out}'"
    assert _run(state, sink, 3400).state == "finished"
    (newest,) = (state.joinpath(*CHECKPOINTS)).iterdir()
    manifest = newest / MANIFEST
    doc = json.loads(manifest.read_text())
    assert doc["positions"] == {"source_0": {"rows": 3400}}
    manifest.write_text(manifest.read_text().replace('"rows": 3400', '"rows": 4400'))
    with pytest.raises(CheckpointError) as refused:
        _run(state, sink, 5000)  # resuming at 4400 would silently skip 1000 rows
    assert str(manifest) in str(refused.value) and "checksum mismatch" in str(refused.value)
    assert _parquet_ids(out) == list(range(3400))


# -- staged file sink output ----------------------------------------------------------------


def test_damaged_staged_part_falls_back_when_nothing_of_it_was_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    sink = f"connector = 'parquet', path = '{out}'"
    assert _run(state, sink, 2000).state == "finished"  # checkpoint 1, published
    _crashed_run(state, sink, 3400, monkeypatch)  # checkpoint 2: manifest, no commit
    (staged,) = (out / "_staging").glob("part-*.parquet")
    _truncate(staged)
    q = _run(state, sink, 3400)
    assert q.state == "finished", q.error
    recovered = q.status()["recovered_from"]
    assert recovered["checkpoint"] == 1
    assert len(recovered["skipped"]) == 1
    assert staged.name in recovered["skipped"][0] and "damaged" in recovered["skipped"][0]
    assert _parquet_ids(out) == list(range(3400))  # every row once, the damaged part not used
    assert not list((out / "_staging").iterdir())


def test_damaged_staged_part_of_the_only_checkpoint_is_not_a_silent_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    sink = f"connector = 'parquet', path = '{out}'"
    _crashed_run(state, sink, 3400, monkeypatch)
    (staged,) = (out / "_staging").glob("part-*.parquet")
    _truncate(staged)
    q = _run(state, sink, 3400)
    assert q.state == "failed"
    error = q.error.__cause__
    assert isinstance(error, CheckpointError)
    assert "no intact checkpoint" in str(error) and str(staged) in str(error)
    assert not list(out.glob("*.parquet"))


def test_damaged_staged_part_after_a_partial_publish_fails_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    sink = f"connector = 'parquet', path = '{out}', max_file_rows = '500'"
    assert _run(state, sink, 1000).state == "finished"
    _crashed_run(state, sink, 3400, monkeypatch)
    first, second, *_ = sorted((out / "_staging").glob("part-*.parquet"))
    first.replace(out / first.name)  # the crash came in the middle of publishing
    _truncate(second)
    q = _run(state, sink, 3400)
    assert q.state == "failed"
    error = q.error.__cause__
    assert isinstance(error, CheckpointError)
    assert str(second) in str(error) and "already published" in str(error)
    assert (out / "_staging" / second.name).exists()  # left for inspection, not published
    assert not (out / second.name).exists()


def test_file_sink_verifies_every_staged_file_before_publishing_any(tmp_path: Path) -> None:
    out = tmp_path / "out"
    spec = ConnectorSpec(name="out", options={"path": str(out), "max_file_rows": "5"})

    async def run() -> None:
        sink = registry.create_sink("parquet", spec)
        table = pa.table({"id": pa.array(range(20), pa.int64())})
        await sink.open(table.schema)
        await sink.write(table.to_batches()[0])
        staged = await sink.pre_commit(1)
        assert len(staged["files"]) == 4
        damaged = out / "_staging" / staged["files"][2]
        _truncate(damaged)
        with pytest.raises(SinkError, match=str(damaged)):
            await sink.commit(1, staged)
        await sink.close()

    asyncio.run(run())
    assert not list(out.glob("*.parquet"))


# -- staged DuckDB sink output --------------------------------------------------------------


def test_damaged_duckdb_staging_file_falls_back_and_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, db = tmp_path / "state", tmp_path / "out.duckdb"
    sink = f"connector = 'duckdb', path = '{db}', table = 'rows'"
    assert _run(state, sink, 2000).state == "finished"
    _crashed_run(state, sink, 3400, monkeypatch)
    (staged,) = Path(f"{db}.datum-staging").iterdir()
    _truncate(staged)
    q = _run(state, sink, 3400)
    assert q.state == "finished", q.error
    recovered = q.status()["recovered_from"]
    assert recovered["checkpoint"] == 1
    assert staged.name in recovered["skipped"][0]
    con = duckdb.connect(str(db), read_only=True)
    ids = [r[0] for r in con.sql("SELECT id FROM rows ORDER BY id").fetchall()]
    con.close()
    assert ids == list(range(3400))


def test_duckdb_commit_of_a_damaged_staging_file_names_it(tmp_path: Path) -> None:
    db = tmp_path / "out.duckdb"
    spec = ConnectorSpec(name="out", options={"path": str(db), "table": "t"})
    table = pa.table({"id": pa.array(range(50), pa.int64())})

    async def run() -> None:
        sink = registry.create_sink("duckdb", spec)
        await sink.open(table.schema)
        await sink.write(table.to_batches()[0])
        staged = await sink.pre_commit(1)
        await sink.close()  # the crash: staged, never committed
        (path,) = Path(f"{db}.datum-staging").iterdir()
        _truncate(path)
        recovered = registry.create_sink("duckdb", spec)
        await recovered.open(table.schema)
        with pytest.raises(SinkError, match=str(path)):
            await recovered.commit(1, staged)
        await recovered.close()

    asyncio.run(run())
    con = duckdb.connect(str(db), read_only=True)
    assert con.sql("SELECT count(*) FROM t").fetchall() == [(0,)]
    con.close()


# -- a damaged checkpoint whose output was already published --------------------------------


def _duckdb_ids(db: Path) -> list[int]:
    con = duckdb.connect(str(db), read_only=True)
    ids = [r[0] for r in con.sql("SELECT id FROM rows ORDER BY id").fetchall()]
    con.close()
    return ids


APPENDING: dict[str, tuple[Callable[[Path], str], Callable[[Path], list[int]]]] = {
    "parquet": (lambda p: f"connector = 'parquet', path = '{p}'", _parquet_ids),
    "duckdb": (lambda p: f"connector = 'duckdb', path = '{p}', table = 'rows'", _duckdb_ids),
}


def _newest(state: Path) -> Path:
    return sorted(state.joinpath(*CHECKPOINTS).iterdir())[-1]


def _edit_position(manifest: Path, rows: int = 3400) -> None:
    """A hand edit (or a damaged block) in the source position of a manifest."""
    manifest.write_text(manifest.read_text().replace(f'"rows": {rows}', f'"rows": {rows - 100}'))


@pytest.mark.parametrize("kind", sorted(APPENDING))
def test_a_damaged_manifest_whose_output_is_published_is_not_replayed(
    tmp_path: Path, kind: str
) -> None:
    options, ids = APPENDING[kind]
    state, out = tmp_path / "state", tmp_path / "out"
    assert _run(state, options(out), 2000).state == "finished"  # checkpoint 1
    assert _run(state, options(out), 3400).state == "finished"  # checkpoint 2, committed
    manifest = _newest(state) / MANIFEST
    _edit_position(manifest)
    q = _run(state, options(out), 3400)
    assert q.state == "failed"
    error = q.error.__cause__
    assert isinstance(error, CheckpointError)
    message = str(error)
    assert str(manifest) in message and "checksum mismatch" in message
    assert "already published in sink 'out'" in message and "twice" in message
    assert "fresh=True" in message
    assert ids(out) == list(range(3400))  # checkpoint 1's replay would have doubled 2000..3399


def test_a_damaged_manifest_whose_output_is_not_published_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    sink = f"connector = 'parquet', path = '{out}'"
    assert _run(state, sink, 2000).state == "finished"
    _crashed_run(state, sink, 3400, monkeypatch)  # checkpoint 2: manifest, no commit
    manifest = _newest(state) / MANIFEST
    _edit_position(manifest)
    q = _run(state, sink, 3400)
    assert q.state == "finished", q.error
    recovered = q.status()["recovered_from"]
    assert recovered["checkpoint"] == 1
    assert str(manifest) in recovered["skipped"][0]
    assert _parquet_ids(out) == list(range(3400))


def test_an_unreadable_manifest_before_an_appending_sink_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    sink = f"connector = 'parquet', path = '{out}'"
    assert _run(state, sink, 2000).state == "finished"
    _crashed_run(state, sink, 3400, monkeypatch)
    manifest = _newest(state) / MANIFEST
    manifest.write_bytes(manifest.read_bytes()[:100])  # what it staged can no longer be read
    q = _run(state, sink, 3400)
    assert q.state == "failed"
    error = q.error.__cause__
    assert isinstance(error, CheckpointError)
    assert str(manifest) in str(error) and "unknown" in str(error)
    assert "sink 'out' appends" in str(error)
    assert _parquet_ids(out) == list(range(2000))


def test_an_unreadable_manifest_before_an_upserting_sink_falls_back(tmp_path: Path) -> None:
    state, db = tmp_path / "state", tmp_path / "out.duckdb"
    sink = f"connector = 'duckdb', path = '{db}', table = 'rows', primary_key = 'id'"
    assert _run(state, sink, 2000).state == "finished"
    assert _run(state, sink, 3400).state == "finished"
    manifest = _newest(state) / MANIFEST
    manifest.write_bytes(b"\0" * 64)
    q = _run(state, sink, 3400)
    assert q.state == "finished", q.error
    assert q.status()["recovered_from"]["checkpoint"] == 1
    assert _duckdb_ids(db) == list(range(3400))  # the replayed rows overwrote themselves


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


WINDOWS = (
    "INSERT INTO out SELECT window_start, count(*) AS bids "
    "FROM tumble(bids, date_time, INTERVAL '1 second') "
    "GROUP BY window_start, window_end EMIT ON WINDOW CLOSE"
)


def _windows_context(state: Path, out: Path) -> ds.Context:
    """Windows over unbounded, paced bids into a Parquet sink."""
    ctx = ds.Context(state_dir=state, checkpoint_interval=None)
    ctx.execute(
        "CREATE SOURCE IF NOT EXISTS bids "
        "(WATERMARK FOR date_time AS date_time - INTERVAL '1 second') "
        "WITH (connector = 'nexmark', stream = 'bid', events_per_second = '20000', "
        "batch_size = '500', seed = '1')"
    )
    ctx.execute(f"CREATE SINK IF NOT EXISTS out WITH (connector = 'parquet', path = '{out}')")
    return ctx


def test_a_damaged_state_file_whose_output_is_published_is_not_replayed(tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    q = _windows_context(state, out).execute_streaming(WINDOWS)
    try:
        q.checkpoint()  # checkpoint 1
        at_first = q.status()["rows_out"]
        _wait_for(lambda: q.status()["rows_out"] > at_first, "a window to close")
    finally:
        q.cancel()  # checkpoint 2 publishes the windows closed since checkpoint 1
    assert q.state == "cancelled", q.error
    written = sorted(p.name for p in out.glob("*.parquet"))
    state_file = next(_newest(state).glob("op-*.state"))
    _truncate(state_file)

    again = _windows_context(state, out).execute_streaming(WINDOWS)
    try:
        with pytest.raises(ds.QueryFailed) as failed:
            again.wait(60)
    finally:
        if not again.done:
            again.cancel()
    error = failed.value.cause
    assert isinstance(error, CheckpointError)
    assert str(state_file) in str(error) and "already published in sink 'out'" in str(error)
    assert sorted(p.name for p in out.glob("*.parquet")) == written


# -- the store -------------------------------------------------------------------------------


def test_the_store_says_what_a_skipped_checkpoint_staged_when_it_can(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, retain=4)
    staged = {"sink_1": {"files": ["part-1.parquet"], "checksums": {}}}
    for cid in (1, 2, 3, 4):
        store.write(replace(_manifest(cid, 100 * cid), staged=staged), {"op": b"state"})
    (tmp_path / "chk-00000004" / "op-op.state").write_bytes(b"other")
    _edit_position(tmp_path / "chk-00000003" / MANIFEST, 300)
    (tmp_path / "chk-00000002" / MANIFEST).write_text("{")
    recovered = store.latest()
    assert recovered is not None and recovered.manifest.checkpoint_id == 1
    assert [(s.checkpoint_id, s.staged) for s in recovered.passed] == [
        (4, staged),  # a damaged state file: the manifest is intact
        (3, staged),  # the staged section still matches its own checksum
        (2, None),  # unreadable: unknown
    ]
    assert "state file" in recovered.skipped[0] and "unreadable" in recovered.skipped[2]


def test_a_checkpoint_written_after_a_fall_back_removes_the_ones_it_passed_over(
    tmp_path: Path,
) -> None:
    """Checkpoints above the one being written belong to a run recovery abandoned: left in
    place, one that reads back intact later (a passing I/O error) would be resumed from."""
    store = CheckpointStore(tmp_path)
    for cid in (1, 2, 3):
        store.write(_manifest(cid, 100 * cid), {})
    store.write(_manifest(2, 250), {})  # the run that fell back to checkpoint 1
    assert store.ids() == [1, 2]
    recovered = store.latest()
    assert recovered is not None and recovered.manifest.positions == {"t": {"rows": 250}}
