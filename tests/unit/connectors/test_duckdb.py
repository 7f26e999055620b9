"""DuckDB sink (append and upsert, exactly-once) and source, against real DuckDB files."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import tempfile
from typing import Any

import duckdb
import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec, Sink, Source
from datum_sql.errors import PlanError, SinkError, SourceError

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("price", pa.float64()),
        ("ts", pa.timestamp("us")),
        ("tags", pa.list_(pa.string())),
    ]
)

#: naive UTC, like TIMESTAMP columns
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC).replace(tzinfo=None)


def sample(n: int, start: int = 0) -> pa.Table:
    ids = range(start, start + n)
    return pa.table(
        {
            "id": list(ids),
            "name": [None if i % 3 == 1 else f"n{i}" for i in ids],
            "price": [i * 0.5 for i in ids],
            "ts": [T0 + dt.timedelta(seconds=i) for i in ids],
            "tags": [["a"] * (i % 3) for i in ids],
        },
        schema=SCHEMA,
    )


def make_sink(path: str, table: str = "t", name: str = "out", **options: Any) -> Sink:
    spec = ConnectorSpec(name=name, options={"path": path, "table": table, **options})
    return registry.create_sink("duckdb", spec)


def make_source(
    path: str, table: str = "t", schema: pa.Schema | None = None, **opts: Any
) -> Source:
    spec = ConnectorSpec(name="dim", options={"path": path, "table": table, **opts}, schema=schema)
    return registry.create_source("duckdb", spec)


def query(path: str, sql: str) -> pa.Table:
    con = duckdb.connect(path)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


async def write(sink: Sink, table: pa.Table, chunk: int = 3) -> None:
    for batch in table.to_batches(max_chunksize=chunk):
        await sink.write(batch)


@pytest.fixture
def db(tmp_path) -> str:
    return str(tmp_path / "warehouse.duckdb")


# -- append ---------------------------------------------------------------------------------


def test_append_round_trip_equals_input(db):
    table = sample(10)

    async def run() -> None:
        sink = make_sink(db)
        await sink.open(SCHEMA)
        await write(sink, table.slice(0, 4))
        await sink.commit(1, await sink.pre_commit(1))
        await write(sink, table.slice(4))
        await sink.commit(2, await sink.pre_commit(2))
        assert sink.metrics()["rows_written"] == 10
        await sink.close()

    asyncio.run(run())
    assert query(db, "SELECT * FROM t").equals(table)
    assert query(db, "SELECT count(*) AS n FROM _datum_commits").column("n")[0].as_py() == 2


def test_rows_are_invisible_until_commit(db):
    async def run() -> None:
        sink = make_sink(db)
        await sink.open(SCHEMA)
        await write(sink, sample(5))
        assert query(db, "SELECT count(*) AS n FROM t").column("n")[0].as_py() == 0
        staged = await sink.pre_commit(1)
        assert query(db, "SELECT count(*) AS n FROM t").column("n")[0].as_py() == 0
        await sink.commit(1, staged)
        assert query(db, "SELECT count(*) AS n FROM t").column("n")[0].as_py() == 5
        await sink.close()

    asyncio.run(run())


def test_replayed_checkpoint_is_a_no_op(db):
    async def run() -> None:
        sink = make_sink(db)
        await sink.open(SCHEMA)
        await write(sink, sample(4))
        staged = await sink.pre_commit(1)
        await sink.commit(1, staged)
        await sink.commit(1, staged)
        await sink.close()
        # recovery in a new process replays the manifest's commit
        again = make_sink(db)
        await again.open(SCHEMA)
        await again.commit(1, staged)
        await again.close()

    asyncio.run(run())
    assert query(db, "SELECT * FROM t").equals(sample(4))


def test_precommitted_rows_survive_a_crash_and_commit_once(db):
    async def run() -> dict[str, Any]:
        sink = make_sink(db)
        await sink.open(SCHEMA)
        await write(sink, sample(6))
        staged = await sink.pre_commit(3)
        await write(sink, sample(2, start=50))  # after the checkpoint: lost in the crash
        await sink.close()  # crash: the manifest was written, the commit never ran
        recovered = make_sink(db)
        await recovered.open(SCHEMA)
        await recovered.commit(3, staged)
        await recovered.commit(3, staged)
        await recovered.close()
        return staged

    staged = asyncio.run(run())
    assert query(db, "SELECT * FROM t").equals(sample(6))
    assert os.listdir(db + ".datum-staging") == []
    assert staged["parts"][0][0] == 3


def test_a_second_run_is_not_mistaken_for_a_replay(db):
    """Checkpoint ids restart with each run; the rows of run 2 must still land."""

    async def run(start: int) -> None:
        sink = make_sink(db)
        await sink.open(SCHEMA)
        await write(sink, sample(3, start=start))
        await sink.commit(1, await sink.pre_commit(1))
        await sink.close()

    asyncio.run(run(0))
    asyncio.run(run(10))
    assert query(db, "SELECT * FROM t").equals(pa.concat_tables([sample(3), sample(3, 10)]))


def test_uncommitted_checkpoint_is_carried_by_the_next(db):
    async def run() -> None:
        sink = make_sink(db)
        await sink.open(SCHEMA)
        await write(sink, sample(3))
        await sink.pre_commit(1)  # never committed: its manifest failed
        await write(sink, sample(3, start=3))
        staged = await sink.pre_commit(2)
        assert [p[0] for p in staged["parts"]] == [1, 2]
        await sink.commit(2, staged)
        await sink.close()

    asyncio.run(run())
    assert query(db, "SELECT * FROM t").equals(sample(6))


def test_abort_drops_unstaged_rows_and_discard_removes_orphans(db):
    async def run() -> None:
        sink = make_sink(db)
        await sink.open(SCHEMA)
        await write(sink, sample(3))
        await sink.abort()
        await write(sink, sample(2, start=7))
        orphan = await sink.pre_commit(1)
        await sink.close()
        assert len(os.listdir(db + ".datum-staging")) == 1
        restarted = make_sink(db)
        await restarted.open(SCHEMA)
        await restarted.discard_uncommitted(set())
        assert os.listdir(db + ".datum-staging") == []
        with pytest.raises(SinkError, match="gone"):
            await restarted.commit(1, orphan)
        await restarted.close()

    asyncio.run(run())
    assert query(db, "SELECT count(*) AS n FROM t").column("n")[0].as_py() == 0


def test_existing_table_with_wider_types_is_accepted(db):
    con = duckdb.connect(db)
    con.execute("CREATE TABLE t (extra VARCHAR, id HUGEINT, price DOUBLE, name VARCHAR)")
    con.close()
    schema = pa.schema([("id", pa.int32()), ("name", pa.string()), ("price", pa.float32())])
    rows = pa.table({"id": [1, 2], "name": ["a", None], "price": [0.5, 1.5]}, schema=schema)

    async def run() -> None:
        sink = make_sink(db)
        await sink.open(schema)
        await write(sink, rows)
        await sink.commit(1, await sink.pre_commit(1))
        await sink.close()

    asyncio.run(run())
    got = query(db, "SELECT extra, id::INTEGER AS id, name, price FROM t")
    assert got.to_pydict() == {
        "extra": [None, None],
        "id": [1, 2],
        "name": ["a", None],
        "price": [0.5, 1.5],
    }


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("CREATE TABLE t (id BIGINT, name VARCHAR, price INTEGER, ts TIMESTAMP, "
         "tags VARCHAR[])", r"column 'price' is INTEGER .* produces DOUBLE"),
        ("CREATE TABLE t (id BIGINT, name VARCHAR, price DOUBLE, ts TIMESTAMP)",
         r"no column 'tags'"),
        ("CREATE TABLE t (id BIGINT, name VARCHAR, price DOUBLE, ts TIMESTAMP, "
         "tags VARCHAR[], owner VARCHAR NOT NULL)", r"NOT NULL column 'owner'"),
    ],
)  # fmt: skip
def test_incompatible_table_is_refused_before_any_row_moves(db, ddl, message):
    con = duckdb.connect(db)
    con.execute(ddl)
    con.close()
    sink = make_sink(db)
    with pytest.raises(SinkError, match=message) as err:
        asyncio.run(sink.open(SCHEMA))
    assert "'t'" in str(err.value)
    asyncio.run(sink.close())


def test_append_sink_refuses_a_changelog(db):
    sink = make_sink(db)
    assert not sink.accepts_changelog
    with pytest.raises(SinkError, match="primary_key"):
        asyncio.run(sink.open(SCHEMA.append(pa.field("_op", pa.string()))))


def test_unknown_option_is_a_plan_error(db):
    with pytest.raises(PlanError, match=r"'primary_keys'.*Did you mean 'primary_key'"):
        make_sink(db, primary_keys="id")
    with pytest.raises(PlanError, match="'table'"):
        registry.create_sink("duckdb", ConnectorSpec(name="x", options={"path": db}))


# -- upsert ---------------------------------------------------------------------------------

UPSERT = pa.schema([("k", pa.int64()), ("v", pa.string()), ("_op", pa.string())])


def changelog(rows: list[tuple[str, int, str | None]]) -> pa.Table:
    return pa.table(
        {"k": [r[1] for r in rows], "v": [r[2] for r in rows], "_op": [r[0] for r in rows]},
        schema=UPSERT,
    )


def test_upsert_applies_a_changelog(db):
    first = changelog(
        [("+I", 1, "a"), ("+I", 2, "b"), ("-U", 1, "a"), ("+U", 1, "a2"), ("+I", 3, "c")]
    )
    second = changelog(
        [("-D", 2, "b"), ("-U", 3, "c"), ("+U", 3, "c2"), ("+I", 2, "b again"), ("-D", 1, "a2")]
    )

    async def run() -> None:
        sink = make_sink(db, primary_key="k")
        assert sink.accepts_changelog
        await sink.open(UPSERT)
        await write(sink, first, chunk=2)
        await sink.commit(1, await sink.pre_commit(1))
        assert query(db, "SELECT * FROM t ORDER BY k").to_pydict() == {
            "k": [1, 2, 3],
            "v": ["a2", "b", "c"],
        }
        await write(sink, second, chunk=4)
        await sink.commit(2, await sink.pre_commit(2))
        await sink.close()

    asyncio.run(run())
    # the _op column is never written into the table
    assert query(db, "SELECT * FROM t ORDER BY k").to_pydict() == {
        "k": [2, 3],
        "v": ["b again", "c2"],
    }


def test_upsert_with_composite_key_and_append_only_input(db):
    schema = pa.schema([("a", pa.string()), ("b", pa.int32()), ("n", pa.int64())])
    rows = pa.table(
        {"a": ["x", "x", "y", "x"], "b": [1, 2, 1, 1], "n": [1, 2, 3, 4]}, schema=schema
    )

    async def run() -> None:
        sink = make_sink(db, primary_key=" a , b ")
        await sink.open(schema)
        await write(sink, rows)
        await sink.commit(1, await sink.pre_commit(1))
        await sink.close()

    asyncio.run(run())
    got = query(db, "SELECT * FROM t ORDER BY a, b").to_pydict()
    assert got == {"a": ["x", "x", "y"], "b": [1, 2, 1], "n": [4, 2, 3]}


def test_upsert_refuses_a_table_without_that_primary_key(db):
    con = duckdb.connect(db)
    con.execute("CREATE TABLE t (k BIGINT, v VARCHAR)")
    con.close()
    sink = make_sink(db, primary_key="k")
    with pytest.raises(SinkError, match=r"'t'.*PRIMARY KEY.*\(k\)"):
        asyncio.run(sink.open(UPSERT))
    asyncio.run(sink.close())


def test_upsert_key_must_be_a_column(db):
    with pytest.raises(SinkError, match="primary_key column 'id'"):
        asyncio.run(make_sink(db, primary_key="id").open(UPSERT))


def test_upsert_rejects_an_unknown_op(db):
    async def run() -> None:
        sink = make_sink(db, primary_key="k")
        await sink.open(UPSERT)
        await write(sink, changelog([("+I", 1, "a"), ("*X", 2, "b")]))
        with pytest.raises(SinkError, match="'\\*X'"):
            await sink.commit(1, await sink.pre_commit(1))
        await sink.close()

    asyncio.run(run())
    assert query(db, "SELECT count(*) AS n FROM t").column("n")[0].as_py() == 0


OPS = st.lists(
    st.tuples(st.sampled_from(["+I", "+U", "-U", "-D"]), st.integers(0, 5), st.text(max_size=3)),
    max_size=40,
)


@pytest.mark.timeout(
    900
)  # each checkpoint's commit connects to the file (see the sink's docstring)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, chunk=st.integers(1, 6), cuts=st.sets(st.integers(0, 40), max_size=5))
def test_upsert_matches_a_dict_model(ops, chunk, cuts):
    """Any changelog, in any batching and checkpointing, ends in the state a dict reaches
    by applying the ops one by one."""
    model: dict[int, str] = {}
    for op, k, v in ops:
        if op in ("+I", "+U"):
            model[k] = v
        else:
            model.pop(k, None)
    table = changelog([(op, k, v) for op, k, v in ops])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.duckdb")

        async def run() -> None:
            sink = make_sink(path, primary_key="k")
            await sink.open(UPSERT)
            cid = 0
            for start in range(0, table.num_rows, chunk):
                await sink.write(table.slice(start, chunk).to_batches()[0])
                if start in cuts:
                    cid += 1
                    await sink.commit(cid, await sink.pre_commit(cid))
            await sink.commit(cid + 1, await sink.pre_commit(cid + 1))
            await sink.close()

        asyncio.run(run())
        got = query(path, "SELECT k, v FROM t").to_pydict()
    assert dict(zip(got["k"], got["v"])) == model
    assert len(got["k"]) == len(model)


# -- source ---------------------------------------------------------------------------------


def fill(db: str, table: pa.Table) -> None:
    con = duckdb.connect(db)
    con.register("src", table)
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    con.close()


def test_source_reads_the_table_with_its_schema(db):
    fill(db, sample(10))
    source = make_source(db, batch_size=4)
    assert source.schema == SCHEMA
    assert source.bounded

    async def run() -> list[pa.RecordBatch]:
        await source.open(None)
        return [b async for b in source.read()]

    batches = asyncio.run(run())
    assert all(b.num_rows <= 4 for b in batches)
    assert pa.Table.from_batches(batches).equals(sample(10))
    assert source.position() == {"row": 10}


def test_source_resumes_after_the_last_batch(db):
    fill(db, sample(10))

    async def run() -> None:
        first = make_source(db, batch_size=3)
        await first.open(None)
        async for _ in first.read():
            break
        position = first.position()
        assert position == {"row": 3}
        second = make_source(db, batch_size=3)
        await second.open(position)
        rest = pa.Table.from_batches([b async for b in second.read()])
        assert rest.equals(sample(10).slice(3))

    asyncio.run(run())


def test_source_declared_columns_select_and_cast(db):
    fill(db, sample(4))
    schema = pa.schema([("price", pa.float64()), ("id", pa.int32())])

    async def run() -> pa.Table:
        source = make_source(db, schema=schema)
        await source.open(None)
        return pa.Table.from_batches([b async for b in source.read()], schema=schema)

    got = asyncio.run(run())
    assert got.to_pydict() == {"price": [0.0, 0.5, 1.0, 1.5], "id": [0, 1, 2, 3]}


def test_source_missing_table_or_file_is_named(db):
    fill(db, sample(1))
    with pytest.raises(SourceError, match="'nope'"):
        make_source(db, table="nope")
    with pytest.raises(SourceError, match=r"missing\.duckdb"):
        make_source(os.path.join(os.path.dirname(db), "missing.duckdb"))
    with pytest.raises(SourceError, match="'qty'"):
        make_source(db, schema=pa.schema([("qty", pa.int64())]))
