"""Registering scalar Python functions for SQL: ``ctx.register_udf``, ``@datum_sql.udf`` and
``CREATE FUNCTION ... LANGUAGE python AS 'module:function'``.

Everything about a function that can be wrong without running it (a type name, the
volatility, the target of CREATE FUNCTION, a name that is a built-in) is a PlanError here, at
registration; a call with the wrong number or types of arguments is one at planning.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from datum_sql.engine import udafs, udfs
from datum_sql.errors import PlanError, SqlError
from datum_sql.sql.parse import parse_one
from datum_sql.sql.types import arrow_type

TypeLike = Any  # a pyarrow.DataType or a SQL type name
_NAME = re.compile(r"[a-z_][a-z0-9_]*")
#: Functions whose value changes from one run to the next: a query writing to an
#: exactly-once sink cannot call them (a replay after a failure would write other rows).
VOLATILE_BUILTINS = ("now", "random", "current_timestamp", "uuid", "current_time", "current_date")


def register_udf(
    name: str,
    fn: Callable[..., Any],
    input_types: Sequence[TypeLike],
    return_type: TypeLike,
    volatility: str = "immutable",
) -> udfs.ScalarUdf:
    """Check and register ``fn`` as the SQL function ``name``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name.lower()):
        raise PlanError(f"function name {name!r} must be a plain identifier ([a-z_][a-z0-9_]*)")
    name = name.lower()
    if not callable(fn):
        raise PlanError(f"function {name}(): fn must be callable, got {type(fn).__name__}")
    if volatility not in udfs.VOLATILITIES:
        raise PlanError(
            f"function {name}(): unknown volatility {volatility!r}; "
            f"use one of {', '.join(udfs.VOLATILITIES)}"
        )
    if name in udafs.registered():
        raise PlanError(
            f"function {name}() is registered as an aggregate function; choose another name"
        )
    if not _plain_call(name) or (name in udfs.builtin_names() and name not in udfs.registered()):
        raise PlanError(f"function {name}() is a built-in SQL function; choose another name")
    if isinstance(input_types, str | pa.DataType):
        raise PlanError(f"function {name}(): input_types must be a list of types, one per argument")
    inputs = tuple(_type(name, t, f"argument {i + 1}") for i, t in enumerate(input_types))
    udf = udfs.ScalarUdf(name, fn, inputs, _type(name, return_type, "return type"), volatility)
    udfs.register(udf)
    return udf


def udf(
    input_types: Sequence[TypeLike],
    return_type: TypeLike,
    *,
    name: str | None = None,
    volatility: str = "immutable",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the function (under its own name unless ``name``) for SQL."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        register_udf(name or fn.__name__, fn, input_types, return_type, volatility)
        return fn

    return decorate


def create_function(node: exp.Create) -> Any:
    """``CREATE FUNCTION name(arg TYPE, ...) RETURNS TYPE LANGUAGE python AS 'module:function'``
    (``RETURNS TABLE (col TYPE, ...)``: a table function, see :mod:`datum_sql.table_functions`)."""
    target = node.this
    name = target.this.name if isinstance(target.this, exp.Table) else target.name
    props = {type(p): p for p in (node.args.get("properties") or exp.Properties()).expressions}
    language = props.get(exp.LanguageProperty)
    if language is None or language.name.lower() != "python":
        raise PlanError(f"CREATE FUNCTION {name}: only LANGUAGE python is supported")
    returns = props.get(exp.ReturnsProperty)
    if returns is not None and returns.args.get("is_table"):
        from datum_sql.table_functions import create_table_function

        return create_table_function(node, name, returns)
    if returns is None or not isinstance(returns.this, exp.DataType):
        raise PlanError(f"CREATE FUNCTION {name}: RETURNS <type> is required")
    fn = python_object(node.args.get("expression"), f"CREATE FUNCTION {name}")
    args = [a.args.get("kind") for a in target.expressions]
    if any(not isinstance(a, exp.DataType) for a in args):
        raise PlanError(f"CREATE FUNCTION {name}: every argument needs a type: name TYPE")
    volatility = "immutable"
    for p in props.values():
        if isinstance(p, exp.StabilityProperty):
            volatility = p.name.lower()
    return register_udf(name, fn, args, returns.this, volatility)


def python_object(body: exp.Expr | None, statement: str, what: str = "function") -> Any:
    """The Python object a CREATE statement's ``AS 'module:attr'`` names, imported."""
    form = "module:Class" if what == "class" else "module:function"
    if not (isinstance(body, exp.Literal) and body.is_string and ":" in body.this):
        raise PlanError(f"{statement}: AS '{form}' names the Python {what}")
    module_name, _, attr = body.this.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        raise PlanError(f"{statement}: cannot import module {module_name!r}: {exc}") from None
    except AttributeError:
        raise PlanError(f"{statement}: module {module_name!r} has no {what} {attr!r}") from None


def is_create_function(node: exp.Expr) -> TypeGuard[exp.Create]:
    return isinstance(node, exp.Create) and (node.args.get("kind") or "").upper() == "FUNCTION"


def volatile_calls(ast: exp.Expr) -> list[str]:
    """The volatile functions ``ast`` calls (registered volatile UDFs, now(), random(), ...)."""
    volatile = {n for n, f in udfs.registered().items() if f.volatility == "volatile"}
    found: list[str] = []
    for fn in ast.find_all(exp.Func):
        fname = (fn.name if isinstance(fn, exp.Anonymous) else fn.sql_name()).lower()
        if fname in ("currenttimestamp", "currentdate", "currenttime", "rand"):
            fname = {"rand": "random"}.get(fname, fname.replace("current", "current_"))
        if (fname in volatile or fname in VOLATILE_BUILTINS) and fname not in found:
            found.append(fname)
    return found


def udf_calls(ast: exp.Expr) -> list[str]:
    """The registered Python functions (scalar and aggregate) ``ast`` calls, in order of
    appearance."""
    known = {*udfs.registered(), *udafs.registered()}
    names = [fn.name.lower() for fn in ast.find_all(exp.Anonymous, exp.AnonymousAggFunc)]
    return list(dict.fromkeys(n for n in names if n in known))


def _plain_call(name: str) -> bool:
    """Whether ``name(...)`` parses as a call of an unknown function (not a built-in SQL
    construct, such as ``explode`` for UNNEST)."""
    try:
        call = parse_one(f"SELECT {name}(1)")
    except SqlError:
        return False
    return isinstance(call, exp.Select) and isinstance(call.expressions[0], exp.Anonymous)


def _type(name: str, t: Any, what: str) -> pa.DataType:
    if isinstance(t, pa.DataType):
        return t
    if isinstance(t, exp.DataType):
        dtype = t
    elif isinstance(t, str):
        try:
            dtype = exp.DataType.build(t, dialect="postgres")
        except (ParseError, ValueError, sqlglot.errors.SqlglotError):
            raise PlanError(f"function {name}(): unknown type {t!r} for the {what}") from None
    else:
        raise PlanError(
            f"function {name}(): the {what} must be a pyarrow type or a SQL type name, "
            f"got {type(t).__name__}"
        )
    try:
        return arrow_type(dtype)
    except SqlError:
        raise PlanError(f"function {name}(): unknown type {t!r} for the {what}") from None
