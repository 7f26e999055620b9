"""The one exception hierarchy of datum-sql.

Every error a user can see derives from :class:`DatumError`. Messages name what the user
wrote (table, column, option, file, topic/partition/offset) and say how to fix it; they
never contain secrets.
"""

from __future__ import annotations

from datum_sql.redaction import REDACTED, redact_sql_at


class DatumError(Exception):
    """Base of every datum-sql error."""


class SqlError(DatumError):
    """SQL that cannot be parsed or bound: carries line, column and the offending text.

    The statement is kept and echoed with secret option values masked, and so is the
    offending text when it lies inside one."""

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        text: str | None = None,
        sql: str | None = None,
    ) -> None:
        if sql is not None:
            offset = _offset(sql, line, column)
            sql, moved, inside = redact_sql_at(sql, offset if offset is not None else -1)
            if offset is not None:
                column += moved - offset  # type: ignore[operator]
            if inside:
                text = REDACTED
        self.line = line
        self.column = column
        self.text = text
        self.sql = sql
        where = ""
        if line is not None and column is not None:
            where = f" (line {line}, column {column}"
            where += f", near {text!r})" if text else ")"
        super().__init__(message + where + _caret(sql, line, column))

    @property
    def message(self) -> str:
        return str(self)


def _offset(sql: str, line: int | None, column: int | None) -> int | None:
    """The character offset of 1-based ``line``/``column`` in ``sql``."""
    if line is None or column is None:
        return None
    lines = sql.split("\n")
    if not 1 <= line <= len(lines):
        return None
    return sum(len(x) + 1 for x in lines[: line - 1]) + column - 1


def _caret(sql: str | None, line: int | None, column: int | None) -> str:
    """A two-line excerpt of the statement with a caret under the offending column."""
    if not sql or line is None or column is None:
        return ""
    lines = sql.split("\n") or [sql]
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    return f"\n  {src}\n  {' ' * max(column - 1, 0)}^"


class PlanError(DatumError):
    """Valid SQL that the streaming planner cannot run; says why and what would work."""


class AlreadyExists(PlanError):
    """A CREATE of a name the catalog already holds: ``kind`` and ``name`` say what is there."""

    def __init__(self, message: str, *, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(message)


class SchemaError(DatumError):
    """Data whose shape does not match the declared schema."""


class SourceError(DatumError):
    """A source could not be opened or read; names the source and the position."""


class SinkError(DatumError):
    """A sink could not be opened or written; names the sink and the target."""


class CheckpointError(DatumError):
    """A checkpoint could not be written or read back."""


class CatalogError(DatumError):
    """The catalog file under ``state_dir`` could not be read or written; names the path."""


class QueryFailed(DatumError):
    """A running query died. ``cause`` is the original error, ``operator`` where it happened."""

    def __init__(self, message: str, *, operator: str | None = None) -> None:
        self.operator = operator
        super().__init__(message if operator is None else f"{message} (in {operator})")

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__


class QueryTimeout(DatumError, TimeoutError):
    """A query did not reach the state asked for (stopped, finished) within the timeout."""
