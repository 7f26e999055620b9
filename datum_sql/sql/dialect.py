"""The datum-sql SQL dialect: sqlglot's RisingWave dialect plus our streaming extensions.

``Datum`` subclasses :class:`sqlglot.dialects.risingwave.RisingWave` (the way
``sqlglot/dialects/materialize.py`` subclasses Postgres). Because sqlglot registers dialects
by class name, importing this module makes ``sqlglot.parse_one(sql, read="datum")`` work.
Every construct below round-trips: ``parse_one(sql, read=Datum).sql(dialect=Datum) == sql``
for SQL written in the canonical form (keywords upper case, ``key='value'`` options).

What RisingWave already gives us (unchanged), and where it lands in the AST:

- ``CREATE SOURCE s (cols..., WATERMARK FOR c AS c - INTERVAL '5 SECONDS') INCLUDE key AS k
  WITH (connector='kafka', ...) FORMAT PLAIN ENCODE JSON`` -> ``exp.Create(kind="SOURCE")``;
  the watermark is an ``exp.WatermarkColumnConstraint`` inside the ``exp.Schema``; ``INCLUDE``,
  ``WITH`` options, ``FORMAT`` and ``ENCODE`` are ``exp.IncludeProperty``, ``exp.Property``,
  ``exp.FileFormatProperty`` and ``exp.EncodeProperty`` in ``create.args["properties"]``.
- ``CREATE SINK s [(cols...)] WITH (...)``, ``CREATE SINK s AS SELECT ... WITH (...)``,
  ``CREATE MATERIALIZED VIEW v AS SELECT ...``, ``DROP SOURCE|SINK|MATERIALIZED VIEW [IF EXISTS]``,
  ``ASOF [LEFT] JOIN``, ``tumble(...)`` / ``hop(...)`` in FROM (``exp.Table(this=exp.Anonymous)``).
- ``SET name = value`` / ``SET name TO value`` -> ``exp.Set`` (generated with ``=``).

What this module adds:

- ``SELECT ... GROUP BY ... [HAVING ...] EMIT ON WINDOW CLOSE`` -> ``select.args["emit"] ==
  "window_close"`` (a plain string; absent means emit-on-update).
- Late data, after GROUP BY/HAVING (and after EMIT when present), in this order when generated::

      ALLOWED LATENESS INTERVAL '10 SECONDS'   -> select.args["allowed_lateness"]  (an expression)
      LATE ROWS TO late_sink                   -> select.args["late_output"]       (exp.Identifier)

  The streaming clauses come before ORDER BY/LIMIT when generated; the parser accepts them in
  any order, once each. They are clauses of the SELECT, so they work unchanged at the end of
  ``INSERT INTO s SELECT ...``, ``CREATE MATERIALIZED VIEW v AS SELECT ...`` and before the
  ``WITH (...)`` of ``CREATE SINK s AS SELECT ... WITH (...)``.
- ``session(t, ts, INTERVAL '...')`` in FROM parses like ``tumble``/``hop``.
- Flink's window table-valued functions are another spelling of the same calls:
  ``TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND))`` parses to the tree of
  ``TUMBLE(t, ts, INTERVAL '10' SECOND)`` (likewise ``HOP``, ``CUMULATE``, ``SESSION``), so it
  is generated in that form and plans identically. Positional arguments only.
- ``INCLUDE key``, ``INCLUDE partition``, ... without ``AS alias`` (RisingWave needs the alias).
- ``EXPLAIN <statement>`` -> :class:`Explain` (``this`` is the statement).
- ``SHOW SOURCES|SINKS|MATERIALIZED VIEWS|TABLES|QUERIES`` -> ``exp.Show(this="SOURCES")`` etc.
- ``approx_percentile(col, q)`` -> ``exp.ApproxQuantile`` (the aggregate sqlglot knows), written
  back as ``APPROX_PERCENTILE``.
- ``CREATE AGGREGATE FUNCTION ...`` -> ``exp.Create(kind="FUNCTION")`` holding an
  :class:`AggregateProperty`; a call of a name given to :func:`register_aggregate` (a Python
  aggregate function) -> ``exp.AnonymousAggFunc``, so the planner sees an aggregate.
- Time formats (``to_char(ts, 'YYYY-MM-DD')``) stay as written: the dialect has no time
  mapping, so ``format`` holds the PostgreSQL template and the planner translates it once.
- Nothing falls back to ``exp.Command``: statements sqlglot would keep as opaque text (``ALTER
  ...``, ``SHOW FOO``, a malformed ``SET``) raise a ``ParseError`` that points at them.
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.dialects.risingwave import RisingWave
from sqlglot.errors import ParseError
from sqlglot.generators.risingwave import RisingWaveGenerator
from sqlglot.helper import seq_get
from sqlglot.parsers.risingwave import RisingWaveParser
from sqlglot.tokens import Token, TokenType
from sqlglot.trie import new_trie

__all__ = [
    "EMIT_WINDOW_CLOSE",
    "SHOW_KINDS",
    "SUPPORTED_STATEMENTS",
    "AggregateProperty",
    "Datum",
    "Explain",
    "register_aggregate",
]

EMIT_WINDOW_CLOSE = "window_close"
"""The value of ``select.args["emit"]`` for ``EMIT ON WINDOW CLOSE``."""

SHOW_KINDS = ("SOURCES", "SINKS", "VIEWS", "MATERIALIZED VIEWS", "TABLES", "QUERIES")
"""What ``SHOW`` can list; ``exp.Show.this`` is one of these strings."""

SUPPORTED_STATEMENTS = (
    "CREATE SOURCE, CREATE SINK, CREATE MATERIALIZED VIEW, INSERT INTO ... SELECT, SELECT, "
    "EXPLAIN <statement>, SHOW SOURCES|SINKS|MATERIALIZED VIEWS|TABLES|QUERIES, SET name = value, "
    "DROP SOURCE|SINK|MATERIALIZED VIEW"
)
"""The statement kinds named in errors about statements we do not support."""

# The leading words of each streaming clause of a SELECT. They are not reserved words (``late``
# stays a valid column name), so an implicit table alias must not swallow them.
_STREAMING_CLAUSE_STARTS = {"EMIT": "ON", "ALLOWED": "LATENESS", "LATE": "ROWS"}

_CLAUSE_NAMES = {
    "emit": "EMIT ON WINDOW CLOSE",
    "allowed_lateness": "ALLOWED LATENESS",
    "late_output": "LATE ROWS TO",
}

# Tokens that name something (not keywords): left out of "Unsupported statement 'ALTER TABLE'".
_NAME_TOKENS = {TokenType.VAR, TokenType.STRING, TokenType.NUMBER, TokenType.IDENTIFIER}


class Explain(exp.Expression):
    """``EXPLAIN <statement>``: ``this`` is the explained statement (a SELECT, INSERT, ...)."""

    arg_types: t.ClassVar[dict[str, bool]] = {"this": True}


class AggregateProperty(exp.Property):
    """``AGGREGATE`` in ``CREATE AGGREGATE FUNCTION``."""

    arg_types: t.ClassVar[dict[str, bool]] = {}


def _to_char(args: list, dialect: t.Any) -> exp.Expr:
    """``to_char`` as RisingWave builds it, except an empty template: sqlglot's time-format
    translation turns ``''`` into the text ``'None'``, which every row would then read."""
    fmt = seq_get(args, 1)
    if isinstance(fmt, exp.Literal) and fmt.is_string and fmt.name == "":
        return exp.TimeToStr(this=seq_get(args, 0), format=fmt)
    return RisingWaveParser.FUNCTIONS["TO_CHAR"](args, dialect)


#: The window table functions, called in FROM as ``tumble(t, ...)`` or the Flink way,
#: ``TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), ...))``.
WINDOW_FUNCTIONS = ("tumble", "hop", "cumulate", "session")


def _count_distinct(args: list) -> exp.Expr:
    """``approx_distinct(x)``: ``count(DISTINCT x)``, exact in both paths (``approx_distinct(
    DISTINCT x)`` too: the values it counts are distinct already)."""
    if args and isinstance(args[0], exp.Distinct):
        return exp.Count(this=args[0])
    return exp.Count(this=exp.Distinct(expressions=args[:1]))


def _distinct_first(args: list) -> list:
    """The arguments of ``f(DISTINCT a, b, ...)``, which arrive as one DISTINCT of them all,
    as ``[DISTINCT a, b, ...]``: the call's parameters (a percentile's q) and a two-argument
    aggregate's second argument stand apart (plan/distinct.py refuses DISTINCT there)."""
    if len(args) == 1 and isinstance(args[0], exp.Distinct) and len(args[0].expressions) > 1:
        first, *rest = args[0].expressions
        return [exp.Distinct(expressions=[first]), *rest]
    return args


def _split_distinct(build: t.Callable[[list], exp.Expr]) -> t.Callable[[list], exp.Expr]:
    return lambda args: build(_distinct_first(args))


def _percentile(args: list) -> exp.Expr:
    """``percentile_cont`` / ``approx_percentile_cont`` / ``quantile_cont``: the exact
    ``percentile_cont``, in both forms, ``(col, q[, centroids])`` and ``(q) WITHIN GROUP
    (ORDER BY col)`` (centroids, a precision of the approximation, have nothing to tune in
    an exact result)."""
    args = _distinct_first(args)
    if len(args) == 1:
        return exp.PercentileCont(this=args[0])
    return _approx_quantile(args)


def _approx_quantile(args: list) -> exp.Expr:
    """``approx_percentile(col, q)`` (and the call form above): sqlglot's ApproxQuantile."""
    args = _distinct_first(args)
    return exp.ApproxQuantile(this=seq_get(args, 0), quantile=seq_get(args, 1))


#: The aggregates of two arguments, ``f(y, x)``, by name (``covar`` aside: a spelling).
TWO_ARGUMENT_AGGREGATES: dict[str, type[exp.AggFunc]] = {
    "CORR": exp.Corr, "COVAR_SAMP": exp.CovarSamp, "COVAR_POP": exp.CovarPop,
    "REGR_SLOPE": exp.RegrSlope, "REGR_INTERCEPT": exp.RegrIntercept, "REGR_COUNT": exp.RegrCount,
    "REGR_R2": exp.RegrR2, "REGR_AVGX": exp.RegrAvgx, "REGR_AVGY": exp.RegrAvgy,
    "REGR_SXX": exp.RegrSxx, "REGR_SYY": exp.RegrSyy, "REGR_SXY": exp.RegrSxy,
}  # fmt: skip


#: Other spellings of an aggregate, read by the parser as the aggregate the streaming planner
#: has (its builder, from the arguments): DataFusion's other names of those aggregates, and
#: its approximate aggregates, computed exactly in both paths. ``any_value`` is ``min``: one
#: well-defined value of the group, the same whatever the order rows arrive in.
_ALIASED: dict[str, tuple[t.Callable[[list], exp.Expr], tuple[str, ...]]] = {
    "avg": (exp.Avg.from_arg_list, ("mean",)),
    "var_samp": (exp.Variance.from_arg_list, ("var", "var_sample")),
    "var_pop": (exp.VariancePop.from_arg_list, ("var_population",)),
    "median": (exp.Median.from_arg_list, ("approx_median",)),
    "min": (exp.Min.from_arg_list, ("any_value",)),
    "count(DISTINCT)": (_count_distinct, ("approx_distinct",)),
    "percentile_cont": (_percentile, ("approx_percentile_cont", "quantile_cont")),
    "covar_samp": (_split_distinct(exp.CovarSamp.from_arg_list), ("covar",)),
}
AGGREGATE_ALIASES = {name: aliases for name, (_, aliases) in _ALIASED.items()}


class DatumParser(RisingWaveParser):
    """RisingWave's parser with the streaming clauses, EXPLAIN, SHOW and no Command fallback."""

    FUNC_TOKENS: t.ClassVar = {*RisingWaveParser.FUNC_TOKENS, TokenType.SESSION}

    FUNCTIONS: t.ClassVar = {
        **RisingWaveParser.FUNCTIONS,
        "APPROX_PERCENTILE": _approx_quantile,
        "PERCENTILE_CONT": _percentile,
        "TO_CHAR": lambda args, dialect: _to_char(args, dialect),
        **{
            name: _split_distinct(cls.from_arg_list)
            for name, cls in TWO_ARGUMENT_AGGREGATES.items()
        },
        **{alias.upper(): build for build, aliases in _ALIASED.values() for alias in aliases},
    }

    STATEMENT_PARSERS: t.ClassVar = {
        **RisingWaveParser.STATEMENT_PARSERS,
        # The tokenizer maps EXPLAIN to DESCRIBE (as sqlglot's MySQL dialect does).
        TokenType.DESCRIBE: lambda self: (
            self._parse_explain()
            if self._prev.text.upper() == "EXPLAIN"
            else self._parse_describe()
        ),
        TokenType.SHOW: lambda self: self._parse_show(),
    }

    PROPERTY_PARSERS: t.ClassVar = {
        **RisingWaveParser.PROPERTY_PARSERS,
        # `key = 'col'` is an ordinary option (the Kafka sink's key column); `KEY ENCODE ...`
        # keeps RisingWave's meaning.
        "KEY": lambda self: (
            self._parse_key_option()
            if self._match(TokenType.EQ)
            else self._parse_encode_property(key=True)
        ),
        # `aggregate = ...` stays an ordinary option; `CREATE AGGREGATE FUNCTION` marks one.
        "AGGREGATE": lambda self: (
            self.expression(exp.Property(this=exp.var("aggregate"), value=self._parse_primary()))
            if self._match(TokenType.EQ)
            else self.expression(AggregateProperty())
        ),
    }

    SHOW_PARSERS: t.ClassVar = {
        kind: (lambda self, kind=kind: self.expression(exp.Show(this=kind))) for kind in SHOW_KINDS
    }
    SHOW_TRIE: t.ClassVar = new_trie(key.split(" ") for key in SHOW_PARSERS)

    # -- statements -------------------------------------------------------------------------

    def _parse_key_option(self) -> exp.Property:
        return self.expression(exp.Property(this=exp.var("key"), value=self._parse_primary()))

    def _parse_explain(self) -> Explain:
        if not self._curr:
            self.raise_error("Expected a statement after EXPLAIN")
        if self._curr.token_type == TokenType.ANALYZE:
            self.raise_error("EXPLAIN ANALYZE is not supported; use EXPLAIN <statement>")
        statement = self._parse_statement()
        if statement is None:
            self.raise_error("Expected a statement after EXPLAIN")
        return self.expression(Explain(this=statement))

    def _parse_show(self) -> exp.Expr | None:
        parser = self._find_parser(self.SHOW_PARSERS, self.SHOW_TRIE)
        if parser:
            return parser(self)
        self.raise_error(f"Unsupported SHOW; expected SHOW {' | '.join(SHOW_KINDS)}")
        return None

    def _parse_set(self, unset: bool = False, tag: bool = False) -> exp.Set | exp.Command:
        start = self._prev
        set_ = self.expression(
            exp.Set(expressions=self._parse_csv(self._parse_set_item), unset=unset, tag=tag)
        )
        if self._curr or not set_.expressions:
            self.raise_error(
                "Expected SET name = value (or SET name TO value)", token=self._curr or start
            )
        return set_

    # sqlglot keeps SQL it does not understand as an opaque exp.Command; we raise instead. (Only
    # with a non-default ErrorLevel does raise_error return, and then sqlglot's fallback runs.)
    def _parse_as_command(self, start: Token) -> exp.Command:
        self._raise_unsupported(start)
        return super()._parse_as_command(start)

    def _parse_command(self) -> exp.Command:
        self._raise_unsupported(self._prev)
        return super()._parse_command()

    def _raise_unsupported(self, start: Token) -> None:
        head = self._tokens_from(start, 2)
        words = [head[0].text.upper()]
        if len(head) > 1 and head[1].token_type not in _NAME_TOKENS:
            words.append(head[1].text.upper())
        self.raise_error(
            f"Unsupported statement {' '.join(words)!r}; supported: {SUPPORTED_STATEMENTS}",
            token=start,
        )

    # -- CREATE SOURCE ... INCLUDE ------------------------------------------------------------

    def _parse_include_property(self) -> exp.Expr | None:
        # INCLUDE <kind> ['header key' [type]] [AS alias]; RisingWave's own version requires AS.
        this = self._parse_var_or_string()
        column_def = None
        if self._match(TokenType.STRING, advance=False):
            header = self._parse_string()
            column_def = self.expression(exp.ColumnDef(this=header, kind=self._parse_types()))
        alias = (
            self._parse_id_var(tokens=self.ALIAS_TOKENS) if self._match(TokenType.ALIAS) else None
        )
        return self.expression(exp.IncludeProperty(this=this, alias=alias, column_def=column_def))

    # -- SELECT ... EMIT ON WINDOW CLOSE / ALLOWED LATENESS / LATE ROWS TO -------------------

    def _parse_query_modifiers(self, this: t.Any) -> t.Any:
        this = super()._parse_query_modifiers(this)
        # ORDER BY / LIMIT may follow the streaming clauses: alternate until neither advances.
        while isinstance(this, exp.Select) and self._parse_streaming_clauses(this):
            this = super()._parse_query_modifiers(this)
        return this

    def _parse_streaming_clauses(self, select: exp.Select) -> bool:
        found = False
        while self._curr:
            token = self._curr
            value: str | exp.Expr | None
            if self._match_text_seq("EMIT"):
                if not self._match_text_seq("ON", "WINDOW", "CLOSE"):
                    self.raise_error("Expected ON WINDOW CLOSE after EMIT")
                key, value = "emit", EMIT_WINDOW_CLOSE
            elif self._match_text_seq("ALLOWED", "LATENESS"):
                key, value = "allowed_lateness", self._parse_bitwise()
                if value is None:
                    self.raise_error(
                        "Expected an interval after ALLOWED LATENESS, e.g. INTERVAL '10 seconds'"
                    )
            elif self._match_text_seq("LATE", "ROWS"):
                if not self._match_text_seq("TO"):
                    self.raise_error("Expected TO <sink or table> after LATE ROWS")
                key, value = "late_output", self._parse_id_var(any_token=False)
                if value is None:
                    self.raise_error("Expected a sink or table name after LATE ROWS TO")
            else:
                break
            if select.args.get(key) is not None:
                self.raise_error(f"Found multiple '{_CLAUSE_NAMES[key]}' clauses", token=token)
            select.set(key, value)
            found = True
        return found

    # -- FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), ...)) ----------------------------------

    def _parse_table(
        self,
        schema: bool = False,
        joins: bool = False,
        alias_tokens: t.Collection[TokenType] | None = None,
        parse_bracket: bool = False,
        is_db_reference: bool = False,
        parse_partition: bool = False,
        consume_pipe: bool = False,
    ) -> exp.Expr | None:
        if (
            not schema
            and not is_db_reference
            and self._curr
            and self._curr.token_type == TokenType.TABLE
            and self._next
            and self._next.token_type == TokenType.L_PAREN
        ):
            return self._parse_window_tvf(alias_tokens)
        return super()._parse_table(
            schema=schema, joins=joins, alias_tokens=alias_tokens, parse_bracket=parse_bracket,
            is_db_reference=is_db_reference, parse_partition=parse_partition,
            consume_pipe=consume_pipe,
        )  # fmt: skip

    def _parse_window_tvf(self, alias_tokens: t.Collection[TokenType] | None) -> exp.Table:
        self._advance(2)  # TABLE (
        func = self._curr
        if (
            func is None
            or func.text.lower() not in WINDOW_FUNCTIONS
            or not self._next
            or self._next.token_type != TokenType.L_PAREN
        ):
            self._fail(
                f"Expected a window function after TABLE(: {', '.join(WINDOW_FUNCTIONS).upper()}",
                token=func,
            )
        name = func.text.upper()
        self._advance(2)  # NAME (
        if not self._match(TokenType.TABLE):
            self._fail(f"Expected TABLE <name> as the first argument of {name}(...)")
        table = self._parse_table_parts()
        if not isinstance(table, exp.Table):
            self._fail(f"Expected a table name after TABLE in {name}(...)")
        if self._match(TokenType.PARTITION_BY):
            self._fail(f"{name}(TABLE t PARTITION BY ...) is not supported; GROUP BY the keys")
        if not self._match(TokenType.COMMA) or not self._match_text_seq("DESCRIPTOR"):
            self._fail(f"Expected DESCRIPTOR(<time column>) as the second argument of {name}")
        self._match_l_paren()
        time_column = self._parse_column() or self._fail("Expected a column in DESCRIPTOR()")
        self._match_r_paren()
        args: list[exp.Expr] = [
            exp.Column(this=table.this, table=table.args.get("db")),
            time_column,
        ]
        while self._match(TokenType.COMMA):
            arg = self._parse_assignment()
            args.append(arg if arg is not None else self._fail(f"Expected an argument of {name}"))
        self._match_r_paren()
        self._match_r_paren()
        call = self.expression(exp.Anonymous(this=func.text, expressions=args))
        return self.expression(
            exp.Table(this=call, alias=self._parse_table_alias(alias_tokens=alias_tokens))
        )

    def _fail(self, message: str, token: Token | None = None) -> t.NoReturn:
        if token is None:
            self.raise_error(message)
        else:
            self.raise_error(message, token=token)
        raise ParseError(message)  # raise_error returns only at a lenient error level

    def _tokens_from(self, token: Token, count: int) -> list[Token]:
        for i, candidate in enumerate(self._tokens):
            if candidate is token:
                return self._tokens[i : i + count]
        return [token]

    def _parse_table_alias(
        self, alias_tokens: t.Collection[TokenType] | None = None
    ) -> exp.TableAlias | None:
        # `FROM t EMIT ON WINDOW CLOSE`: EMIT is the clause, not an implicit alias of t.
        if self._is_streaming_clause_start():
            return None
        return super()._parse_table_alias(alias_tokens)

    def _is_streaming_clause_start(self) -> bool:
        if not self._curr or not self._next:
            return False
        follower = _STREAMING_CLAUSE_STARTS.get(self._curr.text.upper())
        return follower is not None and self._next.text.upper() == follower


def register_aggregate(name: str) -> None:
    """Parse calls of ``name`` as calls of an aggregate (a registered Python aggregate
    function) from now on."""
    DatumParser.FUNCTIONS[name.upper()] = lambda args: exp.AnonymousAggFunc(
        this=name, expressions=args
    )


class DatumGenerator(RisingWaveGenerator):
    """RisingWave's generator plus EXPLAIN, SHOW and the SELECT streaming clauses."""

    TRANSFORMS: t.ClassVar = {
        **RisingWaveGenerator.TRANSFORMS,
        Explain: lambda self, e: f"EXPLAIN {self.sql(e, 'this')}",
        exp.ApproxQuantile: lambda self, e: self.func(
            "APPROX_PERCENTILE", e.this, e.args.get("quantile")
        ),
        exp.TryCast: lambda self, e: self.trycast_sql(e),
        exp.Show: lambda self, e: f"SHOW {e.name}",
        AggregateProperty: lambda self, e: "AGGREGATE",
    }

    AFTER_HAVING_MODIFIER_TRANSFORMS: t.ClassVar = {
        **RisingWaveGenerator.AFTER_HAVING_MODIFIER_TRANSFORMS,
        "emit": lambda self, e: (
            self.seg("EMIT ON WINDOW CLOSE") if e.args.get("emit") == EMIT_WINDOW_CLOSE else ""
        ),
        "allowed_lateness": lambda self, e: (
            self.seg(f"ALLOWED LATENESS {self.sql(e, 'allowed_lateness')}")
            if e.args.get("allowed_lateness") is not None
            else ""
        ),
        "late_output": lambda self, e: (
            self.seg(f"LATE ROWS TO {self.sql(e, 'late_output')}")
            if e.args.get("late_output") is not None
            else ""
        ),
    }


class Datum(RisingWave):
    """The datum-sql dialect (``read="datum"``): RisingWave plus streaming extensions."""

    #: Keep time formats as written (PostgreSQL templates); see the module docstring.
    TIME_MAPPING: dict[str, str] = {}

    class Tokenizer(RisingWave.Tokenizer):
        KEYWORDS: t.ClassVar = {
            **RisingWave.Tokenizer.KEYWORDS,
            "EXPLAIN": TokenType.DESCRIBE,
        }
        COMMANDS: t.ClassVar = RisingWave.Tokenizer.COMMANDS - {TokenType.SHOW}

    Parser = DatumParser

    Generator = DatumGenerator
