"""One engine runs one benchmark once, in the child process it was started in.

:func:`run` reads the inputs into memory, sets the engine up (outside the clock), then
times the query up to a fully materialized ``pyarrow.Table`` (inside the clock), takes the
peak RSS, and writes the table to an Arrow IPC file for the parent to compare.

The clock starts on a collected heap (``gc.collect()``, every engine alike): the set-up's
imports leave tens of thousands of new objects (datafusion alone imports pandas), and the
full collection they are owed would otherwise fall, once per process, on whatever
allocates next: 20-45 ms of the first query, which is the import's cost, not the query's.

* ``datum-sql``: each input ``register_arrow``-ed with its event time and a bounded
  out-of-orderness watermark (65536-row batches); the clock covers planning,
  ``execute_streaming`` of the SELECT and ``to_arrow()`` (an updating query's changelog is
  applied: the final state). Paced inputs (async iterators) count as unbounded, which
  ``to_arrow()`` refuses: there an ``INSERT INTO`` a callback sink keeps every batch.
* ``duckdb``: one thread (``SET threads = 1``), the inputs registered as Arrow tables; the
  clock covers ``sql(...).to_arrow_table()``.
* ``polars``: ``pl.from_arrow(...).lazy()`` per input, one thread (``POLARS_MAX_THREADS=1``,
  set by the parent), ``collect(engine="streaming").to_arrow()``. Where the streaming
  engine hands a node to the in-memory engine, the run notes which.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import re
import resource
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from benchmarks import compare, inputs
from benchmarks.child import peak_rss_mb, vm_hwm_mb
from benchmarks.registry import get
from benchmarks.spec import Benchmark

BATCH = 65_536


@dataclass
class Prepared:
    """An engine set up on its inputs: ``run()`` is what the clock times."""

    run: Callable[[], pa.Table | int]
    #: the in-memory input (None where the engine reads it from elsewhere, e.g. Kafka)
    input_rows: int | None
    input_bytes: int | None
    notes: Callable[[], list[str]] = field(default=lambda: [])


def load_inputs(bench: Benchmark, events: int) -> dict[str, pa.Table]:
    return {
        name: inputs.load(i.dataset, i.rows, i.seed) for name, i in bench.inputs(events).items()
    }


def _sizes(tables: dict[str, pa.Table]) -> tuple[int, int]:
    return sum(t.num_rows for t in tables.values()), sum(t.nbytes for t in tables.values())


async def paced(table: pa.Table, batch_size: int) -> AsyncIterator[pa.RecordBatch]:
    """``table`` in batches, yielding to the event loop before each: inputs take turns."""
    for batch in table.to_batches(max_chunksize=batch_size):
        await asyncio.sleep(0)
        yield batch


def prepare_datum(bench: Benchmark, events: int, params: dict[str, Any]) -> Prepared:
    import datum_sql as ds

    tables = load_inputs(bench, events)
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    for name, spec in bench.inputs(events).items():
        table = tables[name]
        wm = ds.BoundedOutOfOrderness(milliseconds=spec.watermark_ms)
        if bench.paced:
            ctx.register_arrow(
                name, paced(table, BATCH), schema=table.schema, event_time=spec.event_time,
                watermark=wm,
            )  # fmt: skip
        else:
            ctx.register_arrow(
                name, table, event_time=spec.event_time, watermark=wm, batch_size=BATCH
            )
    handle: dict[str, Any] = {}

    def select() -> pa.Table:
        handle["q"] = ctx.execute_streaming(bench.datum_sql)
        return handle["q"].to_arrow()

    # async iterators are unbounded to register_arrow, so to_arrow() refuses them: a paced
    # run keeps every batch of its (append-only) result in a callback sink instead
    batches: list[pa.RecordBatch] = []
    ctx.register_append_sink("out", batches.append)

    def insert() -> pa.Table:
        handle["q"] = ctx.execute_streaming(f"INSERT INTO out {bench.datum_sql}")
        handle["q"].wait()
        if not batches:
            raise RuntimeError(f"{bench.name}: the paced run wrote no batch (no result schema)")
        return pa.Table.from_batches(batches)

    def notes() -> list[str]:
        status = handle["q"].status()
        return [f"{status['late_rows']:,} LATE ROWS DROPPED"] if status["late_rows"] else []

    return Prepared(insert if bench.paced else select, *_sizes(tables), notes)


def prepare_duckdb(bench: Benchmark, events: int, params: dict[str, Any]) -> Prepared:
    import duckdb

    tables = load_inputs(bench, events)
    con = duckdb.connect()
    con.execute("SET threads = 1")
    for name, table in tables.items():
        con.register(name, table)
    return Prepared(lambda: con.sql(bench.duckdb_sql).to_arrow_table(), *_sizes(tables))


#: a node the streaming engine handed to the in-memory engine, in its physical plan graph
FALLBACK = re.compile(r'label="((?:[^"\\]|\\.)*)",style=filled,fillcolor="0\.0 0\.3 1\.0"')


def prepare_polars(bench: Benchmark, events: int, params: dict[str, Any]) -> Prepared:
    import polars as pl

    if bench.polars is None:
        raise ValueError(f"benchmark {bench.name} has no polars query")
    tables = load_inputs(bench, events)
    frames = {name: pl.from_arrow(table).lazy() for name, table in tables.items()}
    query = bench.polars(frames)
    graph = query.show_graph(engine="streaming", plan_stage="physical", raw_output=True)
    fallback = sorted({label.split("\\n")[0] for label in FALLBACK.findall(graph or "")})

    def notes() -> list[str]:
        return [f"in-memory engine for: {', '.join(fallback)}"] if fallback else []

    return Prepared(lambda: query.collect(engine="streaming").to_arrow(), *_sizes(tables), notes)


PREPARE: dict[str, Callable[[Benchmark, int, dict[str, Any]], Prepared]] = {
    "datum-sql": prepare_datum,
    "duckdb": prepare_duckdb,
    "polars": prepare_polars,
}


def _preparer(bench: Benchmark, engine: str) -> Callable[..., Prepared]:
    target = bench.runners.get(engine)
    if target is None:
        return PREPARE[engine]
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(
    bench: str, engine: str, events: int, out: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Child entry: one timed run; the result table goes to ``out`` (Arrow IPC)."""
    b = get(bench)
    prepared = _preparer(b, engine)(b, events, params or {})
    rss_input = peak_rss_mb()
    gc.collect()
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    result = prepared.run()
    seconds = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    peak, hwm = peak_rss_mb(), vm_hwm_mb()
    rows = result if isinstance(result, int) else result.num_rows
    if isinstance(result, pa.Table):
        compare.write(result, out)
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "rows_out": rows,
        "compared": isinstance(result, pa.Table),
        "input_rows": prepared.input_rows,
        "input_bytes": prepared.input_bytes,
        "rss_input_mb": rss_input,
        "peak_rss_mb": peak,
        "vm_hwm_mb": hwm,
        "notes": prepared.notes(),
    }


__all__ = ["BATCH", "PREPARE", "Prepared", "load_inputs", "paced", "run"]
