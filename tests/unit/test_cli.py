"""The ``datum-sql`` command: run, sql, explain, demo; exit codes; progress; Ctrl-C."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from datum_sql.cli import main
from datum_sql.context import Context
from datum_sql.progress import Progress

ESC = "\x1b"

ROWS = [{"id": i, "name": f"item-{i}", "price": (i * 37) % 100, "qty": i % 7} for i in range(1, 41)]
EXPECTED = sorted(
    [{"id": r["id"], "name": r["name"], "total": r["price"] * r["qty"]} for r in ROWS if r["price"] > 50],
    key=lambda r: r["id"],
)  # fmt: skip


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _script(tmp_path: Path, text: str, name: str = "job.sql") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _read_dir(path: Path) -> pa.Table:
    return pads.dataset(str(path), format="parquet").to_table()


def _orders_script(tmp_path: Path) -> tuple[Path, Path]:
    data = _write_csv(tmp_path / "orders.csv", ROWS)
    out = tmp_path / "out" / "big"
    script = _script(
        tmp_path,
        f"""
        -- a comment before the first statement
        CREATE SOURCE orders (id BIGINT, name VARCHAR, price BIGINT, qty BIGINT)
            WITH (connector = 'csv', path = '{data}');
        CREATE SINK big WITH (connector = 'parquet', path = '{out}');
        SHOW SINKS;
        INSERT INTO big SELECT id, name, price * qty AS total FROM orders WHERE price > 50;
        """,
    )
    return script, out


def _cli(*args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "datum_sql.cli", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **(env or {})},
        **kw,
    )


# -- run --------------------------------------------------------------------------------------


def test_run_writes_the_filtered_rows_in_process(tmp_path, capsys):
    script, out = _orders_script(tmp_path)
    code = main(["run", str(script), "--state-dir", str(tmp_path / "state")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    got = sorted(_read_dir(out).to_pylist(), key=lambda r: r["id"])
    assert got == EXPECTED
    assert "big" in captured.out  # SHOW SINKS printed its table
    assert "started insert_into_big" in captured.out
    assert "insert_into_big finished" in captured.out
    assert f"out big: {len(EXPECTED):,} rows" in captured.out
    assert ESC not in captured.out + captured.err


def test_run_in_a_subprocess(tmp_path):
    script, out = _orders_script(tmp_path)
    result = _cli("run", str(script), "--state-dir", str(tmp_path / "state"), "--checkpoint-interval", "1s")  # fmt: skip
    assert result.returncode == 0, result.stderr
    got = sorted(_read_dir(out).to_pylist(), key=lambda r: r["id"])
    assert got == EXPECTED
    assert "insert_into_big finished" in result.stdout


def test_run_again_on_the_same_state_dir_reuses_the_catalog(tmp_path, capsys):
    script, out = _orders_script(tmp_path)
    state = str(tmp_path / "state")
    assert main(["run", str(script), "--state-dir", state]) == 0
    assert main(["run", str(script), "--state-dir", state]) == 0, capsys.readouterr().err
    # The second run resumes from the first one's last checkpoint: nothing is written twice.
    assert sorted(_read_dir(out).to_pylist(), key=lambda r: r["id"]) == EXPECTED
    assert "in orders: 0 rows" in capsys.readouterr().out

    changed = (
        script.read_text().replace("price > 50", "price > 60").replace(str(out), str(out) + "2")
    )
    script.write_text(changed)
    capsys.readouterr()
    assert main(["run", str(script), "--state-dir", state]) == 2
    assert "different definition" in capsys.readouterr().err


def test_create_sink_as_select_starts_a_query(tmp_path, capsys):
    data = _write_csv(tmp_path / "orders.csv", ROWS)
    out = tmp_path / "cheap"
    script = _script(
        tmp_path,
        f"CREATE SOURCE orders WITH (connector = 'csv', path = '{data}');\n"
        f"CREATE SINK cheap WITH (connector = 'parquet', path = '{out}') AS\n"
        "  SELECT id FROM orders WHERE price <= 50;\n",
    )
    assert main(["run", str(script), "--state-dir", str(tmp_path / "state")]) == 0
    got = sorted(r["id"] for r in _read_dir(out).to_pylist())
    assert got == [r["id"] for r in ROWS if r["price"] <= 50]
    assert "started insert_into_cheap" in capsys.readouterr().out


def test_materialized_view_is_restarted_when_the_script_runs_again(tmp_path, capsys):
    data = _write_csv(tmp_path / "orders.csv", ROWS)
    script = _script(
        tmp_path,
        f"CREATE SOURCE orders WITH (connector = 'csv', path = '{data}');\n"
        "CREATE MATERIALIZED VIEW per_qty AS SELECT qty, count(*) AS n FROM orders GROUP BY qty;\n",
    )
    state = str(tmp_path / "state")
    groups = len({r["qty"] for r in ROWS})
    for rows_in, rows_out in ((len(ROWS), groups), (0, 0)):  # the second run resumes
        assert main(["run", str(script), "--state-dir", state]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        assert "view per_qty finished" in out
        assert f"in orders: {rows_in} rows" in out
        assert f"out (results): {rows_out} rows" in out
    with Context(state) as ctx:  # the view's result came back from its checkpoint
        ctx.view("per_qty").wait(30)
        assert ctx.sql("SELECT sum(n) AS n FROM per_qty").column("n").to_pylist() == [len(ROWS)]


def test_missing_script_exits_2(tmp_path, capsys):
    code = main(["run", str(tmp_path / "nope.sql"), "--state-dir", str(tmp_path / "s")])
    assert code == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "nope.sql" in err


def test_syntax_error_exits_2_with_line_and_column_and_nothing_runs(tmp_path, capsys):
    data = _write_csv(tmp_path / "orders.csv", ROWS)
    script = _script(
        tmp_path,
        f"CREATE SOURCE orders WITH (connector = 'csv', path = '{data}');\n"
        "\n"
        "SELECT id, FROM WHERE orders;\n",
    )
    state = tmp_path / "state"
    code = main(["run", str(script), "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert code == 2
    assert "line 3, column" in err
    assert f"{script}:3:" in err
    assert "^" in err  # the caret under the offending token
    assert "Traceback" not in err
    # The whole file is checked before anything runs: the source was not created.
    assert Context(state).catalog.names() == []


def test_bind_error_points_into_the_file(tmp_path, capsys):
    data = _write_csv(tmp_path / "orders.csv", ROWS)
    script = _script(
        tmp_path,
        f"CREATE SOURCE orders WITH (connector = 'csv', path = '{data}');\n"
        "CREATE SINK o WITH (connector = 'parquet', path = 'x');\n"
        "INSERT INTO o\n  SELECT idd FROM orders;\n",
    )
    code = main(["run", str(script), "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 2
    assert "line 4, column 10" in err
    assert "Did you mean 'id'" in err


def test_bad_checkpoint_interval_exits_2(tmp_path, capsys):
    script, _ = _orders_script(tmp_path)
    assert main(["run", str(script), "--checkpoint-interval", "soon"]) == 2
    assert "checkpoint-interval" in capsys.readouterr().err


def test_failed_query_exits_1_with_the_message_only(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,x\n2,y\nnot-a-number,z\n")
    script = _script(
        tmp_path,
        f"CREATE SOURCE t (a BIGINT, b VARCHAR) WITH (connector = 'csv', path = '{bad}');\n"
        f"CREATE SINK o WITH (connector = 'parquet', path = '{tmp_path / 'o'}');\n"
        "INSERT INTO o SELECT a, b FROM t;\n",
    )
    code = main(["run", str(script), "--state-dir", str(tmp_path / "s1")])
    err = capsys.readouterr().err
    assert code == 1
    assert "query insert_into_o failed" in err and "not-a-number" in err
    assert "Traceback" not in err

    code = main(["run", str(script), "--state-dir", str(tmp_path / "s2"), "--debug"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" in err


def test_progress_lines_when_not_a_terminal(tmp_path):
    """A query running ~3 s prints periodic plain lines and a summary, no escape codes —
    even with FORCE_COLOR set."""
    out = tmp_path / "o"
    script = _script(
        tmp_path,
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', rows = '6000', "
        "events_per_second = '2000');\n"
        f"CREATE SINK o WITH (connector = 'parquet', path = '{out}');\n"
        "SHOW SOURCES;\n"
        "INSERT INTO o SELECT auction, price FROM bids;\n",
    )
    result = _cli("run", str(script), "--state-dir", str(tmp_path / "s"), env={"FORCE_COLOR": "1"})
    assert result.returncode == 0, result.stderr
    assert ESC not in result.stdout + result.stderr
    progress = [line for line in result.stdout.splitlines() if " insert_into_o running " in line]
    assert progress, result.stdout
    assert "in bids:" in progress[0] and "rows/s" in progress[0] and "out o:" in progress[0]
    assert "insert_into_o finished" in result.stdout and "out o: 6,000 rows" in result.stdout
    assert _read_dir(out).num_rows == 6000


def test_ctrl_c_cancels_commits_and_exits_130(tmp_path):
    out = tmp_path / "sink"
    script = _script(
        tmp_path,
        "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', "
        "events_per_second = '2000');\n"
        f"CREATE SINK s WITH (connector = 'parquet', path = '{out}');\n"
        "INSERT INTO s SELECT auction, bidder, price FROM bids;\n",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "datum_sql.cli", "run", str(script), "--state-dir", str(tmp_path / "s"),
         "--checkpoint-interval", "1h"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "started insert_into_s" in line, line + proc.stderr.read() if proc.stderr else line
        time.sleep(1.5)
        assert proc.poll() is None, "an unbounded query must keep running"
        # Nothing committed yet: the checkpoint interval is an hour.
        assert not list(out.glob("*.parquet"))
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert time.monotonic() - sent < 5
    assert "stopped" in stderr and "Traceback" not in stderr
    assert "insert_into_s cancelled" in stdout
    parts = list(out.glob("*.parquet"))
    assert parts, "Ctrl-C must commit what was processed"
    rows = _read_dir(out).num_rows
    assert rows > 0
    assert f"out s: {rows:,} rows" in stdout


# -- sql / explain ----------------------------------------------------------------------------


@pytest.fixture
def state_with_orders(tmp_path) -> str:
    data = _write_csv(tmp_path / "orders.csv", ROWS)
    state = str(tmp_path / "state")
    ctx = Context(state)
    ctx.execute(f"CREATE SOURCE orders WITH (connector = 'csv', path = '{data}')")
    return state


def test_sql_prints_a_table(state_with_orders, capsys):
    code = main(["sql", "SELECT id, name FROM orders WHERE id IN (3, 17) ORDER BY id", "--state-dir", state_with_orders])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "item-3" in out and "item-17" in out and "item-4" not in out
    assert "(2 rows)" in out
    assert ESC not in out


def test_sql_table_is_capped_at_50_rows(tmp_path, capsys):
    data = _write_csv(tmp_path / "n.csv", [{"n": i} for i in range(120)])
    code = main(["sql", f"CREATE SOURCE n WITH (connector = 'csv', path = '{data}'); SELECT n FROM n ORDER BY n", "--state-dir", str(tmp_path / "s")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "… 70 more rows (120 in all)" in out
    cells = [line.strip() for line in out.splitlines()]
    assert "49" in cells and "50" not in cells


def test_sql_formats_csv_and_json(state_with_orders, capsys):
    query = "SELECT id, name FROM orders WHERE id <= 2 ORDER BY id"
    assert main(["sql", query, "--state-dir", state_with_orders, "--format", "csv"]) == 0
    assert capsys.readouterr().out == '"id","name"\n1,"item-1"\n2,"item-2"\n'
    assert main(["sql", query, "--state-dir", state_with_orders, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"id": 1, "name": "item-1"},
        {"id": 2, "name": "item-2"},
    ]
    assert main(["sql", query, "--state-dir", state_with_orders, "--format", "jsonl"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x) for x in lines] == [
        {"id": 1, "name": "item-1"},
        {"id": 2, "name": "item-2"},
    ]


def test_sql_in_a_subprocess(state_with_orders):
    result = _cli("sql", "SELECT sum(qty) AS q FROM orders", "--state-dir", state_with_orders, "--format", "csv")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ['"q"', str(sum(r["qty"] for r in ROWS))]


def test_sql_errors_exit_2(state_with_orders, capsys):
    assert main(["sql", "SELECT nme FROM orders", "--state-dir", state_with_orders]) == 2
    err = capsys.readouterr().err
    assert "line 1, column 8" in err and "'name'" in err
    assert main(["sql", "SELECT FROM FROM", "--state-dir", state_with_orders]) == 2
    assert "line 1" in capsys.readouterr().err
    code = main(["sql", "INSERT INTO x SELECT id FROM orders", "--state-dir", state_with_orders])
    assert code == 2
    assert "datum-sql run" in capsys.readouterr().err


def test_explain_prints_the_plan(state_with_orders, capsys):
    code = main(["explain", "SELECT id FROM orders WHERE price > 50", "--state-dir", state_with_orders])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "Scan(orders)" in out and "job graph" in out


def test_usage_errors_exit_2(capsys):
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["--help"]) == 0
    assert "run" in capsys.readouterr().out


# -- demo -------------------------------------------------------------------------------------


def test_demo_runs_and_prints_a_sample(tmp_path, capsys):
    out_dir = tmp_path / "demo"
    assert main(["demo", "--rows", "20000", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    table = _read_dir(out_dir / "big_bids")
    assert table.num_rows > 0
    assert f"{table.num_rows:,} of 20,000 bids matched" in out
    top = max(table.column("price_eur").to_pylist())
    assert format(top, ".15g") in out  # the sample is sorted by price, biggest first
    assert "insert_into_big_bids finished" in out
    assert ESC not in out
    # Run again into the same directory: the earlier output is replaced, not added to.
    assert main(["demo", "--rows", "20000", "--out", str(out_dir)]) == 0
    assert _read_dir(out_dir / "big_bids").num_rows == table.num_rows


def test_demo_in_a_subprocess_is_quick(tmp_path):
    started = time.monotonic()
    result = _cli("demo", "--rows", "100000", "--out", str(tmp_path / "d"))
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    assert "The ten biggest bids" in result.stdout
    assert "of 100,000 bids matched" in result.stdout


# -- the progress display ---------------------------------------------------------------------


class FakeQuery:
    """A query whose status follows a script of (rows in, rows out) steps, one per poll."""

    def __init__(self, name: str, steps: list[tuple[int, int]], end: str = "finished") -> None:
        self.name = name
        self.steps = steps
        self.end = end
        self.polls = 0
        self.cancelled = False

    @property
    def done(self) -> bool:
        return self.cancelled or self.polls >= len(self.steps)

    @property
    def state(self) -> str:
        if self.cancelled:
            return "cancelled"
        return self.end if self.done else "running"

    def status(self) -> dict[str, Any]:
        i = min(self.polls, len(self.steps) - 1)
        self.polls += 1
        rows_in, rows_out = self.steps[i]
        return {
            "name": self.name,
            "state": self.state,
            "error": "query failed: boom" if self.state == "failed" else None,
            "elapsed_s": 0.5 * self.polls,
            "late_rows": 2,
            "sources": {
                "bids": {
                    "rows": rows_in,
                    "late_rows": 2,
                    "watermark": "2026-01-01 00:00:07.460400",
                    "partitions": {"0": {"lag": 5}, "1": {"lag": 7}},
                }
            },
            "sinks": {"out_t": {"rows": rows_out, "commits": 1}},
            "last_checkpoint": {"id": 3, "at": time.time() - 2},
        }


def test_progress_plain_lines(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)
    buf = io.StringIO()
    q = FakeQuery("q1", [(i * 1000, i * 500) for i in range(8)])
    # One second passes per poll of the query's status.
    done = Progress([q], out=buf, is_terminal=False, log_interval=2.0, clock=lambda: float(q.polls)).run_until_done()  # fmt: skip
    text = buf.getvalue()
    assert done
    assert ESC not in text
    lines = text.splitlines()
    running = [x for x in lines if " q1 running " in x]
    assert running, text
    first = running[0]
    assert "in bids:" in first and "rows/s" in first and "watermark 2026-01-01 00:00:07" in first
    assert "2 late" in first and "lag 12 (2 part.)" in first and "out out_t:" in first
    assert "last checkpoint #3" in first
    assert "1,000 rows/s" in first and "500 rows/s" in first
    assert lines[-1].startswith("q1 finished")
    assert "in bids: 7,000 rows" in lines[-1] and "out out_t: 3,500 rows" in lines[-1]


def test_progress_live_table_on_a_terminal(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)
    buf = io.StringIO()
    q = FakeQuery("q7", [(i * 100, i * 10) for i in range(4)])
    assert Progress([q], out=buf, is_terminal=True).run_until_done()
    text = buf.getvalue()
    assert ESC in text  # a live display redraws with escape codes
    for needle in ("q7", "bids", "out_t", "watermark", "finished", "#3"):
        assert needle in text


def test_progress_fail_fast_and_final(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)
    buf = io.StringIO()
    bad = FakeQuery("q1", [(1, 1)] * 2, end="failed")
    forever = FakeQuery("q2", [(1, 1)] * 10_000)
    progress = Progress([bad, forever], out=buf, is_terminal=False)
    assert progress.run_until_done()
    assert not forever.done
    assert "q1 failed" in buf.getvalue() and "error: query failed: boom" in buf.getvalue()
    forever.cancelled = True
    progress.final()
    assert buf.getvalue().splitlines()[-1].startswith("q2 cancelled")
    assert buf.getvalue().count("q1 failed") == 1


def test_progress_timeout(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)
    q = FakeQuery("q1", [(1, 1)] * 10_000)
    clock = iter(float(i) for i in range(100))
    progress = Progress([q], out=io.StringIO(), is_terminal=False, clock=lambda: next(clock))
    assert progress.run_until_done(timeout=5) is False


def test_insert_script_reads_a_materialized_view_as_a_stream_with_a_subquery(tmp_path, capsys):
    """A script's INSERT reads a materialized view as a stream and keeps the rows whose
    qty is IN a bounded table, as the batch query over the view says."""
    data = _write_csv(tmp_path / "orders.csv", ROWS)
    wanted = _write_csv(tmp_path / "wanted.csv", [{"qty": 2}, {"qty": 2}, {"qty": 5}])
    out = tmp_path / "picked"
    script = _script(
        tmp_path,
        f"CREATE SOURCE orders WITH (connector = 'csv', path = '{data}');\n"
        f"CREATE SOURCE wanted WITH (connector = 'csv', path = '{wanted}');\n"
        "CREATE MATERIALIZED VIEW dear AS SELECT id, qty FROM orders WHERE price > 50;\n"
        f"CREATE SINK picked WITH (connector = 'parquet', path = '{out}');\n"
        "INSERT INTO picked SELECT id FROM dear WHERE qty IN (SELECT qty FROM wanted);\n",
    )
    assert main(["run", str(script), "--state-dir", str(tmp_path / "state")]) == 0, (
        capsys.readouterr().err
    )
    got = sorted(r["id"] for r in _read_dir(out).to_pylist())
    assert got == [r["id"] for r in ROWS if r["price"] > 50 and r["qty"] in (2, 5)]
    assert got


def test_a_name_another_kind_holds_is_refused_when_the_script_runs_again(tmp_path, capsys):
    # the CLI recognises "already exists" by the error's kind and name, not by its text: a
    # source named like a view of the state directory must not replace the view
    data = _write_csv(tmp_path / "orders.csv", ROWS)
    state = str(tmp_path / "state")
    first = _script(
        tmp_path,
        f"CREATE SOURCE orders WITH (connector = 'csv', path = '{data}');\n"
        "CREATE MATERIALIZED VIEW per_qty AS SELECT qty, count(*) AS n FROM orders GROUP BY qty;\n",
    )
    assert main(["run", str(first), "--state-dir", state]) == 0, capsys.readouterr().err
    second = tmp_path / "second.sql"
    second.write_text(f"CREATE SOURCE per_qty WITH (connector = 'csv', path = '{data}');\n")
    capsys.readouterr()
    assert main(["run", str(second), "--state-dir", state]) == 2
    assert "materialized view 'per_qty' already exists" in capsys.readouterr().err
    with Context(state) as ctx:
        assert ctx.catalog.require("per_qty").kind == "materialized view"


def test_already_exists_carries_the_kind_and_the_name():
    from datum_sql.errors import AlreadyExists

    ctx = Context(state_dir=None)
    ctx.execute("CREATE SOURCE t (x BIGINT) WITH (connector = 'datagen', rows = '1')")
    with pytest.raises(AlreadyExists, match="source 't' already exists") as info:
        ctx.execute("CREATE SOURCE t (x BIGINT) WITH (connector = 'datagen', rows = '1')")
    assert (info.value.kind, info.value.name) == ("source", "t")


def test_sql_prints_values_as_typed_one_row_per_line(tmp_path, capsys):
    data = _write_csv(tmp_path / "notes.csv", [{"id": 1, "note": "[red]x[/red]"}, {"id": 2, "note": "two\nlines"}])  # fmt: skip
    sql = f"CREATE SOURCE notes WITH (connector = 'csv', path = '{data}'); SELECT note FROM notes ORDER BY id"  # fmt: skip
    code = main(["sql", sql, "--state-dir", str(tmp_path / "s")])
    out = capsys.readouterr().out
    assert code == 0
    lines = [line.strip() for line in out.splitlines()]
    assert lines[lines.index("[red]x[/red]") + 1] == "two\\nlines"
    assert "(2 rows)" in lines
