"""``ctx.sql(sql, params=...)``: query parameters bound as literals in the parsed query.

Two spellings, one per query: named ``:name`` placeholders take a mapping, positional ``?``
(or numbered ``$1``, ``$2``) placeholders a sequence. Each value becomes a sqlglot literal
node (:func:`literal`) in place of its placeholder, and the query text is generated from
that tree: a value is always one literal, whatever characters it holds, never SQL.
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlglot import exp

from datum_sql.errors import SqlError
from datum_sql.sql.dialect import Datum
from datum_sql.sql.parse import parse_one

__all__ = ["bind_params", "literal"]


def literal(value: Any) -> exp.Expr:
    """The SQL literal node of a Python value, shared by ``ctx.sql(params=...)`` and the
    notebook's ``{var}`` interpolation; TypeError for a value that has none.

    ``None`` is ``NULL``; booleans ``TRUE``/``FALSE``; integers, decimals and floats numbers
    (negative ones in parentheses, so ``a-{x}`` never becomes a ``--`` comment; NaN and
    infinities as casts); strings quoted; a ``datetime`` a ``TIMESTAMP`` (an aware one in
    UTC), a ``date`` a ``DATE``, a ``time`` a ``TIME``, a ``timedelta`` an ``INTERVAL``; a
    list, tuple or set a parenthesised list of literals (for ``IN``; a set sorted)."""
    import numpy as np

    if value is None:
        return exp.null()
    if isinstance(value, bool | np.bool_):
        return exp.true() if value else exp.false()
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, numbers.Integral):
        return _number(str(int(value)))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError(f"cannot bind {value!r}: not a finite decimal")
        return _number(str(value))
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isfinite(f):
            return _number(repr(f))
        text = "NaN" if math.isnan(f) else ("Infinity" if f > 0 else "-Infinity")
        return exp.cast(exp.Literal.string(text), exp.DataType.Type.DOUBLE)
    if isinstance(value, np.datetime64):
        value = value.astype("datetime64[us]").item()
        if not isinstance(value, _dt.datetime):
            raise TypeError(f"cannot bind numpy datetime64 {value!r}")
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
        return _cast(value.isoformat(sep=" "), exp.DataType.Type.TIMESTAMP)
    if isinstance(value, _dt.date):
        return _cast(value.isoformat(), exp.DataType.Type.DATE)
    if isinstance(value, _dt.time):
        if value.tzinfo is not None:
            raise TypeError("cannot bind a time with a time zone")
        return _cast(value.isoformat(), exp.DataType.Type.TIME)
    if isinstance(value, _dt.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        text = (
            f"{micros // 1_000_000} seconds"
            if micros % 1_000_000 == 0
            else f"{micros} microseconds"
        )
        return exp.Interval(this=exp.Literal.string(text))
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        if not items:
            raise TypeError("cannot bind an empty collection (SQL has no empty list)")
        if isinstance(value, set | frozenset):
            try:
                items = sorted(items)
            except TypeError:
                pass
        return exp.Tuple(expressions=[literal(v) for v in items])
    raise TypeError(
        f"a {type(value).__name__} has no SQL literal: pass a str, number, bool, None, "
        "datetime, date, time, timedelta, or a list of those"
    )


def _number(text: str) -> exp.Expr:
    if text.startswith("-"):
        return exp.Paren(this=exp.Neg(this=exp.Literal.number(text[1:])))
    return exp.Literal.number(text)


def _cast(text: str, to: Any) -> exp.Expr:
    return exp.cast(exp.Literal.string(text), to)


def _bound(value: Any, what: str, sql: str) -> exp.Expr:
    try:
        return literal(value)
    except TypeError as exc:
        raise SqlError(f"{what}: {exc}", sql=sql) from None


def _key(node: exp.Expr) -> str | int | None:
    """``'name'`` for ``:name``, the 1-based number for ``$N``, None for ``?``."""
    if isinstance(node, exp.Parameter):
        return int(node.name) if node.name.isdigit() else node.name
    return None if node.args.get("jdbc") or not node.name else node.name


def _refuse_case_collisions(names: list[str], what: str, sql: str) -> None:
    """SqlError when two of ``names`` differ only in case: parameter names match
    case-insensitively, so one of the two would silently lose its value."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise SqlError(
                f"{what} {other} and {name}, which differ only in case: parameter names "
                "are case-insensitive, so rename one of them",
                sql=sql,
            )


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
        _refuse_case_collisions([repr(str(k)) for k in params], "params has keys", sql)  # type: ignore[union-attr]
        _refuse_case_collisions([f":{k}" for k in keys], "the query has parameters", sql)
        values = {str(k).lower(): v for k, v in params.items()}  # type: ignore[union-attr]
        missing = sorted({str(k) for k in keys if str(k).lower() not in values})
        if missing:
            raise SqlError(f"no value for parameter :{missing[0]} in params", sql=sql)
        unused = sorted(set(values) - {str(k).lower() for k in keys})
        if unused:
            raise SqlError(f"parameter {unused[0]!r} in params is not used by the query", sql=sql)
        bound = [_bound(values[str(k).lower()], f"parameter :{k}", sql) for k in keys]
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
        bound = [_bound(seq[i], f"parameter {i + 1}", sql) for i in picks]
    for hole, value in zip(holes, bound, strict=True):
        hole.replace(value)
    return tree.sql(dialect=Datum)
