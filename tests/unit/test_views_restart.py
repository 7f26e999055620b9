"""Materialized views outlive their Context: restarted from their checkpoints when a
Context opens the same state_dir, replaced by CREATE OR REPLACE, readable by other views."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import datum_sql as ds

COUNTS = "SELECT k, count(*) AS n, sum(v) AS total FROM events GROUP BY k"


def _db(path: Path, sql: str) -> None:
    con = duckdb.connect(str(path))
    try:
        con.execute(sql)
    finally:
        con.close()


def _events(tmp_path: Path, rows: str = "(1, 10), (2, 20), (1, 30)") -> Path:
    db = tmp_path / "data.duckdb"
    _db(db, f"CREATE TABLE events (k INTEGER, v INTEGER); INSERT INTO events VALUES {rows}")
    return db


def _declare(ctx: ds.Context, db: Path) -> None:
    ctx.execute(
        f"CREATE SOURCE IF NOT EXISTS events WITH "
        f"(connector = 'duckdb', path = '{db}', table = 'events')"
    )


def _rows(table: pa.Table, *cols: str) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in cols)))


def _wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_an_updating_view_is_restarted_from_its_checkpoint(tmp_path: Path) -> None:
    db, state = _events(tmp_path), tmp_path / "state"
    with ds.Context(state) as ctx:
        _declare(ctx, db)
        ctx.execute(f"CREATE MATERIALIZED VIEW IF NOT EXISTS counts AS {COUNTS}").wait(60)
        assert _rows(ctx.sql("SELECT * FROM counts"), "k", "n", "total") == [
            (1, 2, 40), (2, 1, 20),
        ]  # fmt: skip
    _db(db, "INSERT INTO events VALUES (2, 5), (3, 7)")

    with ds.Context(state) as ctx:
        view = ctx.view("counts")  # running again without being asked
        assert ctx.execute(f"CREATE MATERIALIZED VIEW IF NOT EXISTS counts AS {COUNTS}") is view
        view.wait(60)
        status = view.status()
        assert status["recovered_from"]["checkpoint"] >= 1
        assert status["sources"]["events"]["rows"] == 2  # only the rows added since
        assert _rows(ctx.sql("SELECT * FROM counts"), "k", "n", "total") == [
            (1, 2, 40), (2, 2, 25), (3, 1, 7),
        ]  # fmt: skip
        shown = ctx.execute("SHOW MATERIALIZED VIEWS").to_pylist()
        assert [(r["name"], r["persistent"]) for r in shown] == [("counts", True)]
        root = state / "queries" / "view_counts" / "checkpoints"
        assert any(root.glob("chk-*/MANIFEST.json"))


WINDOWED = """
    SELECT window_start, count(*) AS n FROM tumble(ticks, ts, INTERVAL '1' SECOND)
    GROUP BY window_start, window_end EMIT ON WINDOW CLOSE
"""


def test_a_windowed_view_keeps_the_rows_it_emitted_before_the_restart(tmp_path: Path) -> None:
    """The closed windows are gone from the operator's state: the view's result is
    checkpointed with it, and the EMIT ON WINDOW CLOSE clause survives in the catalog."""
    state = tmp_path / "state"
    ddl = (
        """
        CREATE SOURCE IF NOT EXISTS ticks (id BIGINT, ts TIMESTAMP,
            WATERMARK FOR ts AS ts - INTERVAL '0' SECOND)
        WITH (connector = 'datagen', events_per_second = '4000', inter_event_us = '1000');
        CREATE MATERIALIZED VIEW IF NOT EXISTS per_second AS """
        + WINDOWED
    )
    with ds.Context(state) as ctx:
        ctx.execute(ddl)
        _wait_for(lambda: ctx.sql("SELECT count(*) AS c FROM per_second")["c"][0].as_py() >= 2)
    # the Context closed: the view stopped with a checkpoint of everything processed
    with ds.Context(state) as ctx:
        # a read waits for the restore: what the first Context emitted is there at once
        first = _rows(ctx.sql("SELECT * FROM per_second"), "window_start", "n")
        assert len(first) >= 2
        assert ctx.view("per_second").status()["recovered_from"] is not None
        assert "_op" not in ctx.sql("SELECT * FROM per_second").column_names
        _wait_for(lambda: len(ctx.sql("SELECT * FROM per_second")) >= len(first) + 1)
        got = _rows(ctx.sql("SELECT * FROM per_second"), "window_start", "n")
    # every window of 1000 rows exactly once, across the restart, none lost or repeated
    starts = [r[0] for r in got]
    assert starts == sorted(set(starts))
    assert all(n == 1000 for _, n in got)
    assert all((b - a).total_seconds() == 1 for a, b in itertools.pairwise(starts))


def test_a_view_over_python_data_lives_only_in_its_context(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with ds.Context(state) as ctx:
        ctx.register_arrow("t", pa.table({"k": [1, 1, 2]}))
        ctx.execute("CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM t GROUP BY k")
        ctx.view("per_k").wait(60)
        assert _rows(ctx.sql("SELECT * FROM per_k"), "k", "n") == [(1, 2), (2, 1)]
        shown = ctx.execute("SHOW MATERIALIZED VIEWS").to_pylist()
        assert [(r["name"], r["persistent"]) for r in shown] == [("per_k", False)]
    with ds.Context(state) as ctx:
        assert ctx.catalog.get("per_k") is None
        with pytest.raises(ds.PlanError, match="unknown"):
            ctx.view("per_k")


def test_create_or_replace_view_restarts_it_with_the_new_query(tmp_path: Path) -> None:
    db, state = _events(tmp_path), tmp_path / "state"
    with ds.Context(state) as ctx:
        _declare(ctx, db)
        old = ctx.execute(f"CREATE MATERIALIZED VIEW counts AS {COUNTS}")
        old.wait(60)
        new = ctx.execute(
            "CREATE OR REPLACE MATERIALIZED VIEW counts AS "
            "SELECT k, max(v) AS top FROM events GROUP BY k"
        )
        assert new is not old and ctx.view("counts") is new
        new.wait(60)
        assert _rows(ctx.sql("SELECT * FROM counts"), "k", "top") == [(1, 30), (2, 20)]
        assert ctx.catalog.get("counts").schema.names == ["k", "top"]
    with ds.Context(state) as ctx:  # the replacement is what restarts
        ctx.view("counts").wait(60)
        assert _rows(ctx.sql("SELECT * FROM counts"), "k", "top") == [(1, 30), (2, 20)]


def test_replacing_a_running_view_cancels_the_old_query(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with ds.Context(state) as ctx:
        ctx.execute("""
            CREATE SOURCE gen (id BIGINT) WITH (connector = 'datagen', events_per_second = '100');
            CREATE MATERIALIZED VIEW c AS SELECT count(*) AS n FROM gen
        """)
        old = ctx.view("c")
        assert old.state == "running"
        new = ctx.execute("CREATE OR REPLACE MATERIALIZED VIEW c AS SELECT max(id) AS top FROM gen")
        assert old.done and old.state == "cancelled"
        assert new.state == "running"
        _wait_for(lambda: len(ctx.sql("SELECT top FROM c")) == 1)


def test_replacing_something_in_use_is_refused(tmp_path: Path) -> None:
    db, state = _events(tmp_path), tmp_path / "state"
    with ds.Context(state) as ctx:
        _declare(ctx, db)
        ctx.execute("""
            CREATE SOURCE gen (id BIGINT) WITH (connector = 'datagen', events_per_second = '100');
            CREATE MATERIALIZED VIEW live AS SELECT count(*) AS n FROM gen;
            CREATE MATERIALIZED VIEW base AS SELECT k, v FROM events WHERE v > 10;
            CREATE MATERIALIZED VIEW top AS SELECT k, max(v) AS top FROM base GROUP BY k;
        """)
        with pytest.raises(ds.PlanError, match=r"'gen' is used by running query view live"):
            ctx.execute("CREATE OR REPLACE SOURCE gen (id BIGINT) WITH (connector = 'datagen')")
        with pytest.raises(ds.PlanError, match=r"'base' is read by materialized view 'top'"):
            ctx.execute("CREATE OR REPLACE MATERIALIZED VIEW base AS SELECT k, v FROM events")
        with pytest.raises(ds.PlanError, match=r"'base' is read by materialized view 'top'"):
            ctx.execute("DROP MATERIALIZED VIEW base")
        with pytest.raises(ds.PlanError, match="'top' cannot read itself"):
            ctx.execute("CREATE OR REPLACE MATERIALIZED VIEW top AS SELECT k, top FROM top")
        with pytest.raises(
            ds.PlanError, match=r"source .gen. already exists and is not a materialized view"
        ):
            ctx.execute("CREATE OR REPLACE MATERIALIZED VIEW gen AS SELECT k FROM events")
        assert ctx.view("live").state == "running"  # nothing was touched


def test_create_or_replace_source_and_sink_take_the_new_definition(tmp_path: Path) -> None:
    db = _events(tmp_path)
    other = tmp_path / "other.duckdb"
    _db(other, "CREATE TABLE events (k INTEGER, v INTEGER); INSERT INTO events VALUES (9, 99)")
    with ds.Context(tmp_path / "state") as ctx:
        _declare(ctx, db)
        ctx.execute(
            f"CREATE OR REPLACE SOURCE events WITH "
            f"(connector = 'duckdb', path = '{other}', table = 'events')"
        )
        assert _rows(ctx.sql("SELECT k, v FROM events"), "k", "v") == [(9, 99)]
        for sub in ("a", "b"):
            ctx.execute(
                f"CREATE OR REPLACE SINK out WITH (connector = 'parquet', path = '{tmp_path / sub}')"
            )
        ctx.execute("INSERT INTO out SELECT k, v FROM events").wait(60)
        assert not (tmp_path / "a").exists() and (tmp_path / "b").exists()
    with ds.Context(tmp_path / "state") as ctx:  # and the catalog kept the replacements
        assert ctx.catalog.get("events").options["path"] == str(other)


def test_a_view_can_read_another_view(tmp_path: Path) -> None:
    db, state = _events(tmp_path), tmp_path / "state"
    nested = "SELECT k, total * 2 AS doubled FROM counts WHERE n >= 1"
    with ds.Context(state) as ctx:
        _declare(ctx, db)
        ctx.execute(f"""
            CREATE MATERIALIZED VIEW counts AS {COUNTS};
            CREATE MATERIALIZED VIEW doubled AS {nested};
        """)
        for name in ("counts", "doubled"):
            ctx.view(name).wait(60)
        assert _rows(ctx.sql("SELECT * FROM doubled"), "k", "doubled") == [(1, 80), (2, 40)]
        joined = ctx.sql("SELECT c.k, c.n, d.doubled FROM counts c JOIN doubled d ON c.k = d.k")
        assert _rows(joined, "k", "n", "doubled") == [(1, 2, 80), (2, 1, 40)]
        # a streaming query over a view runs the view's query over its sources
        streamed = ctx.execute_streaming("SELECT k, doubled FROM doubled").to_arrow(timeout=60)
        assert _rows(streamed, "k", "doubled") == [(1, 80), (2, 40)]
    _db(db, "INSERT INTO events VALUES (3, 1)")
    with ds.Context(state) as ctx:
        for name in ("counts", "doubled"):
            ctx.view(name).wait(60)
        assert _rows(ctx.sql("SELECT * FROM doubled"), "k", "doubled") == [
            (1, 80), (2, 40), (3, 2),
        ]  # fmt: skip


def test_a_query_over_a_windowed_view_reads_its_final_rows(tmp_path: Path) -> None:
    """A view with EMIT ON WINDOW CLOSE, read as a subquery, still emits final rows (no
    changelog), so a view over it and windows over its window_end and its window_start run."""
    with ds.Context(tmp_path / "state") as ctx:
        ctx.execute(
            """
            CREATE SOURCE ticks (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
            WITH (connector = 'datagen', rows = '100');
            CREATE MATERIALIZED VIEW per_second AS """
            + WINDOWED.replace(
                "SELECT window_start,", "SELECT window_start AS opened, window_end AS closed,"
            )
        )
        ctx.view("per_second").wait(60)
        again = ctx.execute("CREATE MATERIALIZED VIEW again AS SELECT n FROM per_second")
        again.wait(60)
        want = ctx.sql("SELECT n FROM per_second")
        assert sorted(ctx.sql("SELECT n FROM again").column("n").to_pylist()) == sorted(
            want.column("n").to_pylist()
        )
        plain = ctx.execute_streaming("SELECT opened, n FROM per_second")
        assert "_op" not in plain.to_arrow(timeout=60).column_names
        minutes = ctx.execute_streaming(
            "SELECT window_start, sum(n) AS n FROM "
            "tumble(per_second, closed, INTERVAL '1' MINUTE) GROUP BY window_start, window_end"
        ).to_arrow(timeout=60)
        assert sum(minutes.column("n").to_pylist()) == sum(want.column("n").to_pylist())
        # window_start trails the watermark by the window's size: a window over it closes
        # that much later, with the same rows as the batch query
        by_start = (
            "SELECT window_start, sum(n) AS n FROM "
            "tumble(per_second, opened, INTERVAL '1' MINUTE) GROUP BY window_start"
        )
        streamed = ctx.execute_streaming(by_start).to_arrow(timeout=60)
        assert sorted(streamed.to_pylist(), key=repr) == sorted(
            ctx.sql(by_start).to_pylist(), key=repr
        )
        assert sum(streamed.column("n").to_pylist()) == sum(want.column("n").to_pylist())


def test_drop_forgets_the_view_and_its_checkpoints(tmp_path: Path) -> None:
    db, state = _events(tmp_path), tmp_path / "state"
    with ds.Context(state) as ctx:
        _declare(ctx, db)
        ctx.execute(f"CREATE MATERIALIZED VIEW counts AS {COUNTS}").wait(60)
        ctx.execute("DROP MATERIALIZED VIEW counts")
        assert not (state / "queries" / "view_counts").exists()
        again = ctx.execute(f"CREATE MATERIALIZED VIEW counts AS {COUNTS}")
        again.wait(60)
        assert again.status()["recovered_from"] is None  # built from the start, not resumed
        assert _rows(ctx.sql("SELECT * FROM counts"), "k", "n") == [(1, 2), (2, 1)]


def test_a_view_that_cannot_restart_says_why(tmp_path: Path) -> None:
    db, state = _events(tmp_path), tmp_path / "state"
    with ds.Context(state) as ctx:
        _declare(ctx, db)
        ctx.execute(f"CREATE MATERIALIZED VIEW counts AS {COUNTS}").wait(60)
    db.unlink()
    with ds.Context(state) as ctx:  # the Context opens; the view reports its failure
        with pytest.raises(ds.PlanError) as info:
            ctx.sql("SELECT * FROM counts")
        message = str(info.value)
        assert "materialized view 'counts' could not be restarted" in message
        assert "does not exist" in message and "DROP MATERIALIZED VIEW counts" in message
        ctx.execute("DROP MATERIALIZED VIEW counts")
        assert ctx.catalog.get("counts") is None


def test_two_contexts_never_run_one_view(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with ds.Context(state) as first:
        first.execute("""
            CREATE SOURCE gen (id BIGINT) WITH (connector = 'datagen', events_per_second = '100');
            CREATE MATERIALIZED VIEW c AS SELECT count(*) AS n FROM gen
        """)
        with ds.Context(state) as second, pytest.raises(ds.PlanError, match="already running"):
            second.view("c")
        assert first.view("c").state == "running"
