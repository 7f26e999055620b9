"""Files that keep arriving: reruns that read only what is new, continuous sources that
discover files and appended rows, an incremental column, and crashes in between.

Every check compares what the sink holds with what the input holds: each input row once.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pytest

import datum_sql as ds
from datum_sql.cli import main
from datum_sql.engine.runtime.executor import AFTER_END


def write_csv(path: Path, ids: range, *, header: bool = True, minute: int = 0) -> Path:
    """Rows ``id,ts`` (``ts`` ``minute`` minutes plus ``id`` seconds into 2026-01-01). A
    new file is written under a hidden name and renamed into place, as docs/incremental-
    files.md asks of writers (a listing could catch a file half written); ``header=False``
    appends to ``path``."""
    start = dt.datetime(2026, 1, 1) + dt.timedelta(minutes=minute)
    lines = ["id,ts\n"] if header else []
    lines += [f"{i},{start + dt.timedelta(seconds=i)}\n" for i in ids]
    if not header:
        with path.open("a") as f:
            f.write("".join(lines))
        return path
    hidden = path.with_name(f".{path.name}.part")
    hidden.write_text("".join(lines))
    os.replace(hidden, path)
    return path


def sink_ids(path: Path) -> list[int]:
    """The ids the Parquet sink at ``path`` committed, sorted (a repeat shows twice)."""
    if not path.exists():
        return []
    return sorted(pads.dataset(str(path), format="parquet").to_table().column("id").to_pylist())


def job(tmp_path: Path, options: str = "", select: str = "SELECT id, ts FROM landing") -> Path:
    script = tmp_path / "job.sql"
    script.write_text(
        f"""
        CREATE SOURCE landing (id BIGINT, ts TIMESTAMP)
            WITH (connector = 'csv', path = '{tmp_path / "in"}'{options});
        CREATE SINK copy WITH (connector = 'parquet', path = '{tmp_path / "out"}');
        INSERT INTO copy {select};
        """
    )
    (tmp_path / "in").mkdir(exist_ok=True)
    return script


def run_cli(script: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    state = str(script.parent / "state")
    code = main(["run", str(script), "--state-dir", state, *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out + captured.err


def test_a_rerun_reads_only_new_files_and_appended_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = job(tmp_path)
    landing = tmp_path / "in"
    write_csv(landing / "b.csv", range(0, 5))
    write_csv(landing / "a.csv", range(5, 8))
    out = run_cli(script, capsys)
    assert "in landing: 8 rows" in out
    assert sink_ids(tmp_path / "out") == list(range(8))

    out = run_cli(script, capsys)
    assert "no new input since checkpoint #1: nothing written" in out
    assert sink_ids(tmp_path / "out") == list(range(8))

    write_csv(landing / "b.csv", range(8, 10), header=False)  # appended
    write_csv(landing / "0-new.csv", range(10, 13))  # sorts first, arrives last
    out = run_cli(script, capsys)
    assert "in landing: 5 rows" in out and "nothing written" not in out
    assert sink_ids(tmp_path / "out") == list(range(13))


@pytest.mark.parametrize("point", ["before_manifest", "after_manifest"])
def test_a_crash_between_sink_and_position_repeats_and_loses_nothing(
    tmp_path: Path, point: str
) -> None:
    """The sink commit and the files read are one checkpoint: a run killed on either side
    of publishing it, then rerun, leaves each row once, and the rerun after that reads only
    what arrived since."""
    script = job(tmp_path)
    landing = tmp_path / "in"
    for n in range(3):
        write_csv(landing / f"part-{n}.csv", range(n * 10, n * 10 + 10))
    command = [sys.executable, "-m", "datum_sql.cli", "run", str(script)]
    command += ["--state-dir", str(tmp_path / "state")]
    env = {**os.environ, "DATUM_CRASH_AT": f"{point}:1"}
    crashed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert crashed.returncode == 86, crashed.stderr
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert sink_ids(tmp_path / "out") == list(range(30))
    write_csv(landing / "part-3.csv", range(30, 35))
    more = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert more.returncode == 0, more.stderr
    assert "in landing: 5 rows" in more.stdout + more.stderr
    assert sink_ids(tmp_path / "out") == list(range(35))


WINDOWED = """
    CREATE SINK per_minute WITH (connector = 'parquet', path = '{out}');
    CREATE SINK late WITH (connector = 'parquet', path = '{late}');
    CREATE SOURCE landing (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
        WITH (connector = 'csv', path = '{landing}', late_output = 'late');
    INSERT INTO per_minute
        SELECT window_start, count(*) AS n FROM TUMBLE(landing, ts, INTERVAL '1' MINUTE)
        GROUP BY window_start EMIT ON WINDOW CLOSE;
"""


def test_a_windowed_rerun_routes_rows_after_the_first_runs_end_as_late(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first run's end closed every window: rows that arrive after it cannot join a
    window already written (that would write the minute twice); they go to the late sink
    with the reason, and the windows written stay as they were."""
    landing = tmp_path / "in"
    landing.mkdir()
    script = tmp_path / "windows.sql"
    script.write_text(
        WINDOWED.format(landing=landing, out=tmp_path / "out", late=tmp_path / "late")
    )
    write_csv(landing / "a.csv", range(0, 90))  # minute 0: 60 rows, minute 1: 30 rows
    run_cli(script, capsys)
    windows = pads.dataset(str(tmp_path / "out"), format="parquet").to_table()
    assert sorted(windows.column("n").to_pylist()) == [30, 60]

    write_csv(landing / "b.csv", range(0, 10), minute=1)  # ten more rows in minute 1
    out = run_cli(script, capsys)
    assert "10 late rows" in out
    late = pads.dataset(str(tmp_path / "late"), format="parquet").to_table()
    assert late.num_rows == 10 and set(late.column("_late_reason").to_pylist()) == {AFTER_END}
    again = pads.dataset(str(tmp_path / "out"), format="parquet").to_table()
    assert sorted(again.column("n").to_pylist()) == [30, 60]


def test_a_stateless_rerun_with_a_watermark_passes_new_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing closes on the watermark in a copy: rows after the first run's end are new
    rows like any other."""
    script = job(tmp_path, select="SELECT id, ts FROM landing WHERE id % 2 = 0")
    text = script.read_text().replace("ts TIMESTAMP)", "ts TIMESTAMP, WATERMARK FOR ts AS ts)")
    script.write_text(text)
    write_csv(tmp_path / "in" / "a.csv", range(0, 10))
    run_cli(script, capsys)
    write_csv(tmp_path / "in" / "b.csv", range(10, 20))
    out = run_cli(script, capsys)
    assert "late" not in out
    assert sink_ids(tmp_path / "out") == list(range(0, 20, 2))


def test_an_incremental_column_reads_only_rows_above_the_highest_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export rewritten whole on every refresh: only rows with a higher sequence than
    the last run read are new, whatever else the file holds."""
    landing = tmp_path / "in"
    landing.mkdir()
    export = landing / "orders.csv"
    script = tmp_path / "job.sql"
    script.write_text(
        f"""
        CREATE SOURCE orders (id BIGINT, seq BIGINT)
            WITH (connector = 'csv', path = '{landing}', incremental.column = 'seq');
        CREATE SINK copy WITH (connector = 'parquet', path = '{tmp_path / "out"}');
        INSERT INTO copy SELECT id FROM orders;
        """
    )
    export.write_text("id,seq\n1,10\n2,11\n")
    run_cli(script, capsys)
    export.write_text("id,seq\n1,10\n2,11\n3,12\n4,13\n")  # rewritten, two rows more
    assert "in orders: 2 rows" in run_cli(script, capsys)
    export.write_text("id,seq\n4,13\n5,14\n")  # older rows gone, one new
    (landing / "late.csv").write_text("id,seq\n6,9\n7,15\n")  # a new file: 6 is old
    assert "in orders: 2 rows" in run_cli(script, capsys)
    assert "nothing written" in run_cli(script, capsys)
    assert sink_ids(tmp_path / "out") == [1, 2, 3, 4, 5, 7]

    export.write_text("id,seq\n8,\n")  # no sequence: a bad record, named
    with pytest.raises(AssertionError, match=r"missing value for the incremental column 'seq'"):
        run_cli(script, capsys)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (", scan.mode = 'forever'", "option 'scan.mode' must be one of bounded, continuous"),
        (", discovery_interval = 'soon'", "option 'discovery_interval'"),
        (", discovery_interval = '0s'", "'discovery_interval' must be positive"),
        (", incremental.column = 'nope'", "'incremental.column' names 'nope', which is not"),
        (", incremental.column = 'ok'", "column 'ok' is bool; it must be an integer"),
    ],
)
def test_bad_options_name_the_option(tmp_path: Path, options: str, message: str) -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(ds.PlanError, match=message.replace("(", r"\(")):
        ctx.execute(
            f"CREATE SOURCE t (id BIGINT, ok BOOLEAN) WITH (connector = 'csv', "
            f"path = '{tmp_path}'{options})"
        )


# -- continuous sources -----------------------------------------------------------------


def wait_for(q: Any, rows: int, timeout: float = 60.0) -> None:
    """Until the query read ``rows`` rows (its error, if it failed)."""
    deadline = time.monotonic() + timeout
    while q.status()["rows_in"] < rows:
        if q.done:
            raise AssertionError(f"the query ended: {q.error!r}")
        if time.monotonic() > deadline:
            raise AssertionError(f"read {q.status()['rows_in']} of {rows} rows")
        time.sleep(0.05)


def continuous(tmp_path: Path, fmt: str = "csv") -> ds.Context:
    ctx = ds.Context(state_dir=tmp_path / "state", checkpoint_interval=None)
    columns = "(id BIGINT, ts TIMESTAMP)"
    ctx.execute(
        f"CREATE SOURCE IF NOT EXISTS landing {columns} WITH (connector = '{fmt}', "
        f"path = '{tmp_path / 'in'}', scan.mode = 'continuous', discovery_interval = '50ms')"
    )
    ctx.execute(
        f"CREATE SINK IF NOT EXISTS copy WITH (connector = 'parquet', path = '{tmp_path / 'out'}')"
    )
    return ctx


def test_a_continuous_source_reads_files_as_they_arrive_and_resumes(tmp_path: Path) -> None:
    landing = tmp_path / "in"
    landing.mkdir()
    write_csv(landing / "a.csv", range(0, 5))
    ctx = continuous(tmp_path)
    q = ctx.execute_streaming("INSERT INTO copy SELECT id, ts FROM landing", name="copy")
    try:
        wait_for(q, 5)
        write_csv(landing / "b.csv", range(5, 9))
        wait_for(q, 9)
        assert not q.done  # it waits for more
        q.checkpoint()
        assert sink_ids(tmp_path / "out") == list(range(9))
        # ctx.sql reads the files there are now
        assert ctx.sql("SELECT count(*) AS n FROM landing").column("n").to_pylist() == [9]
    finally:
        q.cancel()
    write_csv(landing / "c.csv", range(9, 12))  # while nothing runs
    again = continuous(tmp_path).execute_streaming(
        "INSERT INTO copy SELECT id, ts FROM landing", name="copy"
    )
    try:
        wait_for(again, 3)
        again.checkpoint()
    finally:
        again.cancel()
    assert sink_ids(tmp_path / "out") == list(range(12))


def test_a_continuous_source_reads_appended_lines_once_they_end(tmp_path: Path) -> None:
    landing = tmp_path / "in"
    landing.mkdir()
    log = landing / "log.csv"
    log.write_text("id,ts\n1,2026-01-01 00:00:01\n2,2026-01-01 00:0")  # line 3 half written
    q = continuous(tmp_path).execute_streaming("INSERT INTO copy SELECT id, ts FROM landing")
    try:
        wait_for(q, 1)
        time.sleep(0.3)  # several listings: the half line is not a row yet
        assert q.status()["rows_in"] == 1
        with log.open("a") as f:
            f.write("0:02\n3,2026-01-01 00:00:03\n")
        wait_for(q, 3)
        q.checkpoint()
    finally:
        q.cancel()
    assert sink_ids(tmp_path / "out") == [1, 2, 3]


def test_a_continuous_source_fails_on_a_file_rewritten_after_it_was_read(tmp_path: Path) -> None:
    landing = tmp_path / "in"
    landing.mkdir()
    write_csv(landing / "a.csv", range(0, 3))
    q = continuous(tmp_path).execute_streaming("INSERT INTO copy SELECT id, ts FROM landing")
    wait_for(q, 3)
    write_csv(landing / "a.csv", range(7, 8))  # rewritten: fewer bytes, other rows
    with pytest.raises(ds.QueryFailed, match=r"a\.csv changed after this query read it"):
        q.wait(timeout=60)


def test_a_file_that_vanishes_before_it_is_read_is_a_loud_error(tmp_path: Path) -> None:
    """Listed, then deleted before its turn: its rows were never read, and the run says so."""
    landing = tmp_path / "in"
    landing.mkdir()
    rows = "".join(f"{i},\n" for i in range(100_000))
    for name in ("a", "b"):
        (landing / f"{name}.csv").write_text("id,ts\n" + rows)
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        f"CREATE SOURCE landing (id BIGINT, ts TIMESTAMP) WITH (connector = 'csv', "
        f"path = '{landing}', batch_size = 1000)"
    )
    seen: list[int] = []

    def take(batch: pa.RecordBatch) -> None:
        seen.append(batch.num_rows)
        if len(seen) == 1:
            (landing / "b.csv").unlink()

    ctx.register_append_sink("out", take)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM landing")
    with pytest.raises(ds.QueryFailed, match=r"b\.csv vanished before it was read to its end"):
        q.wait(timeout=60)
    assert sum(seen) == 100_000


def test_watermarks_run_across_files_and_an_idle_source_stops_holding_them_back(
    tmp_path: Path,
) -> None:
    """Windows close as later files arrive (bounded disorder across files); a second source
    that gets no files stops holding the windows back after its idle timeout."""
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
    ctx = ds.Context(state_dir=None)
    for side in ("a", "b"):
        ctx.execute(
            f"CREATE SOURCE {side} (id BIGINT, ts TIMESTAMP, "
            f"WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) WITH (connector = 'csv', "
            f"path = '{tmp_path / side}', scan.mode = 'continuous', discovery_interval = '50ms', "
            "idle_timeout = '300ms')"
        )
    q = ctx.execute_streaming(
        "SELECT window_start, count(*) AS n FROM TUMBLE("
        "(SELECT id, ts FROM a UNION ALL SELECT id, ts FROM b), ts, INTERVAL '1' MINUTE) "
        "GROUP BY window_start EMIT ON WINDOW CLOSE"
    )
    try:
        write_csv(tmp_path / "a" / "1.csv", range(0, 50))  # minute 0, up to 00:00:49
        write_csv(tmp_path / "b" / "1.csv", range(0, 10))
        wait_for(q, 60)
        write_csv(tmp_path / "a" / "2.csv", range(50, 66))  # 00:01:05: minute 0 may close
        deadline = time.monotonic() + 60
        while not q.latest().num_rows and time.monotonic() < deadline:
            time.sleep(0.05)
        # b got nothing since 00:00:09; idle, it no longer holds minute 0 open
        assert q.latest().to_pylist() == [{"window_start": dt.datetime(2026, 1, 1), "n": 70}]
    finally:
        q.cancel()


# -- SIGKILL at random moments ----------------------------------------------------------


def cli(script: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "datum_sql.cli", "run", str(script), "--state-dir",
            str(script.parent / "state"), "--checkpoint-interval", "200ms", *args]  # fmt: skip


def killed_then_finished(command: list[str], rng: random.Random, kills: int) -> str:
    """Run ``command`` ``kills`` times, each SIGKILLed at a random moment (start-up included:
    a process takes seconds to start here), then once to its end; its output."""
    for _ in range(kills):
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=rng.uniform(1.0, 8.0))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_the_walkthrough_holds_each_row_once_through_sigkills(tmp_path: Path) -> None:
    """Two rows, then a run with nothing new, then one appended row (with a bulk file so
    the kills land while rows are read and written too): after each run, killed at random
    moments and run again to its end, the sink holds every row once."""
    rng = random.Random(15)
    script = job(tmp_path)
    orders = write_csv(tmp_path / "in" / "orders.csv", range(0, 2))
    write_csv(tmp_path / "in" / "bulk.csv", range(1000, 301_000))
    expected = [0, 1, *range(1000, 301_000)]
    killed_then_finished(cli(script), rng, kills=2)
    assert sink_ids(tmp_path / "out") == expected

    out = killed_then_finished(cli(script), rng, kills=1)
    assert "nothing written" in out
    assert sink_ids(tmp_path / "out") == expected

    write_csv(orders, range(2, 3), header=False)
    killed_then_finished(cli(script), rng, kills=2)
    assert sink_ids(tmp_path / "out") == sorted([*expected, 2])


def window_rows(path: Path) -> list[tuple[int, int]]:
    """(minute, count) of the per-minute windows committed at ``path``, sorted."""
    table = pads.dataset(str(path), format="parquet").to_table() if path.exists() else None
    if table is None or "window_start" not in table.column_names:
        return []  # nothing committed yet
    minutes = [w.minute for w in table.column("window_start").to_pylist()]
    return sorted(zip(minutes, table.column("n").to_pylist()))


def wait_until(what: str, check: Any, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"the job ended ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout} s")
        time.sleep(0.1)


def test_a_continuous_windowed_job_closes_windows_across_files_and_survives_a_crash(
    tmp_path: Path,
) -> None:
    landing = tmp_path / "in"
    landing.mkdir()
    script = tmp_path / "windows.sql"
    script.write_text(
        f"""
        CREATE SOURCE landing (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
            WITH (connector = 'csv', path = '{landing}', scan.mode = 'continuous',
                  discovery_interval = '100ms');
        CREATE SINK per_minute WITH (connector = 'parquet', path = '{tmp_path / "out"}');
        INSERT INTO per_minute
            SELECT window_start, count(*) AS n FROM TUMBLE(landing, ts, INTERVAL '1' MINUTE)
            GROUP BY window_start EMIT ON WINDOW CLOSE;
        """
    )
    out = tmp_path / "out"
    first = subprocess.Popen(
        cli(script), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        write_csv(landing / "m0.csv", range(0, 40))  # minute 0: 40 rows
        write_csv(landing / "m1.csv", range(0, 25), minute=1)  # minute 1 opens: 0 closes
        wait_until("window of minute 0", lambda: window_rows(out) == [(0, 40)], first)
    finally:
        first.kill()  # a crash: no clean stop
        first.wait()
    write_csv(landing / "m2.csv", range(0, 5), minute=2)  # arrives while the job is down
    second = subprocess.Popen(
        cli(script), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_until("window of minute 1", lambda: len(window_rows(out)) == 2, second)
    finally:
        second.send_signal(signal.SIGTERM)  # a clean stop: it commits and says what it read
        text, _ = second.communicate(timeout=120)
    assert window_rows(out) == [(0, 40), (1, 25)]
    read = int(re.search(r"in landing: ([\d,]+) rows", text).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert read <= 25 + 5  # m0.csv, read and committed before the crash, was not read again
