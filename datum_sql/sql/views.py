"""Materialized views read by a streaming query: each becomes a subquery of its definition.

A streaming query (a view over a view among them) cannot read a view's result as a stream,
so it runs the view's query itself, over the view's sources: ``FROM v AS x`` becomes
``FROM (<v's query>) AS x`` and ``tumble(v, ...)`` becomes ``tumble((<v's query>) AS v,
...)``, nested views included. A view with ``EMIT ON WINDOW CLOSE`` keeps it as a subquery
(its SELECT is marked :data:`EMIT_FINAL`: its windowed aggregate emits final rows, so what
reads it sees the view's append-only stream). Views with ``ALLOWED LATENESS`` or ``LATE
ROWS TO`` are refused: those clauses apply to a whole query's sources, so as a subquery
they would be lost and the result would silently differ.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.catalog import Catalog, ViewEntry
from datum_sql.errors import PlanError
from datum_sql.sql.dialect import EMIT_WINDOW_CLOSE
from datum_sql.sql.parse import parse_one

#: Query clauses that apply to the whole streaming query, never to a subquery.
_STREAMING_CLAUSES = {
    "allowed_lateness": "ALLOWED LATENESS",
    "late_output": "LATE ROWS TO",
}
#: ``select.meta`` key: the SELECT is a view's and emits final windows (EMIT ON WINDOW CLOSE).
EMIT_FINAL = "emit_on_window_close"


def inline_views(query: exp.Query, catalog: Catalog, *, plain_only: bool = False) -> list[str]:
    """Replace, in place, every view ``query`` reads by its definition; the names of the
    views replaced (nested ones too), in the order met. ``plain_only``: only the views no
    query maintains (``CREATE VIEW``), as a batch query reads them."""
    return _inline(query, catalog, (), plain_only)


def _inline(
    query: exp.Query, catalog: Catalog, outer: tuple[str, ...], plain_only: bool = False
) -> list[str]:
    ctes = {cte.alias.lower() for cte in query.find_all(exp.CTE)}
    inlined: list[str] = []
    for table in list(query.find_all(exp.Table)):
        fn = table.this
        target: exp.Expr = table
        if isinstance(fn, exp.Anonymous | exp.Func):
            args = list(fn.expressions) if isinstance(fn, exp.Anonymous) else []
            if not args or not isinstance(args[0], exp.Column) or args[0].table:
                continue
            target = args[0]  # tumble(v, ...): the view is the window's table
        entry = catalog.get(target.name)
        if not isinstance(entry, ViewEntry) or target.args.get("db"):
            continue
        if plain_only and entry.materialized:
            continue
        if target.name.lower() in ctes:
            continue
        if entry.name.lower() in outer:
            chain = " -> ".join([*outer, entry.name.lower()])
            raise PlanError(f"materialized view {entry.name!r} reads itself ({chain})")
        definition = _definition(entry)
        nested = _inline(definition, catalog, (*outer, entry.name.lower()), plain_only)
        alias = target.args.get("alias") if target is table else None
        name = alias.this if alias is not None and alias.this else exp.to_identifier(target.name)
        target.replace(exp.Subquery(this=definition, alias=exp.TableAlias(this=name.copy())))
        for view in (entry.name, *nested):
            if view not in inlined:
                inlined.append(view)
    return inlined


def _definition(entry: ViewEntry) -> exp.Query:
    definition = parse_one(entry.query)
    assert isinstance(definition, exp.Query)
    for clause, text in _STREAMING_CLAUSES.items():
        if definition.args.get(clause) is not None:
            raise PlanError(
                f"materialized view {entry.name!r} uses {text}, which a query over it "
                "cannot run as a subquery; read it in batch with ctx.sql(), or write the "
                f"query over {entry.name!r}'s sources"
            )
    if definition.args.get("emit") == EMIT_WINDOW_CLOSE:
        definition.set("emit", None)
        definition.meta[EMIT_FINAL] = True
    return definition
