"""Lateral: a Python table function called on every batch, each input row repeated for
the output rows it yields."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine import udtfs
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.udfs import UdfFailure
from datum_sql.errors import PlanError, QueryFailed


@register("lateral_table_function")
class LateralTableFunction(Operator):
    """Calls table function ``config["function"]`` once per batch with the batch's
    ``config["arguments"]`` columns (cast to the declared types) and emits, for each output
    row, the ``config["passed"]`` columns of the input row its ``input_row`` names followed
    by its ``config["outputs"]``; with ``config["outer"]``, an input row it yields nothing
    for once, its outputs NULL.

    State: none. On a watermark: nothing (every row is emitted with the batch it came in,
    carrying its input row's time columns). A failure of the function, or output that does
    not match its declaration, fails the query naming the function and this operator.
    """

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        try:
            self._fn = udtfs.lookup(config["function"])
        except KeyError:
            raise PlanError(
                f"table function {config['function']}() is not registered in this process; "
                "register it (ctx.register_table_function, or CREATE FUNCTION) before "
                "starting the query"
            ) from None
        self._schema: pa.Schema = config["schema"]
        self._args = [inputs[0].get_field_index(a) for a in config["arguments"]]
        self._passed = [inputs[0].get_field_index(src) for src, _ in config["passed"]]
        self._outputs = [f for f, _ in config["outputs"]]
        self._outer = bool(config.get("outer"))

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        fn = self._fn
        try:
            args = [
                batch.column(i).cast(t) for i, t in zip(self._args, fn.input_types, strict=True)
            ]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise QueryFailed(
                f"table function {fn.name}(): an argument does not fit its declared type: {exc}",
                operator=self.name,
            ) from exc
        try:
            index, out = fn.expand(args, n)
        except UdfFailure as failure:
            raise QueryFailed(f"table {failure}", operator=self.name) from failure
        rows = batch.select(self._passed).take(index)
        columns = [*rows.columns, *(out.column(f).combine_chunks() for f in self._outputs)]
        if self._outer:
            kept = np.ones(n, dtype=bool)
            kept[index.to_numpy(zero_copy_only=False)] = False
            if kept.any():
                empty = batch.select(self._passed).filter(pa.array(kept))
                extra = [pa.nulls(empty.num_rows, out.schema.field(f).type) for f in self._outputs]
                columns = [
                    pa.concat_arrays([a, b])
                    for a, b in zip(columns, [*empty.columns, *extra], strict=True)
                ]
        result = pa.RecordBatch.from_arrays(columns, schema=self._schema)
        return [result] if result.num_rows else []
