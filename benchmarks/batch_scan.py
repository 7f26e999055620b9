"""Batch SQL over a Parquet file: ``ctx.sql`` scanning it, beside DuckDB's ``read_parquet``.

The input is a cached Parquet file (``big_parquet``: ``id``, ``x``, ``y``, ``tag``, 1M-row
row groups); the query reads two of its four columns and keeps a quarter of the rows.
Each run in a fresh process of its own, the clock covering the whole query from the file:

* ``datum-sql``: ``CREATE SOURCE ... (connector = 'parquet')`` over the file (outside the
  clock), then ``ctx.sql(...)``: DataFusion's own Parquet scan (datum_sql/batch/scan.py);
* ``datum-sql-whole``: the file read whole into memory (``pyarrow.parquet.read_table``,
  inside the clock) and queried as an Arrow table: what ``ctx.sql`` did before it scanned;
* ``duckdb``: ``read_parquet`` of the file, DuckDB on its default threads (every core, as
  DataFusion): the reference.

Peak RSS is the point: the scan's stays far below the table's size in memory.
"""

from __future__ import annotations

from typing import Any

from benchmarks.spec import Benchmark, Input

TABLE = "big_parquet"
WHERE = "y < 0.25 AND x > 1000"
SQL = f"SELECT count(*) AS n, max(x) AS max_x FROM {TABLE} WHERE {WHERE}"
#: the 20M rows of the issue's benchmark
DEFAULT_ROWS = 20_000_000


def big_parquet(events: int) -> dict[str, Input]:
    return {TABLE: Input(TABLE, events)}


def _path(bench: Benchmark, events: int) -> str:
    from benchmarks import inputs

    spec = bench.inputs(events)[TABLE]
    return str(inputs.path(spec.dataset, spec.rows, spec.seed))


# The runners import in the child that runs them: the harness's own process stays small.


def prepare_scan(bench: Benchmark, events: int, params: dict[str, Any]) -> Any:
    import datum_sql as ds
    from benchmarks.engines import Prepared

    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.execute(
        f"CREATE SOURCE {TABLE} WITH (connector = 'parquet', path = '{_path(bench, events)}')"
    )
    return Prepared(lambda: ctx.sql(bench.datum_sql), None, None)


def prepare_whole(bench: Benchmark, events: int, params: dict[str, Any]) -> Any:
    import pyarrow.parquet as pq

    import datum_sql as ds
    from benchmarks.engines import Prepared

    path = _path(bench, events)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)

    def run() -> Any:
        ctx.register_arrow(TABLE, pq.read_table(path))
        return ctx.sql(bench.datum_sql)

    return Prepared(run, None, None)


def prepare_duckdb(bench: Benchmark, events: int, params: dict[str, Any]) -> Any:
    import duckdb

    from benchmarks.engines import Prepared

    con = duckdb.connect()
    sql = bench.duckdb_sql.replace(TABLE, f"read_parquet('{_path(bench, events)}')")
    return Prepared(lambda: con.sql(sql).to_arrow_table(), None, None)


BENCHMARKS = [
    Benchmark(
        "parquet_scan_count_max", "batch",
        f"ctx.sql over a {TABLE} file (2 of 4 columns read, a quarter of the rows kept): "
        "count(*), max(x) with a WHERE",
        big_parquet, SQL, SQL,
        engines=("datum-sql", "datum-sql-whole", "duckdb"),
        runners={"datum-sql": "benchmarks.batch_scan:prepare_scan",
                 "datum-sql-whole": "benchmarks.batch_scan:prepare_whole",
                 "duckdb": "benchmarks.batch_scan:prepare_duckdb"},
    ),
]  # fmt: skip
