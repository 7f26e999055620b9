"""Binding ``process(table, 'function', key => column [, time => column])`` in FROM.

A keyed process function's output is a table: the key columns, then the columns the
function declared. The binder needs that signature to qualify the SELECT reading it, so
registration declares it here (:func:`declare`); the handler itself lives with the engine.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from datum_sql.catalog import SourceEntry
from datum_sql.errors import PlanError
from datum_sql.sql import statements as st
from datum_sql.sql.types import sql_type

if TYPE_CHECKING:
    from datum_sql.sql.analyze import Binder

PROCESS = "process"
USAGE = "process(table, 'function', key => column [, time => column])"
#: ``node.meta`` key of a bound process() FROM item: its :class:`ProcessCall`.
META = "process"


@dataclass(frozen=True)
class ProcessSignature:
    """What a registered process function returns: ``output`` columns (after the key's),
    the one of them carrying event time (if any)."""

    name: str
    output: pa.Schema
    time: str | None


@dataclass(frozen=True)
class ProcessCall:
    """A bound ``process(...)``: the function, its input table, key and time columns, and
    the name its result takes in a batch query."""

    function: str
    #: The source table read; None for a subquery (the call's first argument).
    table: str | None
    keys: tuple[str, ...]
    #: None: the subquery's event-time column, which the planner finds.
    time_column: str | None
    batch_name: str


_signatures: dict[str, ProcessSignature] = {}
_lock = threading.Lock()
_batch_names = itertools.count(1)


def declare(signature: ProcessSignature) -> None:
    with _lock:
        _signatures[signature.name] = signature


def signature(name: str) -> ProcessSignature | None:
    with _lock:
        return _signatures.get(name)


def bind_process(binder: Binder, table: exp.Table, fn: exp.Anonymous) -> st.Relation:
    """The relation of ``process(...)``; ``table`` is annotated with its :class:`ProcessCall`."""
    args = list(fn.expressions)
    positional = [a for a in args if not isinstance(a, exp.Kwarg)]
    named: dict[str, exp.Expr] = {}
    for a in args:
        if isinstance(a, exp.Kwarg):
            word = a.this.name.lower()
            if word not in ("key", "time") or word in named:
                raise binder._err(a, f"process() takes key => and time => once each: {USAGE}")
            named[word] = a.expression
    if len(positional) != 2 or not (
        isinstance(positional[1], exp.Literal) and positional[1].is_string
    ):
        raise binder._err(fn, f"process() takes a table and a function name: {USAGE}")
    name = positional[1].this.lower()
    with _lock:
        signature = _signatures.get(name)
        known = sorted(_signatures)
    if signature is None:
        hint = f"registered: {', '.join(known)}" if known else "none is registered"
        raise binder._err(
            positional[1],
            f"unknown process function {name!r} ({hint}); register it with "
            "ctx.register_process_function or @datum_sql.process_function",
        )
    source = positional[0]
    if isinstance(source, exp.Subquery):
        rel = _derived_input(binder, source)
    elif isinstance(source, exp.Column) and not source.table:
        rel = binder._table_relation(source, source.name, source.name.lower())
        if not isinstance(rel.entry, SourceEntry) and not binder.batch:
            raise binder._err(
                source, f"process() reads a source or a subquery; {source.name!r} is a {rel.kind}"
            )
    else:
        raise binder._err(
            source, f"process() reads a table by name or a subquery (SELECT ...): {USAGE}"
        )
    keys = _key_columns(binder, named.get("key"), rel, fn)
    time = _time_column(binder, named.get("time"), rel, source)
    alias = _alias(table) or name
    columns = [*keys, *signature.output.names]
    clash = sorted({c for c in signature.output.names if c in keys})
    if clash:
        raise binder._err(
            fn,
            f"process function {name!r} outputs {clash}, also its key column(s): the key "
            "columns come first in its result; rename the output column",
        )
    # a subquery's key types are known to the planner (and to a batch query once it ran)
    types = {k: rel.types[k] for k in keys if k in rel.types}
    types |= {f.name: f.type for f in signature.output}
    out = st.Relation(alias=alias, kind="process", columns=columns, types=types)
    table_name = rel.entry.name if rel.entry is not None else None
    call = ProcessCall(name, table_name, tuple(keys), time, f"__process_{next(_batch_names)}")
    if table_name is not None:
        input_table = exp.Table(this=exp.to_identifier(table_name))
        input_table.meta["relation"] = rel
        source.replace(input_table)
    table.meta["relation"] = out
    table.meta[META] = call
    table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    return out


def _derived_input(binder: Binder, node: exp.Subquery) -> st.Relation:
    columns = binder._bind_query_node(node.this)
    binder._subqueries += 1
    alias = f"subquery_{binder._subqueries}"
    node.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    rel = st.Relation(alias=alias, kind="subquery", columns=columns)
    node.meta["relation"] = rel
    return rel


def _key_columns(
    binder: Binder, node: exp.Expr | None, rel: st.Relation, fn: exp.Expr
) -> list[str]:
    if node is None:
        raise binder._err(fn, f"process() needs the key: {USAGE}")
    parts = node.expressions if isinstance(node, exp.Tuple) else [node]
    keys: list[str] = []
    for part in parts:
        if not isinstance(part, exp.Column) or part.table:
            raise binder._err(part, "process(): key => names columns of the table: key => (a, b)")
        if part.name not in rel.columns:
            raise binder._unknown_column(part, part.name, rel.columns)
        t = rel.types.get(part.name)
        if t is not None and not key_type(t):
            raise binder._err(part, key_type_error(part.name, t))
        keys.append(part.name)
    return keys


def key_type(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` can key a process function (ordered, exact)."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
    )


def key_type_error(column: str, t: pa.DataType) -> str:
    return (
        f"process(): key column {column!r} is {t}; a key is an integer, text, boolean, date, "
        "timestamp or decimal column (cast it)"
    )


def _time_column(
    binder: Binder, node: exp.Expr | None, rel: st.Relation, source: exp.Expr
) -> str | None:
    entry = rel.entry
    if node is None:
        if rel.kind == "subquery":
            return None  # the planner finds the subquery's event-time column
        event_time = entry.event_time if isinstance(entry, SourceEntry) else None
        if event_time is None:
            raise binder._err(
                source,
                f"process(): {rel.alias!r} has no event time, which orders each key's rows "
                "and fires its timers; declare WATERMARK FOR in CREATE SOURCE (event_time= "
                "in Python), or name the column: time => column",
            )
        return event_time
    if not isinstance(node, exp.Column) or node.table:
        raise binder._err(node, "process(): time => names a TIMESTAMP column of the table")
    if node.name not in rel.columns:
        raise binder._unknown_column(node, node.name, rel.columns)
    t = rel.types.get(node.name)
    if t is not None and not pa.types.is_timestamp(t):
        raise binder._err(node, f"process(): time column {node.name!r} must be a TIMESTAMP, is {t}")
    return node.name


def _alias(table: exp.Table) -> str | None:
    alias = table.args.get("alias")
    return alias.name if alias is not None and alias.name else None


def batch_table(table: exp.Table) -> tuple[str, pa.Schema] | None:
    """For a bound process() FROM item: the name and schema its result has in a batch
    query (the engine computes it first); None for any other FROM item."""
    call: ProcessCall | None = table.meta.get(META)
    rel = table.meta.get("relation")
    if call is None or rel is None or any(c not in rel.types for c in rel.columns):
        return None
    return call.batch_name, pa.schema([(c, rel.types[c]) for c in rel.columns])


def process_calls(ast: exp.Expr) -> list[ProcessCall]:
    """The process() calls of a bound query, in order."""
    return [t.meta[META] for t in ast.find_all(exp.Table) if META in t.meta]


def input_tables(ast: exp.Expr) -> list[str]:
    """The tables the process() calls of an unbound query read."""
    return [
        fn.expressions[0].name
        for fn in ast.find_all(exp.Anonymous)
        if fn.name.lower() == PROCESS
        and fn.expressions
        and isinstance(fn.expressions[0], exp.Column)
    ]


def batch_placeholder(table: exp.Table) -> exp.Expr | None:
    """A process() over a subquery whose key types are not known yet, as a query of its
    result's columns and no rows (the key columns come from the subquery), so that the
    query around it can be type-checked; None for any other FROM item."""
    call: ProcessCall | None = table.meta.get(META)
    rel = table.meta.get("relation")
    source = table.this.expressions[0] if isinstance(table.this, exp.Anonymous) else None
    if call is None or rel is None or not isinstance(source, exp.Subquery):
        return None
    keys = [exp.column(k, quoted=True) for k in call.keys]
    outputs = [
        exp.alias_(exp.cast(exp.null(), sql_type(rel.types[c])), c, quoted=True)
        for c in rel.columns[len(call.keys) :]
    ]
    select = exp.select(*keys, *outputs).from_(source, copy=False).where(exp.false(), copy=False)
    return exp.Subquery(this=select, alias=table.args.get("alias"))


def subquery_time(schema: pa.Schema) -> str:
    """The time column of process() over a subquery without ``time =>``: its one TIMESTAMP
    column (streaming and batch pick it alike)."""
    timed = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    if len(timed) != 1:
        found = f"it has {', '.join(timed)}" if timed else "it has none"
        raise PlanError(
            "process() over a subquery: name the column that orders its rows with "
            f"time => column (without it, the subquery's one TIMESTAMP column; {found})"
        )
    return timed[0]
