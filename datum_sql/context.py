"""Context: the one place that wires catalog, SQL, planner, runtime and connectors together."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql import aggregate_functions, functions
from datum_sql.batch import BatchTables, run_sql
from datum_sql.batch.read import read_all
from datum_sql.batch.scan import scan
from datum_sql.catalog import Catalog, SinkEntry, SourceEntry, ViewEntry
from datum_sql.connectors import registry
from datum_sql.connectors.arrow import arrow_schema_of, is_replayable
from datum_sql.connectors.arrow_data import as_arrow_data
from datum_sql.connectors.base import ConnectorSpec, Sink, Source
from datum_sql.engine.jobgraph import JobGraph
from datum_sql.engine.runtime.checkpoint import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    IN_CHECKPOINT,
    CheckpointStore,
    Recovered,
)
from datum_sql.engine.runtime.executor import Executor
from datum_sql.engine.runtime.layout import CHECKPOINTS_DIR, query_dir
from datum_sql.engine.runtime.lock import QueryLock
from datum_sql.engine.runtime.query import StreamingQuery
from datum_sql.engine.runtime.results import CollectSink, ResultBuffer
from datum_sql.errors import AlreadyExists, CheckpointError, DatumError, PlanError, SqlError
from datum_sql.extensions import extension
from datum_sql.plan import logical as lp
from datum_sql.plan.build import build
from datum_sql.plan.explain import explain
from datum_sql.plan.infer import prepare_planner
from datum_sql.plan.lateral import VALUES_COLUMN
from datum_sql.plan.lower import COLLECT, lower
from datum_sql.plan.prune import prune_columns
from datum_sql.plan.windows import DEFAULT_MAX_WINDOWS_PER_ROW
from datum_sql.process import (
    create_process_function,
    is_create_process_function,
    register_process_function,
)
from datum_sql.redaction import redact_sql, reveal
from datum_sql.replay import ReplayChunk, ReplayRange, ReplayReport, replay
from datum_sql.sql import statements as st
from datum_sql.sql.analyze import Binder, ordered_watermark_type
from datum_sql.sql.dialect import Explain
from datum_sql.sql.params import bind_params
from datum_sql.sql.parse import parse, parse_one
from datum_sql.sql.views import inline_views
from datum_sql.types import BoundedOutOfOrderness, parse_duration, to_micros

DEFAULT_STATE_DIR = ".datum"
DEFAULT_CHECKPOINT_INTERVAL = timedelta(seconds=10)
#: How long a read of a restarted view waits for its checkpoint to be restored.
VIEW_RESTORE_TIMEOUT_S = 120.0


@dataclass
class Prepared:
    """A streaming query made ready to run: bound, planned and lowered."""

    query: st.Query
    plan: lp.LogicalPlan
    graph: JobGraph

    def explain(self) -> str:
        return explain(self.plan, self.graph)


class Context:
    """A catalog of sources and sinks plus the queries running over them.

    ``state_dir`` holds the catalog (and checkpoints); ``None`` keeps everything in memory.
    """

    def __init__(
        self,
        state_dir: str | Path | None = DEFAULT_STATE_DIR,
        *,
        checkpoint_interval: timedelta | float | str | None = DEFAULT_CHECKPOINT_INTERVAL,
    ) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.catalog = Catalog(self.state_dir)  # creates state_dir, owner-only
        prepare_planner()  # once per process, here rather than in the first query
        self.checkpoint_interval = (
            _duration(checkpoint_interval, "checkpoint_interval")
            if checkpoint_interval is not None
            else None
        )
        #: Rows of state each stateful operator of a new query may hold (None: no limit).
        self.state_limit_rows: int | None = None
        #: Windows a hop() may put each row in (SET max_windows_per_row = N).
        self.max_windows_per_row = DEFAULT_MAX_WINDOWS_PER_ROW
        self._queries: list[StreamingQuery] = []
        self._views: dict[str, StreamingQuery] = {}
        #: Why a persistent view of the catalog could not be restarted, by lower-case name.
        self._view_errors: dict[str, DatumError] = {}
        #: One-shot iterators (by id) a query has read: a second query would see nothing.
        self._iterators_read: set[int] = set()
        self._lock = threading.Lock()
        self._restart_views()

    # -- SQL entry points -------------------------------------------------------------------
    def execute(self, sql: str, *, fresh: bool = False) -> Any:
        """Run one or more statements; returns the result of the last.

        DDL and SET return None; SHOW returns a table; EXPLAIN returns text; a SELECT runs
        as a batch query (like :meth:`sql`); ``INSERT INTO`` starts a streaming query and
        returns its handle (``fresh=True``: discard its checkpoints, start over).
        """
        result: Any = None
        for node in parse(sql):
            if aggregate_functions.is_create_aggregate(node):
                aggregate_functions.create_aggregate(node)
                result = None
                continue
            if is_create_process_function(node):
                create_process_function(node)
                result = None
                continue
            if functions.is_create_function(node):
                functions.create_function(node)
                result = None
                continue
            if _is_streaming(node):
                self._inline_views(node)
            stmt = Binder(self.catalog, batch=not _is_streaming(node)).bind(node, sql)
            result = self._run_statement(stmt, sql, fresh=fresh)
        return result

    def _run_statement(self, stmt: st.Statement, sql: str, *, fresh: bool = False) -> Any:
        if isinstance(stmt, st.CreateSource):
            self._create_source(
                stmt.entry, replace=stmt.or_replace, if_not_exists=stmt.if_not_exists
            )
            return None
        if isinstance(stmt, st.CreateSink):
            self._create_sink(stmt.entry, replace=stmt.or_replace, if_not_exists=stmt.if_not_exists)
            if stmt.query is not None:
                return self._start(self._prepare_query(stmt.query), fresh=fresh)
            return None
        if isinstance(stmt, st.CreateView):
            return self._create_view(stmt, fresh=fresh)
        if isinstance(stmt, st.Drop):
            entry = self.catalog.get(stmt.name)
            if entry is not None and entry.kind == stmt.kind:
                self._check_not_read(entry.name)
                if isinstance(entry, ViewEntry):
                    self._stop_view(entry.name)
            self._check_unused(stmt.name)
            self.catalog.drop(stmt.name, stmt.kind, if_exists=stmt.if_exists)
            return None
        if isinstance(stmt, st.Show):
            return self._show(stmt.what)
        if isinstance(stmt, st.SetOption):
            self._set(stmt.name, stmt.value)
            return None
        if isinstance(stmt, st.Explain):
            return self._prepare_query(stmt.statement).explain()
        if isinstance(stmt, st.Query):
            if stmt.sink is not None:
                return self._start(self._prepare_query(stmt), fresh=fresh)
            return self.sql(stmt.sql)
        raise PlanError(f"cannot run {type(stmt).__name__} here")

    def execute_streaming(
        self,
        sql: str,
        *,
        allowed_lateness: timedelta | float | str | None = None,
        late_output: str | None = None,
        name: str | None = None,
        max_pending_rows: int = 1_000_000,
        fresh: bool = False,
        state_limit_rows: int | None = None,
    ) -> StreamingQuery:
        """Start a streaming query: ``INSERT INTO sink SELECT ...`` or a ``SELECT`` whose
        batches come back to the caller. Returns the running query's handle.

        An ``INSERT`` with a ``state_dir`` checkpoints and, started again (same ``name``,
        by default the sink's), resumes from its last checkpoint; ``fresh=True`` discards
        its checkpoints and starts over. ``max_pending_rows`` bounds the rows a SELECT holds
        for a caller iterating it: past it the sources wait for the caller (backpressure).
        ``state_limit_rows`` caps the rows each stateful operator holds: exceeding it fails
        the query (default: the context's ``state_limit_rows`` setting).
        """
        prepared = self.prepare(
            sql,
            allowed_lateness=allowed_lateness,
            late_output=late_output,
            state_limit_rows=state_limit_rows,
        )
        return self._start(prepared, name=name, max_pending_rows=max_pending_rows, fresh=fresh)

    def replay(
        self,
        sql: str | Sequence[str],
        start: Any,
        end: Any,
        *,
        by: str | None = None,
        chunk: timedelta | str | None = None,
        chunk_rows: int | None = None,
        dry_run: bool = False,
        save_positions: bool = False,
    ) -> ReplayReport:
        """Run ``INSERT INTO ... SELECT`` queries again over ``[start, end)`` of their input
        only: event time (timestamps), Kafka offsets (``'partition:0,offset:100;...'``) or
        file names, told from the values or named by ``by``. ``chunk`` (a duration of event
        time) or ``chunk_rows`` (offsets per partition) cut it into runs that each commit;
        ``dry_run`` reads and counts what it would read and writes nothing. The queries'
        saved positions do not move, unless ``save_positions`` (offset and file ranges): once
        every chunk committed they are at the range's end. Returns what each chunk read and
        wrote."""
        statements = [sql] if isinstance(sql, str) else list(sql)
        rng = ReplayRange.of(start, end, by)
        return replay(
            self, statements, rng, chunk=chunk, chunk_rows=chunk_rows, dry_run=dry_run,
            save_positions=save_positions,
        )  # fmt: skip

    def execute_streaming_async(self, sql: str, **kw: Any) -> StreamingQuery:
        """Like :meth:`execute_streaming`, for ``async with`` / ``async for``."""
        return self.execute_streaming(sql, **kw)

    def explain(self, sql: str) -> str:
        """The logical plan and the job graph the streaming query would run."""
        return self.prepare(sql).explain()

    def prepare(
        self,
        sql: str,
        *,
        allowed_lateness: timedelta | float | str | None = None,
        late_output: str | None = None,
        state_limit_rows: int | None = None,
    ) -> Prepared:
        nodes = parse(sql)
        if len(nodes) != 1:
            raise SqlError(f"expected one query, got {len(nodes)} statements", sql=sql)
        node = nodes[0]
        if isinstance(node, Explain):
            node = node.this
        self._inline_views(node)
        stmt = Binder(self.catalog).bind(node, sql)
        if isinstance(stmt, st.CreateSink) and stmt.query is not None:
            self._create_sink(stmt.entry, replace=stmt.or_replace, if_not_exists=stmt.if_not_exists)
            stmt = stmt.query
        if not isinstance(stmt, st.Query):
            raise SqlError(
                "execute_streaming runs a SELECT or INSERT INTO ... SELECT; use execute() for DDL",
                sql=sql,
            )
        if allowed_lateness is not None:
            stmt.allowed_lateness_us = to_micros(
                parse_duration(allowed_lateness, what="allowed_lateness")
            )
        if late_output is not None:
            stmt.late_output = late_output
        return self._prepare_query(stmt, state_limit_rows=state_limit_rows)

    def _prepare_query(self, query: st.Query, *, state_limit_rows: int | None = None) -> Prepared:
        if query.late_output:
            self.catalog.require(query.late_output, kinds=("sink",))
        plan = prune_columns(build(query, max_windows_per_row=self.max_windows_per_row))
        limit = state_limit_rows if state_limit_rows is not None else self.state_limit_rows
        if limit:
            plan.settings["state_limit_rows"] = limit
        graph = lower(plan)
        self._check_sink(plan, graph)
        self._check_replayable(query)
        return Prepared(query, plan, graph)

    def _check_replayable(self, query: st.Query) -> None:
        """A query writing to an exactly-once sink replays input after a failure and must
        write the same rows again: volatile functions would make them differ."""
        entry = query.sink
        if entry is None or not registry.sink_class(entry.connector).EXACTLY_ONCE:
            return
        calls = functions.volatile_calls(query.ast)
        if calls:
            raise PlanError(
                f"the query writes to sink {entry.name!r} exactly once, but calls volatile "
                f"{', '.join(f + '()' for f in calls)}: a replay after a failure would write "
                "different rows. Declare the function immutable if it is, or compute the value "
                "before it enters the stream"
            )

    # -- functions ----------------------------------------------------------------------------
    def register_udf(
        self,
        name: str,
        fn: Any,
        input_types: Any,
        return_type: Any,
        volatility: str = "immutable",
    ) -> None:
        """Make ``fn`` callable as ``name(...)`` in SQL: it receives one ``pyarrow.Array``
        per argument (of ``input_types``) and returns an array of ``return_type`` and of the
        same length. Functions are registered for the whole process (every Context)."""
        functions.register_udf(name, fn, input_types, return_type, volatility)

    def register_process_function(
        self,
        name: str,
        handler: Any,
        *,
        output: Any,
        state: Any = None,
        time: str | None = None,
        limits: Any = None,
    ) -> None:
        """Make ``handler`` a keyed process function, applied in FROM as
        ``process(table, 'name', key => column)``: called per key with its new rows, its
        ``state`` (declared name -> type) and the timer that fired, it returns a
        :class:`~datum_sql.ProcessResponse` of rows of the ``output`` columns, state
        changes and timers (see docs/process-functions.md). Registered for the whole process."""
        register_process_function(
            name, handler, output=output, state=state, time=time, limits=limits
        )

    def register_table_function(
        self, name: str, fn: Any, input_types: Any, output_schema: Any
    ) -> None:
        """Make ``fn`` callable as ``name(...)`` in FROM (``LATERAL name(t.x) AS f`` or, with
        literal arguments, ``FROM name(1, 'a')``): it receives one ``pyarrow.Array`` per
        argument (of ``input_types``), the arguments of a batch of input rows, and yields
        record batches of ``output_schema`` plus ``input_row``, the position of the input
        row each output row came from. Registered for the whole process (every Context)."""
        from datum_sql.table_functions import register_table_function

        register_table_function(name, fn, input_types, output_schema)

    def register_udaf(
        self,
        name: str,
        impl: Any,
        input_types: Any,
        return_type: Any,
        state: Any = None,
        initial: Any = None,
    ) -> None:
        """Make ``impl`` callable as the aggregate ``name(...)`` in SQL: an object (or a
        class, created without arguments) with ``accumulate(state, *args)``,
        ``merge(state, other)`` and ``finish(state)``, and ``retract(state, *args)`` to read
        a changelog. ``state`` declares the engine-owned state (field name → type; default:
        ``impl.state``), ``initial`` its starting values (default: ``impl.initial``, else
        NULL). Registered for the whole process, like :meth:`register_udf`."""
        aggregate_functions.register_udaf(name, impl, input_types, return_type, state, initial)

    def _inline_views(self, node: exp.Expr) -> None:
        """A streaming statement reads each view through the view's own query (its result
        is no stream): see ``sql/views.py``. A CREATE MATERIALIZED VIEW keeps its SQL as
        written; :meth:`_plan_view` inlines it."""
        target = node.this if isinstance(node, Explain) else node
        if isinstance(target, exp.Create) and (target.args.get("kind") or "").upper() == "VIEW":
            return
        query = target.expression if isinstance(target, exp.Create | exp.Insert) else target
        if isinstance(query, exp.Query):
            inline_views(query, self.catalog)

    # -- materialized views -------------------------------------------------------------------
    def _create_view(self, stmt: st.CreateView, *, fresh: bool = False) -> StreamingQuery | None:
        """Start maintaining a materialized view: a streaming query whose result is kept.

        ``IF NOT EXISTS`` on an existing view returns its running query; ``OR REPLACE`` (or
        ``fresh``) cancels it, forgets its checkpoints and starts the new query."""
        entry = stmt.entry
        old = self.catalog.get(entry.name)
        if (
            old is not None
            and not isinstance(old, ViewEntry)
            and (stmt.or_replace or stmt.if_not_exists)
        ):
            raise AlreadyExists(
                f"{old.kind} {old.name!r} already exists and is not a materialized view; "
                f"DROP {old.kind.upper()} {old.name} first, or use another name",
                kind=old.kind,
                name=old.name,
            )
        replacing = old is not None and (stmt.or_replace or (stmt.if_not_exists and fresh))
        if old is not None and not replacing:
            if stmt.if_not_exists:
                return self.view(old.name) if getattr(old, "materialized", True) else None
            self.catalog.add(entry)  # raises: it already exists
        if old is not None:
            self._check_not_read(old.name)
        entry.state_limit_rows = self.state_limit_rows
        prepared, entry.reads = self._plan_view(entry)
        if entry.name.lower() in map(str.lower, entry.reads):
            raise PlanError(f"materialized view {entry.name!r} cannot read itself")
        schema = prepared.plan.root.schema
        entry.schema = (
            schema.remove(schema.get_field_index(lp.OP_COLUMN))
            if lp.OP_COLUMN in schema.names
            else schema
        )
        entry.persistent = all(
            getattr(self.catalog.get(name), "persistent", True) for name in entry.reads
        )
        if old is not None:
            self._stop_view(old.name)
        self.catalog.add(entry, replace=old is not None)
        if not entry.materialized:  # a named query: each query reading it runs it
            return None
        try:
            return self._run_view(entry, prepared, fresh=True)
        except BaseException:
            self.catalog.drop(entry.name, "materialized view")
            raise

    def _plan_view(self, entry: ViewEntry) -> tuple[Prepared, list[str]]:
        """The view's streaming query, with the views it reads inlined; and every table
        it depends on (those views, then the sources)."""
        node = parse_one(entry.query)
        assert isinstance(node, exp.Query)
        views = inline_views(node, self.catalog)
        query = Binder(self.catalog).bind_query(node, entry.query)
        query.sql = entry.query
        prepared = self._prepare_query(query, state_limit_rows=entry.state_limit_rows or 0)
        return prepared, views + [t for t in query.tables if t not in views]

    def _run_view(self, entry: ViewEntry, prepared: Prepared, *, fresh: bool) -> StreamingQuery:
        handle = self._start(
            prepared, name=_view_query_name(entry.name), retain_all=True,
            checkpointed=entry.persistent, fresh=fresh,
        )  # fmt: skip
        self._views[entry.name.lower()] = handle
        self._view_errors.pop(entry.name.lower(), None)
        return handle

    def _restart_views(self) -> None:
        """Restart every view of the catalog from its last checkpoint. A view that cannot
        restart (a source gone, its query changed) does not stop the Context from opening:
        :meth:`view` and queries over it report why."""
        for entry in self.catalog.views():
            if not entry.materialized:
                continue
            try:
                prepared, _ = self._plan_view(entry)
                self._run_view(entry, prepared, fresh=False)
            except DatumError as exc:
                self._view_errors[entry.name.lower()] = exc

    def _stop_view(self, name: str) -> None:
        """Cancel the view's query and delete its checkpoints (it will not be restarted)."""
        handle = self._views.pop(name.lower(), None)
        if handle is not None:
            handle.cancel()
        self._view_errors.pop(name.lower(), None)
        if self.state_dir is not None:
            directory = self._query_dir(_view_query_name(name))
            if directory.exists():
                lock = QueryLock(directory, _view_query_name(name))
                try:
                    shutil.rmtree(directory)
                finally:
                    lock.release()

    def _check_not_read(self, name: str) -> None:
        """Refuse to drop or replace a table a materialized view depends on."""
        entry = self.catalog.get(name)
        for view in self.catalog.views():
            if view.name.lower() != name.lower() and name.lower() in map(str.lower, view.reads):
                kind = entry.kind if entry is not None else "table"
                raise PlanError(
                    f"{kind} {name!r} is read by materialized view {view.name!r}; "
                    f"DROP MATERIALIZED VIEW {view.name} first"
                )

    def view(self, name: str) -> StreamingQuery:
        """The streaming query maintaining materialized view ``name``; a restarted view's
        once its checkpoint is restored, so that its result is complete."""
        handle = self._views.get(name.lower())
        if handle is not None:
            if not handle.executor.restored.wait(VIEW_RESTORE_TIMEOUT_S):
                raise PlanError(
                    f"materialized view {name!r} is still restoring its checkpoint after "
                    f"{VIEW_RESTORE_TIMEOUT_S:.0f} s; try again"
                )
            return handle
        entry = self.catalog.require(name, kinds=("materialized view",))
        if isinstance(entry, ViewEntry) and not entry.materialized:
            raise PlanError(
                f"view {entry.name!r} is not materialized: no query maintains its result. "
                f"Read it in a query (SELECT ... FROM {entry.name}), or create it with "
                "CREATE MATERIALIZED VIEW"
            )
        error = self._view_errors.get(entry.name.lower())
        raise PlanError(
            f"materialized view {entry.name!r} could not be restarted from its checkpoint: "
            f"{error or 'its query is not running'}. Fix that and open the Context again, "
            f"or DROP MATERIALIZED VIEW {entry.name} and create it again"
        ) from error

    def _check_sink(self, plan: lp.LogicalPlan, graph: JobGraph) -> None:
        root = plan.root
        if not isinstance(root, lp.SinkWrite):
            return
        entry = self.catalog.require(root.table, kinds=("sink",))
        assert isinstance(entry, SinkEntry)
        sink = registry.create_sink(entry.connector, self._spec(entry))
        if plan.updating and not sink.accepts_changelog:
            raise PlanError(
                f"sink {entry.name!r} ({entry.connector}) is append-only but the query produces "
                "updates (a changelog). Add EMIT ON WINDOW CLOSE to a windowed query, or write "
                "to an upsert sink (connector = 'duckdb' with primary_key = '...')"
            )
        # the SinkWrite is lowered last
        _check_upsert_key(
            entry.name, getattr(sink, "primary_key", None), graph.nodes[-1].upsert_keys
        )
        if entry.schema is not None:
            _check_columns(entry.name, entry.schema, root.schema)

    # -- running ------------------------------------------------------------------------------
    def _start(
        self,
        prepared: Prepared,
        name: str | None = None,
        max_pending_rows: int = 1_000_000,
        retain_all: bool = False,
        fresh: bool = False,
        checkpointed: bool = False,
        replay: ReplayChunk | None = None,
    ) -> StreamingQuery:
        """Run ``prepared``. An INSERT, and a ``checkpointed`` SELECT (a persistent view's,
        whose result goes into the checkpoints too), checkpoint under ``state_dir``; a
        ``replay`` chunk reads only its range of the sources and checkpoints into the
        replay's own store, never the query's."""
        sink = prepared.query.sink
        name = name or (f"insert_into_{sink.name}" if sink else f"q{len(self._queries) + 1}")
        if any(q.name == name for q in self.queries):
            raise PlanError(f"a query named {name!r} is already running; cancel it or pass name=")
        if (sink is not None or checkpointed) and self.state_dir is not None and replay is None:
            lock: QueryLock | None = QueryLock(self._query_dir(name), name)
        else:
            lock = None
        try:
            return self._launch(prepared, name, max_pending_rows, retain_all, fresh, lock, replay)
        except BaseException:
            if lock is not None:
                lock.release()
            raise

    def _launch(
        self, prepared: Prepared, name: str, max_pending_rows: int, retain_all: bool,
        fresh: bool, lock: QueryLock | None, replay: ReplayChunk | None = None,
    ) -> StreamingQuery:  # fmt: skip
        graph = prepared.graph
        store, recovered = self._checkpoints(name, graph, fresh) if lock else (None, None)
        if replay is not None:
            store, recovered = replay.store, replay.store.latest()
        sources: dict[str, Source] = {}
        sinks: dict[str, Sink] = {}
        buffer: ResultBuffer | None = None
        one_shot: list[int] = []
        tables: dict[str, dict[str, Any]] = {}  # node id -> table, connector (for manifests)
        for node in graph.sources:
            if node.config.get("values"):  # the one input row of FROM f(literals)
                sources[node.id] = registry.create_source("arrow", ConnectorSpec(
                    name=node.kind, options={}, schema=node.schema,
                    obj=pa.table({VALUES_COLUMN: pa.array([0], pa.int8())}),
                ))  # fmt: skip
                tables[node.id] = {"table": node.kind, "connector": "values"}
                continue
            entry = self.catalog.require(node.kind, kinds=("source",))
            assert isinstance(entry, SourceEntry)
            tables[node.id] = {"table": entry.name, "connector": entry.connector}
            if entry.connector == "arrow" and not is_replayable(entry.obj):
                if id(entry.obj) in self._iterators_read:
                    raise PlanError(
                        f"source {entry.name!r} is a one-shot iterator that another query already "
                        "read; register the data again (or a pyarrow Table / list of batches, "
                        "which any number of queries can read)"
                    )
                if id(entry.obj) in one_shot:
                    # two readers of it (a stream and a lookup or subquery table): the
                    # second would see nothing
                    raise PlanError(
                        f"source {entry.name!r} is a one-shot iterator this query reads twice "
                        "(as a stream and as a lookup join's or subquery's table); register it "
                        "as a pyarrow Table or list of batches, which can be read any number "
                        "of times"
                    )
                one_shot.append(id(entry.obj))
            spec = self._spec(entry, query=name)
            assert node.schema is not None
            if entry.schema is not None and node.schema.names != entry.schema.names:
                spec.columns = tuple(node.schema.names)
            sources[node.id] = (
                replay.range.source(entry, spec)
                if replay is not None
                else registry.create_source(entry.connector, spec)
            )
        bounded = all(s.bounded for s in sources.values())
        for node in graph.sinks:
            if node.kind == COLLECT:
                assert node.schema is not None
                buffer = ResultBuffer(
                    node.schema,
                    bounded=bounded or retain_all,
                    max_pending=max_pending_rows,
                    key=node.upsert_key,
                    name=f"query {name!r}",
                    key_column=node.config.get("key_column"),
                )
                sinks[node.id] = CollectSink(buffer, checkpointed=store is not None)
                tables[node.id] = {"table": name, "connector": "result",
                                   "delivery": IN_CHECKPOINT, "upserts": True}  # fmt: skip
                continue
            entry = self.catalog.require(node.kind, kinds=("sink",))
            assert isinstance(entry, SinkEntry)
            sink = sinks[node.id] = registry.create_sink(entry.connector, self._spec(entry))
            tables[node.id] = {
                "table": entry.name,
                "connector": entry.connector,
                "delivery": EXACTLY_ONCE if sink.EXACTLY_ONCE else AT_LEAST_ONCE,
                "upserts": sink.accepts_changelog,
            }
        interval = self.checkpoint_interval.total_seconds() if self.checkpoint_interval else None
        executor = Executor(
            graph, sources, sinks, commit_interval_s=interval, store=store, recovered=recovered,
            description={"name": name, "sql": _statement_text(prepared.query), "tables": tables},
            end_input=replay is None or replay.ends_input, restore_positions=replay is None,
        )  # fmt: skip

        def on_exit(query: StreamingQuery) -> None:
            self._forget(query)
            if lock is not None:
                lock.release()

        query = StreamingQuery(
            executor, sql=prepared.query.sql, buffer=buffer, name=name, on_exit=on_exit
        )
        with self._lock:
            self._queries.append(query)
        self._iterators_read.update(one_shot)
        return query.start()

    def _query_dir(self, name: str) -> Path:
        assert self.state_dir is not None
        return query_dir(self.state_dir, name)

    def _checkpoints(
        self, name: str, graph: JobGraph, fresh: bool
    ) -> tuple[CheckpointStore, Recovered | None]:
        """The query's checkpoint store and the checkpoint to resume from, if any (the
        caller holds the query's lock)."""
        root = self._query_dir(name) / CHECKPOINTS_DIR
        if fresh and root.exists():
            shutil.rmtree(root)
        store = CheckpointStore(root)
        recovered = store.latest()
        if recovered is not None and recovered.manifest.fingerprint != graph.fingerprint():
            raise CheckpointError(
                f"query {name!r} changed since its checkpoint {recovered.manifest.checkpoint_id} "
                f"(plan fingerprint {recovered.manifest.fingerprint} -> {graph.fingerprint()}): "
                "its state cannot carry over. Run the original SQL to resume, or start over with "
                "fresh=True (CLI: --fresh)"
            )
        return store, recovered

    def _forget(self, query: StreamingQuery) -> None:
        with self._lock:
            if query in self._queries:
                self._queries.remove(query)

    def _spec(self, entry: SourceEntry | SinkEntry, query: str | None = None) -> ConnectorSpec:
        extra: dict[str, Any] = {}
        if isinstance(entry, SourceEntry) and entry.include:
            extra["include"] = list(entry.include)
        return ConnectorSpec(
            name=entry.name, options=reveal(entry.options), schema=entry.schema,
            format=entry.format, encode=entry.encode,
            event_time=getattr(entry, "event_time", None), obj=entry.obj, extra=extra,
            query=query,
        )  # fmt: skip

    @property
    def queries(self) -> list[StreamingQuery]:
        """Streaming queries of this context that are still running."""
        with self._lock:
            return list(self._queries)

    def close(self, timeout: float | None = 30.0) -> None:
        """Cancel every running query of this context."""
        for q in self.queries:
            q.cancel(timeout)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def serve(
        self,
        listen: str = "127.0.0.1:0",
        *,
        token_file: str | Path | None = None,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
        insecure_no_auth: bool = False,
        subscription_stall_limit: timedelta | float | str | None = None,
        subscription_buffer_rows: int | None = None,
    ) -> Any:
        """Serve this context over Arrow Flight SQL at ``listen`` (``HOST:PORT``; port 0
        picks a free one) without blocking; returns a handle with ``.address``,
        ``.location`` and ``.stop()``. ``token_file`` holds one ``TOKEN ROLE`` per line
        (roles ``read`` and ``admin``); ``insecure_no_auth`` serves without tokens, on a
        loopback address only. A ``SUBSCRIBE TO`` client holds at most
        ``subscription_buffer_rows`` unread rows; one whose buffer stays full for
        ``subscription_stall_limit`` (seconds or a duration) is disconnected (defaults: 100,000
        rows, 30 s). See
        docs/server.md; needs ``datum-sql[server]``."""
        from datum_sql.server import serve

        return serve(
            self, listen, token_file=token_file, tls_cert=tls_cert, tls_key=tls_key,
            insecure_no_auth=insecure_no_auth, subscription_stall_limit=subscription_stall_limit,
            subscription_buffer_rows=subscription_buffer_rows,
        )  # fmt: skip

    # -- batch --------------------------------------------------------------------------------
    def sql(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None) -> pa.Table:
        """Run a query as a batch over what the tables hold now; returns a pyarrow Table.

        Sources are read to their current end, sinks show what they committed, and
        materialized views their current state. DataFusion runs the query.
        ``params`` binds placeholders as literals: a dict for ``:name``, a list for ``?``
        or ``$1`` (see datum_sql/sql/params.py).
        """
        if params is not None:
            sql = bind_params(sql, params)
        return run_sql(
            sql,
            BatchTables(
                self.catalog, read=self._read_all, stream=self._run_bounded,
                max_windows_per_row=self.max_windows_per_row,
                scan=lambda entry: scan(entry, self._spec),
            ),
        )  # fmt: skip

    def _read_all(self, entry: Any) -> pa.Table:
        """Every row a table holds now (a source read to its current end, a sink's output,
        a materialized view's state)."""
        return read_all(entry, self._spec, lambda name: self.view(name).latest_state())

    def _run_bounded(self, tables: dict[str, tuple[pa.Table, str | None]], sql: str) -> pa.Table:
        """The final result of streaming ``sql`` over bounded ``tables`` (name -> rows and
        event-time column), on an in-memory engine of its own."""
        with Context(state_dir=None, checkpoint_interval=None) as engine:
            engine.max_windows_per_row = self.max_windows_per_row
            for name, (table, event_time) in tables.items():
                engine.register_arrow(name, table, event_time=event_time)
            return engine.execute_streaming(sql).to_arrow()

    # -- checking and peeking -----------------------------------------------------------------
    def verify(
        self,
        sql: str,
        *,
        allowed_lateness: timedelta | float | str | None = None,
        snapshot_rows: int = 10_000,
        timeout: float | None = 120.0,
    ) -> Any:
        """Run SELECT ``sql`` as a batch and as a streaming query over the same bounded
        snapshot of its sources; a result that is truthy when they agree and lists the
        differing rows (and late rows) when not. Unbounded generators are cut to their
        first ``snapshot_rows`` rows. Starts no query of this context, commits nothing.
        Implemented by the notebook layer (datum_sql/notebook/verify.py)."""
        return extension("context.verify")(
            self, sql, allowed_lateness=allowed_lateness, snapshot_rows=snapshot_rows,
            timeout=timeout,
        )  # fmt: skip

    def sample(self, table: str, n: int = 10) -> pa.Table:
        """Peek at up to ``n`` rows of ``table`` without starting a query or committing
        offsets: the first rows of files, Arrow data and generators; the newest ``n``
        messages (decoded) of a Kafka topic; what a sink or view holds now."""
        from datum_sql.sample import sample

        return sample(self, table, n)

    # -- catalog from Python -----------------------------------------------------------------
    def register_arrow(
        self,
        name: str,
        data: Any,
        *,
        schema: pa.Schema | None = None,
        event_time: str | None = None,
        watermark: BoundedOutOfOrderness | timedelta | int | float | None = None,
        idle_timeout: timedelta | float | str | None = None,
        late_output: str | None = None,
        batch_size: int | None = None,
        replace: bool = True,
    ) -> None:
        """Register in-memory data as a source table: a pyarrow Table, RecordBatch, list of
        them or RecordBatchReader; a pandas or polars DataFrame, a polars LazyFrame, a
        DuckDB relation or any object with ``__arrow_c_stream__``; a dict of columns; or an
        (async) iterator of batches or DataFrames.

        DataFrames, relations, Arrow streams and dicts are made a pyarrow Table here, once
        (zero-copy where Arrow allows; strings as ``string``, categoricals decoded; a named
        pandas index becomes a column), so they read like a Table: any number of times, in
        streaming and batch queries. A LazyFrame is collected here; to stream a large one
        instead, register ``lazy.collect_batches()`` with ``schema=``: an iterator, read
        once. A RecordBatchReader and iterators are read once, when a query reads them.

        It lives as long as this process: a new Context on the same state_dir will not see it.
        """
        data = as_arrow_data(data, name, schema)
        schema = schema or arrow_schema_of(data)
        if schema is None:
            raise PlanError(
                f"register_arrow({name!r}): the data does not tell its schema (an iterator or an "
                "empty list); pass schema="
            )
        options: dict[str, Any] = {}
        if batch_size:
            options["batch_size"] = int(batch_size)
        if idle_timeout is not None:
            options["idle_timeout"] = str(_duration(idle_timeout, "idle_timeout").total_seconds())
        if not is_replayable(data) and not isinstance(data, pa.RecordBatchReader):
            options.setdefault("bounded", "false")
        entry = SourceEntry(
            name=name, connector="arrow", options=options, schema=schema,
            event_time=event_time, watermark_delay_us=_delay(watermark, event_time, schema),
            late_output=late_output, persistent=False, obj=data,
        )  # fmt: skip
        self._create_source(entry, replace=replace)

    #: Short for :meth:`register_arrow`.
    register = register_arrow

    def register_kafka_topic(
        self,
        name: str,
        *,
        topic: str,
        bootstrap_servers: str,
        schema: pa.Schema,
        format: str = "json",
        event_time: str | None = None,
        watermark: BoundedOutOfOrderness | timedelta | None = None,
        group_id: str | None = None,
        startup_mode: str | None = None,
        bounded: bool = False,
        bad_records: str | None = None,
        dead_letter_sink: str | None = None,
        idle_timeout: timedelta | float | str | None = None,
        late_output: str | None = None,
        include: list[str] | None = None,
        options: dict[str, Any] | None = None,
        replace: bool = True,
    ) -> None:
        """Register a Kafka topic as a source table (persisted in the catalog like SQL DDL)."""
        opts: dict[str, Any] = {"topic": topic, "properties.bootstrap.server": bootstrap_servers}
        if group_id:
            opts["properties.group.id"] = group_id
        if startup_mode:
            opts["scan.startup.mode"] = startup_mode
        if bounded:
            opts["scan.bounded.mode"] = "latest"
        if bad_records:
            opts["bad_records"] = bad_records
        if dead_letter_sink:
            opts["dead_letter.sink"] = dead_letter_sink
        if idle_timeout is not None:
            opts["idle_timeout"] = str(_duration(idle_timeout, "idle_timeout").total_seconds())
        opts.update(options or {})
        entry = SourceEntry(
            name=name, connector="kafka", options=opts, schema=schema, event_time=event_time,
            watermark_delay_us=_delay(watermark, event_time, schema), encode=format.upper(),
            format="PLAIN", include=[(k, k if k != "timestamp" else "kafka_timestamp") for k in include or []],
            late_output=late_output,
        )  # fmt: skip
        self._create_source(entry, replace=replace)

    def register_append_sink(self, name: str, target: Any, *, replace: bool = True) -> None:
        """Register a sink: a callable receiving each ``pyarrow.RecordBatch``, or a sink object
        such as ``ds.ParquetSink('out/dir')``."""
        if isinstance(target, SinkEntry):
            entry = target
            entry.name = name
        elif callable(target) or hasattr(target, "write"):
            entry = SinkEntry(name=name, connector="callback", persistent=False, obj=target)
        else:
            raise PlanError(
                f"register_append_sink({name!r}): expected a callable or a sink, got {type(target).__name__}"
            )
        self._create_sink(entry, replace=replace)

    def _create_source(
        self, entry: SourceEntry, *, replace: bool = False, if_not_exists: bool = False
    ) -> None:
        # Building the connector checks its options now, and tells what the planner needs:
        # the schema (files, generators, DuckDB know it) and whether the source ends.
        source = registry.create_source(entry.connector, self._spec(entry))
        # The connector's schema: what it infers, or the declared columns plus metadata
        # columns asked for with INCLUDE.
        entry.schema = source.schema if entry.schema is None or entry.include else entry.schema
        entry.bounded = source.bounded
        if entry.event_time is not None:
            idx = entry.schema.get_field_index(entry.event_time)
            if idx < 0:
                raise PlanError(
                    f"source {entry.name!r}: event-time column {entry.event_time!r} does not exist; columns: {', '.join(entry.schema.names)}"
                )
            if not ordered_watermark_type(entry.schema.field(idx).type):
                raise PlanError(
                    f"source {entry.name!r}: event-time column {entry.event_time!r} must be a TIMESTAMP, DATE, integer or DECIMAL, is {entry.schema.field(idx).type}"
                )
        for key in ("late_output", "dead_letter.sink"):
            target = entry.late_output if key == "late_output" else entry.options.get(key)
            if target and not isinstance(self.catalog.get(target), SinkEntry):
                raise PlanError(
                    f"source {entry.name!r}: {key} names {target!r}, which is not a sink; CREATE SINK it first"
                )
        if replace:
            self._check_replaceable(entry)
        self.catalog.add(entry, replace=replace, if_not_exists=if_not_exists)

    def _create_sink(
        self, entry: SinkEntry, *, replace: bool = False, if_not_exists: bool = False
    ) -> None:
        cls = registry.sink_class(entry.connector)
        registry.check_options(cls, entry.connector, entry.name, entry.options)
        if replace:
            self._check_replaceable(entry)
        self.catalog.add(entry, replace=replace, if_not_exists=if_not_exists)

    def _check_replaceable(self, entry: SourceEntry | SinkEntry) -> None:
        """A replacement keeps the kind, and never pulls a table from under a running
        query (which would go on with the old one) or a view (whose restart would resume
        the old table's positions in the new one)."""
        old = self.catalog.get(entry.name)
        if old is None:
            return
        if old.kind != entry.kind:
            raise AlreadyExists(
                f"{old.kind} {old.name!r} already exists; DROP {old.kind.upper()} {old.name} "
                f"first to create a {entry.kind} of that name",
                kind=old.kind,
                name=old.name,
            )
        self._check_unused(old.name)
        self._check_not_read(old.name)

    def _check_unused(self, name: str) -> None:
        for q in self.queries:
            if any(
                n.kind.lower() == name.lower()
                for n in q.executor.graph.nodes
                if n.role != "operator"
            ):
                raise PlanError(f"{name!r} is used by running query {q.name}; cancel it first")

    def _show(self, what: str) -> pa.Table:
        what = what.lower()
        if what in ("sources", "tables"):
            rows = [e.describe() for e in self.catalog.sources()]
        elif what == "sinks":
            rows = [e.describe() for e in self.catalog.sinks()]
        elif what == "views":
            rows = [e.describe() for e in self.catalog.views()]
        elif what == "materialized views":
            rows = [e.describe() for e in self.catalog.views() if e.materialized]
        elif what == "queries":
            return _queries_table(self.queries)
        else:
            raise SqlError(
                f"SHOW {what.upper()} is not supported; "
                "SHOW SOURCES | SINKS | VIEWS | MATERIALIZED VIEWS | QUERIES"
            )
        for r in rows:
            if "options" in r:
                r["options"] = ", ".join(f"{k}={v}" for k, v in r["options"].items())
        if not rows:
            return pa.table({"name": pa.array([], pa.string())})
        return pa.Table.from_pylist(rows)

    def _set(self, name: str, value: Any) -> None:
        if name == "checkpoint_interval":
            self.checkpoint_interval = _duration(value, "checkpoint_interval")
            return
        if name == "state_limit_rows":
            self.state_limit_rows = _positive_int(value, name)
            return
        if name == "max_windows_per_row":
            limit = _positive_int(value, name)
            if not limit:
                raise PlanError(f"{name} must be a whole number of windows, at least 1")
            self.max_windows_per_row = limit
            return
        raise PlanError(
            f"unknown setting {name!r}; settings: checkpoint_interval, state_limit_rows, "
            "max_windows_per_row"
        )

    def __repr__(self) -> str:
        return (
            f"<datum_sql.Context state_dir={str(self.state_dir)!r} tables={self.catalog.names()}>"
        )


def _queries_table(queries: Sequence[StreamingQuery]) -> pa.Table:
    """``SHOW QUERIES``: one row per running query of the context, its SQL with secrets
    masked."""
    rows = []
    for q in queries:
        status = q.status()
        rows.append({
            "name": q.name, "state": status["state"], "sql": redact_sql(q.executor.description.get("sql", q.sql)),
            "rows_in": status["rows_in"], "rows_out": status["rows_out"],
            "late_rows": status["late_rows"], "elapsed_s": status["elapsed_s"],
            "watermark": status["watermark"],
            "last_checkpoint": (status["last_checkpoint"] or {}).get("time"),
        })  # fmt: skip
    return pa.Table.from_pylist(rows, schema=_QUERIES_SCHEMA)


_QUERIES_SCHEMA = pa.schema([
    ("name", pa.string()), ("state", pa.string()), ("sql", pa.string()),
    ("rows_in", pa.int64()), ("rows_out", pa.int64()), ("late_rows", pa.int64()),
    ("elapsed_s", pa.float64()), ("watermark", pa.string()), ("last_checkpoint", pa.string()),
])  # fmt: skip


def _positive_int(value: Any, what: str) -> int | None:
    if value is None or str(value).lower() in ("none", "null", "0", "off"):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise PlanError(f"{what} must be a whole number of rows, got {value!r}") from None
    if number < 0:
        raise PlanError(f"{what} must not be negative")
    return number


def _duration(value: Any, what: str) -> timedelta:
    try:
        return parse_duration(value, what=what)
    except ValueError as exc:
        raise PlanError(str(exc)) from None


def _view_query_name(view: str) -> str:
    """The name of the query maintaining ``view`` (and of its checkpoint directory)."""
    return f"view {view}"


def _statement_text(query: st.Query) -> str:
    """The SQL a query runs, with the sink it feeds."""
    return query.sql if query.sink is None else f"INSERT INTO {query.sink.name} {query.sql}"


def _is_streaming(node: Any) -> bool:
    return not isinstance(node, exp.Query)


def _delay(
    watermark: BoundedOutOfOrderness | timedelta | int | float | None,
    event_time: str | None,
    schema: pa.Schema | None = None,
) -> int | None:
    """The watermark delay in the event-time column's unit: microseconds of a duration for
    a TIMESTAMP or DATE, a number of units for an integer or DECIMAL column."""
    if event_time is None:
        if watermark is not None:
            raise PlanError("watermark= needs event_time= (the column the watermark follows)")
        return None
    if watermark is None:
        return None  # no derived watermark: source-provided markers and end of input only
    t = schema.field(event_time).type if schema is not None and event_time in schema.names else None
    counted = t is not None and (pa.types.is_integer(t) or pa.types.is_decimal(t))
    if isinstance(watermark, bool):
        raise PlanError(f"watermark={watermark!r}: give a delay, not a boolean")
    if isinstance(watermark, int | float):
        if not counted:
            raise PlanError(
                f"watermark={watermark!r}: a number is a delay in the units of an integer or "
                f"DECIMAL event-time column; {event_time!r} is {t or 'not declared'}: use "
                "ds.BoundedOutOfOrderness(seconds=...)"
            )
        scale = t.scale if pa.types.is_decimal(t) else 0  # type: ignore[union-attr]
        units = Decimal(str(watermark)).scaleb(scale)
        if units < 0 or units != units.to_integral_value():
            raise PlanError(
                f"watermark={watermark!r}: the delay of {event_time!r} ({t}) must be a "
                "non-negative number it can hold"
            )
        return int(units)
    if isinstance(watermark, timedelta):
        watermark = BoundedOutOfOrderness(watermark)
    if counted and watermark.delay_micros == 0:
        return 0  # no delay is no delay in any unit
    if counted:
        raise PlanError(
            f"event-time column {event_time!r} is {t}, not a time: give watermark= as a number "
            f"of its units (watermark=5 for 'watermark = max {event_time} - 5'), not a duration"
        )
    return watermark.delay_micros


def _check_columns(sink: str, declared: pa.Schema, produced: pa.Schema) -> None:
    produced_names = [n for n in produced.names if n != "_op"]
    if produced_names != list(declared.names):
        raise PlanError(
            f"sink {sink!r} declares columns ({', '.join(declared.names)}) but the query "
            f"produces ({', '.join(produced_names)}); alias the SELECT list to match"
        )
    for f in declared:
        got = produced.field(f.name).type
        if got.equals(f.type):
            continue
        if not _widens(got, f.type):
            raise PlanError(
                f"sink {sink!r} column {f.name!r} is {f.type} but the query produces {got}; "
                f"add CAST({f.name} AS ...) to the SELECT"
            )


def _widens(src: pa.DataType, dst: pa.DataType) -> bool:
    """True when every value of ``src`` fits ``dst`` exactly (int32 → int64, ...)."""
    if pa.types.is_integer(src) and pa.types.is_integer(dst):
        return dst.bit_width >= src.bit_width and (
            pa.types.is_signed_integer(dst) or not pa.types.is_signed_integer(src)
        )
    if pa.types.is_integer(src) and pa.types.is_floating(dst):
        return True
    if pa.types.is_floating(src) and pa.types.is_floating(dst):
        return dst.bit_width >= src.bit_width
    return bool(pa.types.is_string(src) and pa.types.is_large_string(dst))


def ParquetSink(path: str | Path, **options: Any) -> SinkEntry:
    """A Parquet sink for ``register_append_sink``: a directory of part files."""
    return SinkEntry(name="", connector="parquet", options={"path": str(path), **options})


def CsvSink(path: str | Path, **options: Any) -> SinkEntry:
    """A CSV sink for ``register_append_sink``: a directory of part files."""
    return SinkEntry(name="", connector="csv", options={"path": str(path), **options})


def JsonlSink(path: str | Path, **options: Any) -> SinkEntry:
    """A JSON-lines sink for ``register_append_sink``: a directory of part files."""
    return SinkEntry(name="", connector="jsonl", options={"path": str(path), **options})


def _check_upsert_key(
    sink: str, primary_key: list[str] | None, keys: tuple[tuple[str, ...], ...]
) -> None:
    """An upsert sink's primary key must identify the changelog's rows: hold every column
    of one of the keys the plan carries, or rows of different keys would overwrite each
    other."""
    if not primary_key or not keys or any(set(k) <= set(primary_key) for k in keys):
        return
    options = " or ".join(f"'{', '.join(k)}'" for k in keys)
    raise PlanError(
        f"sink {sink!r} upserts by primary_key ({', '.join(primary_key)}), but the query's "
        f"rows are identified by {options}: rows that differ in a column outside the "
        f"primary key would overwrite each other. Set primary_key = {options}"
    )


def DuckDBSink(
    path: str | Path, table: str, *, primary_key: str | None = None, **options: Any
) -> SinkEntry:
    """A DuckDB table sink for ``register_append_sink`` (upsert when ``primary_key`` is set;
    other options, such as ``lock_timeout``, as in ``CREATE SINK``)."""
    options = {"path": str(path), "table": table, **options}
    if primary_key:
        options["primary_key"] = primary_key
    return SinkEntry(name="", connector="duckdb", options=options)
