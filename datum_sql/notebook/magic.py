"""``%load_ext datum_sql``: the ``%%sql`` / ``%sql`` magics and rich display.

::

    %%sql [--context NAME] [--out NAME] [--stream]
    CREATE SOURCE ...;
    SELECT * FROM bids WHERE price > {min_price}

Each statement of the cell runs against a :class:`~datum_sql.Context`: the one named by
``--context``, else the variable ``ctx`` when it is a Context, else the only Context in the
notebook's namespace. The cell's value is the last statement's result: ``None`` for DDL, a
``pyarrow.Table`` for a batch ``SELECT`` and ``SHOW``, an :class:`ExplainView` (text and
graph picture) for ``EXPLAIN``, and a live query handle for streaming statements
(``INSERT INTO``, ``CREATE SINK ... AS``, ``CREATE MATERIALIZED VIEW``, and ``SELECT`` with
``--stream``). ``--out NAME`` also stores it in the variable ``NAME``.

Interpolation: ``{name}`` or ``{name.attr}`` outside string literals, quoted identifiers and
comments is replaced by the Python value **as a SQL literal** — never as SQL text: strings
are quoted (``'`` doubled), numbers written out (negative ones in parentheses), ``None`` is
``NULL``, booleans ``TRUE``/``FALSE``, ``datetime`` a ``TIMESTAMP '...'`` literal (aware
ones converted to UTC), ``date`` ``DATE '...'``, ``timedelta`` an ``INTERVAL``, and a
list/tuple/set a parenthesised list of literals (for ``IN``). Any other type is refused.
Braces inside string literals and comments are left alone. IPython's own ``{var}`` and
``$var`` expansion of the magic line is switched off, so nothing is ever spliced.
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import re
from decimal import Decimal
from typing import Any

from datum_sql.notebook import require

require("IPython", "the %%sql magic")

from IPython.core.error import UsageError  # noqa: E402
from IPython.core.magic import (  # noqa: E402
    Magics,
    line_cell_magic,
    magics_class,
    needs_local_scope,
    no_var_expand,
)

__all__ = ["SqlMagics", "interpolate", "load_ipython_extension", "run_sql", "sql_literal"]


# -- literals ------------------------------------------------------------------------------
def sql_literal(value: Any) -> str:
    """``value`` as a SQL literal (see the module docstring); TypeError for other types."""
    import numpy as np

    if value is None:
        return "NULL"
    if isinstance(value, bool | np.bool_):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, numbers.Integral):
        n = int(value)
        return str(n) if n >= 0 else f"({n})"
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError(f"cannot interpolate {value!r}: not a finite decimal")
        return str(value) if value >= 0 else f"({value})"
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isnan(f):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(f):
            return "CAST('Infinity' AS DOUBLE)" if f > 0 else "CAST('-Infinity' AS DOUBLE)"
        return repr(f) if f >= 0 else f"({f!r})"
    if isinstance(value, np.datetime64):
        value = value.astype("datetime64[us]").item()
        if not isinstance(value, _dt.datetime):
            raise TypeError(f"cannot interpolate numpy datetime64 {value!r}")
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, _dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, _dt.time):
        if value.tzinfo is not None:
            raise TypeError("cannot interpolate a time with a time zone")
        return f"TIME '{value.isoformat()}'"
    if isinstance(value, _dt.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros % 1_000_000 == 0:
            return f"INTERVAL '{micros // 1_000_000} seconds'"
        return f"INTERVAL '{micros} microseconds'"
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        if not items:
            raise TypeError("cannot interpolate an empty collection (SQL has no empty list)")
        if isinstance(value, set | frozenset):
            try:
                items = sorted(items)
            except TypeError:
                pass
        return "(" + ", ".join(sql_literal(v) for v in items) + ")"
    raise TypeError(
        f"cannot interpolate a {type(value).__name__} into SQL: pass a str, number, bool, None, "
        "datetime, date, time, timedelta, or a list of those"
    )


_NAME = re.compile(r"[A-Za-z_]\w*")


def _lookup(path: list[str], namespaces: list[dict[str, Any]]) -> Any:
    for ns in namespaces:
        if path[0] in ns:
            value = ns[path[0]]
            break
    else:
        raise NameError(f"{{{'.'.join(path)}}}: no variable {path[0]!r} in the notebook")
    for attr in path[1:]:
        value = getattr(value, attr)
    return value


def interpolate(sql: str, *namespaces: dict[str, Any]) -> str:
    """Replace each ``{name}`` / ``{name.attr}`` of ``sql`` — outside string literals,
    quoted identifiers and comments, as the SQL tokenizer sees them — by the value's SQL
    literal (:func:`sql_literal`)."""
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    from datum_sql.sql.dialect import Datum

    if "{" not in sql:
        return sql
    try:
        tokens = Datum().tokenizer().tokenize(sql)
    except TokenError:
        return sql  # unreadable SQL: nothing is replaced; running it reports the error
    out: list[str] = []
    pos = 0
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.token_type == TokenType.L_BRACE and sql[tok.start] == "{":
            path: list[str] = []
            j = i + 1
            while j < len(tokens):
                t = tokens[j]
                text = sql[t.start : t.end + 1]
                expect_name = not path or sql[tokens[j - 1].start] == "."
                if expect_name and _NAME.fullmatch(text) and t.token_type != TokenType.IDENTIFIER:
                    path.append(text)
                elif not expect_name and t.token_type == TokenType.DOT:
                    pass
                else:
                    break
                j += 1
            end = tokens[j] if j < len(tokens) else None
            if (
                path
                and end is not None
                and end.token_type == TokenType.R_BRACE
                and sql[tokens[j - 1].start] != "."
            ):
                out.append(sql[pos : tok.start])
                out.append(sql_literal(_lookup(path, list(namespaces))))
                pos = end.end + 1
                i = j + 1
                continue
        i += 1
    out.append(sql[pos:])
    return "".join(out)


# -- running -------------------------------------------------------------------------------
def run_sql(ctx: Any, sql: str, *, stream: bool = False) -> Any:
    """Run each statement of ``sql`` against ``ctx``; the last statement's result."""
    from sqlglot import exp

    from datum_sql.notebook.display import ExplainView
    from datum_sql.sql.dialect import Explain
    from datum_sql.sql.parse import parse_one, statement_texts

    result: Any = None
    for text in statement_texts(sql):
        node = parse_one(text)
        if isinstance(node, Explain):
            prepared = ctx.prepare(text)
            result = ExplainView(prepared.explain(), prepared.graph)
        elif stream and isinstance(node, exp.Query):
            result = ctx.execute_streaming(text)
        else:
            result = ctx.execute(text)
    return result


_OPTION = re.compile(r"\s*(?:(-c|--context|-o|--out)(?:=|\s+)(\S+)|(--stream))(?=\s|$)")


def parse_options(line: str) -> tuple[dict[str, Any], str]:
    """Leading ``--context NAME``, ``--out NAME``, ``--stream`` of a magic line; the rest
    of the line is SQL."""
    opts: dict[str, Any] = {"context": None, "out": None, "stream": False}
    rest = line
    while True:
        m = _OPTION.match(rest)
        if m is None:
            break
        if m.group(3):
            opts["stream"] = True
        else:
            key = "context" if m.group(1) in ("-c", "--context") else "out"
            if not _NAME.fullmatch(m.group(2)):
                raise UsageError(f"{m.group(1)} needs a Python variable name, got {m.group(2)!r}")
            opts[key] = m.group(2)
        rest = rest[m.end() :]
    return opts, rest.strip()


@magics_class
class SqlMagics(Magics):
    """``%sql`` (one line) and ``%%sql`` (a cell) run SQL against a datum_sql Context."""

    def _context(self, name: str | None, namespaces: list[dict[str, Any]]) -> Any:
        from datum_sql.context import Context

        if name is not None:
            for ns in namespaces:
                if name in ns:
                    if isinstance(ns[name], Context):
                        return ns[name]
                    raise UsageError(
                        f"--context {name}: {name} is a {type(ns[name]).__name__}, not a datum_sql.Context"
                    )
            raise UsageError(f"--context {name}: no variable {name!r} in the notebook")
        for ns in namespaces:
            if isinstance(ns.get("ctx"), Context):
                return ns["ctx"]
        found: dict[int, tuple[str, Any]] = {}
        for ns in namespaces:
            for key, value in ns.items():
                if not key.startswith("_") and isinstance(value, Context):
                    found.setdefault(id(value), (key, value))
        if len(found) == 1:
            return next(iter(found.values()))[1]
        if not found:
            raise UsageError(
                "no datum_sql.Context in the notebook: create one (ctx = ds.Context()) "
                "or name it with --context NAME"
            )
        names = ", ".join(sorted(k for k, _ in found.values()))
        raise UsageError(f"several Contexts ({names}): pick one with --context NAME")

    @no_var_expand
    @needs_local_scope
    @line_cell_magic
    def sql(
        self, line: str, cell: str | None = None, local_ns: dict[str, Any] | None = None
    ) -> Any:
        """Run SQL against a datum_sql Context; see ``datum_sql.notebook.magic``."""
        opts, rest = parse_options(line)
        text = rest if cell is None else "\n".join(p for p in (rest, cell) if p.strip())
        if not text.strip():
            raise UsageError("%%sql: no SQL to run")
        user_ns = self.shell.user_ns if self.shell is not None else {}
        namespaces = [ns for ns in (local_ns, user_ns) if ns is not None]
        ctx = self._context(opts["context"], namespaces)
        result = run_sql(ctx, interpolate(text, *namespaces), stream=opts["stream"])
        if opts["out"]:
            user_ns[opts["out"]] = result
        return result


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext datum_sql``: register the magics and the HTML formatters."""
    from datum_sql.notebook.display import register_formatters

    ipython.register_magics(SqlMagics)
    register_formatters(ipython)
