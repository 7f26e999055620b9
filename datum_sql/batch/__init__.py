"""Batch SQL (``ctx.sql``): one query over what the tables hold now.

The second query path, beside the streaming one: it shares the binder (in batch mode) and
the planner's batch form (:mod:`datum_sql.plan.batch`). :mod:`.read` reads each table once
whole, :mod:`.scan` lets DataFusion read one as the query runs (files, DuckDB, Kafka),
:mod:`.run` chooses where the query runs: DataFusion, or the streaming engine's own
operators over bounded copies of the tables (:mod:`.engine`) for what DataFusion cannot
run. Either way it is the one dialect of streaming queries.
"""

from datum_sql.batch.run import BatchTables, run_sql

__all__ = ["BatchTables", "run_sql"]
