"""Registering Python table functions for SQL: ``ctx.register_table_function``,
``@datum_sql.table_function`` and ``CREATE FUNCTION ... RETURNS TABLE (...) LANGUAGE python``.

What can be wrong without running the function (a type name, a column name, the target of
CREATE FUNCTION, a name taken by a built-in) is a PlanError here, at registration; a call
with the wrong number or types of arguments is one at planning (:mod:`datum_sql.plan.lateral`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql import functions
from datum_sql.engine import udfs, udtfs
from datum_sql.errors import PlanError
from datum_sql.sql import table_signatures
from datum_sql.sql.dialect import WINDOW_FUNCTIONS
from datum_sql.sql.process import PROCESS

OutputLike = Any  # a pyarrow.Schema, a {column: type} mapping or (column, type) pairs


def register_table_function(
    name: str,
    fn: Callable[..., Any],
    input_types: Sequence[functions.TypeLike],
    output_schema: OutputLike,
) -> udtfs.TableFunction:
    """Check and register ``fn`` as the SQL table function ``name``."""
    if not isinstance(name, str) or not functions._NAME.fullmatch(name.lower()):
        raise PlanError(f"function name {name!r} must be a plain identifier ([a-z_][a-z0-9_]*)")
    name = name.lower()
    if not callable(fn):
        raise PlanError(f"function {name}(): fn must be callable, got {type(fn).__name__}")
    taken = (*WINDOW_FUNCTIONS, PROCESS)
    if name in taken or name in udfs.registered() or not functions._plain_call(name):
        raise PlanError(f"function {name}() names a built-in or scalar function; choose another")
    if isinstance(input_types, str | pa.DataType):
        raise PlanError(f"function {name}(): input_types must be a list of types, one per argument")
    inputs = tuple(functions._type(name, t, f"argument {i + 1}") for i, t in enumerate(input_types))
    if not inputs:
        raise PlanError(
            f"function {name}(): a table function takes at least one argument (its output "
            "rows name the input row they came from); pass a constant if it needs none"
        )
    schema = _output_schema(name, output_schema)
    table_fn = udtfs.TableFunction(name, fn, inputs, schema)
    udtfs.register(table_fn)
    table_signatures.register(table_signatures.Signature(name, inputs, schema))
    return table_fn


def table_function(
    input_types: Sequence[functions.TypeLike],
    output_schema: OutputLike,
    *,
    name: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the function (under its own name unless ``name``) as a table
    function."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        register_table_function(name or fn.__name__, fn, input_types, output_schema)
        return fn

    return decorate


def create_table_function(node: exp.Create, name: str, returns: exp.ReturnsProperty) -> Any:
    """``CREATE FUNCTION name(arg TYPE, ...) RETURNS TABLE (col TYPE, ...) LANGUAGE python
    AS 'module:function'``."""
    columns = returns.this.expressions if isinstance(returns.this, exp.Schema) else []
    if not columns or any(not isinstance(c, exp.ColumnDef) for c in columns):
        raise PlanError(
            f"CREATE FUNCTION {name}: RETURNS TABLE needs its columns: (name TYPE, ...)"
        )
    output = [(c.name, c.args.get("kind")) for c in columns]
    if any(not isinstance(t, exp.DataType) for _, t in output):
        raise PlanError(f"CREATE FUNCTION {name}: every RETURNS TABLE column needs a type")
    fn = functions.python_object(node.args.get("expression"), f"CREATE FUNCTION {name}")
    args = [a.args.get("kind") for a in node.this.expressions]
    if any(not isinstance(a, exp.DataType) for a in args):
        raise PlanError(f"CREATE FUNCTION {name}: every argument needs a type: name TYPE")
    return register_table_function(name, fn, args, output)


def _output_schema(name: str, output: OutputLike) -> pa.Schema:
    if isinstance(output, pa.Schema):
        pairs = [(f.name, f.type) for f in output]
    elif isinstance(output, Mapping):
        pairs = list(output.items())
    elif isinstance(output, Sequence) and not isinstance(output, str):
        pairs = list(output)
    else:
        raise PlanError(
            f"function {name}(): output_schema must be a pyarrow.Schema, a {{column: type}} "
            f"mapping or (column, type) pairs, got {type(output).__name__}"
        )
    fields = []
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise PlanError(f"function {name}(): output column {pair!r} is not (name, type)")
        col, t = pair
        fields.append(pa.field(col, functions._type(name, t, f"output column {col!r}")))
    names = [f.name for f in fields]
    if not names:
        raise PlanError(f"function {name}(): output_schema declares no column")
    if udtfs.INPUT_ROW in names:
        raise PlanError(
            f"function {name}(): {udtfs.INPUT_ROW!r} cannot be an output column: it is the "
            "column that says which input row each output row came from"
        )
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise PlanError(f"function {name}(): output column {dup!r} is declared twice")
    return pa.schema(fields)
