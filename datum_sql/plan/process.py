"""Planning ``process(table, 'function', key => ..., time => ...)``: a keyed process
function over a stream (see :mod:`datum_sql.engine.operators.process`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.sql import statements as st
from datum_sql.sql.process import (
    META,
    ProcessCall,
    key_type,
    key_type_error,
    signature,
    subquery_time,
)


@dataclass(frozen=True)
class Process(lp.PlanNode):
    """Each key's rows and timers through a registered handler, in event-time order once
    the watermark passes them; output: the key columns, then the function's columns."""

    input: lp.PlanNode
    function: str
    keys: tuple[str, ...]
    time_column: str
    out_schema: pa.Schema
    #: The output column carrying event time (bounded by the input's watermark), if any.
    out_time: str | None = None

    def __post_init__(self) -> None:
        if self.input.updating:
            raise PlanError(
                f"process(..., '{self.function}', ...) reads append-only rows; its input is a "
                "changelog (an aggregate's result)"
            )

    @property
    def children(self) -> tuple[lp.PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.out_schema

    @property
    def time_lags(self) -> dict[str, int]:
        return {self.out_time: 0} if self.out_time else {}

    def label(self) -> str:
        return f"Process({self.function}, keys=[{', '.join(self.keys)}], time={self.time_column})"

    def lower_config(self) -> dict[str, Any]:
        return {"function": self.function, "keys": list(self.keys), "time_column": self.time_column}


def plan_process(node: exp.Expr, plan_input: Callable[[exp.Expr], lp.PlanNode]) -> Process:
    """The Process node of a bound process() FROM item; ``plan_input`` plans its input."""
    call: ProcessCall = node.meta[META]
    rel: st.Relation = node.meta["relation"]
    found = signature(call.function)
    if found is None:
        raise PlanError(f"process function {call.function!r} is no longer registered")
    source = node.this.expressions[0]
    upstream = plan_input(source)
    what = call.table or "its subquery"
    time = call.time_column or subquery_time(upstream.schema)
    if not pa.types.is_timestamp(upstream.schema.field(time).type):
        raise PlanError(
            f"process(): time column {time!r} must be a TIMESTAMP, is "
            f"{upstream.schema.field(time).type}"
        )
    if time not in upstream.time_lags:
        raise PlanError(
            f"process(): {what}'s column {time!r} carries no watermark, which decides when "
            "each key's rows are final and its timers fire; use a column that carries event "
            "time (the source's event-time column, passed through)"
        )
    for k in call.keys:
        if not key_type(upstream.schema.field(k).type):
            raise PlanError(key_type_error(k, upstream.schema.field(k).type))
    upstream = lp.lagged(upstream, time)
    fields = [upstream.schema.field(k) for k in call.keys]
    fields += [pa.field(c, rel.types[c]) for c in rel.columns[len(call.keys) :]]
    return Process(upstream, call.function, call.keys, time, pa.schema(fields), found.time)
