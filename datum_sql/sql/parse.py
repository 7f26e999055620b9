"""SQL text -> sqlglot ASTs in the :class:`~datum_sql.sql.dialect.Datum` dialect.

``parse(sql)`` splits a script on ``;`` (empty statements are ignored) and returns one
sqlglot expression per statement; ``parse_one(sql)`` insists on exactly one. Every sqlglot
tokenizer or parser error becomes a :class:`~datum_sql.errors.SqlError` whose ``line`` and
``column`` (1-based) point at the first character of the offending token *in the text passed
in* — so for a script, they are positions in the script file — whose ``text`` is that token,
and whose ``sql`` is that same text (``SqlError`` prints the line with a caret under the
column). Nothing is returned as an opaque ``exp.Command``: statements sqlglot does not
understand are errors that name the supported statement kinds.
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from datum_sql.errors import SqlError
from datum_sql.sql.dialect import SUPPORTED_STATEMENTS, Datum, Explain

__all__ = ["parse", "parse_one", "set_assignment", "statement_texts"]

_DIALECT = Datum()

# Statement kinds that reach the binder: ours, plus the few a user of Postgres-flavoured SQL
# might try, so that the binder can say what to do instead (kinds are checked there). Anything
# else, e.g. a bare expression, GRANT or BEGIN, fails here.
_STATEMENTS = (
    exp.Query,
    exp.Values,
    exp.DDL,  # CREATE ..., INSERT
    exp.DML,  # UPDATE, DELETE, MERGE, COPY
    exp.Drop,
    exp.Alter,
    exp.TruncateTable,
    exp.Set,
    exp.Show,
    exp.Describe,
    Explain,
)

_REQUIRED_ARG = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>")
_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: \d+.*?>")
_MISSING_FROM = re.compile(r"from \d+:(\d+)$")
_OPERATORS = {
    "EQ": "=",
    "NEQ": "<>",
    "GT": ">",
    "GTE": ">=",
    "LT": "<",
    "LTE": "<=",
    "ADD": "+",
    "SUB": "-",
    "MUL": "*",
    "DIV": "/",
    "MOD": "%",
    "DPIPE": "||",
}


def parse(sql: str) -> list[exp.Expression]:
    """Parse a script of ``;``-separated statements; empty statements are skipped."""
    statements = []
    for chunk in _split(_tokenize(sql)):
        statement = _parse_chunk(sql, chunk)
        if statement is not None:
            statements.append(statement)
    return statements


def parse_one(sql: str) -> exp.Expression:
    """Parse exactly one statement (a trailing ``;`` is fine)."""
    chunks = _split(_tokenize(sql))
    if not chunks:
        raise SqlError("Empty SQL: expected a statement", sql=sql)
    if len(chunks) > 1:
        first = chunks[1][0]
        line, column = _position(sql, first.start)
        raise SqlError(
            f"Expected one statement, found {len(chunks)}; run them one at a time or as a script",
            line=line,
            column=column,
            text=first.text,
            sql=sql,
        )
    statement = _parse_chunk(sql, chunks[0])
    if statement is None:  # pragma: no cover - a non-empty chunk always parses to something
        raise SqlError("Empty SQL: expected a statement", sql=sql)
    return statement


def statement_texts(sql: str) -> list[str]:
    """The text of each non-empty statement of a script, without the ``;`` separators.

    Comments before a statement's first token are not part of its text.
    """
    return [sql[chunk[0].start : chunk[-1].end + 1] for chunk in _split(_tokenize(sql))]


def set_assignment(statement: exp.Set) -> tuple[str, exp.Expression]:
    """``SET name = value`` -> (``"name"``, value expression); dotted names keep their dots."""
    items = statement.expressions
    if len(items) != 1 or not isinstance(items[0].this, exp.EQ):
        raise SqlError(f"Expected SET name = value, got {statement.sql(dialect=_DIALECT)!r}")
    assignment = items[0].this
    return assignment.this.sql(dialect=_DIALECT), assignment.expression


# -- internals ------------------------------------------------------------------------------


def _tokenize(sql: str) -> list[Token]:
    tokenizer = _DIALECT.tokenizer()
    try:
        return tokenizer.tokenize(sql)
    except TokenError as error:
        # ``from None`` here and below: sqlglot's message quotes the statement, secrets
        # included; the SqlError carries its position, token and a masked excerpt.
        raise _token_error(sql, _token_error_offset(tokenizer, error), error) from None


def _split(tokens: list[Token]) -> list[list[Token]]:
    chunks: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            chunks.append([])
        else:
            chunks[-1].append(token)
    return [chunk for chunk in chunks if chunk]


def _parse_chunk(sql: str, tokens: list[Token]) -> exp.Expression | None:
    # A context as long as the text makes sqlglot's `start_context` the whole prefix before the
    # offending token, i.e. its exact offset (sqlglot reports only the column of the token end).
    if tokens[0].text.upper() == "SUBSCRIBE":
        line, column = _position(sql, tokens[0].start)
        raise SqlError(
            "SUBSCRIBE TO is a statement for clients of the server (datum-sql serve, see "
            "docs/server.md); in Python, iterate ctx.execute_streaming('SELECT ...') for the "
            "same batches",
            line=line,
            column=column,
            text=tokens[0].text,
            sql=sql,
        )
    parser = _DIALECT.parser(error_message_context=len(sql) + 1)
    try:
        statements = parser.parse(tokens, sql)
    except ParseError as error:
        raise _parse_error(sql, error) from None
    except TokenError as error:  # raised by a few parser paths that re-tokenize
        raise _token_error(sql, tokens[0].start, error) from None
    statement = next((s for s in statements if s is not None), None)
    if statement is not None and (
        not isinstance(statement, _STATEMENTS) or statement.find(exp.Command) is not None
    ):
        # A bare expression (`FLUSH`, `SELEC a`) or a statement sqlglot has no real parser for.
        # (The dialect's parser never builds an exp.Command; the check guards new sqlglot paths.)
        first = tokens[0]
        line, column = _position(sql, first.start)
        raise SqlError(
            f"Unsupported statement {first.text.upper()!r}; supported: {SUPPORTED_STATEMENTS}",
            line=line,
            column=column,
            text=first.text,
            sql=sql,
        )
    return statement  # type: ignore[return-value]


def _parse_error(sql: str, error: ParseError) -> SqlError:
    details = error.errors[0] if error.errors else {}
    description = _describe(details.get("description") or str(error).split("\n")[0])
    start_context = details.get("start_context")
    highlight = details.get("highlight") or None
    if start_context is None:
        return SqlError(f"Syntax error: {description}", text=highlight, sql=sql)
    line, column = _position(sql, len(start_context))
    return SqlError(
        f"Syntax error: {description}", line=line, column=column, text=highlight, sql=sql
    )


def _describe(description: str) -> str:
    """sqlglot's parser messages, reworded where they leak internals."""
    if description == "Invalid expression / Unexpected token":
        return "unexpected token"
    if match := _REQUIRED_ARG.fullmatch(description):
        name = match.group(1).upper()
        return f"incomplete {_OPERATORS.get(name, name)!r}"
    return _TOKEN_REPR.sub(_token_words, description)


def _token_words(match: re.Match[str]) -> str:
    return "the end of the statement" if match.group(1) == "SENTINEL" else repr(match.group(2))


def _token_error_offset(tokenizer: object, error: TokenError) -> int | None:
    """Where the token that failed to scan starts: the tokenizer's scan state, else its message."""
    start = getattr(getattr(tokenizer, "_core", None), "_start", None)
    if isinstance(start, int):
        return start
    match = _MISSING_FROM.search(str(error.__cause__ or ""))  # "Missing ' from <line>:<offset>"
    return int(match.group(1)) if match else None


def _token_error(sql: str, start: int | None, error: TokenError) -> SqlError:
    if start is None or not 0 <= start < len(sql):
        return SqlError(f"Cannot read the SQL text: {error}", sql=sql)
    rest = sql[start:]
    if rest.startswith("/*"):
        what = "Unterminated comment (missing */)"
    elif rest.startswith("$"):
        what = "Unterminated dollar-quoted string"
    elif rest[0] == "'" or rest[:2].upper() in ("E'", "B'", "X'", "U&"):
        what = "Unterminated string literal (missing closing ')"
    elif rest[0] == '"':
        what = 'Unterminated quoted identifier (missing closing ")'
    else:
        what = "Cannot read the SQL text here"
    line, column = _position(sql, start)
    text = rest.split("\n", 1)[0][:40]
    return SqlError(what, line=line, column=column, text=text, sql=sql)


def _position(sql: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a 0-based character offset."""
    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return line, column
