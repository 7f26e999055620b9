"""A batch query run by DataFusion over the tables it reads; each process() call is
computed by the engine's operator first and read as a table."""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.batch.scan import Scan, register_scans, register_table, session_config
from datum_sql.catalog import Catalog
from datum_sql.engine.datafusion_errors import datafusion_message
from datum_sql.engine.operators.process import run_batch as run_process
from datum_sql.engine.udfs import UdfFailure
from datum_sql.engine.udfs import session as udf_session
from datum_sql.errors import DatumError, PlanError, QueryFailed
from datum_sql.plan.batch import batch_sql
from datum_sql.plan.infer import normalize_schema
from datum_sql.sql import statements as st
from datum_sql.sql.process import META as PROCESS
from datum_sql.sql.process import key_type, key_type_error, subquery_time


def run(
    query: st.Query,
    tables: dict[str, pa.Table],
    catalog: Catalog,
    max_windows_per_row: int,
    scans: dict[str, Scan] | None = None,
) -> pa.Table:
    """``query`` over ``tables`` (read whole) and ``scans`` (read as it runs), by
    lower-case name."""
    scans = scans or {}
    failures: list[UdfFailure] = []
    session = udf_session(session_config(scans.values()), failures=failures)
    for name in query.tables:
        if name.lower() in scans:
            continue
        register_table(session, catalog.require(name).name, tables[name.lower()])
    try:
        # the engine's operator computes each process() result first, innermost first
        for node in reversed([t for t in query.ast.find_all(exp.Table) if t.meta.get(PROCESS)]):
            _process(node, query, tables, session, max_windows_per_row)
        text = batch_sql(query, max_windows_per_row=max_windows_per_row)
        with tempfile.TemporaryDirectory(prefix="datum-sql-scan-") as spool:
            by_name = {catalog.require(n).name: s for n, s in scans.items()}
            register_scans(session, by_name, text, spool)
            result = session.sql(text).to_arrow_table()
    except DatumError:
        raise
    except Exception as exc:  # DataFusion errors carry no type hierarchy
        if failures:
            raise QueryFailed(f"batch query failed: {failures[-1]}") from failures[-1]
        raise PlanError(f"batch query failed: {datafusion_message(exc)}") from None
    return result.cast(normalize_schema(result.schema))


def _process(
    node: exp.Table,
    query: st.Query,
    tables: dict[str, pa.Table],
    session: Any,
    max_windows_per_row: int,
) -> None:
    """Run a process() call of a batch query over its whole input, and register its
    result in ``session`` under the name the query's batch SQL reads."""
    call = node.meta[PROCESS]
    if call.table is not None:
        data = tables[call.table.lower()]
    else:  # a subquery: its rows as a batch query of their own
        sub = st.Query(ast=node.this.expressions[0].this, sql=query.sql)
        text = batch_sql(sub, max_windows_per_row=max_windows_per_row)
        data = session.sql(text).to_arrow_table()
        data = data.cast(normalize_schema(data.schema))
        node.meta["relation"].types.update({k: data.schema.field(k).type for k in call.keys})
    for k in call.keys:
        if not key_type(data.schema.field(k).type):
            raise PlanError(key_type_error(k, data.schema.field(k).type))
    time = call.time_column or subquery_time(data.schema)
    if not pa.types.is_timestamp(data.schema.field(time).type):
        raise PlanError(
            f"process(): time column {time!r} must be a TIMESTAMP, is "
            f"{data.schema.field(time).type}"
        )
    done = run_process(call.function, data, list(call.keys), time)
    register_table(session, call.batch_name, done)
