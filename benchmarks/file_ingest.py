"""Reading files: a streaming query over a directory of files, beside DuckDB's ``read_csv`` /
``read_parquet`` of the same files, and a rerun that finds nothing new.

The input is a file set of :mod:`benchmarks.inputs`: the cached bids cut in order into 1,000
small files or 10 large ones, CSV or Parquet (``bid_csv_1000``, ``bid_parquet_10``, ...).
Nothing is read into memory before the clock: the clock covers discovering the files,
reading them and materializing the whole result, a few columns of the bids under a filter.

* ``datum-sql``: a ``Context`` without ``state_dir`` made before the clock (a process's
  first one imports the engine); timed: ``CREATE SOURCE bids (...) WITH (connector =
  'csv' | 'parquet', path = <directory>)`` with the columns declared (the source lists the
  directory when it is created and again when the query opens it),
  ``execute_streaming(SELECT ...)`` and ``to_arrow()``. Its own defaults otherwise.
* ``duckdb``: ``SET threads = 1``, ``read_csv('<directory>/*.csv', columns = {...})`` (the
  same declared types, no sniffing of them) or ``read_parquet('<directory>/*.parquet')``;
  the clock covers ``sql(...).to_arrow_table()``.

The no-change rerun (``files_csv_1000_no_change_rerun``, datum-sql alone: DuckDB keeps no
record of what it read) runs ``INSERT INTO`` a Parquet sink over the 1,000 CSV files with a
``state_dir`` in one child process, then the same job in a second child, on the same
``state_dir``, as a scheduler would start it again: the clock covers the second run, from
its ``Context`` to ``wait()`` (a first ``Context`` without state, made before the clock,
imports the engine), which must read 0 rows. ``python -m benchmarks files``
(or ``file_rerun`` for the rerun alone).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.child import call
from benchmarks.environment import load_average
from benchmarks.harness import SCRATCH, Session, group_record
from benchmarks.results import append
from benchmarks.spec import Benchmark, Input

TABLE = "bids"
COLUMNS = {
    "auction": "BIGINT",
    "bidder": "BIGINT",
    "price": "BIGINT",
    "channel": "VARCHAR",
    "date_time": "TIMESTAMP",
}
SQL = f"SELECT auction, bidder, price, date_time FROM {TABLE} WHERE price < 10000"


def file_set(name: str) -> Any:
    """The inputs of a benchmark over the file set ``name`` (events = its rows)."""

    def inputs(events: int) -> dict[str, Input]:
        return {TABLE: Input(name, events)}

    return inputs


def _directory(bench: Benchmark, events: int) -> tuple[str, str]:
    """The file set's directory and format."""
    from benchmarks import inputs

    spec = bench.inputs(events)[TABLE]
    path = inputs.directory(spec.dataset, spec.rows, spec.seed)
    return str(path), inputs.FILE_SETS[spec.dataset].format


def create_source(path: str, fmt: str, *, if_not_exists: bool = False) -> str:
    """The source over the directory ``path``, its columns declared (a rerun's Context
    finds it in the catalog of its state_dir: ``if_not_exists``)."""
    columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
    clause = "IF NOT EXISTS " if if_not_exists else ""
    return f"CREATE SOURCE {clause}{TABLE} ({columns}) WITH (connector = '{fmt}', path = '{path}')"


def _on_disk(path: str) -> str:
    sizes = [f.stat().st_size for f in Path(path).iterdir()]
    return f"{len(sizes):,} files, {sum(sizes) / 1e6:.0f} MB on disk"


# The runners import in the child that runs them: the harness's own process stays small.


def prepare_datum(bench: Benchmark, events: int, params: dict[str, Any]) -> Any:
    import datum_sql as ds
    from benchmarks.engines import Prepared

    path, fmt = _directory(bench, events)

    # the Context outside the clock, as in every benchmark (its first one imports the engine)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)

    def run() -> Any:
        ctx.execute(create_source(path, fmt))
        q = ctx.execute_streaming(bench.datum_sql)
        table = q.to_arrow()
        if q.status()["rows_in"] != events:
            raise RuntimeError(f"{bench.name}: read {q.status()['rows_in']:,} rows, not {events:,}")
        return table

    return Prepared(run, None, None, lambda: [_on_disk(path)])


def prepare_duckdb(bench: Benchmark, events: int, params: dict[str, Any]) -> Any:
    import duckdb

    from benchmarks.engines import Prepared

    path, fmt = _directory(bench, events)
    con = duckdb.connect()
    con.execute("SET threads = 1")
    if fmt == "csv":
        types = ", ".join(f"'{name}': '{kind}'" for name, kind in COLUMNS.items())
        scan = f"read_csv('{path}/*.csv', header = true, columns = {{{types}}})"
    else:
        scan = f"read_parquet('{path}/*.parquet')"
    sql = bench.duckdb_sql.replace(f"FROM {TABLE}", f"FROM {scan}")
    return Prepared(lambda: con.sql(sql).to_arrow_table(), None, None)


RUNNERS = {
    "datum-sql": "benchmarks.file_ingest:prepare_datum",
    "duckdb": "benchmarks.file_ingest:prepare_duckdb",
}
SHAPES = {1000: "1,000 small files", 10: "10 large files"}

BENCHMARKS = [
    Benchmark(
        f"files_{fmt}_{files}", "files",
        f"a streaming SELECT of 4 of 5 columns, a filter (price < 10000), over {SHAPES[files]} "
        f"of {fmt.upper() if fmt == 'csv' else 'Parquet'} in a directory: discovery, reading, "
        "the whole result",
        file_set(f"bid_{fmt}_{files}"), SQL, SQL,
        engines=("datum-sql", "duckdb"), runners=RUNNERS,
    )
    for files in (1000, 10)
    for fmt in ("csv", "parquet")
]  # fmt: skip

# -- the no-change rerun (datum-sql alone) ---------------------------------------------------

RERUN = "files_csv_1000_no_change_rerun"
RERUN_SET = "bid_csv_1000"
SINK = "bids_copy"


def _job(state_dir: str, rows: int) -> dict[str, Any]:
    """One run of the ingestion job: a new Context on ``state_dir``, INSERT INTO a Parquet
    sink over the file set, to its end; its status, with the seconds it took."""
    import gc

    import datum_sql as ds
    from benchmarks import inputs

    ds.Context(state_dir=None)  # outside the clock: a process's first Context imports the engine
    gc.collect()  # as engines.run: the clock starts on a collected heap
    t0 = time.perf_counter()
    ctx = ds.Context(state_dir=state_dir)
    path = str(inputs.directory(RERUN_SET, rows, 0))
    ctx.execute(create_source(path, "csv", if_not_exists=True))
    ctx.execute(
        f"CREATE SINK IF NOT EXISTS {SINK} WITH (connector = 'parquet', path = '{Path(state_dir) / 'out'}')"
    )
    q = ctx.execute_streaming(f"INSERT INTO {SINK} {SQL}")
    q.wait()
    seconds = time.perf_counter() - t0
    return {**q.status(), "seconds": seconds}


def first_run(state_dir: str, rows: int) -> dict[str, Any]:
    """Child entry: the first run, which reads every file."""
    status = _job(state_dir, rows)
    if status["rows_in"] != rows:
        raise RuntimeError(f"{RERUN}: the first run read {status['rows_in']:,} rows, not {rows:,}")
    return {"seconds": status["seconds"], "rows_in": status["rows_in"]}


def rerun(state_dir: str, rows: int) -> dict[str, Any]:
    """Child entry: the same job again, with nothing new to read: it must read 0 rows."""
    status = _job(state_dir, rows)
    if status["rows_in"] != 0 or status["rows_out"] != 0:
        raise RuntimeError(
            f"{RERUN}: the rerun read {status['rows_in']:,} rows and wrote "
            f"{status['rows_out']:,}; nothing was new"
        )
    if not (status.get("recovered_from") or {}).get("checkpoint"):
        raise RuntimeError(f"{RERUN}: the rerun did not resume from the first run's checkpoint")
    return {"seconds": status["seconds"], "rows_in": 0}


def run_rerun(events: int, session: Session) -> dict[str, Any]:
    """``session.runs`` pairs of fresh processes (a first run, then the timed rerun), each
    pair on a state directory of its own; print, record."""
    call("benchmarks.inputs:ensure", {"dataset": RERUN_SET, "rows": events, "seed": 0})
    print(f"\n== {RERUN}: INSERT INTO a Parquet sink over 1,000 CSV files ({events:,} rows) "
          f"with a state_dir, then the same job again with nothing new; datum-sql alone "
          f"(DuckDB keeps no record of what it read); {session.runs} runs")  # fmt: skip
    load_before = load_average()
    firsts, reruns = [], []
    SCRATCH.mkdir(parents=True, exist_ok=True)
    for _ in range(session.runs):
        state = tempfile.mkdtemp(prefix="rerun-", dir=SCRATCH)
        try:
            args = {"state_dir": state, "rows": events}
            firsts.append(call("benchmarks.file_ingest:first_run", args))
            reruns.append(call("benchmarks.file_ingest:rerun", args))
        finally:
            shutil.rmtree(state, ignore_errors=True)
        print(f"   first run {firsts[-1]['seconds']:.2f} s ({firsts[-1]['rows_in']:,} rows in, "
              f"peak RSS {firsts[-1]['peak_rss_mb']:.0f} MB); rerun {reruns[-1]['seconds']:.3f} s, "
              f"0 rows in, peak RSS {reruns[-1]['peak_rss_mb']:.0f} MB", flush=True)  # fmt: skip
    record = group_record(
        session, group="file_rerun", benchmark=RERUN,
        about="a rerun with a state_dir that finds no new file among 1,000 CSV files (events: "
        "their rows, all read by the first run): seconds",
        engine="datum-sql", events=events, runs=reruns, per_event=False,
        metrics={"rows_in": 0, "files": 1000,
                 "first_run_s": round(statistics.median(r["seconds"] for r in firsts), 3),
                 "first_run_peak_rss_mb": round(max(r["peak_rss_mb"] for r in firsts))},
        load_before=load_before, load_after=load_average(),
    )  # fmt: skip
    print(f"   median rerun {record['median_s']:.3f} s ({record['min_s']:.3f}-"
          f"{record['max_s']:.3f}); load average {load_before[0]:.2f} -> "
          f"{record['load_after'][0]:.2f}")  # fmt: skip
    append([record], session.results_path)
    return record


__all__ = ["BENCHMARKS", "RERUN", "first_run", "prepare_datum", "prepare_duckdb", "rerun",
           "run_rerun"]  # fmt: skip
