"""UNION ALL: the batches of every input port, under one schema."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from datum_sql.engine.operators.base import Operator, register


@register("union")
class Union(Operator):
    """Forwards each batch of any port, its columns renamed to the planned schema.

    State: none. On a watermark: nothing (the runtime forwards the minimum of the inputs').
    """

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._schema: pa.Schema = config["schema"]

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        return [pa.RecordBatch.from_arrays(batch.columns, schema=self._schema)]
