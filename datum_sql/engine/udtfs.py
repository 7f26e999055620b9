"""Python table functions: one call per batch of input rows, zero or more output rows each.

A table function receives one ``pyarrow.Array`` per argument (the arguments of a whole
batch of input rows) and yields (or returns) Arrow record batches or tables of its
declared columns plus ``input_row``: the position, in the arguments, of the input row
each output row came from. Looping over rows in Python is the function's choice, not the
engine's. Everything it yields is checked (columns, types, the range of ``input_row``)
before any row is used; a failure names the function, what was expected and what it got,
or carries the traceback of the exception it raised. The functions live in one
process-wide registry, as scalar functions do (:mod:`datum_sql.engine.udfs`).
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.udfs import UdfFailure

#: The column of a table function's output that names the input row of each output row.
INPUT_ROW = "input_row"


@dataclass(frozen=True)
class TableFunction:
    """``fn`` called as ``name(args)`` in FROM, taking ``input_types``, yielding rows of
    ``output_schema`` (plus ``input_row``)."""

    name: str
    fn: Callable[..., Any]
    input_types: tuple[pa.DataType, ...]
    output_schema: pa.Schema

    def expand(self, args: list[pa.Array], rows: int) -> tuple[pa.Array, pa.Table]:
        """The output rows for ``rows`` input rows whose arguments are ``args``: the input
        row of each (int64) and the output columns, checked; raises :class:`UdfFailure`."""
        parts: list[pa.RecordBatch] = []
        try:
            out = self.fn(*args)
            items: Iterable[Any] = (
                [out] if isinstance(out, pa.RecordBatch | pa.Table) else [] if out is None else out
            )
            if not hasattr(items, "__iter__") or isinstance(items, pa.Array | pa.ChunkedArray):
                raise UdfFailure(self.name, self._want(type(items).__name__))
            for item in items:
                parts.extend(self._checked(item, rows))
        except UdfFailure:
            raise
        except Exception as exc:
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            raise UdfFailure(self.name, f"raised {type(exc).__name__}:\n{text}") from exc
        schema = self.output_schema.append(pa.field(INPUT_ROW, pa.int64()))
        table = pa.Table.from_batches(parts, schema=schema)
        index = table.column(INPUT_ROW).combine_chunks()
        return index, table.drop_columns([INPUT_ROW])

    def _want(self, got: str) -> str:
        cols = ", ".join([*self.output_schema.names, INPUT_ROW])
        return f"must yield pyarrow RecordBatches or Tables of ({cols}), got {got}"

    def _checked(self, item: Any, rows: int) -> list[pa.RecordBatch]:
        if not isinstance(item, pa.RecordBatch | pa.Table):
            raise UdfFailure(self.name, self._want(type(item).__name__))
        want = [*self.output_schema.names, INPUT_ROW]
        if sorted(item.schema.names) != sorted(want):
            raise UdfFailure(
                self.name,
                f"yielded columns ({', '.join(item.schema.names)}), expected ({', '.join(want)})",
            )
        for f in self.output_schema:
            got = item.schema.field(f.name).type
            if got != f.type:
                raise UdfFailure(
                    self.name, f"yielded column {f.name!r} of type {got}, expected {f.type}"
                )
        index = item.column(INPUT_ROW)
        if not pa.types.is_integer(index.type):
            raise UdfFailure(
                self.name, f"yielded column {INPUT_ROW!r} of type {index.type}, expected an integer"
            )
        if index.null_count:
            raise UdfFailure(self.name, f"yielded a null {INPUT_ROW}")
        if len(index):
            lo, hi = pc.min_max(index).values()
            if lo.as_py() < 0 or hi.as_py() >= rows:
                bad = lo.as_py() if lo.as_py() < 0 else hi.as_py()
                raise UdfFailure(
                    self.name,
                    f"yielded {INPUT_ROW} {bad}, expected 0 to {rows - 1} "
                    f"(the positions of the {rows} input rows it was called with)",
                )
        table = item if isinstance(item, pa.Table) else pa.Table.from_batches([item])
        table = table.select(want).cast(self.output_schema.append(pa.field(INPUT_ROW, pa.int64())))
        return table.to_batches()


_registry: dict[str, TableFunction] = {}
_lock = threading.Lock()


def register(fn: TableFunction) -> None:
    """Make ``fn`` callable from every query planned from now on (replacing its name)."""
    with _lock:
        _registry[fn.name] = fn


def lookup(name: str) -> TableFunction:
    """The registered table function ``name``; a KeyError names it when there is none."""
    with _lock:
        return _registry[name]
