"""Secrets kept out of everything printed: option values, echoed SQL, reprs.

A leaf module (it imports nothing from datum_sql) so that ``errors.py`` can mask the SQL it
echoes and ``types.py`` and the catalog can mask options.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "******"

_SECRET_KEY = re.compile(
    r"(password|secret|passwd|token|sasl\.jaas|ssl\.key|private|credential)", re.I
)

# ``key = value`` as written in SQL, where a statement may be cut short or malformed: the
# key bare (dotted) or quoted, the value a quoted string (possibly unterminated, up to the
# end of the text) or a bare word.
_ASSIGNMENT = re.compile(
    r"""(?P<key>"[^"]*"|'[^']*'|`[^`]*`|[A-Za-z_][\w.]*)\s*=\s*
        (?P<value>[Ee]?'(?:[^']|'')*(?:'|$)|"(?:[^"]|"")*(?:"|$)|[^\s,()';]+)""",
    re.X,
)


def is_secret_option(key: str) -> bool:
    """True for option names whose values must never be printed."""
    return bool(_SECRET_KEY.search(key))


class Secret:
    """A secret option value: prints as ``******``; :meth:`reveal` hands out the value.

    Catalog entries hold secrets wrapped, so ``vars(entry)`` and debugger views show no
    password; the connector that needs one reveals it when it connects.
    """

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value.reveal() if isinstance(value, Secret) else value

    def reveal(self) -> Any:
        return self._value

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def protect(options: dict[str, Any]) -> dict[str, Any]:
    """Options with every secret value wrapped in :class:`Secret`."""
    return {k: Secret(v) if is_secret_option(k) else v for k, v in options.items()}


def reveal(options: dict[str, Any]) -> dict[str, Any]:
    """Options with every :class:`Secret` unwrapped (for a connector or the catalog file)."""
    return {k: v.reveal() if isinstance(v, Secret) else v for k, v in options.items()}


def redact(options: dict[str, Any]) -> dict[str, Any]:
    """A copy of connector options with every secret value masked."""
    return {k: (REDACTED if is_secret_option(k) else v) for k, v in options.items()}


def secret_spans(sql: str) -> list[tuple[int, int]]:
    """Character ranges ``[start, end)`` of secret option values written in ``sql``."""
    spans = []
    for m in _ASSIGNMENT.finditer(sql):
        if is_secret_option(m.group("key").strip("\"'`")):
            spans.append(m.span("value"))
    return spans


def redact_sql(sql: str) -> str:
    """``sql`` with the value of every secret option (``...password = '...'``) masked.

    Works on any text, including statements that do not parse."""
    return _mask(sql, secret_spans(sql))


def redact_sql_at(sql: str, offset: int) -> tuple[str, int, bool]:
    """``sql`` masked, the position ``offset`` moved to where it lands in the masked text,
    and whether ``offset`` lay inside a secret value."""
    spans = secret_spans(sql)
    inside = any(start <= offset < end for start, end in spans)
    shift = sum(len(_mask_of(sql, start)) - (end - start) for start, end in spans if end <= offset)
    return _mask(sql, spans), offset + shift, inside


def _mask_of(sql: str, start: int) -> str:
    quoted = sql[start] in "'\"" or sql[start : start + 2] in ("E'", "e'")
    return f"'{REDACTED}'" if quoted else REDACTED


def _mask(sql: str, spans: list[tuple[int, int]]) -> str:
    out, last = [], 0
    for start, end in spans:
        out += [sql[last:start], _mask_of(sql, start)]
        last = end
    out.append(sql[last:])
    return "".join(out)
