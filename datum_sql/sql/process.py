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
from datum_sql.sql import statements as st

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
    table: str
    keys: tuple[str, ...]
    time_column: str
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
    if not isinstance(source, exp.Column) or source.table:
        raise binder._err(
            source,
            "process() reads a source table by name; filter or reshape its output in the "
            "SELECT around it",
        )
    rel = binder._table_relation(source, source.name, source.name.lower())
    if not isinstance(rel.entry, SourceEntry) and not binder.batch:
        raise binder._err(source, f"process() reads a source; {source.name!r} is a {rel.kind}")
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
    types = {k: rel.types[k] for k in keys} | {f.name: f.type for f in signature.output}
    out = st.Relation(alias=alias, kind="process", columns=columns, types=types)
    assert rel.entry is not None
    call = ProcessCall(name, rel.entry.name, tuple(keys), time, f"__process_{next(_batch_names)}")
    input_table = exp.Table(this=exp.to_identifier(rel.entry.name))
    input_table.meta["relation"] = rel
    source.replace(input_table)
    table.meta["relation"] = out
    table.meta[META] = call
    table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    return out


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
        t = rel.types[part.name]
        if not (
            pa.types.is_integer(t)
            or pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_boolean(t)
            or pa.types.is_temporal(t)
            or pa.types.is_decimal(t)
        ):
            raise binder._err(
                part,
                f"process(): key column {part.name!r} is {t}; a key is an integer, text, "
                "boolean, date, timestamp or decimal column (cast it)",
            )
        keys.append(part.name)
    return keys


def _time_column(binder: Binder, node: exp.Expr | None, rel: st.Relation, source: exp.Expr) -> str:
    entry = rel.entry
    if node is None:
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
    if not pa.types.is_timestamp(rel.types[node.name]):
        raise binder._err(
            node,
            f"process(): time column {node.name!r} must be a TIMESTAMP, is {rel.types[node.name]}",
        )
    return node.name


def _alias(table: exp.Table) -> str | None:
    alias = table.args.get("alias")
    return alias.name if alias is not None and alias.name else None


def batch_table(table: exp.Table) -> tuple[str, pa.Schema] | None:
    """For a bound process() FROM item: the name and schema its result has in a batch
    query (the engine computes it first); None for any other FROM item."""
    call: ProcessCall | None = table.meta.get(META)
    rel = table.meta.get("relation")
    if call is None or rel is None:
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
