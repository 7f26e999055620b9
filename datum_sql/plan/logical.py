"""The logical plan: frozen, self-validating nodes, each with its output schema.

A plan is a tree rooted at a :class:`SinkWrite` or :class:`Collect`. Nodes hold only data
(schemas, SQL text for DataFusion, microsecond durations) so the plan prints and hashes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from datum_sql.engine.expressions import Program
from datum_sql.errors import PlanError

OP_COLUMN = "_op"


@dataclass(frozen=True)
class PlanNode:
    @property
    def children(self) -> tuple[PlanNode, ...]:
        return ()

    @property
    def schema(self) -> pa.Schema:  # pragma: no cover - every node overrides
        raise NotImplementedError

    @property
    def updating(self) -> bool:
        """True when the node's output is a changelog (carries ``_op``)."""
        return any(c.updating for c in self.children)

    @property
    def time_lags(self) -> dict[str, int]:
        """Output columns carrying event time that the node's output watermark bounds, each
        with its lag in microseconds: no row this node emits after watermark ``w`` has a
        value below ``w - lag`` in that column. A window, a time-keyed GROUP BY or a join
        on one of these columns reads it through a :class:`WatermarkLag` of that lag."""
        return {}

    @property
    def time_columns(self) -> tuple[str, ...]:
        """The time columns the output watermark itself bounds (lag 0)."""
        return tuple(c for c, lag in self.time_lags.items() if lag == 0)

    def label(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class Scan(PlanNode):
    """Rows of a source table as they arrive, late rows already removed."""

    table: str
    source_schema: pa.Schema
    event_time: str | None = None
    watermark_delay_us: int | None = None
    #: Sink receiving the rows that arrive late (with diagnostics), if any.
    late_output: str | None = None
    #: Sink receiving records that cannot be decoded (``bad_records = 'dead_letter'``).
    dead_letter: str | None = None
    idle_timeout_s: float | None = None

    @property
    def schema(self) -> pa.Schema:
        return self.source_schema

    @property
    def time_lags(self) -> dict[str, int]:
        return {self.event_time: 0} if self.event_time else {}

    def label(self) -> str:
        wm = ""
        if self.event_time:
            wm = f", event_time={self.event_time}, delay={self.watermark_delay_us or 0}us"
        side = "".join(
            f", {k}={v}"
            for k, v in (("late_output", self.late_output), ("dead_letter", self.dead_letter))
            if v
        )
        return f"Scan({self.table}{wm}{side})"


@dataclass(frozen=True)
class Calc(PlanNode):
    """Stateless filter and projection over each batch: ``program`` (kernels compiled at
    planning) when the SELECT has an exact one, else ``sql`` through DataFusion.

    ``sql`` reads one table named ``input``.
    """

    input: PlanNode
    sql: str
    out_schema: pa.Schema
    #: Set when the SELECT only picks and renames columns: (input, output) name pairs,
    #: run without DataFusion (no copy).
    projection: tuple[tuple[str, str], ...] | None = None
    #: The SELECT as the user wrote it, for errors while it runs.
    query: str = ""
    #: Output columns that pass an input time column through (renamed or not, or shifted
    #: by a constant), with their lags (see :attr:`PlanNode.time_lags`).
    passes_time: tuple[tuple[str, int], ...] = ()
    #: The SELECT compiled to kernels (see plan/compile.py); None: DataFusion runs ``sql``.
    program: Program | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        if " input" not in self.sql:
            raise PlanError(f"Calc SQL must read the table 'input': {self.sql}")

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.out_schema

    @property
    def time_lags(self) -> dict[str, int]:
        return dict(self.passes_time)

    def label(self) -> str:
        return f"Calc({self.sql})"


@dataclass(frozen=True)
class WindowSpec:
    kind: str  # "tumble" | "hop" | "cumulate" | "session"
    time_column: str
    size_us: int  # session: the gap
    slide_us: int | None = None  # hop: the slide; cumulate: the step
    offset_us: int = 0

    def label(self) -> str:
        offset = f", offset={self.offset_us}us" if self.offset_us else ""
        if self.kind in ("hop", "cumulate"):
            step = "slide" if self.kind == "hop" else "step"
            return (
                f"{self.kind}({self.time_column}, {step}={self.slide_us}us, "
                f"size={self.size_us}us{offset})"
            )
        what = "gap" if self.kind == "session" else "size"
        return f"{self.kind}({self.time_column}, {what}={self.size_us}us{offset})"


@dataclass(frozen=True)
class AggregateCall:
    #: count_star, count, count_distinct, sum, avg, min, max, first_value, ...; ``python``:
    #: a registered Python aggregate, named by ``params["function"]``
    func: str
    input: str | None
    output: str
    params: tuple[tuple[str, float | str], ...] = ()
    #: The second argument's column of a two-input aggregate (``corr(y, x)``: x).
    input2: str | None = None

    def label(self) -> str:
        func = dict(self.params)["function"] if self.func == "python" else self.func
        args = self.input or "*"
        if self.input2 is not None:
            args += f", {self.input2}"
        return f"{self.output}={func}({args})"


def window_over_changelog(call: str, what: str) -> str:
    """Why a window cannot read a changelog, and what to write instead."""
    return (
        f"{call}: {what} is a changelog (the result of an unbounded GROUP BY or top-N, which "
        "updates and retracts rows), and windows read append-only rows; window the source "
        "rows (and aggregate the windowed result), or aggregate the changelog with an "
        "unbounded GROUP BY"
    )


@dataclass(frozen=True)
class Aggregate(PlanNode):
    """GROUP BY over a window (``window`` set) or unbounded (``window`` None).

    Unbounded and windows without EMIT ON WINDOW CLOSE emit a changelog.
    """

    input: PlanNode
    keys: tuple[str, ...]
    calls: tuple[AggregateCall, ...]
    out_schema: pa.Schema
    window: WindowSpec | None = None
    emit_on_close: bool = False
    allowed_lateness_us: int = 0
    order_column: str | None = None
    #: What moves the watermark that closes the windows (shown by EXPLAIN).
    closed_by: str | None = None
    #: Groups an unbounded aggregate has even over no rows, each as (key, value) pairs, its
    #: other keys NULL: the grouping sets that group by no key (plan/grouping_sets.py).
    always_groups: tuple[tuple[tuple[str, int], ...], ...] = ()

    def __post_init__(self) -> None:
        if self.input.updating and self.window is not None:
            raise PlanError(window_over_changelog(f"{self.window.kind}()", "its input"))
        if self.emit_on_close and self.window is None:
            raise PlanError(
                "EMIT ON WINDOW CLOSE needs a window: GROUP BY window_start, window_end over "
                "tumble(), hop(), cumulate() or session()"
            )
        if self.window is not None and self.window.time_column not in self.input.time_columns:
            raise PlanError(
                f"internal: window over {self.window.time_column!r}, which the input's "
                "watermark does not bound"
            )

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.out_schema

    @property
    def updating(self) -> bool:
        return not self.emit_on_close

    @property
    def retracting(self) -> bool:
        """An unbounded GROUP BY over a changelog: retractions undo their rows."""
        return self.input.updating

    @property
    def time_lags(self) -> dict[str, int]:
        # A window's final row comes out when the watermark reaches its end, and every
        # window still open ends after it: window_end is bounded by the input's watermark.
        # window_start is window_end - size (the largest size for cumulate, whatever the
        # offset): it trails the watermark by at most the size. A session's start has no
        # such bound.
        w = self.window
        if w is None or not self.emit_on_close or self.allowed_lateness_us:
            return {}
        return (
            {"window_end": 0}
            if w.kind == "session"
            else {"window_start": w.size_us, "window_end": 0}
        )

    def label(self) -> str:
        calls = "".join(f", {c.label()}" for c in self.calls)
        head = f"WindowAggregate({self.window.label()}, " if self.window else "GroupAggregate("
        if self.retracting:
            head = "ChangelogAggregate("
        emit = ", emit=on window close" if self.emit_on_close else ""
        late = f", lateness={self.allowed_lateness_us}us" if self.allowed_lateness_us else ""
        closes = f", closed by {self.closed_by}" if self.closed_by else ""
        return f"{head}keys=[{', '.join(self.keys)}]{calls}{emit}{late}{closes})"


JOIN_OF_CHANGELOG = (
    "joins read append-only inputs; an aggregate's changelog cannot be joined: join windowed "
    "aggregates (GROUP BY window_start, window_end over tumble(), hop() or cumulate()), or "
    "aggregates grouped by a column that carries event time (a windowed aggregate's "
    "window_start or window_end), whose groups the watermark closes"
)


@dataclass(frozen=True)
class Join(PlanNode):
    """A stream joined with a stream (ASOF, interval) or with a bounded table (lookup).

    Output columns are named ``<alias>.<column>``; the SELECT above renames them.
    """

    left: PlanNode
    right: PlanNode
    kind: str  # "asof" | "interval" | "lookup"
    outer: bool
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    left_columns: tuple[tuple[str, str], ...]
    right_columns: tuple[tuple[str, str], ...]
    out_schema: pa.Schema
    left_time: str | None = None
    right_time: str | None = None
    direction: str = "backward"
    strict: bool = False
    tolerance_us: int | None = None
    #: None: that bound is a column of one side (``time_options["end_column"]``).
    lower_us: int | None = 0
    upper_us: int | None = 0
    #: The output columns the residual ON filter (``time_options["residual"]``) reads: the
    #: join emits them even when nothing after it does (plan/prune.py).
    residual_columns: tuple[str, ...] = ()
    #: More operator config of ASOF and interval joins (time_scale, which input's watermark
    #: bounds its time column, the residual ON filter): see plan/joins.py.
    time_options: dict = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.left.updating or self.right.updating:
            raise PlanError(JOIN_OF_CHANGELOG)
        if len(self.left_keys) != len(self.right_keys):
            raise PlanError("internal: join key lists differ in length")

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)

    @property
    def operator(self) -> str:
        """The job-graph operator that runs this join: an interval join beside a sparse
        side (``time_options["sparse_side"]``, chosen by plan/window_joins.py) is a
        ``sparse_interval_join``."""
        if self.kind == "interval" and self.time_options.get("sparse_side"):
            return "sparse_interval_join"
        return f"{self.kind}_join"

    @property
    def time_lags(self) -> dict[str, int]:
        # A lookup join emits each stream row as it arrives; ASOF and interval joins emit
        # a row once it is final, possibly after the watermark passed its time.
        if self.kind != "lookup":
            return {}
        lags = self.left.time_lags
        return {o: lags[c] for c, o in self.left_columns if c in lags}

    @property
    def schema(self) -> pa.Schema:
        return self.out_schema

    def label(self) -> str:
        keys = ", ".join(f"{a}={b}" for a, b in zip(self.left_keys, self.right_keys, strict=True))
        side = "LEFT " if self.outer else ""
        if self.kind == "asof":
            op = {
                ("backward", False): ">=",
                ("backward", True): ">",
                ("forward", False): "<=",
                ("forward", True): "<",
            }[(self.direction, self.strict)]
            unit = self.time_options.get("unit", "us")
            tol = f", tolerance={self.tolerance_us}{unit}" if self.tolerance_us is not None else ""
            return f"AsofJoin({side}keys=[{keys}], {self.left_time} {op} {self.right_time}{tol})"
        residual = self.time_options.get("residual")
        extra = f", filter {residual}" if residual is not None else ""
        sparse = self.time_options.get("sparse_side")
        # rows held as they arrived, pairs found by time (see plan/window_joins.py)
        extra += f", sparse {sparse}: held as arrived" if sparse else ""
        if self.kind == "interval" and self.lower_us == self.upper_us == 0:
            return f"IntervalJoin({side}keys=[{keys}], {self.left_time} = {self.right_time}{extra})"
        if self.kind == "interval":
            unit = self.time_options.get("unit", "us")
            end = self.time_options.get("end_column")
            if end is not None:
                start, point, bound = (
                    (self.left_time, self.right_time, -(self.upper_us or 0))
                    if self.lower_us is None
                    else (self.right_time, self.left_time, self.lower_us)
                )
                last = self.time_options.get("end_offset", 0)
                return (
                    f"IntervalJoin({side}keys=[{keys}], {start}{bound:+d}{unit} <= {point} <= "
                    f"{end}{last:+d}{unit}{extra})"
                )
            return (
                f"IntervalJoin({side}keys=[{keys}], {self.right_time}{self.lower_us:+d}{unit} <= "
                f"{self.left_time} <= {self.right_time}{self.upper_us:+d}{unit}{extra})"
            )
        return f"LookupJoin({side}keys=[{keys}])"


@dataclass(frozen=True)
class Residual:
    """A filter over (stream row, table row) pairs: the stream's columns ``left`` named
    ``l.<column>``, the table's ``right`` named ``r.<column>``."""

    expression: Any = field(hash=False, compare=False)  # a pyarrow.compute.Expression
    left: tuple[str, ...] = ()
    right: tuple[str, ...] = ()
    text: str = ""


@dataclass(frozen=True)
class SubqueryJoin(PlanNode):
    """Each row of ``input`` once, plus ``column``: what a subquery of its WHERE says of
    it, from ``table``, a bounded input read whole first.

    ``mode`` ``"exists"``: whether ``table`` has a row whose ``table_keys`` equal the
    row's ``input_keys`` (TRUE/FALSE). ``"in"``: SQL's ``x IN (SELECT v ...)``, the last
    key pair being ``x`` and ``v``: TRUE on a match, NULL when there is none but ``x`` or a
    ``v`` among the rows the other keys select is NULL, else FALSE. ``"scalar"``: the one
    value of ``table`` (NULL when it is empty; more than one row fails the query).
    """

    input: PlanNode
    table: PlanNode
    mode: str  # "exists" | "in" | "scalar"
    input_keys: tuple[str, ...]
    table_keys: tuple[str, ...]
    column: str
    out_schema: pa.Schema
    #: EXISTS only: correlated conditions other than the key equalities.
    residual: Residual | None = None

    def __post_init__(self) -> None:
        if self.residual is not None and (self.mode != "exists" or not self.input_keys):
            raise PlanError("internal: a subquery residual needs EXISTS with keys")
        if len(self.input_keys) != len(self.table_keys):
            raise PlanError("internal: subquery key lists differ in length")
        if self.mode == "in" and not self.input_keys:
            raise PlanError("internal: an IN subquery needs its value as a key")

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.input, self.table)

    @property
    def updating(self) -> bool:
        # The mark depends on the row alone: a changelog passes through consistently.
        return self.input.updating

    @property
    def time_lags(self) -> dict[str, int]:
        return self.input.time_lags

    @property
    def schema(self) -> pa.Schema:
        return self.out_schema

    def label(self) -> str:
        keys = ", ".join(f"{a}={b}" for a, b in zip(self.input_keys, self.table_keys, strict=True))
        extra = f", filter {self.residual.text}" if self.residual is not None else ""
        return f"SubqueryJoin({self.mode}, keys=[{keys}]{extra}, {self.column})"


@dataclass(frozen=True)
class OrderKey:
    column: str
    descending: bool = False
    nulls_first: bool = False

    def label(self) -> str:
        way = " DESC" if self.descending else ""
        return f"{self.column}{way} NULLS {'FIRST' if self.nulls_first else 'LAST'}"


@dataclass(frozen=True)
class TopN(PlanNode):
    """``ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...)`` (or RANK, DENSE_RANK) kept
    where ``lower <= rn <= upper``: a changelog, or (``window_end`` set) final rows as each window closes.

    Output: the input columns minus ``drop``, then ``rank_column`` when set.
    """

    input: PlanNode
    partition: tuple[str, ...]
    order: tuple[OrderKey, ...]
    lower: int
    upper: int
    out_schema: pa.Schema
    rank_column: str | None = None
    drop: tuple[str, ...] = ()
    window_end: str | None = None
    allowed_lateness_us: int = 0
    #: "row_number", "rank" or "dense_rank"
    function: str = "row_number"

    def __post_init__(self) -> None:
        if self.input.updating and self.window_end is not None:
            raise PlanError(
                "a window top-N reads append-only rows; it cannot rank a changelog (an "
                "unbounded aggregate's result): rank a windowed aggregate's rows, partitioned "
                "by window_start, window_end, or rank the changelog without a window"
            )

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.out_schema

    @property
    def updating(self) -> bool:
        return self.window_end is None

    def label(self) -> str:
        head = "WindowTopN" if self.window_end else "TopN"
        if self.input.updating:
            head = "ChangelogTopN"
        order = ", ".join(o.label() for o in self.order)
        rank = f", rank={self.rank_column}" if self.rank_column else ""
        return (
            f"{head}({self.function}, partition=[{', '.join(self.partition)}], "
            f"order=[{order}], rows {self.lower}..{self.upper}{rank})"
        )


@dataclass(frozen=True)
class EventTimeSort(PlanNode):
    """Rows held until the watermark passes their ``time_column``, then emitted in
    event-time order (``EMIT ON WINDOW CLOSE`` on a query without windows)."""

    input: PlanNode
    time_column: str
    allowed_lateness_us: int = 0

    def __post_init__(self) -> None:
        if self.input.updating:
            raise PlanError(
                "EMIT ON WINDOW CLOSE sorts append-only rows by event time; this query's "
                "result is a changelog: use a windowed aggregate, GROUP BY window_start, "
                "window_end over tumble(), hop(), cumulate() or session()"
            )

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.input.schema

    def label(self) -> str:
        late = f", lateness={self.allowed_lateness_us}us" if self.allowed_lateness_us else ""
        return f"EventTimeSort({self.time_column}{late})"


@dataclass(frozen=True)
class OverCall:
    func: str  # count_star, count, sum, avg, min, max, first_value, last_value, lag, row_number
    input: str | None
    output: str
    offset: int = 1
    default: str | None = None

    def label(self) -> str:
        extra = f", {self.offset}" if self.func == "lag" else ""
        return f"{self.output}={self.func}({self.input or '*'}{extra})"


@dataclass(frozen=True)
class OverAggregate(PlanNode):
    """``agg(x) OVER (PARTITION BY ... ORDER BY time <frame>)``: each input row, once the
    watermark passes its time, with the aggregates of its frame appended. Over a changelog
    (``updating``) any ORDER BY column: a changelog of each row with its aggregates,
    re-emitted when a change alters its frame; ``changelog`` makes it one over an
    append-only input too (an ORDER BY that is not event time, or a function reading rows
    after the current one).

    ``mode`` is ``rows`` or ``range``; ``preceding`` the frame's start before the current
    row (rows, or ordinal units of ``time_column``), None for ``UNBOUNDED PRECEDING``.
    """

    input: PlanNode
    partition: tuple[str, ...]
    time_column: str
    mode: str
    preceding: int | None
    calls: tuple[OverCall, ...]
    out_schema: pa.Schema
    allowed_lateness_us: int = 0
    #: a changelog even over an append-only input (no watermark makes the output final)
    changelog: bool = False

    def __post_init__(self) -> None:
        if not self.updating and self.time_column not in self.input.time_columns:
            raise PlanError(f"internal: OVER ordered by {self.time_column!r}, not event time")

    @property
    def updating(self) -> bool:
        return self.changelog or self.input.updating

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.out_schema

    @property
    def time_lags(self) -> dict[str, int]:
        # Rows come out as the watermark passes their time, in time order.
        final = not self.updating and not self.allowed_lateness_us
        return {self.time_column: 0} if final else {}

    def label(self) -> str:
        start = "UNBOUNDED" if self.preceding is None else str(self.preceding)
        unit = "" if self.mode == "rows" or self.preceding is None else "us"
        calls = ", ".join(c.label() for c in self.calls)
        late = f", lateness={self.allowed_lateness_us}us" if self.allowed_lateness_us else ""
        head = "OverChangelog" if self.updating else "OverAggregate"
        return (
            f"{head}(partition=[{', '.join(self.partition)}], order={self.time_column}, "
            f"{self.mode.upper()} {start}{unit} PRECEDING, {calls}{late})"
        )


@dataclass(frozen=True)
class WatermarkLag(PlanNode):
    """The rows of ``input`` unchanged, its watermark moved back by ``lag_us``: a column
    that trails the input's watermark by up to ``lag_us`` is bounded by this node's
    watermark, so a window, a time-keyed aggregate or a join can close on it."""

    input: PlanNode
    lag_us: int

    def __post_init__(self) -> None:
        if self.lag_us <= 0:
            raise PlanError(f"internal: a watermark lag must be positive, not {self.lag_us}")

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.input.schema

    @property
    def time_lags(self) -> dict[str, int]:
        return {c: max(0, lag - self.lag_us) for c, lag in self.input.time_lags.items()}

    def label(self) -> str:
        return f"WatermarkLag({self.lag_us}us)"


def lagged(node: PlanNode, column: str) -> PlanNode:
    """``node``, behind a :class:`WatermarkLag` when ``column`` trails its watermark, so
    that the result's watermark bounds ``column`` (a PlanError when nothing bounds it)."""
    lags = node.time_lags
    if column not in lags:
        raise PlanError(f"internal: column {column!r} carries no event time")
    return WatermarkLag(node, lags[column]) if lags[column] else node


UNION_OF_CHANGELOG = (
    "UNION ALL of a changelog (an aggregate's result) is not supported: UNION ALL the rows "
    "and aggregate after it, or union windowed results with EMIT ON WINDOW CLOSE"
)


@dataclass(frozen=True)
class Union(PlanNode):
    """``UNION ALL``: the rows of every input, under the first input's column names.

    Its watermark is the minimum of its inputs' (the runtime forwards that)."""

    inputs: tuple[PlanNode, ...]
    out_schema: pa.Schema

    def __post_init__(self) -> None:
        if any(i.updating for i in self.inputs):
            raise PlanError(UNION_OF_CHANGELOG)

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return self.inputs

    @property
    def schema(self) -> pa.Schema:
        return self.out_schema

    @property
    def time_lags(self) -> dict[str, int]:
        # The watermark is the minimum of the inputs': a column every input bounds is
        # bounded with the largest of their lags.
        names = self.out_schema.names
        lags = [
            {i.schema.names.index(c): lag for c, lag in i.time_lags.items()} for i in self.inputs
        ]
        common = set.intersection(*(set(m) for m in lags))
        return {names[p]: max(m[p] for m in lags) for p in sorted(common)}

    def label(self) -> str:
        return "UnionAll"


@dataclass(frozen=True)
class SinkWrite(PlanNode):
    """The root of an ``INSERT INTO sink SELECT``."""

    input: PlanNode
    table: str

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.input.schema

    def label(self) -> str:
        return f"SinkWrite({self.table})"


@dataclass(frozen=True)
class Collect(PlanNode):
    """The root of a streaming ``SELECT``: batches go back to the caller."""

    input: PlanNode

    @property
    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.input.schema

    def label(self) -> str:
        return "Collect"


@dataclass(frozen=True)
class LogicalPlan:
    root: PlanNode
    settings: dict = field(default_factory=dict)

    @property
    def updating(self) -> bool:
        return self.root.updating

    def walk(self) -> list[PlanNode]:
        out: list[PlanNode] = []
        stack = [self.root]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(reversed(n.children))
        return out
