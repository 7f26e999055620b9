"""What a statement sent to the server needs, and running it on the Context.

A statement is *read-only* when every part of it is a ``SELECT`` (no ``INTO``), ``SHOW`` or
``EXPLAIN``; anything else (CREATE, DROP, SET, INSERT, CANCEL QUERY, CREATE FUNCTION) needs
the ``admin`` role. The result of any statement is an Arrow table: a query's rows, SHOW's
listing, EXPLAIN's plan in a ``plan`` column, a started INSERT job's name and state, and
an empty table for DDL.

``CANCEL QUERY name`` is the server's own statement: it cancels a running query of the
Context (which commits what the query processed) and answers with its final state.
``SUBSCRIBE TO <select>`` is the other (read-only): the server streams the SELECT as a
streaming query (see ``server/subscriptions.py``); :func:`subscription_query` finds it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.engine.runtime.query import StreamingQuery
from datum_sql.errors import PlanError, SqlError
from datum_sql.sql.dialect import Explain
from datum_sql.sql.parse import parse

if TYPE_CHECKING:
    from datum_sql.context import Context
    from datum_sql.server.jobs import Jobs

__all__ = ["Executor", "needs_admin", "subscription_query"]

_CANCEL = re.compile(
    r"^\s*CANCEL\s+QUERY\s+(?:\"((?:[^\"]|\"\")+)\"|([A-Za-z_][\w]*))\s*;?\s*$", re.I
)
_CANCEL_START = re.compile(r"^\s*CANCEL\b", re.I)

_SUBSCRIBE = re.compile(r"^\s*SUBSCRIBE\s+TO\s+(.*?)[\s;]*$", re.I | re.S)
_SUBSCRIBE_START = re.compile(r"^\s*SUBSCRIBE\b", re.I)
_NAME = re.compile(r"^(?:\"(?:[^\"]|\"\")+\"|[A-Za-z_]\w*)$")

JOB_SCHEMA = pa.schema([("query", pa.string()), ("state", pa.string())])


def _cancel_target(sql: str) -> str | None:
    """The query name of a ``CANCEL QUERY name`` statement (None for any other)."""
    if not _CANCEL_START.match(sql):
        return None
    m = _CANCEL.match(sql)
    if m is None:
        raise SqlError("expected CANCEL QUERY name (the name SHOW QUERIES lists)", sql=sql)
    return m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2)


def subscription_query(sql: str) -> str | None:
    """The SELECT of a ``SUBSCRIBE TO <select>`` statement (None for any other statement);
    a SqlError for a SUBSCRIBE that is not one, a PlanError for a view's name."""
    if not _SUBSCRIBE_START.match(sql):
        return None
    m = _SUBSCRIBE.match(sql)
    if m is None or not m.group(1):
        raise SqlError("expected SUBSCRIBE TO SELECT ...", sql=sql)
    target = m.group(1)
    if _NAME.match(target):
        raise PlanError(
            f"SUBSCRIBE TO {target}: subscribing to a materialized view's changes is not "
            "served yet (the view keeps its current result; its changes cannot be observed). "
            f"SELECT * FROM {target} reads its current state; SUBSCRIBE TO SELECT ... FROM "
            f"{target} runs the view's query anew, from the start of its sources"
        )
    nodes = parse(target)
    if len(nodes) != 1 or not isinstance(nodes[0], exp.Query) or nodes[0].args.get("into"):
        raise SqlError("SUBSCRIBE TO takes one SELECT (no INTO, no other statement)", sql=sql)
    return target


def _is_read(node: exp.Expr) -> bool:
    if isinstance(node, exp.Show):
        return True
    if isinstance(node, Explain):
        return True
    return isinstance(node, exp.Query) and node.args.get("into") is None


def needs_admin(sql: str) -> bool:
    """Whether ``sql`` changes anything (and so needs the admin role); a SqlError for text
    that does not parse."""
    if _cancel_target(sql) is not None:
        return True
    if subscription_query(sql) is not None:
        return False
    return not all(_is_read(node) for node in parse(sql))


class _ReadWriteLock:
    """Many readers at once, or one writer: queries run side by side, DDL alone."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writing:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._readers:
                self._cond.wait()
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class Executor:
    """Runs statements on one Context for many callers at once."""

    def __init__(self, ctx: Context, jobs: Jobs | None = None) -> None:
        self.ctx = ctx
        self.jobs = jobs
        self.lock = _ReadWriteLock()

    def run(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pa.Table:
        """The result of ``sql`` as a table (see the module docstring)."""
        if subscription_query(sql) is not None:
            raise PlanError(
                "SUBSCRIBE TO streams rows as they come: execute it as a query (Flight SQL "
                "GetFlightInfo then DoGet; ADBC cursor.execute then fetch_record_batch)"
            )
        target = _cancel_target(sql)
        if target is not None:
            if params:
                raise SqlError("CANCEL QUERY takes no parameters", sql=sql)
            return self._cancel(target)
        admin = needs_admin(sql)
        if params is not None:
            nodes = parse(sql)
            if len(nodes) != 1 or not isinstance(nodes[0], exp.Query) or admin:
                raise SqlError("parameters bind in a single SELECT only", sql=sql)
            with self.lock.read():
                return self.ctx.sql(sql, params=params)
        with self.lock.write() if admin else self.lock.read():
            result = self.ctx.execute(sql)
            if isinstance(result, StreamingQuery) and self.jobs is not None:
                nodes = parse(sql)
                if len(nodes) == 1 and isinstance(nodes[0], exp.Insert):
                    self.jobs.add(result, sql)
            return _as_table(result)

    def _cancel(self, name: str) -> pa.Table:
        with self.lock.write():
            matches = [q for q in self.ctx.queries if q.name.lower() == name.lower()]
        if not matches:
            running = ", ".join(q.name for q in self.ctx.queries) or "none"
            raise PlanError(f"no running query named {name!r} (running: {running})")
        query = matches[0]
        query.cancel()
        if self.jobs is not None:
            self.jobs.forget(query.name)
        return pa.Table.from_pylist([{"query": query.name, "state": query.state}], JOB_SCHEMA)

    def schema_of(self, sql: str) -> pa.Schema:
        """The result schema of read-only ``sql`` (it runs; nothing changes)."""
        if needs_admin(sql):
            raise PlanError(
                "the schema of a statement that changes something is known once it runs; "
                "execute it instead"
            )
        return self.run(sql).schema


def _as_table(result: Any) -> pa.Table:
    if result is None:
        return pa.table({})
    if isinstance(result, pa.Table):
        return result
    if isinstance(result, StreamingQuery):
        return pa.Table.from_pylist([{"query": result.name, "state": result.state}], JOB_SCHEMA)
    if isinstance(result, str):
        return pa.table({"plan": pa.array([result], pa.string())})
    raise PlanError(f"the server cannot send a {type(result).__name__} result")
