"""A lookup table is read fresh each time its query starts: a restart joins the rows that
come after it with the table's current contents, never with a checkpointed copy."""

from __future__ import annotations

import queue
import time
from pathlib import Path

import duckdb
import pyarrow as pa

import datum_sql as ds

ENRICH = """
    INSERT INTO enriched
    SELECT e.id, e.k, d.label FROM events e JOIN dims d ON e.k = d.k
"""


def _db(path: Path, sql: str) -> None:
    con = duckdb.connect(str(path))
    try:
        con.execute(sql)
    finally:
        con.close()


def _declare(ctx: ds.Context, db: Path, out: Path) -> None:
    ctx.execute(f"""
        CREATE SOURCE IF NOT EXISTS events WITH (connector = 'duckdb', path = '{db}', table = 'events');
        CREATE SOURCE IF NOT EXISTS dims WITH (connector = 'duckdb', path = '{db}', table = 'dims');
        CREATE SINK IF NOT EXISTS enriched WITH (connector = 'parquet', path = '{out}');
    """)


def _rows(ctx: ds.Context) -> list[tuple[int, int, str]]:
    table = ctx.sql("SELECT id, k, label FROM enriched ORDER BY id")
    return list(zip(*(table.column(c).to_pylist() for c in ("id", "k", "label"))))


def test_a_restarted_query_joins_new_rows_with_the_changed_table(tmp_path: Path) -> None:
    db, out, state = tmp_path / "data.duckdb", tmp_path / "out", tmp_path / "state"
    _db(
        db,
        """
        CREATE TABLE dims (k INTEGER, label VARCHAR);
        INSERT INTO dims VALUES (1, 'one'), (2, 'two');
        CREATE TABLE events (id INTEGER, k INTEGER);
        INSERT INTO events VALUES (1, 1), (2, 2);
    """,
    )
    with ds.Context(state) as ctx:
        _declare(ctx, db, out)
        ctx.execute(ENRICH).wait(60)  # both tables are bounded: the first run ends by itself
        assert _rows(ctx) == [(1, 1, "one"), (2, 2, "two")]

    # Between the runs the lookup table changes and the stream grows.
    _db(
        db,
        """
        UPDATE dims SET label = 'uno' WHERE k = 1;
        INSERT INTO dims VALUES (3, 'tres');
        INSERT INTO events VALUES (3, 1), (4, 3), (5, 2);
    """,
    )
    with ds.Context(state) as ctx:
        _declare(ctx, db, out)
        q = ctx.execute(ENRICH)
        q.wait(60)
        assert q.status()["recovered_from"]["checkpoint"] >= 1  # resumed, not started over
        assert q.status()["sources"]["events"]["rows"] == 3  # only the new stream rows
        assert _rows(ctx) == [
            (1, 1, "one"), (2, 2, "two"),  # written by the first run, as they were
            (3, 1, "uno"), (4, 3, "tres"), (5, 2, "two"),  # the table as it is now
        ]  # fmt: skip


def test_a_cancelled_query_resumes_with_the_changed_table(tmp_path: Path) -> None:
    """Stopped part way through a live stream, then restarted over the rest of it."""
    db, out, state = tmp_path / "data.duckdb", tmp_path / "out", tmp_path / "state"
    _db(db, "CREATE TABLE dims (k INTEGER, label VARCHAR); INSERT INTO dims VALUES (1, 'old')")
    schema = pa.schema([("id", pa.int64()), ("k", pa.int32())])
    first = pa.table({"id": [1, 2], "k": [1, 1]}, schema=schema)
    feed: queue.Queue[pa.RecordBatch | None] = queue.Queue()

    def live():  # a stream that stays open until the test cancels the query
        while (batch := feed.get(timeout=60)) is not None:
            yield batch

    with ds.Context(state) as ctx:
        _declare_lookup(ctx, db, out)
        ctx.register_arrow("events", live(), schema=schema)
        q = ctx.execute(ENRICH)
        feed.put(first.to_batches()[0])
        _wait_for(lambda: q.status()["sinks"]["enriched"]["rows"] == 2)
        feed.put(None)
        q.cancel()
        assert q.state in ("cancelled", "finished")
    _db(db, "UPDATE dims SET label = 'new'")
    with ds.Context(state) as ctx:
        _declare_lookup(ctx, db, out)
        everything = pa.table({"id": [1, 2, 3, 4], "k": [1, 1, 1, 1]}, schema=schema)
        ctx.register_arrow("events", everything)  # the stream again: resumes after row 2
        ctx.execute(ENRICH).wait(60)
        assert _rows(ctx) == [(1, 1, "old"), (2, 1, "old"), (3, 1, "new"), (4, 1, "new")]


def _declare_lookup(ctx: ds.Context, db: Path, out: Path) -> None:
    ctx.execute(f"""
        CREATE SOURCE IF NOT EXISTS dims WITH (connector = 'duckdb', path = '{db}', table = 'dims');
        CREATE SINK IF NOT EXISTS enriched WITH (connector = 'parquet', path = '{out}');
    """)


def _wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
