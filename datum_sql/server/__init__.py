"""Server mode: a Context served over Arrow Flight SQL (``ctx.serve``, ``datum-sql serve``).

Sits above the Context, like the CLI: it runs statements through the Context's public
methods and reads its catalog. See docs/server.md.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from datum_sql.errors import DatumError
from datum_sql.server.auth import Tokens
from datum_sql.server.jobs import Jobs
from datum_sql.server.subscriptions import DEFAULT_BUFFER_ROWS, DEFAULT_STALL_LIMIT_S
from datum_sql.types import parse_duration

__all__ = ["ServerHandle", "parse_listen", "serve"]

log = logging.getLogger("datum_sql.server")

#: How long :meth:`ServerHandle.stop` waits for the calls in progress.
STOP_TIMEOUT_S = 10.0


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> host, port; port 0 picks a free one."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host:
        raise DatumError(f"listen address {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:50051")
    try:
        number = int(port)
    except ValueError:
        raise DatumError(f"listen address {listen!r}: the port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise DatumError(f"listen address {listen!r}: the port must be within 0..65535")
    return host.strip("[]"), number


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ServerHandle:
    """A running server: its address, and :meth:`stop`."""

    host: str
    port: int
    tls: bool
    _server: Any
    _thread: threading.Thread

    @property
    def address(self) -> str:
        """``HOST:PORT`` the server listens on (the port it got when asked for 0)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def location(self) -> str:
        """The URI a client connects to: ``grpc://HOST:PORT`` (``grpc+tls://`` with TLS)."""
        return f"grpc{'+tls' if self.tls else ''}://{self.address}"

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """End the open subscriptions, stop accepting calls and wait for the ones in
        progress; the Context (and its other running queries) stays as it is. False when
        calls were still in progress after ``timeout`` seconds (a subscription whose client
        reads nothing and keeps its connection open holds its call): the server then stops
        when they end."""
        ended = self._server.subscriptions.close_all()
        if ended:
            log.info("ended %d subscription%s", ended, "" if ended == 1 else "s")
        stopping = threading.Thread(
            target=self._server.shutdown, name="datum-sql-server-stop", daemon=True
        )
        stopping.start()
        stopping.join(timeout)
        if stopping.is_alive():
            log.warning(
                "calls still in progress %.0f s after the stop (a client reads nothing and "
                "keeps its connection open)", timeout,
            )  # fmt: skip
            return False
        self._thread.join()
        return True

    def wait(self) -> None:
        """Block until the server is stopped."""
        self._thread.join()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<datum_sql server {self.location}>"


def serve(
    ctx: Any,
    listen: str = "127.0.0.1:0",
    *,
    token_file: str | Path | None = None,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    insecure_no_auth: bool = False,
    jobs: Jobs | None = None,
    subscription_stall_limit: timedelta | float | str | None = None,
    subscription_buffer_rows: int | None = None,
) -> ServerHandle:
    """Serve ``ctx`` over Flight SQL at ``listen``; returns once it accepts calls. ``jobs``
    (``datum-sql serve``) records the INSERT jobs clients start, to resume them. A
    subscription holds at most ``subscription_buffer_rows`` unread rows; one whose buffer
    stays full for ``subscription_stall_limit`` (seconds, or a duration such as ``'30s'``)
    is disconnected (None: the defaults, 100,000 rows and 30 s)."""
    from datum_sql.server.flight import FlightSqlService

    host, port = parse_listen(listen)
    if token_file is None and not insecure_no_auth:
        raise DatumError(
            "the server needs a token file (one 'TOKEN ROLE' per line, roles read and admin); "
            "insecure_no_auth=True (--insecure-no-auth) serves without one, on a loopback "
            "address only"
        )
    if token_file is not None and insecure_no_auth:
        raise DatumError("give a token file or insecure_no_auth, not both")
    if insecure_no_auth and not is_loopback(host):
        raise DatumError(
            f"refusing to serve {host} without authentication: insecure_no_auth "
            "(--insecure-no-auth) is for a loopback address only (127.0.0.1, ::1, localhost)"
        )
    if subscription_buffer_rows is None:
        subscription_buffer_rows = DEFAULT_BUFFER_ROWS
    try:
        stall_limit_s = parse_duration(
            DEFAULT_STALL_LIMIT_S if subscription_stall_limit is None else subscription_stall_limit,
            what="subscription stall limit",
        ).total_seconds()
    except ValueError as exc:
        raise DatumError(str(exc)) from None
    if stall_limit_s <= 0:
        raise DatumError("the subscription stall limit must be longer than 0 s")
    if subscription_buffer_rows < 1:
        raise DatumError(
            f"subscription_buffer_rows must be at least 1 row, got {subscription_buffer_rows}"
        )
    tokens = Tokens.from_file(token_file) if token_file is not None else None
    if (tls_cert is None) != (tls_key is None):
        raise DatumError("TLS needs both a certificate and its key (tls_cert and tls_key)")
    certificates = None
    if tls_cert is not None and tls_key is not None:
        certificates = [(_read(tls_cert, "TLS certificate"), _read(tls_key, "TLS key"))]
    scheme = "grpc+tls" if certificates else "grpc+tcp"
    bind = f"[{host}]" if ":" in host else host
    try:
        server = FlightSqlService(
            ctx,
            f"{scheme}://{bind}:{port}",
            tokens=tokens,
            tls_certificates=certificates,
            jobs=jobs,
            subscription_stall_limit_s=stall_limit_s,
            subscription_buffer_rows=subscription_buffer_rows,
        )
    except Exception as exc:  # pyarrow: address in use, bad certificate, ...
        raise DatumError(f"cannot serve on {listen}: {exc}") from None
    # wait(), not serve(): serve() would take SIGINT and SIGTERM over and shut the server
    # down on its own, waiting for the open subscriptions that only stop() ends
    thread = threading.Thread(target=server.wait, name="datum-sql-server", daemon=True)
    thread.start()
    handle = ServerHandle(host, server.port, bool(certificates), server, thread)
    log.info(
        "serving Flight SQL on %s (%s)", handle.location,
        "no authentication" if tokens is None else "bearer tokens",
    )  # fmt: skip
    return handle


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise DatumError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
