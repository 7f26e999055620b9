"""A public harness for testing queries: feed batches and watermarks, inspect the output.

Used by datum-sql's own tests and docs, and meant for yours::

    from datum_sql.testing import run_query, same_rows

    run = run_query(
        "SELECT k, count(*) AS n FROM t GROUP BY k",
        {"t": [batch1, Watermark(ts), batch2]},
        event_time={"t": "ts"},
    )
    run.changelog      # every emitted row, with _op for an updating query
    run.final          # the changelog applied: the result a batch query would give
    run.late           # rows routed as late, with their diagnostic columns
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pyarrow as pa

from datum_sql.context import Context
from datum_sql.engine.changelog import OP_COLUMN, apply_changelog
from datum_sql.types import BoundedOutOfOrderness

LATE_SINK = "__late_rows"


@dataclass
class QueryRun:
    changelog: pa.Table
    late: pa.Table | None
    status: dict[str, Any]

    @property
    def final(self) -> pa.Table:
        """The output with its changelog applied (the output itself for append-only queries)."""
        if OP_COLUMN not in self.changelog.column_names:
            return self.changelog
        return apply_changelog(None, self.changelog)


def run_query(
    sql: str,
    tables: Mapping[str, pa.Table | Sequence[Any]],
    *,
    event_time: Mapping[str, str] | None = None,
    watermark: Mapping[str, BoundedOutOfOrderness | timedelta] | None = None,
    allowed_lateness: timedelta | float | str | None = None,
    batch_size: int | None = None,
    timeout: float = 60.0,
) -> QueryRun:
    """Run a streaming SELECT over in-memory tables (or lists of batches and
    :class:`~datum_sql.Watermark` markers) until they end; return what it emitted."""
    ctx = Context(state_dir=None, checkpoint_interval=None)
    for name, data in tables.items():
        column = (event_time or {}).get(name)
        policy = (watermark or {}).get(name)
        if column is not None and policy is None and isinstance(data, pa.Table):
            policy = BoundedOutOfOrderness()
        schema = None
        if not isinstance(data, pa.Table):
            first = next((b for b in data if isinstance(b, pa.RecordBatch | pa.Table)), None)
            schema = first.schema if first is not None else None
        ctx.register_arrow(
            name, list(data) if not isinstance(data, pa.Table) else data, schema=schema,
            event_time=column, watermark=policy, batch_size=batch_size,
        )  # fmt: skip
    late: list[pa.RecordBatch] = []
    ctx.register_append_sink(LATE_SINK, late.append)
    q = ctx.execute_streaming(sql, allowed_lateness=allowed_lateness, late_output=LATE_SINK)
    batches = list(q)
    q.wait(timeout)
    schema = q.executor.graph.sinks[0].schema if not batches else batches[0].schema
    changelog = pa.Table.from_batches(batches, schema=schema)
    return QueryRun(changelog, pa.Table.from_batches(late) if late else None, q.status())


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else round(v, 6)
    return v


def sorted_rows(table: pa.Table, columns: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """The rows of ``table`` as sorted tuples (floats rounded to 6 places), for comparing
    results whose row order is not defined."""
    cols = list(columns or table.column_names)
    data = [table.column(c).to_pylist() for c in cols]
    rows = [tuple(_norm(v) for v in row) for row in zip(*data, strict=True)]
    return sorted(
        rows, key=lambda r: tuple((v is None, str(type(v)), v if v is not None else 0) for v in r)
    )


def same_rows(got: pa.Table, want: pa.Table) -> bool:
    """True when both tables hold the same multiset of rows under the same column names."""
    return got.column_names == want.column_names and sorted_rows(got) == sorted_rows(want)
