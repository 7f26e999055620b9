"""Arrow data registered from Python: tables, batches, readers and (async) iterators.

A table, a batch or a list of them is re-readable, so its position is a row count and a
restore skips exactly that many rows. An iterator is read once; it may yield
:class:`~datum_sql.types.Watermark` markers between batches to drive event time itself.
DataFrames and other Arrow-speaking objects are made Arrow where they are registered
(:mod:`datum_sql.connectors.arrow_data`); an iterator may yield DataFrames as well.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pyarrow as pa

from datum_sql.connectors.arrow_data import as_arrow_part
from datum_sql.connectors.base import ConnectorSpec, Source, SourceItem
from datum_sql.connectors.registry import source
from datum_sql.errors import SchemaError, SourceError
from datum_sql.types import Watermark

DEFAULT_BATCH_ROWS = 65_536


def arrow_schema_of(data: Any) -> pa.Schema | None:
    """The schema the data itself tells, or None for iterators (lazy) and empty lists."""
    if isinstance(data, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
        return data.schema
    if isinstance(data, list | tuple) and data and isinstance(data[0], pa.RecordBatch | pa.Table):
        return data[0].schema
    return None


def is_replayable(data: Any) -> bool:
    return isinstance(data, pa.Table | pa.RecordBatch | list | tuple)


@source("arrow")
class ArrowSource(Source):
    """Rows of a Python-registered Arrow object (``ctx.register_arrow``)."""

    OPTIONS = {
        "batch_size": "rows per batch when a table is cut into batches (default 65536)",
        "bounded": "'true' when an iterator is finite (affects result retention only)",
    }

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        data = spec.obj
        if data is None:
            raise SourceError(
                f"arrow source {spec.name!r} has no data: register it with ctx.register_arrow()"
            )
        schema = spec.schema or arrow_schema_of(data)
        if schema is None:
            raise SchemaError(
                f"arrow source {spec.name!r}: the data does not tell its schema (an iterator or an "
                "empty list); pass schema= to register_arrow"
            )
        self._schema = schema
        self._data = data
        self._batch_rows = int(spec.options.get("batch_size", DEFAULT_BATCH_ROWS))
        bounded = spec.options.get("bounded")
        self._bounded = (
            is_replayable(data) or isinstance(data, pa.RecordBatchReader)
            if bounded is None
            else str(bounded).lower() == "true"
        )
        self._rows = 0
        self._skip = 0

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def bounded(self) -> bool:
        return self._bounded

    async def open(self, position: dict[str, Any] | None) -> None:
        self._skip = int((position or {}).get("rows", 0))
        if self._skip and not is_replayable(self._data):
            raise SourceError(
                f"arrow source {self.name!r}: an iterator cannot be rewound to row {self._skip}; "
                "register a table or a list of batches to resume from a checkpoint"
            )
        self._rows = self._skip

    def position(self) -> dict[str, Any]:
        return {"rows": self._rows}

    async def read(self) -> AsyncIterator[SourceItem]:
        skip = self._skip
        async for item in self._items():
            if isinstance(item, Watermark):
                yield item
                continue
            batch = self._conform(item)
            if skip:
                if batch.num_rows <= skip:
                    skip -= batch.num_rows
                    continue
                batch = batch.slice(skip)
                skip = 0
            if batch.num_rows == 0:
                continue
            self._rows += batch.num_rows
            yield batch

    async def _items(self) -> AsyncIterator[Any]:
        data = self._data
        if isinstance(data, pa.Table | pa.RecordBatch):
            data = [data]
        if isinstance(data, list | tuple):
            for part in data:
                for item in self._cut(part):
                    yield item
            return
        if hasattr(data, "__aiter__"):
            async for part in data:
                for item in self._cut(part):
                    yield item
            return
        it = iter(data) if isinstance(data, Iterable) else data
        sentinel = object()
        while True:
            part = await asyncio.to_thread(next, it, sentinel)
            if part is sentinel:
                return
            for item in self._cut(part):
                yield item

    def _cut(self, part: Any) -> list[Any]:
        if isinstance(part, Watermark):
            return [part]
        arrow = as_arrow_part(part, self.name, self._schema)
        if isinstance(arrow, pa.Table):
            return arrow.to_batches(max_chunksize=self._batch_rows)
        if isinstance(arrow, pa.RecordBatch):
            if arrow.num_rows > self._batch_rows:
                return [
                    arrow.slice(i, self._batch_rows)
                    for i in range(0, arrow.num_rows, self._batch_rows)
                ]
            return [arrow]
        raise SourceError(
            f"arrow source {self.name!r} received a {type(part).__name__}; expected pyarrow "
            "RecordBatch or Table, a DataFrame (pandas, polars) or datum_sql.Watermark"
        )

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if batch.schema.equals(self._schema):
            return batch
        arrays = []
        for f in self._schema:
            idx = batch.schema.get_field_index(f.name)
            if idx < 0:
                raise SchemaError(
                    f"arrow source {self.name!r}: batch has no column {f.name!r} "
                    f"(it has {', '.join(batch.schema.names)})"
                )
            col = batch.column(idx)
            if not col.type.equals(f.type):
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(
                        f"arrow source {self.name!r}: column {f.name!r} is {col.type}, "
                        f"declared {f.type}: {exc}"
                    ) from exc
            arrays.append(col)
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)
