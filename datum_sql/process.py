"""Registering keyed process functions: ``ctx.register_process_function``,
``@datum_sql.process_function``, and in SQL scripts ``CREATE FUNCTION name LANGUAGE python
AS 'module:handler'`` naming a handler declared with the decorator.

A declaration that can be wrong without running the handler (a name, a type, the time
column, the limits) is a PlanError here, at registration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import pyarrow as pa
import sqlglot
from sqlglot import exp

from datum_sql import functions
from datum_sql.engine import process
from datum_sql.engine.process import Activation, ProcessLimits, ProcessResponse
from datum_sql.errors import PlanError, SqlError
from datum_sql.sql.process import ProcessSignature, declare
from datum_sql.sql.types import arrow_type

__all__ = ["Activation", "ProcessLimits", "ProcessResponse", "process_function"]

_NAME = re.compile(r"[a-z_][a-z0-9_]*")
#: What ``@process_function`` sets on a handler: its declaration, for CREATE FUNCTION.
DECLARATION = "__datum_process_function__"


def register_process_function(
    name: str,
    handler: Callable[[Activation], ProcessResponse],
    *,
    output: Mapping[str, Any],
    state: Mapping[str, Any] | None = None,
    time: str | None = None,
    limits: ProcessLimits | Mapping[str, int] | None = None,
) -> process.ProcessFunction:
    """Check and register ``handler`` as the process function ``name``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name.lower()):
        raise PlanError(f"process function name {name!r} must be a plain identifier")
    name = name.lower()
    if not callable(handler):
        raise PlanError(f"process function {name}: handler must be callable")
    out = _schema(name, output, "output")
    if not len(out):
        raise PlanError(f"process function {name}: output must declare at least one column")
    held = _schema(name, state or {}, "state")
    if time is not None:
        if time not in out.names:
            raise PlanError(
                f"process function {name}: time={time!r} is not an output column ({out.names})"
            )
        if not pa.types.is_timestamp(out.field(time).type):
            raise PlanError(
                f"process function {name}: time column {time!r} must be a TIMESTAMP, "
                f"is {out.field(time).type}"
            )
    if limits is None:
        limits = ProcessLimits()
    elif isinstance(limits, Mapping):
        try:
            limits = ProcessLimits(**limits)
        except (TypeError, ValueError) as exc:
            raise PlanError(f"process function {name}: limits: {exc}") from None
    elif not isinstance(limits, ProcessLimits):
        raise PlanError(f"process function {name}: limits must be a ProcessLimits or a dict")
    fn = process.ProcessFunction(name, handler, held, out, time, limits)
    process.register(fn)
    declare(ProcessSignature(name, out, time))
    return fn


def process_function(
    *,
    output: Mapping[str, Any],
    state: Mapping[str, Any] | None = None,
    time: str | None = None,
    limits: ProcessLimits | Mapping[str, int] | None = None,
    name: str | None = None,
) -> Callable[[Callable[[Activation], ProcessResponse]], Callable[[Activation], ProcessResponse]]:
    """Decorator: register the handler (under its own name unless ``name``)."""

    def decorate(
        handler: Callable[[Activation], ProcessResponse],
    ) -> Callable[[Activation], ProcessResponse]:
        fn = register_process_function(
            name or handler.__name__, handler, output=output, state=state, time=time, limits=limits
        )
        setattr(handler, DECLARATION, fn)
        return handler

    return decorate


def _schema(name: str, columns: Mapping[str, Any], what: str) -> pa.Schema:
    if not isinstance(columns, Mapping):
        raise PlanError(f"process function {name}: {what} must be a dict of name -> type")
    fields = []
    for col, t in columns.items():
        if not isinstance(col, str) or not col:
            raise PlanError(f"process function {name}: {what} names must be strings, got {col!r}")
        fields.append(pa.field(col, _type(name, t, f"{what} {col!r}")))
    return pa.schema(fields)


def _type(name: str, t: Any, what: str) -> pa.DataType:
    if isinstance(t, pa.DataType):
        return t
    if not isinstance(t, str):
        raise PlanError(
            f"process function {name}: the type of {what} must be a SQL type name or a "
            f"pyarrow type, got {type(t).__name__}"
        )
    try:
        return arrow_type(exp.DataType.build(t, dialect="postgres"))
    except (sqlglot.errors.SqlglotError, ValueError, SqlError):
        raise PlanError(f"process function {name}: unknown type {t!r} for {what}") from None


def is_create_process_function(node: exp.Expr) -> TypeGuard[exp.Create]:
    """``CREATE FUNCTION name LANGUAGE python AS 'module:handler'``: no arguments and no
    RETURNS, which a scalar function declares."""
    if not functions.is_create_function(node):
        return False
    props = (node.args.get("properties") or exp.Properties()).expressions
    target = node.this
    bare = isinstance(target, exp.Table) or (
        isinstance(target, exp.UserDefinedFunction) and not target.expressions
    )
    return bare and not any(isinstance(p, exp.ReturnsProperty) for p in props)


def create_process_function(node: exp.Create) -> process.ProcessFunction:
    """Register, under the statement's name, the handler it names (declared in its module
    with ``@datum_sql.process_function``)."""
    target = node.this
    name = target.this.name if isinstance(target.this, exp.Table) else target.name
    body = node.args.get("expression")
    handler = functions.python_object(body, f"CREATE FUNCTION {name}")
    assert isinstance(body, exp.Literal)  # python_object refused anything else
    declared: process.ProcessFunction | None = getattr(handler, DECLARATION, None)
    if declared is None:
        raise PlanError(
            f"CREATE FUNCTION {name}: {body.this} is not a process function; declare it with "
            "@datum_sql.process_function(state=..., output=...), or give a scalar function "
            "its argument types and RETURNS"
        )
    return register_process_function(
        name, declared.handler, output=dict(zip(declared.output.names, declared.output.types)),
        state=dict(zip(declared.state.names, declared.state.types)), time=declared.time,
        limits=declared.limits,
    )  # fmt: skip
