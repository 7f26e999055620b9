"""A bound query as batch SQL for DataFusion (what ``ctx.sql`` runs).

Streaming-only syntax is rewritten into plain SQL with the same meaning: window table
functions become subqueries that add ``window_start`` / ``window_end``.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan.build import DATAFUSION_DIALECT
from datum_sql.sql import statements as st


def batch_sql(query: st.Query) -> str:
    ast = query.ast.copy()
    for table in list(ast.find_all(exp.Table)):
        rel: st.Relation | None = table.meta.get("relation")
        if rel is None:
            # copy() keeps meta; a table without a relation is a CTE name already inlined
            continue
        if rel.window is not None:
            table.replace(_window_subquery(rel, table))
    return ast.sql(dialect=DATAFUSION_DIALECT)


def _window_subquery(rel: st.Relation, table: exp.Table) -> exp.Expression:
    w = rel.window
    assert w is not None and rel.entry is not None
    name = exp.to_identifier(rel.entry.name, quoted=True)
    ts = exp.column(w.time_column, quoted=True)
    size = _interval(w.size_us)
    if w.kind == "tumble":
        start = _bin(ts, size)
        sql = f"SELECT *, {start} AS window_start, {start} + {size} AS window_end FROM {name.sql()}"
    elif w.kind == "hop":
        assert w.slide_us is not None
        slide = _interval(w.slide_us)
        n = w.size_us // w.slide_us
        # The windows holding ts start at the latest multiple of slide <= ts and the n-1
        # multiples before it.
        last = _bin(exp.column(w.time_column, "t", quoted=True), slide)
        first = f"{last} - k * {slide}"
        sql = (
            f"SELECT t.*, {first} AS window_start, {first} + {size} AS window_end "
            f"FROM {name.sql()} AS t CROSS JOIN (SELECT unnest(range(0, {n})) AS k) AS ks"
        )
    else:
        raise PlanError("session() windows are not available in batch queries yet")
    sub = exp.maybe_parse(f"({sql})", dialect=DATAFUSION_DIALECT)
    return exp.Subquery(this=sub.this if isinstance(sub, exp.Subquery) else sub, alias=exp.TableAlias(this=exp.to_identifier(rel.alias, quoted=True)))


def _interval(us: int) -> str:
    return f"INTERVAL '{us} microseconds'"


def _bin(ts: exp.Expression, size: str) -> str:
    return f"date_bin({size}, {ts.sql(dialect=DATAFUSION_DIALECT)}, TIMESTAMP '1970-01-01 00:00:00')"
