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
from datum_sql.sql.process import META, ProcessCall, signature


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
    source = next(a for a in node.this.expressions if isinstance(a, exp.Table))
    upstream = plan_input(source)
    if call.time_column not in upstream.time_lags:
        raise PlanError(
            f"process(): {call.table}.{call.time_column} carries no watermark, which decides "
            "when each key's rows are final and its timers fire; use the source's event-time "
            "column"
        )
    upstream = lp.lagged(upstream, call.time_column)
    schema = pa.schema([(c, rel.types[c]) for c in rel.columns])
    return Process(upstream, call.function, call.keys, call.time_column, schema, found.time)
