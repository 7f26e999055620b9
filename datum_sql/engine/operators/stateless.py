"""Calc: stateless filter and projection on each batch, by kernels compiled at planning or
by DataFusion."""

from __future__ import annotations

from typing import Any

import datafusion
import pyarrow as pa

from datum_sql.engine.datafusion_errors import datafusion_message
from datum_sql.engine.expressions import Program
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.udfs import UdfFailure
from datum_sql.engine.udfs import session as udf_session
from datum_sql.errors import QueryFailed, SchemaError


@register("calc")
class Calc(Operator):
    """Runs ``config["program"]`` (kernels compiled at planning), or else ``config["sql"]``
    (which reads the table ``input``) through DataFusion, over every batch.

    State: none. On a batch: the program's rows, or the rows DataFusion returns cast to the
    planned schema (DataFusion may hand back view types for strings). A batch the program's
    kernels refuse (a zero divisor, a cast that overflows) is run through DataFusion, whose
    answer — its error, in its words — is the query's. On a watermark: nothing. A value
    DataFusion cannot evaluate (a string that is not a number, ...) fails the query naming
    ``config["query"]``, the SELECT as the user wrote it; the cause is a SchemaError.
    """

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._sql: str = config["sql"]
        self._schema: pa.Schema = config["schema"]
        self._query: str = config.get("query") or self._sql
        self._program: Program | None = config.get("program")
        self._ctx: datafusion.SessionContext | None = None
        self._failures: list[UdfFailure] = []

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        if self._program is not None:
            try:
                out = self._program.run(batch)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                return self._datafusion(batch)
            return [out] if out.num_rows else []
        return self._datafusion(batch)

    def _datafusion(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        ctx = self._ctx
        if ctx is None:
            # One partition: the engine runs a query on one core, and a batch is small
            # enough that DataFusion's repartitioning would cost more than it saves.
            session = datafusion.SessionConfig().with_target_partitions(1).with_batch_size(65_536)
            ctx = self._ctx = udf_session(session, self._failures)
        ctx.register_record_batches("input", [[batch]])
        self._failures.clear()
        try:
            out = ctx.sql(self._sql).collect()
        except Exception as exc:  # DataFusion raises plain Exception subclasses
            if self._failures:
                failure = self._failures[-1]
                raise QueryFailed(
                    f"cannot evaluate {self._query}: {failure}", operator=self.name
                ) from failure
            cause = SchemaError(datafusion_message(exc))
            raise QueryFailed(
                f"cannot evaluate {self._query}: {cause}", operator=self.name
            ) from cause
        finally:
            ctx.deregister_table("input")
        return [_conform(b, self._schema) for b in out if b.num_rows]


@register("project")
class Project(Operator):
    """Picks and renames columns (``config["columns"]``: [input, output] pairs).

    State: none. On a batch: the same arrays under their new names, no copy.
    """

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._schema: pa.Schema = config["schema"]
        self._index = [inputs[0].get_field_index(src) for src, _ in config["columns"]]

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        # select() keeps the row count even with no columns (SELECT count(*) reads none)
        picked = batch.select(self._index).rename_columns(self._schema.names)
        return [_conform(picked, self._schema)]


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema):
        return batch
    arrays = [batch.column(i).cast(f.type) for i, f in enumerate(schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
