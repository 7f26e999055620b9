"""Materialized views read by a streaming query: each becomes a subquery of its definition.

A streaming query (a view over a view among them) cannot read a view's result as a stream,
so it runs the view's query itself, over the view's sources: ``FROM v AS x`` becomes
``FROM (<v's query>) AS x``, nested views included. Views whose query carries streaming
clauses (``EMIT ON WINDOW CLOSE``, ``ALLOWED LATENESS``, ``LATE ROWS TO``) are refused:
as a subquery those clauses would be lost, and the result would silently differ.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.catalog import Catalog, ViewEntry
from datum_sql.errors import PlanError
from datum_sql.sql.parse import parse_one

#: Query clauses that apply to the whole streaming query, never to a subquery.
_STREAMING_CLAUSES = {
    "emit": "EMIT ON WINDOW CLOSE",
    "allowed_lateness": "ALLOWED LATENESS",
    "late_output": "LATE ROWS TO",
}


def inline_views(query: exp.Query, catalog: Catalog) -> list[str]:
    """Replace, in place, every view ``query`` reads by its definition; the names of the
    views replaced (nested ones too), in the order met."""
    return _inline(query, catalog, ())


def _inline(query: exp.Query, catalog: Catalog, outer: tuple[str, ...]) -> list[str]:
    ctes = {cte.alias.lower() for cte in query.find_all(exp.CTE)}
    inlined: list[str] = []
    for table in list(query.find_all(exp.Table)):
        fn = table.this
        if isinstance(fn, exp.Anonymous | exp.Func):
            _refuse_window_over_view(fn, catalog)
            continue
        entry = catalog.get(table.name)
        if not isinstance(entry, ViewEntry) or table.args.get("db") or table.name.lower() in ctes:
            continue
        if entry.name.lower() in outer:
            chain = " -> ".join([*outer, entry.name.lower()])
            raise PlanError(f"materialized view {entry.name!r} reads itself ({chain})")
        definition = parse_one(entry.query)
        assert isinstance(definition, exp.Query)
        for clause, text in _STREAMING_CLAUSES.items():
            if definition.args.get(clause) is not None:
                raise PlanError(
                    f"materialized view {entry.name!r} uses {text}, which a query over it "
                    "cannot run as a subquery; read it in batch with ctx.sql(), or write the "
                    f"query over {entry.name!r}'s sources"
                )
        nested = _inline(definition, catalog, (*outer, entry.name.lower()))
        alias = table.args.get("alias")
        name = alias.this if alias is not None and alias.this else table.this
        table.replace(exp.Subquery(this=definition, alias=exp.TableAlias(this=name.copy())))
        for view in (entry.name, *nested):
            if view not in inlined:
                inlined.append(view)
    return inlined


def _refuse_window_over_view(fn: exp.Expr, catalog: Catalog) -> None:
    args = list(fn.expressions) if isinstance(fn, exp.Anonymous) else list(fn.args.values())
    first = args[0] if args else None
    entry = catalog.get(first.name) if isinstance(first, exp.Expr) and first.name else None
    if isinstance(entry, ViewEntry):
        raise PlanError(
            f"a window over materialized view {entry.name!r} is not supported: window its "
            "sources in a query of its own"
        )
