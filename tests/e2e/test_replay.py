"""Bounded replays: a query run again over a range of its input (event time, Kafka offsets,
file names), in chunks, as a dry run, into append and upsert sinks, without moving the
query's saved positions. Each check compares the sink with the rows of the range."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as pads
import pytest
from kafka_support import unique

import datum_sql as ds
from datum_sql.cli import main
from datum_sql.engine.runtime.lock import QueryLock

DAYS = {1: [11, 12], 2: [21, 22], 3: [31, 32]}  # day -> ids, at 10:00 and 11:00


def landing(tmp_path: Path) -> Path:
    directory = tmp_path / "landing"
    directory.mkdir()
    for day, ids in DAYS.items():
        rows = "".join(f"{i},2026-01-0{day} {10 + n}:00:00\n" for n, i in enumerate(ids))
        (directory / f"day-{day}.csv").write_text("id,ts\n" + rows)
    return directory


def context(tmp_path: Path, sink: str = "parquet") -> ds.Context:
    ctx = ds.Context(state_dir=tmp_path / "state")
    ctx.execute(
        "CREATE SOURCE IF NOT EXISTS events (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) "
        f"WITH (connector = 'csv', path = '{tmp_path / 'landing'}')"
    )
    if sink == "parquet":
        ctx.execute(
            f"CREATE SINK IF NOT EXISTS copy WITH (connector = 'parquet', path = '{tmp_path / 'out'}')"
        )
    else:
        ctx.execute(
            f"CREATE SINK IF NOT EXISTS copy WITH (connector = 'duckdb', "
            f"path = '{tmp_path / 'out.duckdb'}', table = 'copy', primary_key = 'id')"
        )
    return ctx


COPY = "INSERT INTO copy SELECT id, ts FROM events"


def ids(ctx: ds.Context) -> list[int]:
    return sorted(ctx.sql("SELECT id FROM copy").column("id").to_pylist())


def test_a_time_range_in_chunks_writes_its_rows_and_moves_no_position(tmp_path: Path) -> None:
    landing(tmp_path)
    ctx = context(tmp_path)
    ctx.execute_streaming(COPY).wait()
    report = ctx.replay(COPY, "2026-01-02", "2026-01-03 10:30", chunk="12 hours")
    assert [str(r.chunk) for r in report.runs] == [
        "time [2026-01-02 00:00:00, 2026-01-02 12:00:00)",
        "time [2026-01-02 12:00:00, 2026-01-03 00:00:00)",
        "time [2026-01-03 00:00:00, 2026-01-03 10:30:00)",
    ]
    assert [r.sinks["copy"] for r in report.runs] == [2, 0, 1]
    assert ids(ctx) == sorted([11, 12, 21, 22, 31, 32, 21, 22, 31])
    assert any("copy append: replaying this range again" in line for line in report.lines())
    # the query's own position did not move: its next run has nothing new
    q = context(tmp_path).execute_streaming(COPY)
    q.wait()
    assert q.status()["rows_in"] == 0


def test_a_dry_run_counts_what_it_would_read_and_writes_nothing(tmp_path: Path) -> None:
    landing(tmp_path)
    ctx = context(tmp_path)
    report = ctx.replay(COPY, "2026-01-01 10:30", "2026-01-03", dry_run=True)
    assert report.rows_in == 3  # 12, 21, 22
    assert report.runs[0].sources["events"] == {"rows": 3, "files": 3}
    assert "dry run: nothing was written" in report.lines()
    assert not (tmp_path / "out").exists() or ids(ctx) == []


def test_a_file_name_range_reads_those_files(tmp_path: Path, capsys: Any) -> None:
    landing(tmp_path)
    script = tmp_path / "job.sql"
    script.write_text(
        f"""
        CREATE SOURCE events (id BIGINT, ts TIMESTAMP)
            WITH (connector = 'csv', path = '{tmp_path / "landing"}');
        CREATE SINK copy WITH (connector = 'parquet', path = '{tmp_path / "out"}');
        INSERT INTO copy SELECT id, ts FROM events;
        """
    )
    state = str(tmp_path / "state")
    code = main(
        ["replay", str(script), "--state-dir", state, "--from", "day-2.csv", "--to", "day-3.csv"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "files [day-2.csv, day-3.csv): replay_copy | read events: 2 rows (1 files)" in out
    table = pads.dataset(str(tmp_path / "out"), format="parquet").to_table()
    assert sorted(table.column("id").to_pylist()) == [21, 22]


def test_a_replay_into_an_upsert_sink_is_idempotent(tmp_path: Path) -> None:
    landing(tmp_path)
    ctx = context(tmp_path, sink="duckdb")
    for _ in range(2):
        report = ctx.replay(COPY, "2026-01-01", "2026-01-03")
        assert report.append_sinks == []
    with duckdb.connect(str(tmp_path / "out.duckdb"), read_only=True) as con:
        got = sorted(r[0] for r in con.sql("SELECT id FROM copy").fetchall())
    assert got == [11, 12, 21, 22]
    assert not any("append" in line for line in report.lines())


@pytest.mark.parametrize(
    ("start", "end", "kw", "message"),
    [
        ("2026-01-02", "2026-01-01", {}, "is an empty range"),
        ("partition:0,offset:5", "partition:1,offset:9", {}, "name the same partitions"),
        ("partition:0,offset:9", "partition:0,offset:5", {}, "starts at 9, after its end 5"),
        (
            "partition:0,offset:1",
            "partition:0,offset:5",
            {"chunk": "1h"},
            "--chunk cuts a range of event time",
        ),
        (
            "2026-01-01",
            "2026-01-02",
            {"chunk_rows": 10},
            "--chunk-rows cuts a range of Kafka offsets",
        ),
        ("2026-01-01", "2026-01-02", {"chunk": "soon"}, "--chunk"),
        ("someday", "2026-01-02", {}, "'someday' is not a value of source 'events'"),
    ],
)
def test_bad_ranges_say_what_is_wrong(
    tmp_path: Path, start: str, end: str, kw: dict[str, Any], message: str
) -> None:
    landing(tmp_path)
    with pytest.raises(ds.PlanError, match=message):
        context(tmp_path).replay(COPY, start, end, **kw)


def test_a_source_without_event_time_cannot_be_replayed_by_time(tmp_path: Path) -> None:
    ctx = ds.Context(state_dir=None)
    ctx.execute("CREATE SOURCE gen (id BIGINT) WITH (connector = 'datagen')")
    ctx.register_append_sink("seen", lambda batch: None)
    with pytest.raises(ds.PlanError, match="source 'gen' is unbounded and has no event time"):
        ctx.replay("INSERT INTO seen SELECT id FROM gen", "2026-01-01", "2026-01-02")


def kafka_orders(broker: Any, tmp_path: Path, options: str = "") -> ds.Context:
    """A context with ``orders``, a 2-partition topic of ids 0-9 and 100-109 (10 per
    partition), and ``copy``, a Parquet sink."""
    topic = unique("replay")
    broker.create_topic(topic, 2)
    for p in range(2):
        rows = [{"id": p * 100 + i} for i in range(10)]
        broker.produce(topic, [json.dumps(r).encode() for r in rows], partition=p)
    ctx = ds.Context(state_dir=tmp_path / "state")
    ctx.execute(
        f"CREATE SOURCE orders (id BIGINT) WITH (connector = 'kafka', topic = '{topic}', "
        f"properties.bootstrap.server = '{broker.bootstrap}'{options}) FORMAT PLAIN ENCODE JSON"
    )
    ctx.execute(f"CREATE SINK copy WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    return ctx


@pytest.mark.kafka
def test_an_offset_range_in_chunks_reads_exactly_those_offsets(
    kafka_broker: Any, tmp_path: Path
) -> None:
    ctx = kafka_orders(kafka_broker, tmp_path)
    report = ctx.replay(
        "INSERT INTO copy SELECT id FROM orders",
        "partition:0,offset:2;partition:1,offset:5",
        "partition:0,offset:7;partition:1,offset:6",
        chunk_rows=3,
    )
    assert [r.sinks["copy"] for r in report.runs] == [4, 2]  # p0 2-4 + p1 5; p0 5-6
    got = sorted(ctx.sql("SELECT id FROM copy").column("id").to_pylist())
    assert got == [2, 3, 4, 5, 6, 105]


def test_a_window_that_spans_two_chunks_is_one_window(tmp_path: Path) -> None:
    """The chunks of a replay are one run cut in pieces: state and event time carry over,
    only the last chunk ends the input."""
    landing(tmp_path)
    ctx = context(tmp_path)
    ctx.execute(f"CREATE SINK days WITH (connector = 'parquet', path = '{tmp_path / 'days'}')")
    per_day = (
        "INSERT INTO days SELECT window_start, count(*) AS n "
        "FROM TUMBLE(events, ts, INTERVAL '1' DAY) GROUP BY window_start EMIT ON WINDOW CLOSE"
    )
    report = ctx.replay(per_day, "2026-01-01", "2026-01-03", chunk="6 hours")
    assert len(report.runs) == 8
    got = ctx.sql("SELECT window_start, n FROM days ORDER BY window_start").to_pylist()
    assert [r["n"] for r in got] == [2, 2]  # days 1 and 2 whole, each cut into four chunks


def test_save_positions_of_a_file_range_makes_the_next_run_read_the_rest(tmp_path: Path) -> None:
    landing(tmp_path)
    ctx = context(tmp_path)
    report = ctx.replay(COPY, "landing/day-1.csv", "day-3.csv", save_positions=True)
    assert report.saved == ["insert_into_copy"]
    assert any("moved to the end of the range" in line for line in report.lines())
    q = context(tmp_path).execute_streaming(COPY)
    q.wait()
    assert q.status()["rows_in"] == 2  # day-3.csv only
    assert ids(ctx) == [11, 12, 21, 22, 31, 32]


def test_save_positions_is_refused_where_positions_could_not_stand_for_the_range(
    tmp_path: Path,
) -> None:
    landing(tmp_path)
    ctx = context(tmp_path)
    with pytest.raises(ds.PlanError, match="a range of event time ends at no place"):
        ctx.replay(COPY, "2026-01-01", "2026-01-02", save_positions=True)
    ctx.execute(
        f"CREATE SINK counts WITH (connector = 'duckdb', path = '{tmp_path / 'c.duckdb'}', "
        "table = 'counts', primary_key = 'id')"
    )
    counting = "INSERT INTO counts SELECT id, count(*) AS n FROM events GROUP BY id"
    ctx.execute_streaming(counting).wait()
    with pytest.raises(ds.PlanError, match="has state of its own runs"):
        ctx.replay(counting, "day-1.csv", "day-2.csv", save_positions=True)


@pytest.mark.kafka
def test_save_positions_of_an_offset_range_moves_only_its_partitions(
    kafka_broker: Any, tmp_path: Path
) -> None:
    ctx = kafka_orders(kafka_broker, tmp_path, ", scan.bounded.mode = 'latest'")
    copy = "INSERT INTO copy SELECT id FROM orders"
    ctx.replay(copy, "partition:0,offset:0", "partition:0,offset:4", save_positions=True)
    q = ctx.execute_streaming(copy)
    q.wait(timeout=60)
    assert q.status()["rows_in"] == 16  # partition 0 from offset 4, partition 1 from its start
    got = sorted(ctx.sql("SELECT id FROM copy").column("id").to_pylist())
    assert got == [*range(10), *range(100, 110)]


def test_positions_move_only_after_every_chunk_committed(tmp_path: Path) -> None:
    """A replay that fails part-way (a bad row in its second file), or whose process is
    killed before it ends, leaves the query's saved positions as they were: its next run
    reads everything."""
    landing(tmp_path)
    (tmp_path / "landing" / "day-2.csv").write_text("id,ts\n21,2026-01-02 10:00:00\nbad,x\n")
    ctx = context(tmp_path)
    with pytest.raises(ds.QueryFailed, match=r"day-2\.csv, line 3"):
        ctx.replay(COPY, "day-1.csv", "day-3.csv", save_positions=True, by="files")
    script = tmp_path / "job.sql"
    script.write_text(
        f"CREATE SOURCE IF NOT EXISTS events (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) "
        f"WITH (connector = 'csv', path = '{tmp_path / 'landing'}');\n"
        f"CREATE SINK IF NOT EXISTS copy WITH (connector = 'parquet', path = '{tmp_path / 'out'}');\n"
        f"{COPY};\n"
    )
    (tmp_path / "landing" / "day-2.csv").write_text("id,ts\n21,2026-01-02 10:00:00\n")
    command = [sys.executable, "-m", "datum_sql.cli", "replay", str(script), "--state-dir"]
    command += [str(tmp_path / "state"), "--from", "day-1.csv", "--to", "day-4.csv"]
    command += ["--save-positions"]
    killed = subprocess.run(
        command, env={**os.environ, "DATUM_CRASH_AT": "after_manifest:1"},
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert killed.returncode == 86, killed.stderr
    q = context(tmp_path).execute_streaming(COPY)
    q.wait()
    assert q.status()["recovered_from"] is None and q.status()["rows_in"] == 5


def test_the_store_of_a_replay_killed_before_it_ended_is_removed_by_the_next(
    tmp_path: Path,
) -> None:
    """A replay's own checkpoints live under the state directory while it runs; one killed
    midway (its lock no longer held) leaves them behind, and the next replay removes them,
    never those of a replay still running (its lock held)."""
    landing(tmp_path)
    ctx = context(tmp_path)
    stale = tmp_path / "state" / ".replay-killed"
    (stale / "checkpoints").mkdir(parents=True)
    (stale / "LOCK").touch()
    running = tmp_path / "state" / ".replay-running"
    held = QueryLock(running, "replay")
    try:
        ctx.replay(COPY, "day-1.csv", "day-2.csv")
        assert not stale.exists() and running.exists()
    finally:
        held.release()
    assert sorted(p.name for p in (tmp_path / "state").glob(".replay-*")) == [".replay-running"]
