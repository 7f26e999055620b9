"""Plain views (``CREATE VIEW``): a named query that streaming queries, ``INSERT INTO``
scripts and ``ctx.sql`` read by running it; no query maintains it, and it outlives its
Context in the state directory's catalog."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.dataset as pads
import pytest

import datum_sql as ds
from datum_sql.cli import main

ROWS = "(1, 10), (2, 20), (1, 30), (3, 5), (2, 25)"
VIEW = "CREATE VIEW big AS SELECT k, v FROM events WHERE v >= 10"


def _events(tmp_path: Path) -> Path:
    db = tmp_path / "data.duckdb"
    con = duckdb.connect(str(db))
    con.execute(f"CREATE TABLE events (k INTEGER, v INTEGER); INSERT INTO events VALUES {ROWS}")
    con.close()
    return db


def _source(db: Path) -> str:
    return f"CREATE SOURCE events WITH (connector = 'duckdb', path = '{db}', table = 'events')"


def _rows(table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_a_view_is_read_as_a_stream_and_in_batch(tmp_path: Path) -> None:
    db = _events(tmp_path)
    with ds.Context(state_dir=tmp_path / "state") as ctx:
        ctx.execute(_source(db))
        assert ctx.execute(VIEW) is None  # nothing runs
        assert not ctx.queries
        sql = "SELECT k, sum(v) AS total FROM big GROUP BY k"
        want = [(1, 40), (2, 45)]
        assert _rows(ctx.execute_streaming(sql).to_arrow(timeout=60)) == want
        assert _rows(ctx.sql(sql)) == want
        assert ctx.execute("SHOW VIEWS").column("name").to_pylist() == ["big"]
        assert ctx.execute("SHOW MATERIALIZED VIEWS").num_rows == 0
        with pytest.raises(ds.PlanError, match="view 'big' is not materialized"):
            ctx.view("big")
    with ds.Context(state_dir=tmp_path / "state") as ctx:  # kept by the catalog
        assert _rows(ctx.sql("SELECT k, v FROM big WHERE k = 2")) == [(2, 20), (2, 25)]
        ctx.execute("DROP VIEW big")
        assert ctx.execute("SHOW VIEWS").num_rows == 0


def test_a_view_reads_views_and_is_refused_with_whole_query_clauses(tmp_path: Path) -> None:
    db = _events(tmp_path)
    with ds.Context(state_dir=None) as ctx:
        ctx.execute(_source(db))
        ctx.execute(VIEW)
        ctx.execute("CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM big GROUP BY k")
        ctx.view("per_k").wait(60)
        assert _rows(ctx.sql("SELECT k, n FROM per_k")) == [(1, 2), (2, 2)]
        with pytest.raises(ds.SqlError, match="a view cannot carry ALLOWED LATENESS"):
            ctx.execute(
                "CREATE VIEW late AS SELECT k FROM events ALLOWED LATENESS INTERVAL '1' SECOND"
            )
        with pytest.raises(ds.PlanError, match="read by materialized view 'per_k'"):
            ctx.execute("DROP VIEW big")


def test_an_insert_script_reads_a_view_and_runs_again(tmp_path: Path, capsys) -> None:
    """Run twice on one state directory: the second run finds the view in the catalog
    with the same definition and keeps it (as it does sources and sinks)."""
    db = _events(tmp_path)
    out = tmp_path / "out"
    script = tmp_path / "job.sql"
    script.write_text(
        f"{_source(db)};\n{VIEW};\n"
        f"CREATE SINK picked WITH (connector = 'parquet', path = '{out}');\n"
        "INSERT INTO picked SELECT k, v FROM big WHERE k IN (SELECT k FROM events WHERE v < 15);\n"
    )
    state = str(tmp_path / "state")
    for _ in range(2):  # the second run resumes the INSERT: nothing is written twice
        assert main(["run", str(script), "--state-dir", state]) == 0, capsys.readouterr().err
        got = pads.dataset(str(out), format="parquet").to_table()
        assert _rows(got) == [(1, 10), (1, 30)]
