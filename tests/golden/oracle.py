"""The golden rule's oracle: DuckDB runs the same SQL as a batch over the same rows.

:func:`assert_restore_matches` is the checkpoint pass every golden case also makes: the
streaming query runs into an exactly-once sink, is checkpointed in the middle of its input,
crashes, resumes in a new context from that checkpoint, and must end holding the batch
result.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

import datum_sql as ds
from datum_sql.testing import RestoreRun, run_with_restore, sorted_rows
from datum_sql.types import Watermark


def duckdb_result(sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute("SET TimeZone = 'UTC'")
    for name, table in tables.items():
        con.register(name, table)
    return con.sql(sql).to_arrow_table()


def ctx_sql_result(
    sql: str, tables: dict[str, pa.Table], event_time: Mapping[str, str] | None = None
) -> pa.Table:
    """``ctx.sql``'s answer over ``tables`` (each with its event-time column, if named): the
    oracle where datum-sql follows DataFusion's definitions rather than DuckDB's."""
    with ds.Context(state_dir=None) as ctx:
        for name, table in tables.items():
            ctx.register_arrow(name, table, event_time=(event_time or {}).get(name))
        return ctx.sql(sql)


def assert_same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names, (got.column_names, want.column_names)
    g, w = sorted_rows(got), sorted_rows(want)
    assert len(g) == len(w), f"{len(g)} rows streamed vs {len(w)} in batch"
    assert g == w


def assert_restore_matches(
    stream_sql: str,
    batch_sql: str,
    inputs: Mapping[str, Sequence[pa.RecordBatch | Watermark]],
    state_dir: Path,
    *,
    hold: Collection[str] | None = None,
    same: Callable[[pa.Table, pa.Table], None] | None = None,
    oracle: Callable[[str, dict[str, pa.Table]], pa.Table] = duckdb_result,
    **options: Any,
) -> RestoreRun:
    """Stream ``stream_sql`` over ``inputs`` (name -> batches) through a checkpoint taken
    half-way through each held input, a crash three quarters of the way, and a restore;
    the sink must end holding DuckDB's ``batch_sql`` over all the rows, and no row may be
    late. ``same`` compares (default: :func:`assert_same_rows`), ``oracle`` answers
    ``batch_sql`` (default: DuckDB; :func:`ctx_sql_result`); ``options`` go to
    :func:`~datum_sql.testing.run_with_restore`."""
    run = run_with_restore(stream_sql, inputs, state_dir, hold=hold, **options)
    for name in hold if hold is not None else inputs:
        n = len(inputs[name])
        # in the middle: rows before the checkpoint, rows lost with the crash, rows after it
        if n >= 4:
            assert 0 < run.checkpoint_items[name] < run.crash_items[name] < n, (name, run)
    assert run.status["recovered_from"]["checkpoint"] == run.checkpoint_id
    assert run.first_status["late_rows"] == 0 and run.status["late_rows"] == 0
    tables = {
        name: pa.Table.from_batches(
            [b for b in batches if isinstance(b, pa.RecordBatch)],
            schema=next(b for b in batches if isinstance(b, pa.RecordBatch)).schema,
        )
        for name, batches in inputs.items()
    }
    (same or assert_same_rows)(run.result, oracle(batch_sql, tables))
    return run


def cut(table: pa.Table, rnd: random.Random, max_batch: int) -> list[pa.RecordBatch]:
    """``table`` as batches of random sizes in ``[1, max_batch]`` (one empty batch when it
    has no rows): how the golden tests stream an input in arbitrary micro-batches."""
    out, i = [], 0
    while i < table.num_rows:
        n = rnd.randint(1, max_batch)
        out.append(table.slice(i, n).combine_chunks().to_batches()[0])
        i += n
    return out or [pa.RecordBatch.from_pylist([], schema=table.schema)]
