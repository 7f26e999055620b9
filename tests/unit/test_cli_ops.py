"""``datum-sql status`` and ``datum-sql reset`` on state directories made by real runs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

import datum_sql as ds
from datum_sql.cli import main
from datum_sql.ops.status import state_status


def _job(tmp_path: Path, sink: str = "log") -> tuple[Path, Path, Path]:
    """A script reading the CSV files of ``landing/`` into a Parquet sink (``log``) or a
    DuckDB sink upserting per meter (``totals``); the script, the landing dir, the state."""
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    if sink == "log":
        body = (
            f"CREATE SINK log WITH (connector = 'parquet', path = '{tmp_path / 'out'}');\n"
            "INSERT INTO log SELECT meter, kwh FROM readings;\n"
        )
    else:
        body = (
            f"CREATE SINK totals WITH (connector = 'duckdb', path = '{tmp_path / 'totals.duckdb'}',"
            " table = 'totals', primary_key = 'meter');\n"
            "INSERT INTO totals SELECT meter, sum(kwh) AS kwh, count(*) AS n FROM readings "
            "GROUP BY meter;\n"
        )
    script = tmp_path / f"{sink}.sql"
    script.write_text(
        "CREATE SOURCE readings (meter INT, kwh DOUBLE) "
        f"WITH (connector = 'csv', path = '{landing}');\n" + body
    )
    return script, landing, tmp_path / "state"


def _land(landing: Path, name: str, rows: list[tuple[int, float]]) -> None:
    text = "meter,kwh\n" + "".join(f"{m},{k}\n" for m, k in rows)
    (landing / name).write_text(text)


def _run(script: Path, state: Path) -> None:
    assert main(["run", str(script), "--state-dir", str(state)]) == 0


def _status_json(state: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["status", "--state-dir", str(state), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _checkpoints(state: Path, query: str) -> list[str]:
    root = state / "queries" / query / "checkpoints"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    rows = pads.dataset(str(path), format="parquet").to_table().to_pylist()
    return sorted(rows, key=lambda r: (r["meter"], r["kwh"]))


# -- status -----------------------------------------------------------------------------------


def test_status_after_a_bounded_file_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, landing, state = _job(tmp_path)
    _land(landing, "1.csv", [(1, 0.5), (2, 0.7)])
    _run(script, state)
    _land(landing, "2.csv", [(3, 0.9)])
    _run(script, state)
    capsys.readouterr()
    assert main(["status", "--state-dir", str(state)]) == 0
    out = capsys.readouterr().out
    assert "query insert_into_log: not running" in out
    assert "INSERT INTO log SELECT meter, kwh FROM readings" in out
    assert "last checkpoint 2 at " in out and "(kept: 1, 2)" in out
    assert f"2 files done (last {landing / '2.csv'})" in out
    assert "sink log (parquet, exactly once, appends)" in out
    assert "\x1b" not in out  # no colours in a pipe


def test_status_json_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script, landing, state = _job(tmp_path, "totals")
    _land(landing, "1.csv", [(1, 0.5), (2, 0.7)])
    _run(script, state)
    code, doc = _status_json(state, capsys)
    assert code == 0
    assert doc["version"] == 1 and doc["state_dir"] == str(state) and doc["problems"] == []
    (q,) = doc["queries"]
    assert q["name"] == "insert_into_totals" and q["running"] is False
    assert q["sql"].startswith("INSERT INTO totals SELECT meter")
    assert [c["id"] for c in q["checkpoints"]] == [1] and q["positions_from"] == 1
    assert q["last_checkpoint"]["time"] and q["last_checkpoint"]["damaged"] is None
    (source,) = q["sources"]
    assert source["table"] == "readings" and source["connector"] == "csv"
    assert source["kind"] == "files" and source["files_done"] == 1
    assert source["last_done"] == str(landing / "1.csv") and source["reading"] is None
    assert source["position"]["done"][0]["path"] == str(landing / "1.csv")
    (sink,) = q["sinks"]
    assert sink["table"] == "totals" and sink["connector"] == "duckdb"
    assert sink["delivery"] == "exactly once" and sink["upserts"] is True


def test_status_shows_the_file_being_read(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    _land(landing, "big.csv", [(i, i / 10) for i in range(3000)])

    def slow(values: pa.Array) -> pa.Array:
        time.sleep(0.002)
        return values

    ctx = ds.Context(state_dir=tmp_path / "state", checkpoint_interval=None)
    ctx.register_udf("slow_ops_test", slow, [pa.int32()], pa.int32())
    ctx.execute(
        "CREATE SOURCE readings (meter INT, kwh DOUBLE) "
        f"WITH (connector = 'csv', path = '{landing}', batch_size = '10')"
    )
    ctx.execute(f"CREATE SINK log WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming("INSERT INTO log SELECT slow_ops_test(meter) AS meter FROM readings")
    deadline = time.monotonic() + 20
    while q.status()["rows_in"] < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    q.cancel()  # a clean stop checkpoints in the middle of the file
    assert 0 < q.status()["rows_in"] < 3000
    (status,) = state_status(tmp_path / "state")["queries"]
    (source,) = status["sources"]
    assert source["files_done"] == 0 and source["last_done"] is None
    reading = source["reading"]
    assert reading["file"] == str(landing / "big.csv")
    assert reading["row"] + reading["at"]["line"] > 0


def test_a_damaged_checkpoint_is_reported_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, landing, state = _job(tmp_path)
    _land(landing, "1.csv", [(1, 0.5)])
    _run(script, state)
    _land(landing, "2.csv", [(2, 0.7)])
    _run(script, state)
    manifest = (
        state / "queries" / "insert_into_log" / "checkpoints" / "chk-00000002" / "MANIFEST.json"
    )
    doc = json.loads(manifest.read_text())
    doc["created_at"] += 1  # breaks its checksum
    manifest.write_text(json.dumps(doc))

    capsys.readouterr()
    assert main(["status", "--state-dir", str(state)]) == 1
    captured = capsys.readouterr()
    assert "DAMAGED" in captured.out
    assert f"checkpoint 2 is damaged: manifest {manifest} is corrupt" in captured.err
    code, report = _status_json(state, capsys)
    assert code == 1
    (q,) = report["queries"]
    assert q["last_checkpoint"]["id"] == 2 and str(manifest) in q["last_checkpoint"]["damaged"]
    assert q["positions_from"] == 1 and q["sources"][0]["files_done"] == 1
    assert report["problems"] == [
        f"query 'insert_into_log': checkpoint 2 is damaged: {q['last_checkpoint']['damaged']}"
    ]


def test_status_never_shows_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "1.csv").write_text("id,token\n1,hunter2\n2,other\n")
    script = tmp_path / "job.sql"
    script.write_text(
        f"CREATE SOURCE logins (id INT, token VARCHAR) WITH (connector = 'csv', path = '{landing}');\n"
        f"CREATE SINK hits WITH (connector = 'parquet', path = '{tmp_path / 'out'}');\n"
        "INSERT INTO hits SELECT id FROM logins WHERE token = 'hunter2';\n"
    )
    _run(script, tmp_path / "state")
    capsys.readouterr()
    assert main(["status", "--state-dir", str(tmp_path / "state")]) == 0
    assert main(["status", "--state-dir", str(tmp_path / "state"), "--json"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    assert "token = '******'" in out


def test_status_beside_a_query_checkpointing_all_the_time(tmp_path: Path) -> None:
    """A running query replaces and prunes its checkpoints while status reads them: every
    reading is whole, none is called damaged."""
    state = tmp_path / "state"
    ctx = ds.Context(state_dir=state, checkpoint_interval="10 milliseconds")
    ctx.execute(
        "CREATE SOURCE bids (WATERMARK FOR date_time AS date_time - INTERVAL '1 second') "
        "WITH (connector = 'nexmark', stream = 'bid', rows = '1000000', "
        "events_per_second = '20000', batch_size = '100')"
    )
    ctx.execute(
        f"CREATE SINK per_auction WITH (connector = 'parquet', path = '{tmp_path / 'out'}')"
    )
    q = ctx.execute_streaming(
        "INSERT INTO per_auction SELECT auction, count(*) AS n FROM tumble(bids, date_time, "
        "INTERVAL '1 second') GROUP BY window_start, auction EMIT ON WINDOW CLOSE"
    )
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            doc = state_status(state)
            assert doc["problems"] == []
            (status,) = doc["queries"]
            assert status["running"] is True
            if status["last_checkpoint"] is not None:
                seen.add(status["last_checkpoint"]["id"])
                assert len(status["checkpoints"]) <= 4  # 3 kept, one more until pruned
                assert status["sources"][0]["kind"] == "other"  # a generator's row counter
        assert len(seen) > 5, "the query checkpointed while status read"
        assert q.state == "running"
    finally:
        q.cancel()
    assert q.status()["state"] == "cancelled"


def test_status_of_an_empty_or_missing_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "state").mkdir()
    assert main(["status", "--state-dir", str(tmp_path / "state")]) == 0
    assert "no query has run" in capsys.readouterr().out
    assert main(["status", "--state-dir", str(tmp_path / "nowhere")]) == 2
    assert f"no state directory {tmp_path / 'nowhere'}" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


# -- reset ------------------------------------------------------------------------------------


def _reset(state: Path, *args: str) -> int:
    return main(["reset", *args, "--state-dir", str(state)])


def test_reset_without_yes_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, landing, state = _job(tmp_path)
    _land(landing, "1.csv", [(1, 0.5)])
    _run(script, state)
    before = _checkpoints(state, "insert_into_log")
    capsys.readouterr()
    assert _reset(state, "insert_into_log", "--to", "start") == 1
    captured = capsys.readouterr()
    assert (
        "would reset query insert_into_log to its start, deleting checkpoint(s) 1:" in captured.out
    )
    assert "source 'readings' (csv) is read from its start" in captured.out
    assert "sink 'log' (parquet) keeps its data" in captured.out
    assert "duplicates" in captured.out
    assert "nothing changed; run again with --yes" in captured.err
    assert _checkpoints(state, "insert_into_log") == before == ["chk-00000001"]


def test_reset_to_start_then_the_next_run_reads_everything_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, landing, state = _job(tmp_path)
    _land(landing, "1.csv", [(1, 0.5), (2, 0.7)])
    _run(script, state)
    _land(landing, "2.csv", [(3, 0.9)])
    _run(script, state)
    assert len(_parquet_rows(tmp_path / "out")) == 3
    capsys.readouterr()
    assert _reset(state, "insert_into_log", "--to", "start", "--yes") == 0
    assert (
        "reset query insert_into_log to its start, deleted checkpoint(s) 2, 1:"
        in capsys.readouterr().out
    )
    assert _checkpoints(state, "insert_into_log") == []
    _run(script, state)
    # both files again, beside the rows the sink kept (as the plan said)
    rows = _parquet_rows(tmp_path / "out")
    assert [r["meter"] for r in rows] == [1, 1, 2, 2, 3, 3]
    code, doc = _status_json(state, capsys)
    assert code == 0
    assert doc["queries"][0]["last_checkpoint"]["id"] == 1
    assert doc["queries"][0]["sources"][0]["files_done"] == 2


def test_reset_to_a_checkpoint_that_wrote_nothing_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, landing, state = _job(tmp_path)
    _land(landing, "1.csv", [(1, 0.5)])
    _run(script, state)
    _run(script, state)  # nothing new: checkpoint 2 wrote nothing
    capsys.readouterr()
    assert _reset(state, "insert_into_log", "--to", "checkpoint:1", "--yes") == 0
    out = capsys.readouterr().out
    assert "sink 'log' (parquet): checkpoint 2 wrote nothing into it" in out
    assert _checkpoints(state, "insert_into_log") == ["chk-00000001"]
    _land(landing, "2.csv", [(2, 0.7)])
    _run(script, state)
    assert [r["meter"] for r in _parquet_rows(tmp_path / "out")] == [1, 2]  # each row once
    assert _checkpoints(state, "insert_into_log") == ["chk-00000001", "chk-00000002"]


def test_reset_refuses_a_rollback_that_would_duplicate_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, landing, state = _job(tmp_path)
    _land(landing, "1.csv", [(1, 0.5)])
    _run(script, state)
    _land(landing, "2.csv", [(2, 0.7)])
    _run(script, state)  # checkpoint 2 published the row of 2.csv
    capsys.readouterr()
    for yes in ([], ["--yes"]):
        assert _reset(state, "insert_into_log", "--to", "checkpoint:1", *yes) == 2
        err = capsys.readouterr().err
        assert "cannot go back to checkpoint 1: checkpoint 2 published rows" in err
        assert "sink 'log' (parquet), which appends" in err
        assert "a second time" in err
    assert _checkpoints(state, "insert_into_log") == ["chk-00000001", "chk-00000002"]


def test_reset_rolls_an_upserting_sink_back_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, landing, state = _job(tmp_path, "totals")
    _land(landing, "1.csv", [(1, 0.5), (2, 0.7)])
    _run(script, state)
    _land(landing, "2.csv", [(1, 1.5), (3, 0.9)])
    _run(script, state)
    capsys.readouterr()
    assert _reset(state, "insert_into_totals", "--to", "checkpoint:1", "--yes") == 0
    out = capsys.readouterr().out
    assert "source 'readings' (csv) resumes at checkpoint 1: 1 file done" in out
    assert "operator state goes back to checkpoint 1" in out
    assert (
        "sink 'totals' (duckdb) upserts by key: the rows of checkpoint 2 are written again" in out
    )
    _run(script, state)  # replays 2.csv from checkpoint 1's state
    code, doc = _status_json(state, capsys)
    assert code == 0
    assert [c["id"] for c in doc["queries"][0]["checkpoints"]] == [1, 2]  # resumed from 1
    con = duckdb.connect(str(tmp_path / "totals.duckdb"), read_only=True)
    got = con.sql("SELECT meter, kwh, n FROM totals ORDER BY meter").fetchall()
    assert got == [(1, 2.0, 2), (2, 0.7, 1), (3, 0.9, 1)]


def test_reset_to_a_checkpoint_not_kept_lists_the_kept_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, landing, state = _job(tmp_path)
    _land(landing, "1.csv", [(1, 0.5)])
    for _ in range(4):
        _run(script, state)  # checkpoints 1-4; the newest 3 are kept
    capsys.readouterr()
    assert _reset(state, "insert_into_log", "--to", "checkpoint:1") == 2
    err = capsys.readouterr().err
    assert "checkpoint 1 is not kept; kept checkpoints: 2, 3, 4 (the newest 3 are kept)" in err
    assert _reset(state, "insert_into_log", "--to", "checkpoint:4", "--yes") == 0
    assert "nothing to change" in capsys.readouterr().out
    assert _reset(state, "nope", "--to", "start") == 2
    assert "no query 'nope' in state directory" in capsys.readouterr().err
    assert _reset(state, "insert_into_log", "--to", "checkpoint:x") == 2
    assert "--to takes 'start' or 'checkpoint:N'" in capsys.readouterr().err
    assert _checkpoints(state, "insert_into_log") == [
        "chk-00000002",
        "chk-00000003",
        "chk-00000004",
    ]


def test_reset_is_refused_while_the_query_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    ctx = ds.Context(state_dir=state, checkpoint_interval="50 milliseconds")
    ctx.execute(
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', rows = '1000000', "
        "events_per_second = '5000')"
    )
    ctx.execute(f"CREATE SINK pricey WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming(
        "INSERT INTO pricey SELECT auction, price FROM bids WHERE price > 1000"
    )
    try:
        deadline = time.monotonic() + 10
        while q.status()["last_checkpoint"] is None and time.monotonic() < deadline:
            time.sleep(0.01)
        before = _checkpoints(state, "insert_into_pricey")
        assert before
        capsys.readouterr()
        for yes in ([], ["--yes"]):
            assert _reset(state, "insert_into_pricey", "--to", "start", *yes) == 2
            assert "query 'insert_into_pricey' is running" in capsys.readouterr().err
        assert main(["status", "--state-dir", str(state)]) == 0
        assert "query insert_into_pricey: running" in capsys.readouterr().out
        assert q.state == "running"
        assert q.checkpoint() > max(int(name[4:]) for name in before)  # it goes on
    finally:
        q.cancel()
    assert _reset(state, "insert_into_pricey", "--to", "start", "--yes") == 0
    assert _checkpoints(state, "insert_into_pricey") == []


def test_a_starting_query_outlasts_a_status_probe(tmp_path: Path) -> None:
    """The probe holds the lock (shared) for an instant; a query starting then waits it out."""
    import fcntl
    import os

    from datum_sql.engine.runtime.lock import LOCK_FILE, QueryLock, is_running

    directory = tmp_path / "q"
    directory.mkdir()
    (directory / LOCK_FILE).touch()
    fd = os.open(directory / LOCK_FILE, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    threading.Timer(0.03, os.close, [fd]).start()
    lock = QueryLock(directory, "q")  # would fail at once without the grace period
    assert is_running(directory)
    lock.release()
    assert not is_running(directory)


def test_position_summaries() -> None:
    """The shapes a source's position takes: Kafka offsets, a file source with an
    incremental column, anything else as its JSON."""
    from datum_sql.ops.positions import describe, summarize

    kafka = summarize({"offsets": {"10": 4, "2": 7}})
    assert describe(kafka) == "next offset per partition: 2: 7, 10: 4"
    files = summarize(
        {
            "done": [{"path": "in/a.csv", "size": 3}],
            "file": "in/b.csv",
            "read": {"size": 9},
            "at": {"offset": 120, "line": 8, "crc": 5},
            "row": 3,
            "rejected": 0,
            "incremental": {"column": "seq", "mark": 41, "highest": 57},
        }
    )
    assert describe(files) == (
        "1 file done (last in/a.csv); reading in/b.csv (block at offset 120, line 8; 3 rows "
        "of it read); incremental on seq: mark 41, highest seen 57"
    )
    assert describe(summarize({"row": 5000})) == '{"row": 5000}'
