"""A bound query as batch SQL for DataFusion (what ``ctx.sql`` runs).

Streaming-only syntax is rewritten into plain SQL with the same meaning: window table
functions become subqueries that add ``window_start`` / ``window_end``. The same form
type-checks streaming queries (:mod:`typecheck`), so both report a type error alike.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan import gathered, lateral, over_functions, typecheck
from datum_sql.plan.engines import DataFusion
from datum_sql.plan.windows import (
    DEFAULT_MAX_WINDOWS_PER_ROW,
    check_windows_per_row,
    window_subquery,
)
from datum_sql.sql import statements as st
from datum_sql.sql.analyze import WINDOW_COLUMNS
from datum_sql.sql.process import batch_placeholder, batch_table


def datafusion_lacks(query: st.Query) -> bool:
    """Whether DataFusion cannot run ``query`` as batch SQL: it has no ASOF JOIN, and plans
    ``NOT IN`` over a correlated subquery on one column only. The streaming engine's own
    operators run such a batch query (:mod:`datum_sql.batch.engine`)."""
    ast = query.ast
    if any((j.args.get("method") or "").upper() == "ASOF" for j in ast.find_all(exp.Join)):
        return True
    return any(
        isinstance(n.parent, exp.Not) and n.args.get("query") is not None and _correlated(n)
        for n in ast.find_all(exp.In)
    )


def _correlated(node: exp.In) -> bool:
    """Whether the subquery of ``x IN (SELECT ...)`` names a column of an outer query."""
    sub = node.args["query"]
    own = {
        rel.alias for n in sub.find_all(exp.Table, exp.Subquery) if (rel := n.meta.get("relation"))
    }
    return any(c.table and c.table not in own for c in sub.find_all(exp.Column))


def batch_sql(query: st.Query, *, max_windows_per_row: int = DEFAULT_MAX_WINDOWS_PER_ROW) -> str:
    """The SQL DataFusion runs for ``ctx.sql``, type-checked first."""
    ast, tables = batch_ast(query, max_windows_per_row)
    typecheck.check(ast, tables)  # percentile_cont's argument too, as streaming checks it
    gathered.distinct_lists(ast)
    gathered.distinct_spreads(ast)
    gathered.percentiles(ast)
    gathered.xor_distinct(ast, tables)
    over_functions.batch_forms(ast)
    return ast.sql(dialect=DataFusion)


def check_types(query: st.Query, max_windows_per_row: int = DEFAULT_MAX_WINDOWS_PER_ROW) -> None:
    """Type-check ``query`` as its batch form (ASOF joins, which DataFusion lacks, are left
    to the checks of each streaming step; the functions no path runs are refused alike)."""
    typecheck.refuse_unsupported(query.ast)
    if not datafusion_lacks(query):
        typecheck.check(*batch_ast(query, max_windows_per_row))


def batch_ast(query: st.Query, max_windows_per_row: int) -> tuple[exp.Expr, dict[str, pa.Schema]]:
    """The query over its tables (by catalog name) and the schema of each table."""
    ast = query.ast.copy()
    tables: dict[str, pa.Schema] = {}
    lateral.stand_ins(ast, tables)
    for table in list(ast.find_all(exp.Table)):
        rel: st.Relation | None = table.meta.get("relation")
        processed = batch_table(table)
        if processed is not None:  # computed by the engine first, a table here
            tables[processed[0]] = processed[1]
            table.set("this", exp.to_identifier(processed[0], quoted=True))
            continue
        placeholder = batch_placeholder(table)
        if placeholder is not None:  # over a subquery: its key types come from it
            table.replace(placeholder)
            continue
        if rel is None or rel.entry is None:
            continue
        name = rel.entry.name
        columns = [c for c in rel.columns if rel.window is None or c not in WINDOW_COLUMNS]
        tables[name] = pa.schema([(c, rel.types[c]) for c in columns])
        if rel.window is None:
            table.set("this", exp.to_identifier(name, quoted=True))
            continue
        check_windows_per_row(rel.window, max_windows_per_row)
        source = exp.Table(this=exp.to_identifier(name, quoted=True))
        keys = _session_keys(table, rel) if rel.window.kind == "session" else None
        sub = window_subquery(rel.window, source, keys)
        sub.set("alias", exp.TableAlias(this=exp.to_identifier(rel.alias, quoted=True)))
        table.replace(sub)
    # Windows over derived tables, innermost first: each renders the subquery it wraps.
    for node in reversed(list(ast.find_all(exp.Subquery, bfs=False))):
        rel = node.meta.get("relation")
        if rel is None or rel.window is None:
            continue
        check_windows_per_row(rel.window, max_windows_per_row)
        keys = _session_keys(node, rel) if rel.window.kind == "session" else None
        sub = window_subquery(rel.window, exp.Subquery(this=node.this.copy()), keys)
        sub.set("alias", exp.TableAlias(this=exp.to_identifier(rel.alias, quoted=True)))
        node.replace(sub)
    return ast, tables


def _session_keys(table: exp.Expr, rel: st.Relation) -> list[str]:
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
