"""A bound query as batch SQL for DataFusion (what ``ctx.sql`` runs).

Streaming-only syntax is rewritten into plain SQL with the same meaning: window table
functions become subqueries that add ``window_start`` / ``window_end``.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan.build import DATAFUSION_DIALECT
from datum_sql.plan.windows import window_subquery
from datum_sql.sql import statements as st
from datum_sql.sql.analyze import WINDOW_COLUMNS


def needs_duckdb(query: st.Query) -> bool:
    """DataFusion has no ASOF JOIN; batch queries with one run on DuckDB instead."""
    return any((j.args.get("method") or "").upper() == "ASOF" for j in query.ast.find_all(exp.Join))


def batch_sql(query: st.Query, dialect: str = DATAFUSION_DIALECT) -> str:
    ast = query.ast.copy()
    for table in list(ast.find_all(exp.Table)):
        rel: st.Relation | None = table.meta.get("relation")
        if rel is None or rel.entry is None:
            continue
        if rel.window is None:
            table.set("this", exp.to_identifier(rel.entry.name, quoted=True))
            continue
        source = exp.Table(this=exp.to_identifier(rel.entry.name, quoted=True))
        if dialect != DATAFUSION_DIALECT:
            raise PlanError("a batch query cannot combine window functions with an ASOF JOIN yet")
        keys = _session_keys(table, rel) if rel.window.kind == "session" else None
        sub = window_subquery(rel.window, source, DATAFUSION_DIALECT, keys)
        sub.set("alias", exp.TableAlias(this=exp.to_identifier(rel.alias, quoted=True)))
        table.replace(sub)
    return ast.sql(dialect=dialect)


def _session_keys(table: exp.Table, rel: st.Relation) -> list[str]:
    """The GROUP BY columns (other than the window's) of the SELECT reading ``table``."""
    select = table.find_ancestor(exp.Select)
    group = select.args.get("group") if select else None
    if group is None:
        raise PlanError(
            "session() windows need GROUP BY window_start, window_end (and the session keys)"
        )
    keys = []
    for g in group.expressions:
        if isinstance(g, exp.Column) and g.name in WINDOW_COLUMNS:
            continue
        if not isinstance(g, exp.Column) or g.name not in rel.columns:
            raise PlanError(f"session keys must be columns of {rel.alias}; got {g.sql()}")
        keys.append(g.name)
    return keys
