"""``ctx.sql``: parse, read the tables, bind in batch mode, and run where the query can run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.batch import datafusion, engine
from datum_sql.batch.scan import Scan
from datum_sql.catalog import Catalog
from datum_sql.errors import SqlError
from datum_sql.plan.batch import datafusion_lacks
from datum_sql.plan.lateral import calls_table_function
from datum_sql.sql.analyze import Binder
from datum_sql.sql.parse import parse
from datum_sql.sql.process import input_tables as process_inputs
from datum_sql.sql.process import process_calls
from datum_sql.sql.views import inline_views


@dataclass
class BatchTables:
    """What a batch query needs of its Context: the catalog, every row a table holds now
    (:func:`datum_sql.batch.read.read_all`), a streaming run over bounded tables
    (:func:`datum_sql.batch.engine.run`), and a table's scan (:mod:`datum_sql.batch.scan`)."""

    catalog: Catalog
    read: Callable[[Any], pa.Table]
    stream: engine.Stream
    max_windows_per_row: int
    #: how DataFusion scans a table as the query runs (None: the table is read whole)
    scan: Callable[[Any], Scan | None]


def run_sql(sql: str, env: BatchTables) -> pa.Table:
    """Run one SELECT as a batch over what the tables hold now."""
    nodes = parse(sql)
    if len(nodes) != 1 or not isinstance(nodes[0], exp.Query):
        raise SqlError("ctx.sql() runs one SELECT; use ctx.execute() for other statements", sql=sql)
    node = nodes[0]
    inline_views(node, env.catalog, plain_only=True)  # a plain view has no result
    tables, scans = _read_tables(node, env)
    schemas = {n: t.schema for n, t in tables.items()} | {n: s.schema for n, s in scans.items()}
    query = Binder(env.catalog, batch=True, schemas=schemas).bind_query(node, sql)
    table_function, lacking = calls_table_function(query.ast), datafusion_lacks(query)
    if scans and (table_function or lacking or process_calls(query.ast)):
        # these take whole tables (the engine's operators)
        tables |= {n: s.read_all() for n, s in scans.items()}
        scans = {}
    if table_function:
        return engine.run(node, tables, env.catalog, env.stream, "a table function")
    if lacking:  # the engine's own operators run it
        return engine.run(node, tables, env.catalog, env.stream)
    return datafusion.run(query, tables, env.catalog, env.max_windows_per_row, scans)


def _read_tables(node: exp.Query, env: BatchTables) -> tuple[dict[str, pa.Table], dict[str, Scan]]:
    """Every table ``node`` reads (process() inputs too), by lower-case name, once: as a
    scan DataFusion reads as the query runs, or else read whole."""
    names = [_read_table_name(t) for t in node.find_all(exp.Table)] + process_inputs(node)
    tables: dict[str, pa.Table] = {}
    scans: dict[str, Scan] = {}
    for name in names:
        entry = env.catalog.get(name) if name else None
        if entry is None or not name or name.lower() in tables or name.lower() in scans:
            continue
        found = env.scan(entry)
        if found is None:
            tables[name.lower()] = env.read(entry)
        else:
            scans[name.lower()] = found
    return tables, scans


def _read_table_name(node: exp.Table) -> str | None:
    """The table a FROM item reads: its name, or a table function's first argument
    (``tumble(t, ...)``); None when that argument names nothing (the binder then says why)."""
    func = node.this
    if not isinstance(func, exp.Func):
        return node.name
    first = func.expressions[0] if func.expressions else func.args.get("this")
    return first.name or None if isinstance(first, exp.Expression) else None
