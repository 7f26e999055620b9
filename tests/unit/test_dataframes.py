"""DataFrames in and out: polars, pandas, DuckDB relations, dicts and lazy frames register
like the same data as a pyarrow Table (same rows, same types, streaming and batch), and
results come back as pandas / polars DataFrames."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import datum_sql as ds

ROOT = Path(__file__).resolve().parents[2]
#: The notebook extra's packages besides pandas and polars.
NOTEBOOK_ONLY = ["IPython", "ipykernel", "nbclient", "nbformat", "matplotlib"]
T0 = datetime(2026, 1, 1)
KEYS = ["a", "b", "a", "c", "b", "a"]
VALUES = [1, 2, 3, 4, 5, 6]
AMOUNTS = [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]
TIMES = [T0 + timedelta(seconds=s) for s in (0, 3, 7, 12, 15, 21)]

REFERENCE = pa.table(
    {
        "k": pa.array(KEYS, pa.string()),
        "v": pa.array(VALUES, pa.int64()),
        "x": pa.array(AMOUNTS, pa.float64()),
        "ts": pa.array(TIMES, pa.timestamp("us")),
    }
)


def _polars() -> pl.DataFrame:
    return pl.DataFrame(
        {"k": KEYS, "v": VALUES, "x": AMOUNTS, "ts": TIMES},
        schema={"k": pl.String, "v": pl.Int64, "x": pl.Float64, "ts": pl.Datetime("us")},
    )


def _pandas() -> pd.DataFrame:
    return pd.DataFrame(
        {"k": KEYS, "v": VALUES, "x": AMOUNTS, "ts": pd.to_datetime(TIMES).astype("datetime64[us]")}
    )


def _duckdb_relation() -> duckdb.DuckDBPyRelation:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k VARCHAR, v BIGINT, x DOUBLE, ts TIMESTAMP)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", list(zip(KEYS, VALUES, AMOUNTS, TIMES)))
    return con.table("t")


INPUTS = {
    "polars": _polars,
    "polars_categorical": lambda: _polars().with_columns(pl.col("k").cast(pl.Categorical)),
    "polars_lazy": lambda: _polars().lazy().filter(pl.col("v") > 0),
    "polars_list": lambda: [_polars().slice(0, 4), _polars().slice(4)],
    "pandas": _pandas,
    "pandas_arrow_backed": lambda: REFERENCE.to_pandas(types_mapper=pd.ArrowDtype),
    "duckdb_relation": _duckdb_relation,
    "dict": lambda: {
        "k": KEYS,
        "v": VALUES,
        "x": AMOUNTS,
        "ts": pa.array(TIMES, pa.timestamp("us")),
    },
}

QUERIES = [
    "SELECT k, v * 2 AS v2, x FROM t WHERE v > 1",
    "SELECT k, count(*) AS n, sum(v) AS total, max(x) AS top FROM t GROUP BY k",
    "SELECT window_start, k, count(*) AS n, sum(x) AS amount "
    "FROM tumble(t, ts, INTERVAL '10 seconds') GROUP BY window_start, window_end, k",
]


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([(name, "ascending") for name in table.column_names])


def _context(data: Any) -> ds.Context:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", data, event_time="ts", batch_size=2)
    return ctx


@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_a_dataframe_reads_like_the_same_pyarrow_table(kind: str, sql: str) -> None:
    want = _context(REFERENCE)
    got = _context(INPUTS[kind]())
    assert got.catalog.require("t").schema == REFERENCE.schema
    batch = _sorted(want.sql(sql))
    assert batch.num_rows > 0
    assert _sorted(got.sql(sql)).equals(batch)
    streamed = _sorted(got.execute_streaming(sql).to_arrow(timeout=60))
    assert streamed.equals(_sorted(want.execute_streaming(sql).to_arrow(timeout=60)))
    assert streamed.to_pylist() == batch.to_pylist()  # (streaming and batch differ in nullability)


@pytest.mark.parametrize("kind", ["polars", "pandas", "duckdb_relation", "polars_lazy"])
def test_a_registered_dataframe_reads_any_number_of_times(kind: str) -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register(kind, INPUTS[kind]())  # the short name
    sql = f"SELECT sum(v) AS total FROM {kind}"
    first = ctx.sql(sql)
    assert first.column("total").to_pylist() == [sum(VALUES)]
    assert ctx.execute_streaming(f"SELECT v FROM {kind}").to_arrow(timeout=60).num_rows == 6
    assert ctx.sql(sql).equals(first)
    assert ctx.execute_streaming(f"SELECT v FROM {kind}").to_arrow(timeout=60).num_rows == 6


def test_nested_polars_columns_get_the_pyarrow_types() -> None:
    tags = [["a", "b"], [], None]
    points = [{"x": "q", "n": 1}, {"x": "r", "n": 2}, None]
    want = pa.table({"tags": pa.array(tags, pa.list_(pa.string())),
                     "p": pa.array(points, pa.struct([("x", pa.string()), ("n", pa.int64())]))})  # fmt: skip
    ctx = ds.Context(state_dir=None)
    ctx.register("t", pl.DataFrame({"tags": tags, "p": points}))
    assert ctx.catalog.require("t").schema == want.schema
    assert ctx.sql("SELECT tags, p FROM t").equals(want)
    assert ctx.execute_streaming("SELECT tags, p FROM t").to_arrow(timeout=60).equals(want)


def test_a_list_of_dataframes_with_watermark_markers_reads_like_pyarrow() -> None:
    """Markers between DataFrames drive event time as they do between batches: a row
    behind the marker is late, for DataFrames as for pyarrow batches."""
    sql = (
        "SELECT window_start, count(*) AS n FROM tumble(t, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end EMIT ON WINDOW CLOSE"
    )
    marker = ds.Watermark(T0 + timedelta(seconds=15))
    late_first = [3, 0, 1, 2, 4, 5]  # the row at :12, then rows at :00 .. :07 (late), ...
    reference = REFERENCE.take(late_first)
    results = []
    for parts in (
        [reference.slice(0, 1), marker, reference.slice(1)],
        [pl.from_arrow(reference.slice(0, 1)), marker, pl.from_arrow(reference.slice(1))],
    ):
        ctx = ds.Context(state_dir=None)
        ctx.register("t", parts, event_time="ts")
        results.append(ctx.execute_streaming(sql).to_arrow(timeout=60))
    assert results[0].to_pylist() == [
        {"window_start": T0 + timedelta(seconds=10), "n": 2},
        {"window_start": T0 + timedelta(seconds=20), "n": 1},
    ]
    assert results[1].equals(results[0])


def test_a_named_pandas_index_is_a_column_the_default_one_is_not() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register("by_id", _pandas().set_index(pd.Index([10, 20, 30, 40, 50, 60], name="id")))
    ctx.register("filtered", _pandas()[_pandas()["v"] > 2])  # an unnamed, non-range index
    assert ctx.catalog.require("by_id").schema.names == ["k", "v", "x", "ts", "id"]
    assert ctx.catalog.require("filtered").schema.names == ["k", "v", "x", "ts"]
    assert ctx.sql("SELECT id FROM by_id WHERE v = 3").column("id").to_pylist() == [30]


def test_a_lazy_frames_batches_stream_once() -> None:
    """A large lazy frame streams as ``collect_batches()``: an Arrow stream, read once."""
    ctx = ds.Context(state_dir=None)
    ctx.register("feed", _polars().lazy().collect_batches(chunk_size=2))
    assert ctx.catalog.require("feed").schema == REFERENCE.schema
    got = ctx.execute_streaming("SELECT k, v, x, ts FROM feed").to_arrow(timeout=60)
    assert _sorted(got).equals(_sorted(REFERENCE))
    with pytest.raises(ds.PlanError, match="one-shot iterator"):
        ctx.sql("SELECT count(*) FROM feed")


@pytest.mark.parametrize(
    "frames",
    [
        lambda: (_polars().slice(i, 2) for i in range(0, 6, 2)),
        lambda: (_pandas().iloc[i : i + 2] for i in range(0, 6, 2)),
    ],
    ids=["polars", "pandas"],
)
def test_an_iterator_of_dataframes_streams(frames: Any) -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register("feed", frames(), schema=REFERENCE.schema)
    q = ctx.execute_streaming("SELECT k, v, x, ts FROM feed")
    assert q.wait(60)  # an iterator is unbounded until it runs out
    got = q.to_arrow()
    assert _sorted(got).equals(_sorted(REFERENCE))


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (object(), "object"),
        (np.arange(3), "numpy.ndarray"),
        (42, "int"),
    ],
)
def test_an_unknown_object_is_refused_naming_its_type_and_what_is_accepted(
    data: Any, named: str
) -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(ds.SourceError) as err:
        ctx.register_arrow("t", data)
    message = str(err.value)
    assert f"cannot read a {named};" in message
    for accepted in ("pyarrow Table", "pandas or polars DataFrame", "__arrow_c_stream__",
                     "dict of columns", "iterator"):  # fmt: skip
        assert accepted in message
    assert "schema=" not in message
    assert "t" not in [s["name"] for s in ctx.execute("SHOW SOURCES").to_pylist()]


@pytest.mark.parametrize("series", [pl.Series("v", [1, 2]), pd.Series([1, 2], name="v")])
def test_a_series_is_refused_pointing_at_to_frame(series: Any) -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(ds.SourceError, match=r"Series, one column .*series\.to_frame\(\)"):
        ctx.register_arrow("t", series)


def test_a_path_is_refused_pointing_at_create_source() -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(ds.SourceError, match=r"got a str, not data; .*CREATE SOURCE"):
        ctx.register_arrow("t", "orders.parquet")


def test_a_list_item_that_is_not_table_like_is_named() -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(ds.SourceError, match=r"item 1 of the list is a int; .*Watermark"):
        ctx.register_arrow("t", [_polars(), 7])


def test_data_that_cannot_be_made_arrow_is_a_schema_error_naming_the_table() -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(ds.SchemaError, match=r"register_arrow\('mixed'\)"):
        ctx.register_arrow("mixed", {"a": [1, "two"]})


# -- results out ------------------------------------------------------------------------------


def test_a_query_handle_gives_pandas_and_polars() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register("t", REFERENCE)
    sql = "SELECT k, sum(v) AS total FROM t GROUP BY k"
    want = {"a": 10, "b": 7, "c": 4}
    frame = ctx.execute_streaming(sql).to_polars(timeout=60)
    assert isinstance(frame, pl.DataFrame)
    assert dict(zip(frame["k"].to_list(), frame["total"].to_list())) == want
    pdf = ctx.execute_streaming(sql).to_pandas(timeout=60)
    assert isinstance(pdf, pd.DataFrame)
    assert dict(zip(pdf["k"], pdf["total"])) == want
    assert ctx.sql(sql).to_pandas().set_index("k")["total"].to_dict() == want
    assert dict(pl.from_arrow(ctx.sql(sql)).iter_rows()) == want


def test_a_streaming_select_iterates_as_polars_and_pandas_frames() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register("t", REFERENCE, batch_size=2)
    with ctx.execute_streaming("SELECT k, v FROM t WHERE v > 1") as q:
        frames = list(q.iter_polars())
    assert len(frames) > 1 and all(isinstance(f, pl.DataFrame) for f in frames)
    assert pl.concat(frames).sort("v")["v"].to_list() == [2, 3, 4, 5, 6]
    with ctx.execute_streaming("SELECT k, v FROM t WHERE v > 1") as q:
        pandas_frames = list(q.iter_pandas())
    assert all(isinstance(f, pd.DataFrame) for f in pandas_frames)
    assert sorted(pd.concat(pandas_frames)["v"]) == [2, 3, 4, 5, 6]


def test_a_changelog_iterates_as_polars_with_its_op_column() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register("t", REFERENCE, batch_size=2)
    with ctx.execute_streaming("SELECT k, count(*) AS n FROM t GROUP BY k") as q:
        changes = pl.concat(list(q.iter_polars()))
    assert changes.columns == ["k", "n", "_op"]
    final = changes.filter(pl.col("_op").is_in(["+I", "+U"])).group_by("k").agg(pl.col("n").max())
    assert dict(final.sort("k").iter_rows()) == {"a": 3, "b": 2, "c": 1}


@pytest.mark.parametrize(("method", "package"), [("to_polars", "polars"), ("iter_polars", "polars"),
                                                 ("to_pandas", "pandas"), ("iter_pandas", "pandas")])  # fmt: skip
def test_a_missing_frame_library_is_named(
    method: str, package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register("t", REFERENCE)
    q = ctx.execute_streaming("SELECT v FROM t")
    q.wait(60)
    monkeypatch.setitem(sys.modules, package, None)  # what Python does for a missing package
    with pytest.raises(ImportError, match=rf"{method}\(\) needs {package}.*pip install {package}"):
        getattr(q, method)()


@pytest.mark.parametrize(("module", "install"), [("polars", "polars"), ("IPython", "'datum-sql[notebook]'"),
                                                 ("matplotlib", "'datum-sql[plot]'")])  # fmt: skip
def test_a_missing_optional_dependency_names_what_to_install(
    module: str, install: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datum_sql.optional import require

    monkeypatch.setitem(sys.modules, module, None)
    message = f"q.plot() needs {module}, which is not installed: pip install {install}"
    with pytest.raises(ImportError, match=re.escape(message)):
        require(module, "q.plot()")


def test_dataframes_in_and_out_need_no_notebook_extra() -> None:
    """With the notebook extra's other packages missing, DataFrames go in and come out:
    an import of any of them (each made to fail, as when not installed) fails the run."""
    code = (
        f"NOTEBOOK_ONLY = {NOTEBOOK_ONLY!r}\n"
        + """
import sys
for missing in NOTEBOOK_ONLY:
    sys.modules[missing] = None  # as when the package is not installed
import pandas as pd, polars as pl
import datum_sql as ds
ctx = ds.Context(state_dir=None)
ctx.register("p", pl.DataFrame({"v": [1, 2, 3]}))
ctx.register("d", pd.DataFrame({"v": [4, 5]}))
q = ctx.execute_streaming("SELECT v FROM p UNION ALL SELECT v FROM d")
assert sorted(q.to_polars(timeout=60)["v"].to_list()) == [1, 2, 3, 4, 5]
assert sorted(q.to_pandas()["v"]) == [1, 2, 3, 4, 5]
with ctx.execute_streaming("SELECT v FROM p") as q:
    assert sorted(v for f in q.iter_polars() for v in f["v"].to_list()) == [1, 2, 3]
print("in and out without", ", ".join(NOTEBOOK_ONLY))
"""
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, check=True)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "in and out without " + ", ".join(NOTEBOOK_ONLY)
