"""``incremental.column``: a file source that reads only rows above the highest value of one
column an earlier pass read, for files that are rewritten whole rather than appended to.

A pass is one reading of the files the listing named (a bounded run; one discovery round
of a continuous source). Rows at or below the *mark* (the highest value of the passes
before) are left out as read already; at the end of a pass the mark becomes the highest
value the pass read. Both live in the source's position, so the mark moves with the
checkpoint that covers the rows it stands for. Values are compared in the column's type:
integers, text, dates and timestamps (a sequence number or an ``updated_at``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.errors import PlanError, SourceError


def _comparable(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
    )


class Incremental:
    """The mark and the highest value so far of one column (see the module docstring)."""

    def __init__(self, table: str, column: str, schema: pa.Schema) -> None:
        self.table = table
        self.column = column
        i = schema.get_field_index(column)
        if i < 0:
            raise PlanError(
                f"{table}: option 'incremental.column' names {column!r}, which is not a column "
                f"(the columns are {', '.join(schema.names)})"
            )
        self.type = schema.field(i).type
        if not _comparable(self.type):
            raise PlanError(
                f"{table}: option 'incremental.column': column {column!r} is {self.type}; "
                "it must be an integer, text, a date or a timestamp"
            )
        self.mark: pa.Scalar | None = None
        self.highest: pa.Scalar | None = None

    def above_mark(self, values: pa.ChunkedArray) -> np.ndarray | None:
        """Which of ``values`` (the column, in its declared type) are above the mark (None:
        all are), counting their highest; a null's row was rejected before this is asked."""
        keep = None
        if self.mark is not None:
            keep = pc.greater(values, self.mark).to_numpy(zero_copy_only=False)
            values = values.filter(pa.array(keep))
        top = pc.max(values)
        if top.is_valid and (self.highest is None or pc.greater(top, self.highest).as_py()):
            self.highest = top
        return keep

    def pass_done(self) -> None:
        """Every file of the pass was read: what it read is at or below the new mark."""
        if self.highest is not None:
            self.mark = self.highest

    def position(self) -> dict[str, Any]:
        return {
            "column": self.column,
            "mark": self._save(self.mark),
            "highest": self._save(self.highest),
        }

    def restore(self, doc: dict[str, Any] | None) -> None:
        if doc is None:
            raise SourceError(
                f"source {self.table!r}: cannot resume with 'incremental.column' = {self.column!r}: "
                "the checkpoint was taken without it; start over with fresh=True (CLI: --fresh)"
            )
        if doc.get("column") != self.column:
            raise SourceError(
                f"source {self.table!r}: cannot resume: the checkpoint's incremental column is "
                f"{doc.get('column')!r}, the source's is {self.column!r}; start over with "
                "fresh=True (CLI: --fresh)"
            )
        self.mark, self.highest = self._load(doc.get("mark")), self._load(doc.get("highest"))

    def _save(self, value: pa.Scalar | None) -> Any:
        """JSON-able: integers and text as they are, dates and timestamps as their count."""
        if value is None:
            return None
        if pa.types.is_date(self.type) or pa.types.is_timestamp(self.type):
            return value.value
        return value.as_py()

    def _load(self, value: Any) -> pa.Scalar | None:
        if value is None:
            return None
        if pa.types.is_date32(self.type):
            return pa.scalar(value, pa.int32()).cast(self.type)
        if pa.types.is_date(self.type) or pa.types.is_timestamp(self.type):
            return pa.scalar(value, pa.int64()).cast(self.type)
        return pa.scalar(value, self.type)
