"""ctx.sql scans its tables as it runs (datum_sql/batch/scan.py) and answers exactly as a
query over the whole tables read first (the previous path) and as DuckDB does."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import datum_sql as ds
from datum_sql.batch import scan as batch_scan
from datum_sql.engine.udfs import session as udf_session
from datum_sql.errors import SourceError

UTC = dt.UTC


def events(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([f"k{i % 7}" if i % 5 else None for i in ids], pa.string()),
            "x": pa.array([(i * 37) % 101 for i in ids], pa.int64()),
            "v": pa.array([i / 4 for i in ids], pa.float64()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


def whole(ctx: ds.Context, sql: str, *names: str) -> pa.Table:
    """The previous path: each table read whole, then the query over those tables."""
    with ds.Context(state_dir=None) as other:
        for name in names:
            other.register_arrow(name, ctx._read_all(ctx.catalog.require(name)))
        return other.sql(sql)


def duck(ctx: ds.Context, sql: str, *names: str) -> pa.Table:
    """DuckDB's answer over the same rows."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in names:
        con.register(name, ctx._read_all(ctx.catalog.require(name)))
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def same(ctx: ds.Context, sql: str, *names: str) -> pa.Table:
    got = ctx.sql(sql)
    before = whole(ctx, sql, *names)
    assert got.schema == before.schema
    assert got.to_pylist() == before.to_pylist()
    assert got.to_pylist() == duck(ctx, sql, *names).to_pylist()
    assert got.num_rows > 0
    return got


@pytest.fixture
def ctx():
    with ds.Context(state_dir=None) as c:
        yield c


@pytest.fixture
def parquet_dir(tmp_path: Path) -> Path:
    d = tmp_path / "pq"
    d.mkdir()
    for i in range(3):
        pq.write_table(events(1000, i * 1000), d / f"part-{i}.parquet", row_group_size=256)
    (d / "_staging").mkdir()
    (d / "_staging" / "half.parquet").write_bytes(b"not a parquet file")
    (d / ".hidden.parquet").write_bytes(b"nor this")
    return d


QUERIES = [
    "SELECT count(*) AS n, max(x) AS mx FROM {t} WHERE v > 100 AND k IS NOT NULL",
    "SELECT id, k, ts FROM {t} WHERE x = 17 ORDER BY id",
    "SELECT k, count(*) AS n, sum(v) AS s, min(ts) AS first FROM {t} GROUP BY k ORDER BY k",
    "SELECT * FROM {t} WHERE id % 499 = 0 ORDER BY id",
    "SELECT count(*) AS n FROM {t}",
    # a scalar subquery: a scan the plan walk may not reach, so every column is read
    "SELECT id, x FROM {t} WHERE x = (SELECT max(x) FROM {t}) ORDER BY id",
    # a self-join: one table read twice
    "SELECT a.id, b.id AS other FROM {t} a JOIN {t} b ON a.id = b.id + 1 "
    "WHERE a.x < 3 ORDER BY a.id",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_parquet_source_is_scanned_by_datafusion_with_the_same_answers(
    ctx: ds.Context, parquet_dir: Path, sql: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx.execute(f"CREATE SOURCE t WITH (connector = 'parquet', path = '{parquet_dir}')")
    assert isinstance(batch_scan.scan(ctx.catalog.require("t"), ctx._spec), batch_scan.ParquetScan)
    want = same(ctx, sql.format(t="t"), "t")
    # the scan path: ctx.sql never reads the table whole
    monkeypatch.setattr(ctx, "_read_all", _refuse_whole_read)
    assert ctx.sql(sql.format(t="t")) == want


def _refuse_whole_read(entry: object) -> None:
    raise AssertionError(f"{entry} was read whole instead of scanned")


@pytest.mark.parametrize(
    "sql",
    [
        *QUERIES,
        "SELECT t.* FROM {t} WHERE x = 5 ORDER BY id",
        "SELECT x FROM {t} WHERE id < 50 UNION ALL SELECT x FROM {t} WHERE id > 2950 ORDER BY x",
        "SELECT id, sum(v) OVER (ORDER BY id) AS running FROM {t} WHERE x < 4 ORDER BY id",
        "SELECT id FROM {t} a WHERE EXISTS (SELECT 1 FROM {t} b WHERE b.id = a.id + 1 "
        "AND b.k IS NULL) AND a.x > 90 ORDER BY id",
    ],
)
def test_a_duckdb_source_is_streamed_with_the_same_answers(
    ctx: ds.Context, tmp_path: Path, sql: str
) -> None:
    db = str(tmp_path / "src.duckdb")
    con = duckdb.connect(db)
    con.register("ev", events(3000))
    con.execute("CREATE TABLE ev_table AS SELECT * FROM ev")
    con.close()
    ctx.execute(f"CREATE SOURCE t WITH (connector = 'duckdb', path = '{db}', table = 'ev_table')")
    assert isinstance(batch_scan.scan(ctx.catalog.require("t"), ctx._spec), batch_scan.StreamedScan)
    same(ctx, sql.format(t="t"), "t")


def test_a_filter_and_projection_over_parquet_gives_the_right_rows(
    ctx: ds.Context, parquet_dir: Path
) -> None:
    ctx.execute(f"CREATE SOURCE t WITH (connector = 'parquet', path = '{parquet_dir}/*.parquet')")
    got = ctx.sql("SELECT id, v FROM t WHERE x > 95 AND id BETWEEN 1500 AND 2600 ORDER BY id")
    files = [str(parquet_dir / f"part-{i}.parquet") for i in range(3)]
    want = duckdb.sql(
        f"SELECT id, v FROM read_parquet({files!r}) "
        "WHERE x > 95 AND id BETWEEN 1500 AND 2600 ORDER BY id"
    ).to_arrow_table()
    assert got.column_names == ["id", "v"]
    assert got.to_pylist() == want.to_pylist()
    assert 10 < got.num_rows < 200


def test_a_declared_type_other_than_the_stored_one_reads_through_the_connector(
    ctx: ds.Context, tmp_path: Path
) -> None:
    """A cast could reject a row (bad_records): the connector's own stream, same policy."""
    pq.write_table(pa.table({"a": pa.array([1, 2, 2**40], pa.int64())}), tmp_path / "f.parquet")
    ctx.execute(
        f"CREATE SOURCE narrow (a INT) WITH (connector = 'parquet', path = '{tmp_path}', "
        "bad_records = 'skip')"
    )
    ctx.execute(f"CREATE SOURCE strict (a INT) WITH (connector = 'parquet', path = '{tmp_path}')")
    found = batch_scan.scan(ctx.catalog.require("narrow"), ctx._spec)
    assert isinstance(found, batch_scan.StreamedScan)
    assert same(ctx, "SELECT a FROM narrow ORDER BY a", "narrow").column("a").to_pylist() == [1, 2]
    with pytest.raises(SourceError, match=r"f\.parquet.*row 3"):
        ctx.sql("SELECT count(*) FROM strict")


def test_not_null_columns_with_nulls_fail_as_before(ctx: ds.Context, tmp_path: Path) -> None:
    pq.write_table(pa.table({"a": [1, None], "b": [1, 2]}), tmp_path / "f.parquet")
    pq.write_table(pa.table({"a": [1, 3], "b": [1, 2]}), tmp_path / "g.parquet")
    ctx.execute(
        f"CREATE SOURCE f (a BIGINT NOT NULL, b BIGINT) WITH (connector = 'parquet', "
        f"path = '{tmp_path}/f.parquet')"
    )
    ctx.execute(
        f"CREATE SOURCE g (a BIGINT NOT NULL, b BIGINT) WITH (connector = 'parquet', "
        f"path = '{tmp_path}/g.parquet')"
    )
    assert isinstance(batch_scan.scan(ctx.catalog.require("f"), ctx._spec), batch_scan.StreamedScan)
    assert isinstance(batch_scan.scan(ctx.catalog.require("g"), ctx._spec), batch_scan.ParquetScan)
    with pytest.raises(SourceError, match="NOT NULL column 'a'"):
        ctx.sql("SELECT b FROM f")
    assert same(ctx, "SELECT a, b FROM g ORDER BY a", "g").num_rows == 2


def test_csv_with_its_options_reads_as_before(ctx: ds.Context, tmp_path: Path) -> None:
    """No header, a delimiter, an unquoted empty field (null) and a quoted one ("")."""
    lines = [f'{i};{"" if i % 4 == 0 else chr(34) * 2 if i % 4 == 1 else f"s{i}"};{i * 1.5}'
             for i in range(200)]  # fmt: skip
    (tmp_path / "a.csv").write_text("\n".join(lines[:120]) + "\n")
    (tmp_path / "b.csv").write_text("\n".join(lines[120:]) + "\n")
    ctx.execute(
        f"CREATE SOURCE c (id BIGINT, s VARCHAR, w DOUBLE) WITH (connector = 'csv', "
        f"path = '{tmp_path}', header = false, delimiter = ';')"
    )
    got = same(ctx, "SELECT id, s, s IS NULL AS missing FROM c WHERE id < 9 ORDER BY id", "c")
    assert got.column("s").to_pylist()[:3] == [None, "", "s2"]
    same(ctx, "SELECT count(*) AS n, sum(w) AS total FROM c", "c")
    same(ctx, "SELECT s, count(*) AS n FROM c GROUP BY s ORDER BY s NULLS FIRST LIMIT 5", "c")


def test_jsonl_reads_as_before(ctx: ds.Context, tmp_path: Path) -> None:
    rows = [
        f'{{"id": {i}, "name": {"null" if i % 3 == 0 else chr(34) + f"n{i}" + chr(34)}, '
        f'"seen": "2024-01-01T00:00:{i % 60:02d}Z"}}'
        for i in range(300)
    ]
    (tmp_path / "e.jsonl").write_text("\n".join(rows) + "\n")
    ctx.execute(
        f"CREATE SOURCE j (id BIGINT, name VARCHAR, seen TIMESTAMP) WITH (connector = 'jsonl', "
        f"path = '{tmp_path}/e.jsonl')"
    )
    same(ctx, "SELECT id, name, seen FROM j WHERE id % 50 = 1 ORDER BY id", "j")
    same(ctx, "SELECT count(name) AS named, max(seen) AS last FROM j", "j")


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_file_sinks_read_their_committed_files_only(
    ctx: ds.Context, tmp_path: Path, fmt: str
) -> None:
    ctx.register_arrow("src", events(5000), event_time="ts")
    out = tmp_path / "out"
    ctx.execute(f"CREATE SINK out WITH (connector = '{fmt}', path = '{out}', max_file_rows = 1000)")
    assert ctx.execute_streaming("INSERT INTO out SELECT id, k, x, v, ts FROM src").wait(120)
    # a part being written sits in _staging, never read
    (out / "_staging" / f"being-written.{fmt}").write_bytes(b"half a file")
    got = same(ctx, "SELECT k, count(*) AS n, max(x) AS mx FROM out GROUP BY k ORDER BY k", "out")
    assert sum(got.column("n").to_pylist()) == 5000
    same(ctx, "SELECT id, ts FROM out WHERE x = 3 ORDER BY id", "out")


def test_a_duckdb_sink_is_read_as_before(ctx: ds.Context, tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    ctx.register_arrow("src", events(3000), event_time="ts")
    ctx.execute(f"CREATE SINK out WITH (connector = 'duckdb', path = '{db}', table = 'ev')")
    assert ctx.execute_streaming("INSERT INTO out SELECT id, k, x, v, ts FROM src").wait(120)
    sql = "SELECT k, count(*) AS n, sum(v) AS s FROM out WHERE x > 50 GROUP BY k ORDER BY k"
    got = same(ctx, sql, "out")
    con = duckdb.connect(str(db), read_only=True)
    try:
        own = con.sql(sql.replace("FROM out", "FROM ev")).to_arrow_table()
    finally:
        con.close()
    assert got.to_pylist() == own.to_pylist()


def test_only_the_needed_columns_are_spooled(ctx: ds.Context, tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("a,b,c\n1,x,2.5\n2,y,3.5\n")
    ctx.execute(
        f"CREATE SOURCE c (a BIGINT, b VARCHAR, c DOUBLE) WITH (connector = 'csv', "
        f"path = '{tmp_path}/a.csv')"
    )
    scans = {"c": batch_scan.scan(ctx.catalog.require("c"), ctx._spec)}
    spool = tmp_path / "spool"
    spool.mkdir()
    session = udf_session(batch_scan.session_config(scans.values()))
    sql = 'SELECT sum("c") AS s FROM (SELECT "a", "c" FROM "c") WHERE "a" > 1'
    batch_scan.register_scans(session, scans, sql, str(spool))  # type: ignore[arg-type]
    [spooled] = os.listdir(spool)
    with ipc.open_file(spool / spooled) as f:
        assert f.schema.names == ["a", "c"]
    assert session.sql(sql).to_arrow_table().column(0).to_pylist() == [3.5]
    assert session.table('"c"').schema().names == ["a", "b", "c"]


def test_a_table_s_connector_is_made_once_for_the_check_and_once_per_read(
    ctx: ds.Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CSV source is checked and scanned by connectors of its own (the scan's reads only
    the columns the query needs); a query the engine's operators run (ASOF) reads the table
    whole through the connector made for the check, not a third one."""
    from datum_sql.connectors import registry

    (tmp_path / "e.csv").write_text("id,x\n" + "".join(f"{i},{i * 3}\n" for i in range(50)))
    ctx.execute(
        f"CREATE SOURCE c (id BIGINT, x BIGINT) WITH (connector = 'csv', path = '{tmp_path}/e.csv')"
    )
    made: list[tuple[str, tuple[str, ...] | None]] = []
    create = registry.create_source

    def counting(connector: str, spec: object) -> object:
        if connector == "csv":  # (a query the engine runs registers Arrow copies too)
            made.append((connector, spec.columns))  # type: ignore[attr-defined]
        return create(connector, spec)  # type: ignore[arg-type]

    monkeypatch.setattr(registry, "create_source", counting)
    assert ctx.sql("SELECT sum(x) AS s FROM c").column("s").to_pylist() == [sum(range(0, 150, 3))]
    assert made == [("csv", None), ("csv", ("x",))]
    made.clear()
    ctx.register_arrow("q", pa.table({"id": pa.array([3, 7], pa.int64())}))
    got = ctx.sql("SELECT q.id, c.x FROM q ASOF LEFT JOIN c ON q.id >= c.id ORDER BY q.id")
    assert got.column("x").to_pylist() == [9, 21]
    assert made == [("csv", None)]
