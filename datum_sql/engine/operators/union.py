"""UNION ALL: the batches of every input port, under one schema; and the watermark lag,
which forwards its one input's batches and holds its watermark back."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from datum_sql.engine.operators.base import Operator, register
from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME, START_OF_TIME


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


@register("watermark_lag")
class WatermarkLag(Operator):
    """Forwards every batch as it is and the watermark less ``config["lag_us"]``: a column
    whose values trail the input's watermark by up to that lag (a windowed aggregate's
    ``window_start``) is then bounded by the watermark it forwards.

    State: none. The start and the end of time (+inf at the end of input) pass unchanged.
    """

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._schema: pa.Schema = config["schema"]
        self._lag = int(config["lag_us"])
        if self._lag <= 0:
            raise PlanError(f"{name}: a watermark lag must be positive, not {self._lag}")

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        return [batch] if batch.num_rows else []

    def output_watermark(self, watermark: int) -> int:
        if watermark in (START_OF_TIME, END_OF_TIME):
            return watermark
        return max(watermark - self._lag, START_OF_TIME)
