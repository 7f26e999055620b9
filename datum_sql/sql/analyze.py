"""The binder: resolves tables and columns against the catalog and checks what it can.

Input: a parsed statement. Output: a checked statement (``statements.py``) whose query AST
has every FROM item annotated with its :class:`Relation` (``node.meta["relation"]``),
every column qualified by its relation's alias, ``*`` expanded, and window table functions
replaced by their underlying table (the window kept in the relation). It never plans.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from decimal import Decimal

import pyarrow as pa
from sqlglot import exp

from datum_sql.catalog import Catalog, SinkEntry, SourceEntry, ViewEntry
from datum_sql.errors import PlanError, SqlError
from datum_sql.sql import process, table_signatures
from datum_sql.sql import statements as st
from datum_sql.sql.dialect import WINDOW_FUNCTIONS, Datum, Explain
from datum_sql.sql.literals import dotted_name, error_at, interval_micros, option_value
from datum_sql.sql.types import arrow_type

WINDOW_USAGE = {
    "tumble": "tumble(table, time_col, INTERVAL size [, INTERVAL offset])",
    "hop": "hop(table, time_col, INTERVAL slide, INTERVAL size [, INTERVAL offset])",
    "cumulate": "cumulate(table, time_col, INTERVAL step, INTERVAL size [, INTERVAL offset])",
    "session": "session(table, time_col, INTERVAL gap)",
}
WINDOW_COLUMNS = ("window_start", "window_end")


def ordered_watermark_type(t: pa.DataType) -> bool:
    """Whether a watermark can follow a column of type ``t``."""
    return (
        pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_integer(t)
        or pa.types.is_decimal(t)
    )


class Binder:
    """Binds statements against a catalog.

    ``batch=True`` binds for ``ctx.sql``: sinks are readable tables there.
    """

    def __init__(
        self, catalog: Catalog, *, batch: bool = False, schemas: dict[str, pa.Schema] | None = None
    ) -> None:
        self.catalog = catalog
        self.batch = batch
        #: Schemas known only from data (a sink's committed files), by lower-case name.
        self.schemas = schemas or {}
        self._sql = ""
        self._subqueries = 0
        #: The FROM relations of the SELECTs enclosing the one being bound, innermost
        #: last: a subquery in an expression may name their columns (correlation).
        self._outer: list[list[st.Relation]] = []

    # -- statements ---------------------------------------------------------------------
    def bind(self, node: exp.Expr, sql: str) -> st.Statement:
        self._sql = sql
        if isinstance(node, exp.Create):
            return self._bind_create(node)
        if isinstance(node, exp.Insert):
            return self._bind_insert(node)
        if isinstance(node, exp.Query):
            return self.bind_query(node)
        if isinstance(node, exp.Drop):
            return self._bind_drop(node)
        if isinstance(node, exp.Set):
            return self._bind_set(node)
        if isinstance(node, Explain):
            inner = self.bind(node.this, sql)
            if not isinstance(inner, st.Query):
                raise self._err(node, "EXPLAIN takes a SELECT or INSERT INTO ... SELECT")
            return st.Explain(inner)
        if isinstance(node, exp.Show):
            return st.Show(node.name.lower())
        raise self._err(node, f"unsupported statement {node.key.upper()}")

    def _err(self, node: exp.Expr | None, message: str) -> SqlError:
        return error_at(node, message, self._sql)

    def _bind_create(self, node: exp.Create) -> st.Statement:
        kind = (node.args.get("kind") or "").upper()
        target = node.this
        table = target.this if isinstance(target, exp.Schema) else target
        name = table.name
        exists = bool(node.args.get("exists"))
        replace = bool(node.args.get("replace"))
        props = node.args.get("properties")
        options, fmt, enc = self._options(props)
        if kind == "SOURCE" or (kind == "TABLE" and options.get("connector")):
            schema, event_time, delay = (
                self._columns(target) if isinstance(target, exp.Schema) else (None, None, None)
            )
            connector = self._connector(options, node, name)
            include = self._include(props)
            entry = SourceEntry(
                name=name, connector=connector, options=options, schema=schema,
                event_time=event_time, watermark_delay_us=delay, format=fmt, encode=enc,
                include=include, late_output=options.pop("late_output", None),
            )  # fmt: skip
            return st.CreateSource(entry, if_not_exists=exists, or_replace=replace)
        if kind == "SINK":
            connector = self._connector(options, node, name)
            schema = self._columns(target)[0] if isinstance(target, exp.Schema) else None
            query_ast = node.expression
            sink = SinkEntry(name=name, connector=connector, options=options, schema=schema,
                             format=fmt, encode=enc,
                             query=query_ast.sql(dialect=Datum) if query_ast else None)  # fmt: skip
            query = self.bind_query(query_ast) if isinstance(query_ast, exp.Query) else None
            if query is not None:
                query.sink = sink
            return st.CreateSink(sink, if_not_exists=exists, query=query, or_replace=replace)
        if kind == "VIEW":
            materialized = props is not None and bool(props.find(exp.MaterializedProperty))
            q = node.expression
            if not isinstance(q, exp.Query):
                what = "MATERIALIZED VIEW" if materialized else "VIEW"
                raise self._err(node, f"CREATE {what} needs AS SELECT ...")
            for clause, text in (
                ("allowed_lateness", "ALLOWED LATENESS"),
                ("late_output", "LATE ROWS TO"),
            ):
                if not materialized and q.args.get(clause) is not None:
                    raise self._err(
                        table,
                        f"a view cannot carry {text}, which applies to a whole query: write it "
                        "on the query reading the view, or CREATE MATERIALIZED VIEW",
                    )
            query = self.bind_query(q)
            view = ViewEntry(name, q.sql(dialect=Datum), materialized=materialized)
            return st.CreateView(view, query, exists, or_replace=replace)
        if kind == "TABLE":
            raise self._err(
                table,
                "CREATE TABLE is not supported: use CREATE SOURCE (rows in) or CREATE SINK (rows out)",
            )
        raise self._err(node, f"unsupported CREATE {kind}")

    def _include(self, props: exp.Properties | None) -> list[tuple[str, str]]:
        """``INCLUDE key AS k, partition, ...``: (kind, column name) pairs."""
        out = []
        for p in props.expressions if props else []:
            if isinstance(p, exp.IncludeProperty):
                kind = p.name.lower()
                out.append((kind, p.alias or (kind if kind != "timestamp" else "kafka_timestamp")))
        return out

    def _connector(self, options: dict, node: exp.Expr, name: str) -> str:
        connector = options.pop("connector", None)
        if not connector:
            raise self._err(node, f"{name}: WITH (connector = '...') is required")
        return str(connector).lower()

    def _options(self, props: exp.Properties | None) -> tuple[dict, str | None, str | None]:
        options: dict = {}
        fmt = enc = None
        for p in props.expressions if props else []:
            if isinstance(p, exp.FileFormatProperty):
                fmt = p.name.upper()
            elif type(p).__name__ == "EncodeProperty":
                enc = p.name.upper()
            elif isinstance(p, exp.MaterializedProperty | exp.IncludeProperty):
                continue
            elif type(p) is exp.Property:
                options[dotted_name(p.this).lower()] = option_value(p.args.get("value"))
            else:
                raise self._err(p, f"unsupported table property {p.sql(dialect='risingwave')}")
        return options, fmt, enc

    def _columns(self, schema_node: exp.Schema) -> tuple[pa.Schema, str | None, int | None]:
        fields: list[pa.Field] = []
        event_time = None
        watermark: exp.Expr | None = None
        for col in schema_node.expressions:
            if isinstance(col, exp.ColumnDef):
                kind = col.args.get("kind")
                if kind is None:
                    raise self._err(col, f"column {col.name!r} needs a type")
                nullable = not any(
                    isinstance(c.kind, exp.NotNullColumnConstraint) for c in col.constraints
                )
                fields.append(pa.field(col.name, arrow_type(kind, column=col.name), nullable))
            elif type(col).__name__ == "WatermarkColumnConstraint":
                watermark = col
                event_time = col.this.name
            else:
                raise self._err(
                    col, f"unsupported column definition {col.sql(dialect='risingwave')}"
                )
        names = [f.name for f in fields]
        if watermark is None:
            return (pa.schema(fields) if fields else None), None, None  # type: ignore[return-value]
        if not fields:
            # Only a WATERMARK clause: the connector tells the columns, the context checks it.
            return None, event_time, self._watermark(watermark, None)  # type: ignore[return-value]
        if event_time not in names:
            raise self._err(
                schema_node,
                f"WATERMARK FOR {event_time}: no such column; columns: {', '.join(names)}",
            )
        t = fields[names.index(event_time)].type
        if not ordered_watermark_type(t):
            raise self._err(
                schema_node,
                f"WATERMARK FOR {event_time}: column must be a TIMESTAMP, DATE, integer or "
                f"DECIMAL, is {t}",
            )
        return pa.schema(fields), event_time, self._watermark(watermark, t)

    def _watermark(self, node: exp.Expr, t: pa.DataType | None) -> int:
        """The delay in the column's unit: microseconds of an INTERVAL for a TIMESTAMP or
        DATE (or a column the connector types later), the number for an integer or DECIMAL
        (in its unscaled units)."""
        col = node.this.name
        expr = node.expression
        if isinstance(expr, exp.Column) and expr.name == col:
            return 0
        if (
            isinstance(expr, exp.Sub)
            and isinstance(expr.this, exp.Column)
            and expr.this.name == col
        ):
            if t is None or pa.types.is_timestamp(t) or pa.types.is_date(t):
                return interval_micros(expr.expression, what="the watermark delay")
            return self._count_delay(expr.expression, t, col)
        raise self._err(
            expr,
            f"WATERMARK FOR {col} AS must be '{col}' or '{col} - <delay>' ({col} - INTERVAL '5 seconds' for a time, {col} - 5 for a number)",
        )

    def _count_delay(self, node: exp.Expr, t: pa.DataType, col: str) -> int:
        scale = t.scale if pa.types.is_decimal(t) else 0  # type: ignore[attr-defined]
        if isinstance(node, exp.Literal) and not node.is_string:
            units = Decimal(node.this).scaleb(scale)
            if units == units.to_integral_value() and units >= 0:
                return int(units)
        raise self._err(
            node,
            f"WATERMARK FOR {col}: the delay of a {t} column must be a non-negative number "
            f"{'with at most ' + str(scale) + ' decimals' if scale else 'without decimals'}, "
            f"got {node.sql()}",
        )

    def _bind_insert(self, node: exp.Insert) -> st.Query:
        target = node.this
        if isinstance(target, exp.Schema):
            raise self._err(
                target,
                "INSERT INTO sink (columns) is not supported; name the columns in the SELECT",
            )
        sink = self.catalog.get(target.name)
        if not isinstance(sink, SinkEntry):
            near = difflib.get_close_matches(
                target.name, [s.name for s in self.catalog.sinks()], n=2
            )
            hint = f" Did you mean {', '.join(map(repr, near))}?" if near else ""
            what = (
                f"{target.name!r} is a {sink.kind}, not a sink"
                if sink
                else f"unknown sink {target.name!r}"
            )
            raise self._err(target, f"INSERT INTO: {what}.{hint} Create one with CREATE SINK")
        q = node.expression
        if not isinstance(q, exp.Query):
            raise self._err(node, "INSERT INTO sink needs a SELECT")
        query = self.bind_query(q)
        query.sink = sink
        return query

    def _bind_drop(self, node: exp.Drop) -> st.Drop:
        kind = (node.args.get("kind") or "").lower()
        if node.args.get("materialized") or kind == "materialized view" or kind == "view":
            kind = "materialized view"
        if kind not in ("source", "sink", "materialized view"):
            raise self._err(
                node, f"DROP {kind.upper()} is not supported; DROP SOURCE|SINK|MATERIALIZED VIEW"
            )
        target = node.this or (node.args.get("tables") or [None])[0]
        if target is None:
            raise self._err(node, "DROP needs a name")
        return st.Drop(kind, target.name, bool(node.args.get("exists")))

    def _bind_set(self, node: exp.Set) -> st.SetOption:
        item = node.expressions[0] if node.expressions else None
        eq = item.this if isinstance(item, exp.SetItem) else None
        if not isinstance(eq, exp.EQ):
            raise self._err(node, "SET takes name = value")
        return st.SetOption(dotted_name(eq.this).lower(), option_value(eq.expression))

    # -- queries ------------------------------------------------------------------------
    def bind_query(self, node: exp.Query, sql: str | None = None) -> st.Query:
        if sql is not None:
            self._sql = sql
        sql = node.sql(dialect=Datum)
        node = node.copy()
        emit = node.args.get("emit") == "window_close"
        lateness = node.args.get("allowed_lateness")
        late_output = node.args.get("late_output")
        node = _inline_ctes(node)
        self._bind_query_node(node)
        return st.Query(
            ast=node,
            sql=sql,
            emit_on_window_close=emit,
            allowed_lateness_us=interval_micros(lateness, what="allowed lateness")
            if lateness
            else 0,
            late_output=late_output.name if late_output is not None else None,
        )

    def _bind_query_node(self, node: exp.Expr) -> list[str]:
        """Bind a SELECT or set operation in place; return its output column names."""
        if isinstance(node, exp.Subquery):
            return self._bind_query_node(node.this)
        if isinstance(node, exp.SetOperation):
            left = self._bind_query_node(node.left)
            right = self._bind_query_node(node.right)
            if len(left) != len(right):
                raise self._err(
                    node,
                    f"{node.key.upper()}: each side must have the same number of columns ({len(left)} vs {len(right)})",
                )
            return left
        if not isinstance(node, exp.Select):
            raise self._err(node, f"unsupported query {node.key.upper()}")
        relations = self._bind_from(node)
        self._expand_stars(node, relations)
        _name_outputs(node)
        self._resolve_group_by(node, relations)
        aliases = {e.alias for e in node.expressions if isinstance(e, exp.Alias)}
        for clause, allow_alias in (("expressions", False), ("where", False), ("group", True),
                                    ("having", True), ("order", True), ("joins", False)):  # fmt: skip
            value = node.args.get(clause)
            for part in value if isinstance(value, list) else [value]:
                if isinstance(part, exp.Join):  # its table is bound: qualify its condition
                    part = part.args.get("on")
                if part is not None:
                    self._qualify(
                        part,
                        relations,
                        aliases if allow_alias else set(),
                        prefer_alias=clause == "order",
                    )
                    self._bind_expression_subqueries(part, relations)
        return [e.alias_or_name for e in node.expressions]

    def _bind_expression_subqueries(self, node: exp.Expr, relations: list[st.Relation]) -> None:
        """Bind the subqueries of an expression (``IN (SELECT ...)``, ``EXISTS (...)``, a
        scalar subquery): each sees this SELECT's relations as its outer scope."""
        for sub in subqueries_in_scope(node):
            query = sub.this if isinstance(sub, exp.Exists | exp.Subquery) else sub
            self._outer.append(relations)
            try:
                cols = self._bind_query_node(query)
            finally:
                self._outer.pop()
            parent = sub.parent
            if isinstance(sub, exp.Exists):
                continue
            width = (
                len(parent.this.expressions)
                if isinstance(parent, exp.In) and isinstance(parent.this, exp.Tuple)
                else 1
            )
            if len(cols) != width:
                what = "IN" if isinstance(parent, exp.In) else "a scalar subquery"
                raise self._err(
                    sub,
                    f"the subquery of {what} must return {width} column(s), returns {len(cols)}",
                )

    def _resolve_group_by(self, select: exp.Select, relations: list[st.Relation]) -> None:
        """``GROUP BY 2`` and ``GROUP BY alias`` name SELECT items: group by the item's
        expression (a column of the FROM tables wins over an alias, as in PostgreSQL)."""
        group = select.args.get("group")
        if group is None:
            return
        items = select.expressions
        outputs = {e.alias: e.this for e in items if isinstance(e, exp.Alias)}
        columns = {c.lower() for r in relations for c in r.columns}
        for key in list(group.expressions):
            if isinstance(key, exp.Literal) and not key.is_string:
                if not key.this.isdigit() or not 1 <= int(key.this) <= len(items):
                    raise self._err(
                        key,
                        f"GROUP BY {key.this}: the position must be between 1 and {len(items)} "
                        "(the number of SELECT items)",
                    )
                what = f"GROUP BY {key.this}"
                target = items[int(key.this) - 1]
                target = target.this if isinstance(target, exp.Alias) else target
            elif (
                isinstance(key, exp.Column)
                and not key.table
                and key.name in outputs
                and key.name.lower() not in columns
            ):
                what, target = f"GROUP BY {key.name}", outputs[key.name]
            else:
                continue
            if target.find(exp.AggFunc):
                raise self._err(
                    key,
                    f"{what} names {target.sql(dialect=Datum, normalize_functions='lower')}, "
                    "an aggregate; group by "
                    "columns or expressions of the FROM tables",
                )
            key.replace(target.copy())

    def _bind_from(self, select: exp.Select) -> list[st.Relation]:
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            return []
        relations = [self._bind_relation(from_.this)]
        for join in select.args.get("joins") or []:
            if _table_call(join.this) is not None:
                relations.append(self._bind_lateral(join, relations))
            else:
                relations.append(self._bind_relation(join.this))
        seen: set[str] = set()
        for rel in relations:
            if rel.alias in seen:
                raise self._err(
                    from_, f"table name {rel.alias!r} appears twice in FROM; give one an alias"
                )
            seen.add(rel.alias)
        return relations

    def _bind_relation(self, node: exp.Expr) -> st.Relation:
        if isinstance(node, exp.Subquery):
            cols = self._bind_query_node(node.this)
            self._subqueries += 1
            alias = _alias_of(node) or f"subquery_{self._subqueries}"
            node.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
            rel = st.Relation(alias=alias, kind="subquery", columns=cols)
            node.meta["relation"] = rel
            return rel
        call = _table_call(node)
        if call is not None:
            return self._bind_table_call(node, call, [])
        if not isinstance(node, exp.Table):
            raise self._err(node, f"unsupported FROM item {node.sql(dialect='risingwave')}")
        fn = node.this
        if isinstance(fn, exp.Anonymous) and fn.name.lower() == process.PROCESS:
            return process.bind_process(self, node, fn)
        if isinstance(fn, exp.Anonymous | exp.Func) and not isinstance(fn, exp.Identifier):
            return self._bind_window(node, fn)
        rel = self._table_relation(node, node.name, _alias_of(node) or _fold(node.this))
        node.meta["relation"] = rel
        node.set("alias", exp.TableAlias(this=exp.to_identifier(rel.alias, quoted=True)))
        return rel

    def _bind_lateral(self, join: exp.Join, before: list[st.Relation]) -> st.Relation:
        """``t, LATERAL f(t.x) AS f`` (or ``t, f(t.x)``, ``CROSS JOIN LATERAL``, ``LEFT JOIN
        LATERAL ... ON TRUE``): the call's arguments may name the tables before it. A comma
        becomes CROSS JOIN: the rows of ``f`` are those of each row of ``t``, no join key."""
        node = join.this
        call = _table_call(node)
        assert call is not None
        if is_comma_join(join):
            join.set("kind", "CROSS")
        return self._bind_table_call(node, call, before)

    def _bind_table_call(
        self, node: exp.Expr, call: exp.Anonymous, before: list[st.Relation]
    ) -> st.Relation:
        """A registered Python table function called in FROM: its columns are the declared
        output columns (renamed by ``AS f(a, b)``); its arguments are qualified against the
        FROM items before it. The planner checks their number and types."""
        sig = table_signatures.lookup(call.name)
        assert sig is not None
        for arg in call.expressions:
            if arg.find(exp.Select, exp.AggFunc, exp.Window) is not None:
                raise PlanError(
                    f"{sig.name}(): an argument must be a column, a literal or an expression "
                    f"of them, not {arg.sql(dialect=Datum)}"
                )
            self._qualify(arg, before, set())
        alias_node = node.args.get("alias")
        alias = _alias_of(node) or sig.name
        columns = list(sig.output_schema.names)
        renamed = list(alias_node.columns) if isinstance(alias_node, exp.TableAlias) else []
        if renamed:
            if len(renamed) != len(columns):
                raise PlanError(
                    f"{alias}({', '.join(_fold(c) for c in renamed)}) names {len(renamed)} "
                    f"columns; {sig.name}() returns {len(columns)}: {', '.join(columns)}"
                )
            columns = [_fold(c) for c in renamed]
        types = dict(zip(columns, sig.output_schema.types, strict=True))
        rel = st.Relation(alias=alias, kind="table function", columns=columns, types=types)
        lateral = exp.Lateral(
            this=call,
            alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)),
        )
        lateral.meta["relation"] = rel
        node.replace(lateral)
        return rel

    def _table_relation(self, at: exp.Expr, name: str, alias: str) -> st.Relation:
        kinds: tuple[str, ...] = ("source", "materialized view") + (("sink",) if self.batch else ())
        entry = self.catalog.get(name)
        if entry is None or entry.kind not in kinds:
            known = [e for e in self.catalog.names() if self.catalog.get(e).kind in kinds]  # type: ignore[union-attr]
            near = difflib.get_close_matches(name.lower(), known, n=3)
            hint = (
                f" Did you mean {', '.join(map(repr, near))}?"
                if near
                else (
                    f" Known: {', '.join(known)}."
                    if known
                    else " The catalog is empty: CREATE SOURCE first."
                )
            )
            what = (
                f"{name!r} is a {entry.kind}, which a streaming query cannot read"
                if entry
                else f"unknown table {name!r}"
            )
            raise self._err(at, f"{what}.{hint}")
        schema = entry.schema or self.schemas.get(name.lower())
        if schema is None:
            raise self._err(at, f"{entry.kind} {name!r} has no known schema yet")
        kind = "view" if isinstance(entry, ViewEntry) else entry.kind
        return st.Relation(alias=alias, kind=kind, columns=list(schema.names),
                           types={f.name: f.type for f in schema}, entry=entry)  # fmt: skip

    def _bind_window(self, table: exp.Table, fn: exp.Expr) -> st.Relation:
        fname = (fn.name if isinstance(fn, exp.Anonymous) else type(fn).__name__).lower()
        if fname not in WINDOW_FUNCTIONS:
            raise self._err(
                fn,
                f"unknown table function {fname}(); available: {', '.join(WINDOW_FUNCTIONS)} "
                "and those registered with ctx.register_table_function()",
            )
        args = list(fn.expressions) if isinstance(fn, exp.Anonymous) else list(fn.args.values())
        want = {"tumble": (3, 4), "hop": (4, 5), "cumulate": (4, 5), "session": (3, 3)}[fname]
        if not want[0] <= len(args) <= want[1]:
            usage = WINDOW_USAGE[fname]
            count = f"{want[0]}" if want[0] == want[1] else f"{want[0]} or {want[1]}"
            raise self._err(fn, f"{fname}() takes {count} arguments: {usage}")
        first, named = args[0], None
        if isinstance(first, exp.Alias) and isinstance(first.this, exp.Subquery):
            first, named = first.this, _fold(first.args["alias"])  # tumble((SELECT ...) AS x, ...)
        derived = first if isinstance(first, exp.Subquery) else None
        if derived is not None:
            cols = self._bind_query_node(derived.this)
            self._subqueries += 1
            alias = (
                _alias_of(table) or named or _alias_of(derived) or f"subquery_{self._subqueries}"
            )
            tname = alias
            rel = st.Relation(alias=alias, kind="subquery", columns=cols)
        else:
            tname = args[0].name
            alias = _alias_of(table) or tname.lower()
            rel = self._table_relation(args[0], tname, alias)
        ts = args[1].name
        if ts not in rel.columns:
            raise self._unknown_column(args[1], ts, rel.columns)
        # A derived table's time column is checked by the planner, which knows its type
        # and whether a watermark bounds it.
        if ts in rel.types and not pa.types.is_timestamp(rel.types[ts]):
            raise self._err(
                args[1], f"{fname}(): time column {ts!r} must be a TIMESTAMP, is {rel.types[ts]}"
            )
        window = self._window_spec(fname, ts, args)
        for c in WINDOW_COLUMNS:
            if c in rel.columns:
                raise self._err(
                    args[0], f"{tname} already has a column {c!r}, which {fname}() adds"
                )
        rel.columns = [*rel.columns, *WINDOW_COLUMNS]
        if ts in rel.types:
            rel.types.update(dict.fromkeys(WINDOW_COLUMNS, rel.types[ts]))
        rel.window = window
        replacement: exp.Expr = exp.Table(
            this=exp.to_identifier(tname),
            alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)),
        )
        if derived is not None:
            replacement = exp.Subquery(
                this=derived.this, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True))
            )
        replacement.meta["relation"] = rel
        table.replace(replacement)
        return rel

    def _window_spec(self, fname: str, ts: str, args: list[exp.Expr]) -> st.WindowSpec:
        """The window of ``fname(table, ts, ...)``: intervals checked, offset normalized."""
        if fname in ("hop", "cumulate"):
            step_name = "slide" if fname == "hop" else "step"
            slide = interval_micros(args[2], what=f"{fname} {step_name}")
            size = interval_micros(args[3], what=f"{fname} size")
            if slide <= 0 or size <= 0:
                raise self._err(args[2], f"{fname}(): the {step_name} and size must be positive")
            if fname == "cumulate" and size % slide:
                raise self._err(args[3], "cumulate(): the size must be a multiple of the step")
            period = slide if fname == "hop" else size
        else:
            slide = None
            size = period = interval_micros(args[2], what=f"{fname} size")
            if size <= 0:
                raise self._err(args[2], f"{fname}(): the interval must be positive")
        offset = 0
        if len(args) == (5 if slide is not None else 4):
            offset = interval_micros(args[-1], what=f"{fname} offset") % period
        return st.WindowSpec(fname, ts, size, slide, offset)

    def _expand_stars(self, select: exp.Select, relations: list[st.Relation]) -> None:
        out: list[exp.Expr] = []
        for e in select.expressions:
            if isinstance(e, exp.Star):
                for rel in relations:
                    out.extend(exp.column(c, rel.alias, quoted=True) for c in rel.columns)
            elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
                star = next((r for r in relations if r.alias == _fold(e.args["table"])), None)
                if star is None:
                    raise self._unknown_table(e, e.table, relations)
                out.extend(exp.column(c, star.alias, quoted=True) for c in star.columns)
            else:
                out.append(e)
        if not out:
            raise self._err(select, "SELECT * over no table: add a FROM clause")
        select.set("expressions", out)

    def _qualify(
        self,
        node: exp.Expr,
        relations: list[st.Relation],
        aliases: set[str],
        *,
        prefer_alias: bool = False,
    ) -> None:
        for col in list(_columns_in_scope(node)):
            name = col.name
            if prefer_alias and not col.table and name in aliases:
                continue  # ORDER BY names an output column first (as PostgreSQL does)
            if col.table:
                alias = _fold(col.args["table"])
                rel = next((r for r in relations if r.alias == alias), None)
                scopes = [s for s in reversed(self._outer) if any(r.alias == alias for r in s)]
                if rel is None and scopes:  # a correlated reference to an enclosing SELECT
                    rel = next(r for r in scopes[0] if r.alias == alias)
                if rel is None:
                    raise self._unknown_table(col, col.table, relations)
                actual = _match(name, rel.columns)
                if actual is None:
                    raise self._unknown_column(col, name, rel.columns, rel.alias)
                col.set("table", exp.to_identifier(rel.alias, quoted=True))
                col.set("this", exp.to_identifier(actual, quoted=True))
                continue
            owners = [r for r in relations if _match(name, r.columns) is not None]
            if len(owners) > 1:
                raise self._err(
                    col,
                    f"column {name!r} is ambiguous: in {', '.join(r.alias for r in owners)}; qualify it",
                )
            if not owners and name not in aliases:
                owners = self._outer_owners(col, name)
            if not owners:
                if name in aliases:
                    continue
                if not relations:
                    raise self._err(col, f"column {name!r} needs a FROM clause naming its table")
                raise self._unknown_column(col, name, [c for r in relations for c in r.columns])
            col.set("table", exp.to_identifier(owners[0].alias, quoted=True))
            col.set("this", exp.to_identifier(_match(name, owners[0].columns), quoted=True))

    def _outer_owners(self, col: exp.Column, name: str) -> list[st.Relation]:
        """The relations of the innermost enclosing SELECT that has column ``name``."""
        for scope in reversed(self._outer):
            owners = [r for r in scope if _match(name, r.columns) is not None]
            if len(owners) > 1:
                raise self._err(
                    col,
                    f"column {name!r} is ambiguous: in {', '.join(r.alias for r in owners)}; qualify it",
                )
            if owners:
                return owners
        return []

    def _unknown_column(
        self, at: exp.Expr, name: str, columns: Iterable[str], table: str | None = None
    ) -> SqlError:
        cols = list(dict.fromkeys(columns))
        near = difflib.get_close_matches(name, cols, n=3)
        hint = (
            f" Did you mean {', '.join(map(repr, near))}?"
            if near
            else f" Columns: {', '.join(cols)}."
        )
        where = f" in {table!r}" if table else ""
        return self._err(at, f"unknown column {name!r}{where}.{hint}")

    def _unknown_table(self, at: exp.Expr, name: str, relations: list[st.Relation]) -> SqlError:
        return self._err(
            at,
            f"unknown table or alias {name!r} in this query; FROM has {', '.join(r.alias for r in relations)}",
        )


def _table_call(node: exp.Expr) -> exp.Anonymous | None:
    """The call of a registered table function that FROM item ``node`` is (``f(...)``,
    ``LATERAL f(...)``), or None."""
    call = node.this if isinstance(node, exp.Table | exp.Lateral) else None
    if not isinstance(call, exp.Anonymous) or table_signatures.lookup(call.name) is None:
        if isinstance(node, exp.Lateral):
            what = call.name if isinstance(call, exp.Anonymous) else None
            raise PlanError(
                f"LATERAL {what}(...): unknown table function {what}(); register it with "
                "ctx.register_table_function()"
                if what
                else "LATERAL takes a registered table function call: LATERAL f(t.x) AS f"
            )
        return None
    return call


def is_comma_join(join: exp.Join) -> bool:
    """A join written with a comma: no kind, side, method, ON or USING."""
    return not any(join.args.get(a) for a in ("on", "using", "kind", "side", "method"))


def _fold(ident: exp.Expr | None) -> str:
    """An identifier as SQL means it: unquoted names fold to lower case."""
    if ident is None:
        return ""
    if isinstance(ident, exp.Identifier):
        return ident.this if ident.quoted else ident.this.lower()
    return ident.name.lower()


def _alias_of(node: exp.Expr) -> str | None:
    alias = node.args.get("alias")
    return _fold(alias.this) if isinstance(alias, exp.TableAlias) and alias.this else None


def _match(name: str, columns: list[str]) -> str | None:
    """The column ``name`` refers to: exact, else the one case-insensitive match."""
    if name in columns:
        return name
    folded = [c for c in columns if c.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


#: sqlglot's name of a function → the name it has in our SQL, for output column names.
_OUTPUT_NAMES = {"approx_quantile": "approx_percentile"}


def _name_outputs(select: exp.Select) -> None:
    """Give every unnamed SELECT expression the name PostgreSQL would (``count``,
    ``upper``, ...), made unique, so streaming and batch results agree on column names."""
    taken: set[str] = set()
    for e in select.expressions:
        if isinstance(e, exp.Alias | exp.Column):
            taken.add(e.alias_or_name)
    out: list[exp.Expr] = []
    for e in select.expressions:
        if isinstance(e, exp.Alias | exp.Column):
            out.append(e)
            continue
        fn = e
        while isinstance(fn, exp.Filter | exp.WithinGroup):  # count(*) FILTER (...) is count
            fn = fn.this
        if isinstance(fn, exp.Func):
            named = isinstance(fn, exp.Anonymous | exp.AnonymousAggFunc)
            base = (fn.name if named else fn.sql_name()).lower()
            base = _OUTPUT_NAMES.get(base, base)
        elif isinstance(e, exp.Cast):
            base = e.to.sql().lower()
        else:
            base = "?column?"
        name, n = base, 1
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        taken.add(name)
        out.append(exp.alias_(e, name, quoted=True))
    select.set("expressions", out)


def _columns_in_scope(node: exp.Expr) -> Iterable[exp.Column]:
    """Columns under ``node`` that belong to this SELECT (not to nested subqueries)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, exp.Column):
            if not isinstance(n.this, exp.Star):
                yield n
            continue
        if isinstance(n, exp.Subquery | exp.Select) and n is not node:
            continue  # bound on its own, with this SELECT as its outer scope
        stack.extend(n.iter_expressions())


def subqueries_in_scope(node: exp.Expr) -> list[exp.Expr]:
    """The outermost subqueries under ``node`` (``EXISTS`` with its SELECT, the
    parenthesized SELECT of ``IN`` or a scalar subquery), in the order written."""
    found: list[exp.Expr] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, exp.Exists) or (
            isinstance(n, exp.Subquery | exp.Select) and n is not node
        ):
            found.append(n)
            continue
        stack.extend(reversed(list(n.iter_expressions())))
    return found


def _inline_ctes(node: exp.Query) -> exp.Query:
    """Replace references to WITH-clause names by the subqueries they name: in FROM, in
    joins and as the table of a window function; a CTE may read the CTEs before it, and a
    WITH inside a subquery is scoped to it (inner WITH clauses are inlined first)."""
    for with_ in sorted(node.find_all(exp.With), key=lambda w: -w.depth):
        owner = with_.parent
        assert owner is not None and with_.arg_key
        owner.set(with_.arg_key, None)
        ctes: list[tuple[str, exp.Expr]] = []
        for cte in with_.expressions:
            wrapped = exp.Subquery(this=cte.this.copy())
            for name, earlier in ctes:
                _replace_cte(wrapped, name, earlier)
            ctes.append((cte.alias, wrapped.this))
        for name, body in ctes:
            _replace_cte(owner, name, body)
    return node


def _replace_cte(node: exp.Expr, name: str, body: exp.Expr) -> None:
    """Replace, under ``node``, every reference to CTE ``name`` by ``(body) AS name``."""

    def subquery(alias: str) -> exp.Subquery:
        return exp.Subquery(this=body.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias)))

    for table in list(node.find_all(exp.Table)):
        fn = table.this
        if isinstance(fn, exp.Anonymous) and fn.name.lower() in WINDOW_FUNCTIONS:
            first = fn.expressions[0] if fn.expressions else None
            if isinstance(first, exp.Column) and not first.table and first.name == name:
                first.replace(subquery(name))
            continue
        if table.name == name and not table.args.get("db") and isinstance(fn, exp.Identifier):
            table.replace(subquery(table.alias or name))
