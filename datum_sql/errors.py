"""The one exception hierarchy of datum-sql.

Every error a user can see derives from :class:`DatumError`. Messages name what the user
wrote (table, column, option, file, topic/partition/offset) and say how to fix it; they
never contain secrets.
"""

from __future__ import annotations


class DatumError(Exception):
    """Base of every datum-sql error."""


class SqlError(DatumError):
    """SQL that cannot be parsed or bound: carries line, column and the offending text."""

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        text: str | None = None,
        sql: str | None = None,
    ) -> None:
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


def _caret(sql: str | None, line: int | None, column: int | None) -> str:
    """A two-line excerpt of the statement with a caret under the offending column."""
    if not sql or line is None or column is None:
        return ""
    lines = sql.splitlines() or [sql]
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    return f"\n  {src}\n  {' ' * max(column - 1, 0)}^"


class PlanError(DatumError):
    """Valid SQL that the streaming planner cannot run; says why and what would work."""


class SchemaError(DatumError):
    """Data whose shape does not match the declared schema."""


class SourceError(DatumError):
    """A source could not be opened or read; names the source and the position."""


class SinkError(DatumError):
    """A sink could not be opened or written; names the sink and the target."""


class CheckpointError(DatumError):
    """A checkpoint could not be written or read back."""


class QueryFailed(DatumError):
    """A running query died. ``cause`` is the original error, ``operator`` where it happened."""

    def __init__(self, message: str, *, operator: str | None = None) -> None:
        self.operator = operator
        super().__init__(message if operator is None else f"{message} (in {operator})")

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__
