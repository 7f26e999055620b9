"""The Arrow Flight SQL service over one Context, on ``pyarrow.flight.FlightServerBase``.

How each Flight call is answered:

- ``GetFlightInfo`` with ``CommandStatementQuery`` (or ``CommandPreparedStatementQuery``)
  runs the statement then and there (so an error reaches the caller at execute time) and
  keeps its result for one ``DoGet`` of the ticket it returns (:class:`_Results`: at most
  ``MAX_PENDING_RESULTS`` results, each for ``RESULT_TTL_S``). DDL sent this way (as ADBC's
  ``cursor.execute`` does) runs too and returns an empty result.
- ``DoPut`` with ``CommandStatementUpdate`` / ``CommandPreparedStatementUpdate`` runs a
  statement and answers ``DoPutUpdateResult`` (-1: no row count); with
  ``CommandPreparedStatementQuery`` it binds the parameters sent as one Arrow row.
- ``GetFlightInfo`` + ``DoGet`` with ``CommandGetSqlInfo``, ``CommandGetCatalogs``,
  ``CommandGetDbSchemas``, ``CommandGetTables`` and ``CommandGetTableTypes`` answer from the
  catalog (the ticket is the command itself). ``GetSchema`` answers those and read-only
  statements.
- ``DoAction``: ``CreatePreparedStatement``, ``ClosePreparedStatement`` and ``health``.
- ``SUBSCRIBE TO <select>`` (as a statement query, prepared or not): ``GetFlightInfo``
  plans it and its ``DoGet`` streams the query's batches as they come, in a stream that
  stays open (``server/subscriptions.py``).

Every call first checks the caller (:meth:`FlightSqlService._role`): a missing or unknown
token is refused with Unauthenticated, a read token asking for a change with Unauthorized,
before anything runs. Any other Flight SQL command or action is refused by name ("... is
not served by datum-sql"). Errors reach the client as Flight errors carrying a message and
no Python traceback (:func:`_guarded`): the engine's with their message (which never holds
a secret), unexpected ones as an internal error naming only their type.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from datum_sql.errors import DatumError
from datum_sql.redaction import redact_sql
from datum_sql.server import metadata, protocol
from datum_sql.server.auth import ADMIN, READ, Backoff, Tokens, bearer, peer_host
from datum_sql.server.jobs import Jobs
from datum_sql.server.statements import Executor, needs_admin, subscription_query
from datum_sql.server.subscriptions import (
    DEFAULT_BUFFER_ROWS,
    DEFAULT_STALL_LIMIT_S,
    Subscriptions,
)

__all__ = ["FlightSqlService"]

log = logging.getLogger("datum_sql.server")

MAX_PENDING_RESULTS = 64
RESULT_TTL_S = 300.0
MAX_PREPARED = 1024

_METADATA_COMMANDS = (
    "CommandGetSqlInfo",
    "CommandGetCatalogs",
    "CommandGetDbSchemas",
    "CommandGetTables",
    "CommandGetTableTypes",
)
_ACTIONS = {
    "CreatePreparedStatement": "prepare a statement (Flight SQL)",
    "ClosePreparedStatement": "close a prepared statement (Flight SQL)",
    "health": "whether the server serves, and how many queries run (JSON)",
}


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """A Flight call whose errors reach the client as Flight errors with a message only:
    pyarrow would send any other exception with its Python traceback. The engine's errors
    carry their message (which never holds a secret); unexpected ones only their type."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except flight.FlightError:
            raise
        except DatumError as exc:
            raise flight.FlightServerError(str(exc)) from None
        except Exception as exc:
            log.error("internal error: %s: %s", type(exc).__name__, redact_sql(str(exc)))
            raise flight.FlightInternalError(
                f"internal error ({type(exc).__name__}); the server log says more"
            ) from None

    return call


class _AuthMiddleware(flight.ServerMiddleware):
    """What the call's headers said: the role, or why there is none."""

    def __init__(self, role: str | None, reason: str) -> None:
        self.role = role
        self.reason = reason


class _AuthFactory(flight.ServerMiddlewareFactory):
    def __init__(self, tokens: Tokens | None) -> None:
        self.tokens = tokens

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> _AuthMiddleware:
        if self.tokens is None:  # --insecure-no-auth, loopback only
            return _AuthMiddleware(ADMIN, "")
        token = bearer(headers)
        if token is None:
            return _AuthMiddleware(None, "no bearer token")
        role = self.tokens.role_of(token)
        return _AuthMiddleware(role, "" if role else "unknown token")


@dataclass
class _Prepared:
    sql: str
    admin: bool
    params: list[Any] | dict[str, Any] | None = None


@dataclass
class _Results:
    """Results of executed statements waiting for their DoGet, oldest first."""

    pending: OrderedDict[bytes, tuple[float, pa.Table]] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, table: pa.Table) -> bytes:
        handle = secrets.token_bytes(16)
        now = time.monotonic()
        with self.lock:
            for key in [k for k, (t, _) in self.pending.items() if now - t > RESULT_TTL_S]:
                del self.pending[key]
            while len(self.pending) >= MAX_PENDING_RESULTS:
                self.pending.popitem(last=False)
            self.pending[handle] = (now, table)
        return handle

    def take(self, handle: bytes) -> pa.Table:
        with self.lock:
            entry = self.pending.pop(handle, None)
        if entry is None:
            raise flight.FlightServerError(
                "this result was already fetched or has expired (results wait "
                f"{RESULT_TTL_S:.0f}s, at most {MAX_PENDING_RESULTS} at a time): execute "
                "the statement again"
            )
        return entry[1]


class FlightSqlService(flight.FlightServerBase):
    """Flight SQL over ``ctx``; ``tokens=None`` serves without authentication."""

    def __init__(
        self,
        ctx: Any,
        location: str,
        *,
        tokens: Tokens | None,
        tls_certificates: list[tuple[bytes, bytes]] | None = None,
        jobs: Jobs | None = None,
        subscription_stall_limit_s: float = DEFAULT_STALL_LIMIT_S,
        subscription_buffer_rows: int = DEFAULT_BUFFER_ROWS,
    ) -> None:
        super().__init__(
            location,
            tls_certificates=tls_certificates or [],
            middleware={"auth": _AuthFactory(tokens)},
        )
        self.ctx = ctx
        self.executor = Executor(ctx, jobs)
        self.subscriptions = Subscriptions(
            ctx, self.executor.lock, subscription_stall_limit_s, subscription_buffer_rows
        )
        self.backoff = Backoff()
        self._results = _Results()
        self._prepared: dict[bytes, _Prepared] = {}
        self._prepared_lock = threading.Lock()

    # -- who is calling ---------------------------------------------------------------------
    def _role(self, context: Any, needed: str = READ) -> str:
        auth = context.get_middleware("auth")
        peer = peer_host(context.peer())
        held = self.backoff.held(peer)
        if held > 0:
            raise flight.FlightUnauthenticatedError(
                f"too many failed authentications from {peer}; try again in {held:.0f}s"
            )
        if auth is None or auth.role is None:
            reason = auth.reason if auth is not None else "no credentials"
            self.backoff.failed(peer, reason)
            raise flight.FlightUnauthenticatedError(
                f"authentication failed ({reason}): send 'authorization: Bearer TOKEN' with "
                "a token of the server's token file"
            )
        if needed == ADMIN and auth.role != ADMIN:
            raise flight.FlightUnauthorizedError(
                "this statement changes the server (DDL, SET, INSERT, CANCEL): it needs an "
                "admin token; a read token may run queries, SHOW and EXPLAIN"
            )
        role: str = auth.role
        return role

    def _check_statement(self, context: Any, sql: str) -> bool:
        """Whether ``sql`` needs admin (checked against the caller: raises when refused)."""
        self._role(context)
        admin = needs_admin(sql)
        if admin:
            self._role(context, ADMIN)
        return admin

    # -- Flight calls -----------------------------------------------------------------------
    @_guarded
    def get_flight_info(self, context: Any, descriptor: flight.FlightDescriptor) -> Any:
        self._role(context)
        name, cmd = self._command(descriptor)
        if name == "CommandStatementQuery":
            select = subscription_query(cmd.query)
            if select is not None:
                return self._subscription_info(descriptor, select)
            table = self._execute(context, cmd.query)
        elif name == "CommandPreparedStatementQuery":
            prepared = self._prepared_of(cmd.prepared_statement_handle)
            if prepared.admin:
                self._role(context, ADMIN)
            select = subscription_query(prepared.sql)
            if select is not None:
                if prepared.params is not None:
                    raise flight.FlightServerError("SUBSCRIBE TO takes no parameters")
                return self._subscription_info(descriptor, select)
            table = self._execute(context, prepared.sql, prepared.params)
        elif name in _METADATA_COMMANDS:
            table = self._metadata(name, cmd)
            ticket = flight.Ticket(descriptor.command)
            return flight.FlightInfo(
                table.schema, descriptor, [flight.FlightEndpoint(ticket, [])],
                table.num_rows, -1,
            )  # fmt: skip
        else:
            raise _unsupported(name, "GetFlightInfo")
        handle = self._results.put(table)
        ticket = flight.Ticket(
            protocol.pack(protocol.message("TicketStatementQuery", statement_handle=handle))
        )
        return flight.FlightInfo(
            table.schema, descriptor, [flight.FlightEndpoint(ticket, [])], table.num_rows, -1
        )

    @_guarded
    def get_schema(self, context: Any, descriptor: flight.FlightDescriptor) -> Any:
        self._role(context)
        name, cmd = self._command(descriptor)
        if name in _METADATA_COMMANDS:
            return flight.SchemaResult(self._metadata(name, cmd).schema)
        if name == "CommandStatementQuery":
            self._check_statement(context, cmd.query)
            select = subscription_query(cmd.query)
            if select is not None:
                with self.executor.lock.read():
                    return flight.SchemaResult(self.ctx.prepare(select).plan.root.schema)
            return flight.SchemaResult(self.executor.schema_of(cmd.query))
        raise _unsupported(name, "GetSchema")

    @_guarded
    def do_get(self, context: Any, ticket: flight.Ticket) -> Any:
        self._role(context)
        name, cmd = _unpack(ticket.ticket)
        if name == "TicketStatementQuery":
            planned = self.subscriptions.take(cmd.statement_handle)
            if planned is not None:
                return self.subscriptions.stream(planned, context, peer_host(context.peer()))
            return flight.RecordBatchStream(self._results.take(cmd.statement_handle))
        if name in _METADATA_COMMANDS:
            return flight.RecordBatchStream(self._metadata(name, cmd))
        raise _unsupported(name, "DoGet")

    @_guarded
    def do_put(
        self, context: Any, descriptor: flight.FlightDescriptor, reader: Any, writer: Any
    ) -> None:
        self._role(context)
        name, cmd = self._command(descriptor)
        if name == "CommandStatementUpdate":
            self._check_statement(context, cmd.query)
            self.executor.run(cmd.query)
            self._log_change(context, cmd.query)
            writer.write(_update_result())
        elif name == "CommandPreparedStatementUpdate":
            prepared = self._prepared_of(cmd.prepared_statement_handle)
            self._check_statement(context, prepared.sql)
            if prepared.params is not None:
                raise flight.FlightServerError(
                    "parameters bind in a SELECT only; this statement takes none"
                )
            self.executor.run(prepared.sql)
            self._log_change(context, prepared.sql)
            writer.write(_update_result())
        elif name == "CommandPreparedStatementQuery":
            handle = cmd.prepared_statement_handle
            prepared = self._prepared_of(handle)
            prepared.params = _parameters(reader.read_all())
            writer.write(
                protocol.message(
                    "DoPutPreparedStatementResult", prepared_statement_handle=handle
                ).SerializeToString()
            )
        else:
            raise _unsupported(name, "DoPut")

    @_guarded
    def do_action(self, context: Any, action: flight.Action) -> Iterator[flight.Result]:
        self._role(context)
        kind = action.type
        body = action.body.to_pybytes() if action.body is not None else b""
        if kind == "health":
            status = {"status": "serving", "queries": len(self.ctx.queries)}
            return iter([flight.Result(json.dumps(status).encode())])
        if kind == "CreatePreparedStatement":
            _, request = _unpack(body)
            admin = self._check_statement(context, request.query)
            handle = secrets.token_bytes(16)
            with self._prepared_lock:
                if len(self._prepared) >= MAX_PREPARED:
                    raise flight.FlightServerError(
                        f"{MAX_PREPARED} prepared statements are open: close some first"
                    )
                self._prepared[handle] = _Prepared(request.query, admin)
            result = protocol.message(
                "ActionCreatePreparedStatementResult", prepared_statement_handle=handle
            )
            return iter([flight.Result(protocol.pack(result))])
        if kind == "ClosePreparedStatement":
            _, request = _unpack(body)
            with self._prepared_lock:
                self._prepared.pop(request.prepared_statement_handle, None)
            return iter([])
        raise flight.FlightServerError(
            f"action {kind!r} is not served by datum-sql; actions: {', '.join(_ACTIONS)} "
            "(cancel a query with the statement CANCEL QUERY name)"
        )

    @_guarded
    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        self._role(context)
        return list(_ACTIONS.items())

    @_guarded
    def list_flights(self, context: Any, criteria: bytes) -> Iterator[flight.FlightInfo]:
        self._role(context)
        raise flight.FlightServerError(
            "ListFlights is not served by datum-sql: list tables with Flight SQL's "
            "GetTables (ADBC: adbc_get_objects) or SHOW SOURCES | SINKS | MATERIALIZED VIEWS"
        )

    @_guarded
    def do_exchange(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        self._role(context)
        raise flight.FlightServerError("DoExchange is not served by datum-sql")

    # -- helpers ----------------------------------------------------------------------------
    def _command(self, descriptor: flight.FlightDescriptor) -> tuple[str, Any]:
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            raise flight.FlightServerError(
                "datum-sql serves Flight SQL: send a command descriptor (a path names nothing)"
            )
        return _unpack(descriptor.command)

    def _subscription_info(
        self, descriptor: flight.FlightDescriptor, select: str
    ) -> flight.FlightInfo:
        handle, schema = self.subscriptions.plan(select)
        ticket = flight.Ticket(
            protocol.pack(protocol.message("TicketStatementQuery", statement_handle=handle))
        )
        return flight.FlightInfo(schema, descriptor, [flight.FlightEndpoint(ticket, [])], -1, -1)

    def _execute(self, context: Any, sql: str, params: Any = None) -> pa.Table:
        admin = self._check_statement(context, sql)
        table = self.executor.run(sql, params)
        if admin:
            self._log_change(context, sql)
        return table

    def _log_change(self, context: Any, sql: str) -> None:
        log.info("%s ran: %s", peer_host(context.peer()), " ".join(redact_sql(sql).split()))

    def _prepared_of(self, handle: bytes) -> _Prepared:
        with self._prepared_lock:
            prepared = self._prepared.get(handle)
        if prepared is None:
            raise flight.FlightServerError(
                "unknown prepared statement (closed, or prepared on another server run)"
            )
        return prepared

    def _metadata(self, name: str, cmd: Any) -> pa.Table:
        if name == "CommandGetSqlInfo":
            return metadata.sql_info(list(cmd.info))
        if name == "CommandGetCatalogs":
            return metadata.catalogs()
        if name == "CommandGetTableTypes":
            return metadata.table_types()
        if name == "CommandGetDbSchemas":
            return metadata.db_schemas(_opt(cmd, "catalog"), _opt(cmd, "db_schema_filter_pattern"))
        with self.executor.lock.read():
            entries = self._entries()
        return metadata.tables(
            entries,
            catalog=_opt(cmd, "catalog"),
            schema_pattern=_opt(cmd, "db_schema_filter_pattern"),
            name_pattern=_opt(cmd, "table_name_filter_pattern"),
            types=list(cmd.table_types),
            include_schema=cmd.include_schema,
        )

    def _entries(self) -> list[tuple[str, str, pa.Schema | None]]:
        catalog = self.ctx.catalog
        out: list[tuple[str, str, pa.Schema | None]] = []
        out += [(e.name, "SOURCE", e.schema) for e in catalog.sources()]
        out += [(e.name, "SINK", e.schema) for e in catalog.sinks()]
        out += [
            (e.name, "MATERIALIZED VIEW" if e.materialized else "VIEW", e.schema)
            for e in catalog.views()
        ]
        return out


def _opt(cmd: Any, name: str) -> str | None:
    return getattr(cmd, name) if cmd.HasField(name) else None


def _unpack(data: bytes) -> tuple[str, Any]:
    try:
        return protocol.unpack(data)
    except KeyError as exc:
        raise _unsupported(str(exc.args[0]), "this call") from None
    except ValueError as exc:
        raise flight.FlightServerError(str(exc)) from None


def _unsupported(name: str, call: str) -> flight.FlightServerError:
    return flight.FlightServerError(
        f"Flight SQL {name} is not served by datum-sql ({call}); served: statements "
        "(query, update, prepared), GetSqlInfo, GetCatalogs, GetDbSchemas, GetTables, "
        "GetTableTypes"
    )


def _update_result() -> pa.Buffer:
    return pa.py_buffer(protocol.message("DoPutUpdateResult", record_count=-1).SerializeToString())


def _parameters(table: pa.Table) -> list[Any] | dict[str, Any]:
    """One row of bound parameters: positional (``?``, ``$1``) when the columns are numbered
    or unnamed, by name (``:name``) otherwise."""
    if table.num_rows != 1:
        raise flight.FlightServerError(
            f"bind one row of parameters per execution, got {table.num_rows}"
        )
    row = table.to_pylist()[0]
    names = table.column_names
    if all(n.isidentifier() for n in names) and not all(n.lstrip("$").isdigit() for n in names):
        return row
    return [row[n] for n in names]
