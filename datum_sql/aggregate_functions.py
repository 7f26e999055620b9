"""Registering aggregate Python functions for SQL: ``ctx.register_udaf``,
``@datum_sql.udaf`` and ``CREATE AGGREGATE FUNCTION ... LANGUAGE python AS 'module:Class'``.

Everything that can be wrong without running the function is a PlanError here, at
registration: the name, a type name, the declared state and its initial values, a missing
method or one that cannot take the arguments the engine passes. A call with the wrong
number or types of arguments is one at planning.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import pyarrow as pa
from sqlglot import exp

from datum_sql import functions
from datum_sql.engine import udafs, udfs
from datum_sql.engine.udfs import UdfFailure
from datum_sql.errors import PlanError
from datum_sql.sql.dialect import AggregateProperty, register_aggregate

#: What each method takes besides the arguments of the SQL call (``args``).
_PARAMETERS = {"accumulate": "state, *args", "merge": "state, other", "finish": "state",
               "retract": "state, *args"}  # fmt: skip


def register_udaf(
    name: str,
    impl: Any,
    input_types: Sequence[Any],
    return_type: Any,
    state: Any = None,
    initial: Mapping[str, Any] | None = None,
) -> udafs.AggregateUdf:
    """Check and register ``impl`` (an object or a class with accumulate/merge/finish) as
    the SQL aggregate function ``name``."""
    if not isinstance(name, str) or not functions._NAME.fullmatch(name.lower()):
        raise PlanError(f"function name {name!r} must be a plain identifier ([a-z_][a-z0-9_]*)")
    name = name.lower()
    if name in udfs.registered():
        raise PlanError(
            f"function {name}() is registered as a scalar function; choose another name"
        )
    if name not in udafs.registered() and (
        not functions._plain_call(name) or name in udfs.builtin_names()
    ):
        raise PlanError(f"function {name}() is a built-in SQL function; choose another name")
    if isinstance(impl, type):
        try:
            impl = impl()
        except Exception as exc:
            raise PlanError(
                f"aggregate function {name}(): cannot create {impl.__name__}() without "
                f"arguments: {type(exc).__name__}: {exc}"
            ) from None
    if isinstance(input_types, str | pa.DataType) or not input_types:
        raise PlanError(
            f"aggregate function {name}(): input_types must be a list of types, one per "
            "argument (at least one)"
        )
    inputs = tuple(functions._type(name, t, f"argument {i + 1}") for i, t in enumerate(input_types))
    fields = _state(name, state if state is not None else getattr(impl, "state", None))
    start = _initial(
        name, fields, initial if initial is not None else getattr(impl, "initial", None)
    )
    for method in (*udafs.METHODS, "retract"):
        _check_method(name, impl, method, len(inputs))
    udaf = udafs.AggregateUdf(
        name, impl, inputs, functions._type(name, return_type, "return type"), fields, start
    )
    udafs.register(udaf)
    register_aggregate(name)
    return udaf


def udaf(
    input_types: Sequence[Any],
    return_type: Any,
    *,
    state: Any = None,
    initial: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> Any:
    """Class decorator: register the class (under its own name unless ``name``) for SQL."""

    def decorate(cls: Any) -> Any:
        register_udaf(name or cls.__name__, cls, input_types, return_type, state, initial)
        return cls

    return decorate


def is_create_aggregate(node: exp.Expr) -> TypeGuard[exp.Create]:
    """``CREATE AGGREGATE FUNCTION ...``."""
    props = node.args.get("properties") if isinstance(node, exp.Create) else None
    return props is not None and any(isinstance(p, AggregateProperty) for p in props.expressions)


def create_aggregate(node: exp.Create) -> udafs.AggregateUdf:
    """``CREATE AGGREGATE FUNCTION name(arg TYPE, ...) RETURNS TYPE LANGUAGE python AS
    'module:Class'``: the class declares its ``state`` (and ``initial``)."""
    target = node.this
    name = target.this.name if isinstance(target.this, exp.Table) else target.name
    if (node.args.get("kind") or "").upper() != "FUNCTION":
        raise PlanError("AGGREGATE goes with FUNCTION: CREATE AGGREGATE FUNCTION name(...) ...")
    props = {type(p): p for p in node.args["properties"].expressions}
    language = props.get(exp.LanguageProperty)
    if language is None or language.name.lower() != "python":
        raise PlanError(f"CREATE AGGREGATE FUNCTION {name}: only LANGUAGE python is supported")
    returns = props.get(exp.ReturnsProperty)
    if returns is None or not isinstance(returns.this, exp.DataType):
        raise PlanError(f"CREATE AGGREGATE FUNCTION {name}: RETURNS <type> is required")
    statement = f"CREATE AGGREGATE FUNCTION {name}"
    impl = functions.python_object(node.args.get("expression"), statement, what="class")
    args = [a.args.get("kind") for a in target.expressions]
    if any(not isinstance(a, exp.DataType) for a in args):
        raise PlanError(f"CREATE AGGREGATE FUNCTION {name}: every argument needs a type: name TYPE")
    return register_udaf(name, impl, args, returns.this)


def _state(name: str, state: Any) -> tuple[pa.Field, ...]:
    """The declared state: a mapping of field name to type, (name, type) pairs or a schema."""
    if state is None:
        raise PlanError(
            f"aggregate function {name}(): declare its state, e.g. state={{'total': 'DOUBLE', "
            "'n': 'BIGINT'}} (or a `state` attribute of the class)"
        )
    if isinstance(state, pa.Schema):
        pairs = [(f.name, f.type) for f in state]
    elif isinstance(state, Mapping):
        pairs = list(state.items())
    else:
        try:
            pairs = [(k, v) for k, v in state]
        except (TypeError, ValueError):
            raise PlanError(
                f"aggregate function {name}(): state must map field names to types, got "
                f"{type(state).__name__}"
            ) from None
    if not pairs:
        raise PlanError(f"aggregate function {name}(): the state needs at least one field")
    names = [str(k) for k, _ in pairs]
    if len(set(names)) != len(names):
        raise PlanError(f"aggregate function {name}(): state fields {names} repeat a name")
    return tuple(pa.field(str(k), functions._type(name, t, f"state field {k!r}")) for k, t in pairs)


def _initial(name: str, fields: tuple[pa.Field, ...], initial: Any) -> tuple[Any, ...]:
    """Each state field's starting value (NULL unless ``initial`` gives one), checked."""
    given = dict(initial or {})
    unknown = sorted(set(given) - {f.name for f in fields})
    if unknown:
        raise PlanError(
            f"aggregate function {name}(): initial names {unknown}, which are not state fields "
            f"({[f.name for f in fields]})"
        )
    out = []
    for f in fields:
        value = given.get(f.name)
        try:
            out.append(udafs.checked([value], f.type, name, f"initial {f.name!r} is")[0].as_py())
        except UdfFailure as failure:
            raise PlanError(f"aggregate {failure}") from None
    return tuple(out)


def _check_method(name: str, impl: Any, method: str, n_args: int) -> None:
    fn = getattr(impl, method, None)
    if fn is None and method == "retract":
        return
    expects = _PARAMETERS[method]
    if not callable(fn):
        raise PlanError(
            f"aggregate function {name}(): {type(impl).__name__} has no method {method}({expects})"
        )
    count = {"accumulate": 1 + n_args, "retract": 1 + n_args, "merge": 2, "finish": 1}[method]
    try:
        inspect.signature(fn).bind(*([None] * count))
    except TypeError:
        raise PlanError(
            f"aggregate function {name}(): {method}() must take ({expects}) — "
            f"{count} positional parameters for a function of {n_args} argument(s)"
        ) from None
    except ValueError:  # no signature to inspect (a builtin): trust it
        return
