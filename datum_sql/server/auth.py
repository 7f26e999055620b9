"""Who may call the server: bearer tokens with a role, and a brake on guessing them.

A token file holds one ``TOKEN ROLE`` per line (``#`` comments and blank lines skipped); the
roles are ``read`` (queries, SHOW, metadata) and ``admin`` (also DDL, INSERT jobs, SET,
CANCEL). A client sends ``authorization: Bearer TOKEN`` with every call. The token is
compared with every known one in constant time (:func:`hmac.compare_digest`), so the time an
answer takes does not tell how much of a guess was right.

Failed authentications are logged with the peer's address and the reason, never the token,
and each address that keeps failing is held off (:class:`Backoff`): from the fifth failure
within a minute it is refused outright, even with a right token, for a time that doubles
with each further failure (up to a minute). A success does not wipe the count (a client
holding a read token could otherwise guess admin tokens between its own calls): failures
age out of the minute.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from datum_sql.errors import DatumError

__all__ = ["ADMIN", "READ", "ROLES", "Backoff", "Tokens"]

READ = "read"
ADMIN = "admin"
ROLES = (READ, ADMIN)
#: The shortest token accepted: anything shorter is guessable.
MIN_TOKEN_LENGTH = 16

log = logging.getLogger("datum_sql.server")


@dataclass(frozen=True)
class _Token:
    value: bytes
    role: str

    def __repr__(self) -> str:  # never the value
        return f"<token role={self.role}>"


class Tokens:
    """The tokens a server accepts, each with its role."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self._tokens = [_Token(t.encode(), role) for t, role in pairs]

    @classmethod
    def from_file(cls, path: str | Path) -> Tokens:
        """Read ``path`` (one ``TOKEN ROLE`` per line); errors name the file and the line,
        never the token."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise DatumError(f"cannot read token file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise DatumError(f"cannot read token file {path}: it is not UTF-8 text") from None
        pairs: list[tuple[str, str]] = []
        seen: set[str] = set()
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            where = f"token file {path}, line {number}"
            if len(parts) != 2:
                raise DatumError(f"{where}: expected 'TOKEN ROLE' (two words), got {len(parts)}")
            token, role = parts
            if role not in ROLES:
                raise DatumError(f"{where}: unknown role {role!r}; roles: {', '.join(ROLES)}")
            if len(token) < MIN_TOKEN_LENGTH:
                raise DatumError(
                    f"{where}: the token is shorter than {MIN_TOKEN_LENGTH} characters, too "
                    'easy to guess; make one with: python -c "import secrets; '
                    'print(secrets.token_urlsafe(32))"'
                )
            if token in seen:
                raise DatumError(f"{where}: the same token appears twice")
            seen.add(token)
            pairs.append((token, role))
        if not pairs:
            raise DatumError(f"token file {path} holds no token ('TOKEN ROLE' per line)")
        return cls(pairs)

    def role_of(self, presented: str) -> str | None:
        """The role of ``presented``, or None. Every known token is compared (in constant
        time), whichever matches."""
        given = presented.encode()
        role = None
        for token in self._tokens:
            if hmac.compare_digest(token.value, given):
                role = token.role
        return role

    def __repr__(self) -> str:
        return f"<Tokens: {len(self._tokens)}>"


def bearer(headers: dict[str, list[str]]) -> str | None:
    """The token of an ``authorization: Bearer TOKEN`` header, or None."""
    for key, values in headers.items():
        if key.lower() == "authorization":
            for value in values:
                scheme, _, token = value.partition(" ")
                if scheme.lower() == "bearer" and token.strip():
                    return token.strip()
    return None


class Backoff:
    """Failed authentications per peer address; an address that keeps failing is refused
    for a while, its time doubling with each failure."""

    #: Failures within ``WINDOW_S`` before an address is held off.
    THRESHOLD = 5
    WINDOW_S = 60.0
    MAX_HOLD_S = 60.0

    def __init__(self) -> None:
        self._failures: dict[str, list[float]] = {}
        self._held_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def held(self, peer: str) -> float:
        """Seconds ``peer`` is still refused for (0: not held)."""
        with self._lock:
            return max(0.0, self._held_until.get(peer, 0.0) - time.monotonic())

    def failed(self, peer: str, reason: str) -> None:
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._failures.get(peer, []) if now - t < self.WINDOW_S]
            recent.append(now)
            self._failures[peer] = recent
            over = len(recent) - self.THRESHOLD
            if over >= 0:
                hold = min(self.MAX_HOLD_S, 2.0**over)
                self._held_until[peer] = now + hold
                log.warning(
                    "authentication failed from %s (%s); %d failures in %ds: refusing it for %.0fs",
                    peer, reason, len(recent), self.WINDOW_S, hold,
                )  # fmt: skip
                return
        log.warning("authentication failed from %s (%s)", peer, reason)


def peer_host(peer: str) -> str:
    """The address of a gRPC peer string (``ipv4:127.0.0.1:5123`` -> ``127.0.0.1``)."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer
