"""Reading literal values out of the AST: intervals, option values, identifiers."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from datum_sql.errors import SqlError
from datum_sql.sql.dialect import Datum
from datum_sql.types import duration_micros, unit_micros


def interval_micros(node: exp.Expr, *, what: str) -> int:
    """Microseconds of an INTERVAL literal; SqlError pointing at it otherwise."""
    try:
        if isinstance(node, exp.Interval):
            text = node.this.name if isinstance(node.this, exp.Literal) else node.this.sql()
            unit = node.args.get("unit")
            if unit is not None:
                return round(float(text) * unit_micros(unit.name))
            return duration_micros(text)
        if isinstance(node, exp.Literal) and node.is_string:
            return duration_micros(node.this)
    except (ValueError, TypeError):
        pass
    raise error_at(
        node, f"{what} must be an INTERVAL literal such as INTERVAL '10 seconds', got {node.sql()}"
    )


def option_value(node: exp.Expr | None) -> Any:
    """The Python value of a ``WITH (key = value)`` option."""
    if node is None:
        return None
    if isinstance(node, exp.Literal):
        return (
            node.this
            if node.is_string
            else (int(node.this) if node.this.isdigit() else float(node.this))
        )
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return -option_value(node.this)
    return node.name if isinstance(node, exp.Identifier | exp.Var | exp.Column) else node.sql()


def dotted_name(node: exp.Expr) -> str:
    """``properties.bootstrap.server`` from Dot/Var/Identifier/Column/Literal nodes."""
    if isinstance(node, exp.Dot):
        return f"{dotted_name(node.this)}.{dotted_name(node.expression)}"
    if isinstance(node, exp.Column):
        return ".".join(p.name for p in node.parts)
    if isinstance(node, exp.Literal):
        return str(node.this)
    return node.name


def position_of(node: exp.Expr | None) -> tuple[int | None, int | None, str | None]:
    """(line, start column, text) of the first token under ``node`` that carries a position."""
    if node is None:
        return (None, None, None)
    for n in node.walk():
        meta = getattr(n, "_meta", None) or {}
        if "line" in meta and "col" in meta:
            text = n.name if isinstance(n, exp.Identifier) else n.sql(dialect=Datum)
            start = max(int(meta["col"]) - len(text) + 1, 1) if text else int(meta["col"])
            return (int(meta["line"]), start, node.sql(dialect=Datum) if node is not n else text)
    return (None, None, node.sql(dialect=Datum))


def error_at(node: exp.Expr | None, message: str, sql: str | None = None) -> SqlError:
    line, col, text = position_of(node)
    return SqlError(message, line=line, column=col, text=text, sql=sql)
