"""``ctx.sql(sql, params=...)``: query parameters bound as literals in the parsed query.

Two spellings, one per query: named ``:name`` placeholders take a mapping, positional ``?``
(or numbered ``$1``, ``$2``) placeholders a sequence. Each value becomes a sqlglot literal
node (``NULL``, a boolean, a number, a quoted string, a ``TIMESTAMP``/``DATE`` cast, a
binary literal) in place of its placeholder, and the query text is generated from that
tree: a value is always one literal, whatever characters it holds, never SQL.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlglot import exp

from datum_sql.errors import SqlError
from datum_sql.sql.dialect import Datum
from datum_sql.sql.parse import parse_one

__all__ = ["bind_params", "literal"]

_LITERAL_TYPES = (
    type(None), bool, int, float, str, Decimal, _dt.datetime, _dt.date, bytes,
)  # fmt: skip


def literal(value: Any, *, what: str = "value") -> exp.Expr:
    """The SQL literal of a Python value; SqlError naming ``what`` for a value with none."""
    if not isinstance(value, _LITERAL_TYPES):
        raise SqlError(
            f"{what} is a {type(value).__name__}, which has no SQL literal: pass None, a bool, "
            "int, float, str, Decimal, datetime, date or bytes"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise SqlError(f"{what} is {value}, which has no SQL literal")
    return exp.convert(value)


def _key(node: exp.Expr) -> str | int | None:
    """``'name'`` for ``:name``, the 1-based number for ``$N``, None for ``?``."""
    if isinstance(node, exp.Parameter):
        return int(node.name) if node.name.isdigit() else node.name
    return None if node.args.get("jdbc") or not node.name else node.name


def bind_params(sql: str, params: Mapping[str, Any] | Sequence[Any]) -> str:
    """``sql`` (one statement) with its placeholders replaced by ``params`` as literals."""
    tree = parse_one(sql)
    holes = list(tree.find_all(exp.Placeholder, exp.Parameter))
    keys = [_key(h) for h in holes]
    named = isinstance(params, Mapping)
    if isinstance(params, str | bytes) or not (named or isinstance(params, Sequence)):
        raise SqlError(
            f"params is a {type(params).__name__}: pass a dict for :name placeholders or a "
            "list for ? placeholders",
            sql=sql,
        )
    if named:
        wrong = [k for k in keys if not isinstance(k, str)]
        if wrong:
            raise SqlError(
                "params is a dict, so the query names its placeholders (:name); it has "
                f"{len(wrong)} positional one(s) (? or $N)",
                sql=sql,
            )
        values = {str(k).lower(): v for k, v in params.items()}  # type: ignore[union-attr]
        missing = sorted({str(k) for k in keys if str(k).lower() not in values})
        if missing:
            raise SqlError(f"no value for parameter :{missing[0]} in params", sql=sql)
        unused = sorted(set(values) - {str(k).lower() for k in keys})
        if unused:
            raise SqlError(f"parameter {unused[0]!r} in params is not used by the query", sql=sql)
        bound = [literal(values[str(k).lower()], what=f"parameter :{k}") for k in keys]
    else:
        seq = list(params)
        if any(isinstance(k, str) for k in keys):
            raise SqlError(
                "params is a list, so the query's placeholders are positional (? or $N); "
                "it names one (:name): pass a dict",
                sql=sql,
            )
        numbered = [k for k in keys if isinstance(k, int)]
        if numbered and len(numbered) != len(keys):
            raise SqlError("the query mixes ? and $N placeholders: use one of them", sql=sql)
        if numbered:
            needed = max(numbered)
            picks = [k - 1 for k in numbered]
        else:
            needed = len(keys)
            picks = list(range(len(keys)))
        if len(seq) != needed or (numbered and set(picks) != set(range(needed))):
            raise SqlError(
                f"the query has {needed} positional placeholder(s) and params has "
                f"{len(seq)} value(s)",
                sql=sql,
            )
        bound = [literal(seq[i], what=f"parameter {i + 1}") for i in picks]
    for hole, value in zip(holes, bound, strict=True):
        hole.replace(value)
    return tree.sql(dialect=Datum)
