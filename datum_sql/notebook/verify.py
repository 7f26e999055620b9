"""``ctx.verify(sql)``: do the batch and the streaming results of a query agree?

The golden rule of datum-sql (SEMANTICS.md): for bounded input without late rows, the final
result of a streaming query equals the same SQL run as a batch query. ``verify`` checks it
for a user's own query, the way datum-sql's tests do:

1. Take a bounded snapshot of every source the query reads: bounded sources (files, Arrow
   tables, bounded generators, DuckDB tables) whole; Kafka up to the end offsets of now;
   unbounded generators their first ``snapshot_rows`` rows. Nothing is committed and no
   query of the context is started.
2. Register the snapshots, with the same event-time column and watermark delay, in a
   private in-memory Context.
3. Run the SQL there as a batch query (``ctx.sql``) and as a streaming query
   (``execute_streaming(...).to_arrow()``: the changelog applied), late rows going to a
   private late output.
4. Compare the two results as multisets of rows (row order is ignored; floats compared to
   6 decimal places). Any difference is reported row by row, with the late rows, which are
   the usual reason: a late row is dropped by the streaming query but counted by the batch.

Sources whose watermarks come from markers in an Arrow iterator, and Kafka partitions, are
replayed as one ordered stream per source; a query that relies on per-partition watermarks
may see different late rows here than live.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.notebook.display import plural

__all__ = ["VerifyResult", "verify"]

DEFAULT_SNAPSHOT_ROWS = 10_000
_LATE_SINK = "__verify_late_rows"


@dataclass
class VerifyResult:
    """The outcome of :func:`verify`: truthy when batch and streaming agree."""

    sql: str
    batch: pa.Table
    stream: pa.Table
    only_in_batch: pa.Table
    only_in_stream: pa.Table
    late: pa.Table | None = None
    notes: list[str] = field(default_factory=list)
    columns_match: bool = True

    @property
    def ok(self) -> bool:
        return (
            self.columns_match
            and self.only_in_batch.num_rows == 0
            and self.only_in_stream.num_rows == 0
        )

    def __bool__(self) -> bool:
        return self.ok

    @property
    def late_rows(self) -> int:
        return 0 if self.late is None else self.late.num_rows

    @property
    def differences(self) -> pa.Table:
        """The differing rows, with a first column ``_in`` = ``'batch only'`` or
        ``'stream only'`` (empty when the results agree)."""
        parts = []
        for side, table in (
            ("batch only", self.only_in_batch),
            ("stream only", self.only_in_stream),
        ):
            parts.append(table.add_column(0, "_in", pa.array([side] * table.num_rows, pa.string())))
        try:
            return pa.concat_tables(parts, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return parts[0]

    def headline(self) -> str:
        if self.ok:
            return f"batch and streaming agree: {plural(self.batch.num_rows, 'row')}"
        if not self.columns_match:
            return (
                f"the columns differ: batch ({', '.join(self.batch.column_names)}), "
                f"streaming ({', '.join(self.stream.column_names)})"
            )
        return (
            f"batch and streaming differ: {plural(self.only_in_batch.num_rows, 'row')} only in "
            f"batch, {self.only_in_stream.num_rows:,} only in streaming "
            f"(batch {plural(self.batch.num_rows, 'row')}, streaming {self.stream.num_rows:,})"
        )

    def __str__(self) -> str:
        from datum_sql.notebook.display import table_text

        out = [("OK: " if self.ok else "DIFFERENT: ") + self.headline()]
        out += [f"  - {n}" for n in self.notes]
        if not self.ok and self.columns_match:
            out.append(table_text(self.differences, 20))
        return "\n".join(out)

    def __repr__(self) -> str:
        return f"<VerifyResult ok={self.ok}: {self.headline()}>"

    def _repr_html_(self) -> str:
        from datum_sql.notebook.display import CSS, _table_fragment, esc

        mark = "✓" if self.ok else "✗"
        color = "#246b36" if self.ok else "#c0392b"
        out = [
            f'<div class="datum datum-verify">{CSS}<div class="datum-head" style="color:{color}">'
            f"<b>{mark} {esc(self.headline())}</b></div>"
        ]
        if self.notes:
            out.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in self.notes) + "</ul>")
        if not self.ok and self.columns_match:
            out.append(_table_fragment(self.differences, 50, title="differing rows"))
        if self.late is not None and self.late.num_rows:
            out.append(_table_fragment(self.late, 20, title="late rows (dropped by streaming)"))
        out.append("</div>")
        return "".join(out)


def _norm(value: Any) -> Any:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else round(value, 6)
    return value


def _row_key(row: dict[str, Any], columns: list[str]) -> tuple[Any, ...]:
    return tuple(_norm(row[c]) for c in columns)


def _only_in(a: pa.Table, b: pa.Table) -> pa.Table:
    """Rows of ``a`` not matched one-for-one by rows of ``b`` (multiset difference)."""
    columns = a.column_names
    remaining = Counter(_row_key(r, columns) for r in b.select(columns).to_pylist())
    out = []
    for row in a.to_pylist():
        key = _row_key(row, columns)
        if remaining[key] > 0:
            remaining[key] -= 1
        else:
            out.append(row)
    return pa.Table.from_pylist(out, schema=a.schema)


def _snapshot(ctx: Any, entry: Any, snapshot_rows: int) -> tuple[pa.Table, str | None]:
    """A bounded copy of what a source holds now, and a note when it is partial."""
    from datum_sql.sample import head

    if entry.kind != "source":
        return ctx._read_all(entry), None
    if entry.bounded or entry.connector in ("kafka", "arrow"):
        table = ctx._read_all(entry)
        note = (
            f"Kafka source {entry.name}: compared over the {table.num_rows:,} messages up to the "
            "current end offsets"
            if entry.connector == "kafka"
            else None
        )
        return table, note
    table = head(ctx, entry, snapshot_rows)
    return table, (
        f"source {entry.name} is unbounded: compared over its first {table.num_rows:,} rows "
        "(snapshot_rows=)"
    )


def verify(
    ctx: Any,
    sql: str,
    *,
    allowed_lateness: timedelta | float | str | None = None,
    snapshot_rows: int = DEFAULT_SNAPSHOT_ROWS,
    batch_size: int | None = None,
    timeout: float | None = 120.0,
) -> VerifyResult:
    """Run ``sql`` (a SELECT) as a batch and as a streaming query over the same bounded
    snapshot of its sources, and compare; see the module docstring."""
    from datum_sql.context import Context
    from datum_sql.sql.parse import parse_one

    node = parse_one(sql)
    if not isinstance(node, exp.Query):
        raise PlanError(
            "verify() checks a SELECT query; for INSERT INTO sink SELECT ..., verify the SELECT"
        )
    prepared = ctx.prepare(sql)
    notes: list[str] = []
    snapshots: dict[str, tuple[Any, pa.Table]] = {}
    for n in prepared.graph.sources:
        if n.config.get("values"):  # the one row of a table function's literal call
            continue
        entry = ctx.catalog.require(n.kind)
        if entry.name not in snapshots:
            table, note = _snapshot(ctx, entry, snapshot_rows)
            snapshots[entry.name] = (entry, table)
            if note:
                notes.append(note)
    late: list[pa.RecordBatch] = []
    with Context(state_dir=None, checkpoint_interval=None) as tmp:
        for name, (entry, table) in snapshots.items():
            delay = getattr(entry, "watermark_delay_us", None)
            event_time = getattr(entry, "event_time", None)
            tmp.register_arrow(
                name, table, event_time=event_time,
                watermark=timedelta(microseconds=delay) if event_time and delay is not None else None,
                batch_size=batch_size,
            )  # fmt: skip
        tmp.register_append_sink(_LATE_SINK, late.append)
        batch = tmp.sql(sql)
        q = tmp.execute_streaming(sql, allowed_lateness=allowed_lateness, late_output=_LATE_SINK)
        stream = q.to_arrow(timeout=timeout)
    late_table = pa.Table.from_batches(late) if late else None
    if late_table is not None:
        n = late_table.num_rows
        notes.append(
            f"{plural(n, 'row')} arrived late in the streaming run and "
            f"{'was' if n == 1 else 'were'} dropped there; the batch query counts "
            f"{'it' if n == 1 else 'them'} (see .late)"
        )
    if batch.column_names != stream.column_names:
        empty_b, empty_s = batch.schema.empty_table(), stream.schema.empty_table()
        return VerifyResult(
            sql, batch, stream, empty_b, empty_s, late_table, notes, columns_match=False
        )
    return VerifyResult(
        sql, batch, stream, _only_in(batch, stream), _only_in(stream, batch), late_table, notes
    )
