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

:func:`run_with_restore` runs a query through a checkpoint, a crash and a recovery (two
contexts on one state directory) and returns what its exactly-once sink holds at the end:
for bounded input with no late rows, that is the batch result too.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from datum_sql.context import Context
from datum_sql.engine.changelog import OP_COLUMN, apply_changelog
from datum_sql.errors import CheckpointError, QueryFailed
from datum_sql.types import BoundedOutOfOrderness, Watermark

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


RESTORE_SINK = "__restored_output"


@dataclass
class RestoreRun:
    """What :func:`run_with_restore` saw: the sink's content at the end, the checkpoint the
    second run resumed from, and how far each table was read when it was taken."""

    result: pa.Table
    checkpoint_id: int | None
    #: per table: items (batches and watermark markers) processed before the checkpoint,
    #: and before the crash (processed, never committed: the second run redoes them)
    checkpoint_items: dict[str, int]
    crash_items: dict[str, int]
    first_status: dict[str, Any]
    status: dict[str, Any]


class _SimulatedCrash(RuntimeError):
    """Raised by a held source to end the first run the way a crash would: no commit."""


class _HeldFeed:
    """A table's items, handed to the source one at a time up to a limit the harness
    raises; asked for item ``i``, the runtime has processed items ``0..i-1`` (a source is
    asked for its next item only once its previous one went all the way through)."""

    def __init__(self, name: str, items: list[Any], timeout: float) -> None:
        self.name = name
        self.items = items
        self.timeout = timeout
        self._cond = threading.Condition()
        self._allowed = 0
        self._asked = 0
        self._crash = False

    def __iter__(self) -> Iterator[Any]:
        i = 0
        while True:
            with self._cond:
                self._asked = i + 1
                self._cond.notify_all()
                if not self._cond.wait_for(self._released(i), self.timeout):
                    raise TimeoutError(f"{self.name}: the harness never released item {i}")
                if self._crash:
                    raise _SimulatedCrash(f"simulated crash of source {self.name!r}")
            yield self.items[i]
            i += 1

    def _released(self, i: int) -> Callable[[], bool]:
        return lambda: self._crash or i < self._allowed

    def allow(self, n: int) -> None:
        with self._cond:
            self._allowed = n
            self._cond.notify_all()

    def crash(self) -> None:
        with self._cond:
            self._crash = True
            self._cond.notify_all()

    def processed(self, n: int) -> bool:
        """True once the runtime asks for item ``n`` (so items before it are processed)."""
        with self._cond:
            return self._asked > n


def _items(data: pa.Table | Sequence[Any], batch_size: int | None) -> list[Any]:
    if isinstance(data, pa.Table):
        return list(data.to_batches(max_chunksize=batch_size))
    return list(data)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def run_with_restore(
    sql: str,
    tables: Mapping[str, pa.Table | Sequence[Any]],
    state_dir: str | Path,
    *,
    event_time: Mapping[str, str] | None = None,
    watermark: Mapping[str, BoundedOutOfOrderness | timedelta] | None = None,
    allowed_lateness: timedelta | float | str | None = None,
    batch_size: int | None = None,
    sink: str = "duckdb",
    primary_key: str | None = None,
    checkpoint_at: float = 0.5,
    crash_at: float = 0.75,
    hold: Collection[str] | None = None,
    timeout: float = 60.0,
) -> RestoreRun:
    """Run SELECT ``sql`` into an exactly-once sink in ``state_dir`` (empty or new) through
    a checkpoint, a crash and a recovery, and return what the sink holds at the end.

    1. A first :class:`Context` reads each table in ``hold`` (default: all) up to
       ``checkpoint_at`` of its items (batches, watermark markers), takes a checkpoint,
       reads on up to ``crash_at``, then its sources fail: the query stops without
       committing anything after the checkpoint, as if the process had died.
    2. A second Context on the same ``state_dir``, given the whole tables, resumes from
       that checkpoint (state, watermarks, source positions, staged output) and runs to
       the end of the input.

    ``sink`` is ``"duckdb"`` (an updating query needs ``primary_key``: the upsert key) or
    ``"parquet"``. Tables are pyarrow Tables (cut into ``batch_size`` rows) or lists of
    batches and :class:`~datum_sql.Watermark` markers.
    """
    root = Path(state_dir)
    if root.exists() and any(root.iterdir()):
        raise CheckpointError(f"run_with_restore needs an empty state_dir; {root} is not empty")
    if not 0 <= checkpoint_at <= crash_at <= 1:
        raise CheckpointError(
            f"run_with_restore: need 0 <= checkpoint_at <= crash_at <= 1, "
            f"got {checkpoint_at} and {crash_at}"
        )
    items = {name: _items(data, batch_size) for name, data in tables.items()}
    held = set(tables if hold is None else hold)
    out = root / ("restored.duckdb" if sink == "duckdb" else "restored")
    options = {"connector": sink, "path": str(out)}
    if sink == "duckdb":
        options["table"] = "result"
        if primary_key:
            options["primary_key"] = primary_key
    with_options = ", ".join(f"{k} = {_quote(v)}" for k, v in options.items())
    create_sink = f"CREATE SINK IF NOT EXISTS {RESTORE_SINK} WITH ({with_options})"
    insert = f"INSERT INTO {RESTORE_SINK} {sql}"

    def context(feeds: Mapping[str, Any]) -> Context:
        ctx = Context(state_dir=root, checkpoint_interval=None)
        for name, data in feeds.items():
            column = (event_time or {}).get(name)
            policy = (watermark or {}).get(name)
            if column is not None and policy is None:
                policy = BoundedOutOfOrderness()
            first = next((b for b in items[name] if not isinstance(b, Watermark)), None)
            ctx.register_arrow(
                name, data, schema=first.schema if first is not None else _schema(tables[name]),
                event_time=column, watermark=policy, batch_size=batch_size,
            )  # fmt: skip
        ctx.execute(create_sink)
        return ctx

    # 1. read to the checkpoint, on to the crash, then fail
    feeds = {name: _HeldFeed(name, items[name], timeout) for name in held}
    first = context({n: feeds.get(n, items[n]) for n in tables})
    q = first.execute_streaming(insert, allowed_lateness=allowed_lateness, fresh=True)
    marks: list[dict[str, int]] = []
    try:
        for step, fraction in enumerate((checkpoint_at, crash_at)):
            marks.append({n: int(len(f.items) * fraction) for n, f in feeds.items()})
            for name, feed in feeds.items():
                feed.allow(marks[step][name])
            deadline = time.monotonic() + timeout
            for name, feed in feeds.items():
                while not feed.processed(marks[step][name]):
                    if q.wait(0.005):  # raises the query's error if it failed
                        raise CheckpointError(
                            f"run_with_restore: the first run ended before the crash "
                            f"(state {q.state}); is a held table read to its end?"
                        )
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{name}: items not processed within {timeout}s")
            if step == 0:
                checkpoint_id = q.checkpoint(timeout)
    finally:
        for feed in feeds.values():
            feed.crash()
    try:
        q.wait(timeout)
    except QueryFailed as exc:
        if not isinstance(exc.__cause__, _SimulatedCrash):
            raise
    else:
        raise CheckpointError(
            f"run_with_restore: the first run did not fail at the crash ({q.state})"
        )
    first_status = q.status()
    first.close()

    # 2. a new context resumes from the checkpoint and reads to the end
    second = context(items)
    q = second.execute_streaming(insert, allowed_lateness=allowed_lateness)
    if not q.wait(timeout):
        q.cancel()
        raise TimeoutError(f"run_with_restore: the resumed run did not end within {timeout}s")
    status = q.status()
    resumed = (status.get("recovered_from") or {}).get("checkpoint")
    if resumed != checkpoint_id:
        raise CheckpointError(
            f"run_with_restore: the second run resumed from {resumed}, not checkpoint {checkpoint_id}"
        )
    schema = q.executor.graph.sinks[0].schema
    second.close()
    return RestoreRun(
        _read_sink(out, sink, schema), checkpoint_id, marks[0], marks[1],
        first_status, status,
    )  # fmt: skip


def _schema(data: pa.Table | Sequence[Any]) -> pa.Schema | None:
    return data.schema if isinstance(data, pa.Table) else None


def _read_sink(path: Path, sink: str, schema: pa.Schema | None) -> pa.Table:
    """The committed content of the harness's sink, read directly (not through a query)."""
    if sink == "duckdb":
        import duckdb

        con = duckdb.connect(str(path), read_only=True)
        try:
            return con.sql("SELECT * FROM result").to_arrow_table()
        finally:
            con.close()
    import pyarrow.parquet as pq

    parts = [pq.read_table(f) for f in sorted(path.glob("part-*"))]
    if parts:
        return pa.concat_tables(parts)
    assert schema is not None
    return schema.empty_table()


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
