"""Shared by the aggregate-operator tests: random streams, a driver, the DuckDB oracle.

A stream is a list of rows with event times in bounded disorder: every row's time is at
least (max time of earlier rows) - ``disorder``. The driver feeds it in random batches,
advancing the watermark to (max so far) - ``delay`` after each batch like the runtime, with
``allowed lateness = disorder - delay (+ extra)`` so that no row is late.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
from hypothesis import strategies as st

from datum_sql.engine.changelog import apply_changelog
from datum_sql.engine.operators import operator_class
from datum_sql.types import END_OF_TIME, START_OF_TIME

S = 1_000_000
INPUT = pa.schema(
    [
        ("ts", pa.timestamp("us")),
        ("k1", pa.string()),
        ("k2", pa.int64()),
        ("vi", pa.int64()),
        ("vf", pa.float64()),
    ]
)

#: The DuckDB spelling of DataFusion's finals where the two differ: corr and regr_slope are
#: NULL (DuckDB: NaN) when a spread is 0, corr also when it is NaN; regr_r2 is NULL when
#: regr_syy is 0 (DuckDB: 1).
_N, _SXX, _SYY = "regr_count({a})", "regr_sxx({a})", "regr_syy({a})"
_CORR = (
    f"CASE WHEN {_N} > 1 AND {_SXX} > 0 AND {_SYY} > 0 AND NOT isnan({_SYY}) THEN corr({{a}}) END"
)
_SLOPE = f"CASE WHEN {_SXX} <> 0 THEN regr_slope({{a}}) END"
_INTERCEPT = (
    f"CASE WHEN {_SXX} <> 0 THEN regr_avgy({{a}}) - regr_slope({{a}}) * regr_avgx({{a}}) END"
)
_R2 = (
    f"CASE WHEN {_N} > 1 AND {_SXX} <> 0 AND {_SYY} <> 0 "
    f"THEN regr_sxy({{a}}) * regr_sxy({{a}}) / ({_SXX} * {_SYY}) END"
)

#: (func, input, output, output type, DuckDB expression, params); a two-input function's
#: input is (first argument, second argument).
Input = str | tuple[str, str] | None
AGGS: list[tuple[str, Input, str, pa.DataType, str, dict[str, Any] | None]] = [
    ("count_star", None, "n", pa.int64(), "count(*)", None),
    ("count", "vi", "n_vi", pa.int64(), "count(vi)", None),
    ("count_distinct", "vi", "nd_vi", pa.int64(), "count(DISTINCT vi)", None),
    ("count_distinct", "k1", "nd_k1", pa.int64(), "count(DISTINCT k1)", None),
    ("sum", "vi", "s_vi", pa.int64(), "sum(vi)::BIGINT", None),
    ("sum", "vf", "s_vf", pa.float64(), "sum(vf)", None),
    ("avg", "vi", "a_vi", pa.float64(), "avg(vi)", None),
    ("avg", "vf", "a_vf", pa.float64(), "avg(vf)", None),
    ("min", "vi", "mn_vi", pa.int64(), "min(vi)", None),
    ("max", "vf", "mx_vf", pa.float64(), "max(vf)", None),
    ("min", "k1", "mn_k1", pa.string(), "min(k1)", None),
    ("max", "k1", "mx_k1", pa.string(), "max(k1)", None),
    ("first_value", "vi", "f_vi", pa.int64(), "first(vi ORDER BY ts, seq)", None),
    ("last_value", "vf", "l_vf", pa.float64(), "last(vf ORDER BY ts, seq)", None),
    ("first_value", "k1", "f_k1", pa.string(), "first(k1 ORDER BY ts, seq)", None),
    ("approx_percentile", "vf", "p_vf", pa.float64(), "quantile_cont(vf, 0.3)", {"q": 0.3}),
    ("sum_distinct", "vi", "sd_vi", pa.int64(), "sum(DISTINCT vi)::BIGINT", None),
    ("avg_distinct", "vf", "ad_vf", pa.float64(), "avg(DISTINCT vf)", None),
    ("var_samp", "vi", "vs_vi", pa.float64(), "var_samp(vi)", None),
    ("stddev_pop", "vf", "sp_vf", pa.float64(), "stddev_pop(vf)", None),
    ("var_pop", "vf", "vp_vf", pa.float64(), "var_pop(vf)", None),
    ("bit_and", "vi", "ba_vi", pa.int64(), "bit_and(vi)", None),
    ("bit_or", "vi", "bo_vi", pa.int64(), "bit_or(vi)", None),
    ("bit_xor", "vi", "bx_vi", pa.int64(), "bit_xor(vi)", None),
    # NaN is only in vf: the M2 of a single NaN is NaN in DataFusion, 0 in DuckDB, so vf is
    # never the argument whose own spread a call reports.
    ("corr", ("vf", "vi"), "co_fi", pa.float64(), _CORR.format(a="vf, vi"), None),
    ("covar_samp", ("vi", "vf"), "cs_if", pa.float64(), "covar_samp(vi, vf)", None),
    ("covar_pop", ("vf", "vi"), "cp_fi", pa.float64(), "covar_pop(vf, vi)", None),
    ("regr_slope", ("vf", "vi"), "rs_fi", pa.float64(), _SLOPE.format(a="vf, vi"), None),
    ("regr_intercept", ("vi", "vf"), "ri_if", pa.float64(), _INTERCEPT.format(a="vi, vf"), None),
    ("regr_r2", ("vf", "vi"), "r2_fi", pa.float64(), _R2.format(a="vf, vi"), None),
    ("regr_count", ("vi", "vf"), "rc_if", pa.int64(), "regr_count(vi, vf)::BIGINT", None),
    ("regr_avgx", ("vi", "vf"), "rx_if", pa.float64(), "regr_avgx(vi, vf)", None),
    ("regr_avgy", ("vi", "vf"), "ry_if", pa.float64(), "regr_avgy(vi, vf)", None),
    ("regr_sxx", ("vf", "vi"), "sxx_fi", pa.float64(), "regr_sxx(vf, vi)", None),
    ("regr_syy", ("vi", "vf"), "syy_if", pa.float64(), "regr_syy(vi, vf)", None),
    ("regr_sxy", ("vf", "vi"), "sxy_fi", pa.float64(), "regr_sxy(vf, vi)", None),
]
CO_MOMENTS = {a[0] for a in AGGS if isinstance(a[1], tuple)}


_FAST = {
    "count_star",
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "var_samp",
    "stddev_pop",
    "bit_and",
    "bit_xor",
    *CO_MOMENTS,
}
#: array_agg/string_agg read the planner's struct {v, o0} (see :func:`with_structs`);
#: ties on the key go by arrival (``seq``).
ORDERED = [
    ("array_agg", "s_k1_vi", "aa", pa.list_(pa.string()),
     "array_agg(k1 ORDER BY vi DESC NULLS FIRST, seq)", {"desc0": 1.0, "nulls_first0": 1.0}),
    ("string_agg", "s_k1_vf", "sa", pa.large_string(),
     "string_agg(k1, '|' ORDER BY vf NULLS LAST, seq)", {"separator": "|"}),
    ("array_agg", "s_vf_ts", "af", pa.list_(pa.float64()), "array_agg(vf ORDER BY ts, seq)", {}),
]  # fmt: skip
#: The aggregate lists the tests choose from: "numeric" takes the numpy fast path
#: (direct-addressed integer keys, no hashing) when the keys allow it.
AGG_SETS = {
    "all": AGGS,
    "numeric": [
        a for a in AGGS if a[0] in _FAST and (a[1] in (None, "vi", "vf") or a[0] in CO_MOMENTS)
    ],
    "ordered": [*ORDERED, AGGS[0]],
}
STRUCTS = {"s_k1_vi": ("k1", "vi"), "s_k1_vf": ("k1", "vf"), "s_vf_ts": ("vf", "ts")}
STRUCT_INPUT = pa.schema(
    [*INPUT, *((name, pa.struct([("v", INPUT.field(v).type), ("o0", INPUT.field(o).type)]))
               for name, (v, o) in STRUCTS.items())]
)  # fmt: skip


def with_structs(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with the struct columns the ordered aggregates read."""
    cols = list(batch.columns)
    for v, o in STRUCTS.values():
        cols.append(
            pa.StructArray.from_arrays([batch.column(v), batch.column(o)], names=["v", "o0"])
        )
    return pa.RecordBatch.from_arrays(cols, schema=STRUCT_INPUT)


def spec(func: str, inp: Input, name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """The operator's spec of one call (a pair input: ``input`` and ``input2``)."""
    out: dict[str, Any] = {"func": func, "input": inp, "output": name}
    if isinstance(inp, tuple):
        out["input"], out["input2"] = inp
    if params:
        out["params"] = params
    return out


def agg_specs(which: str = "all") -> list[dict[str, Any]]:
    return [spec(func, inp, name, params) for func, inp, name, _, _, params in AGG_SETS[which]]


def output_schema(
    keys: list[str], *, window: bool, changelog: bool, which: str = "all"
) -> pa.Schema:
    fields = []
    if window:
        fields += [("window_start", pa.timestamp("us")), ("window_end", pa.timestamp("us"))]
    fields += [(k, INPUT.field(k).type) for k in keys]
    fields += [(name, t) for _, _, name, t, _, _ in AGG_SETS[which]]
    if changelog:
        fields.append(("_op", pa.string()))
    return pa.schema(fields)


@dataclass
class Stream:
    table: pa.Table  # arrival order, with a "seq" column for the oracle
    batches: list[pa.RecordBatch]
    delay: int
    lateness: int
    disorder: int = 0


@st.composite
def streams(draw: Any, max_rows: int = 40, keys_null: bool = True) -> Stream:
    n = draw(st.integers(0, max_rows))
    coarse = draw(st.booleans())  # few distinct times: many ties on event time
    nan = draw(st.integers(0, 4)) == 0  # sometimes NaN among the floats
    disorder = draw(st.sampled_from([0, S // 2, 2 * S, 5 * S]))
    k1 = st.sampled_from(["a", "b", "c", None] if keys_null else ["a", "b", "c"])
    k2 = st.one_of(st.none(), st.integers(0, 2)) if keys_null else st.integers(0, 2)
    rows = []
    for _ in range(n):
        if coarse:
            base = draw(st.integers(0, 12)) * S
        else:
            base = draw(st.integers(0, 160)) * (S // 4) + draw(st.sampled_from([0, 0, 0, 1, -1]))
        rows.append(
            (
                max(base, 0),
                draw(k1),
                draw(k2),
                draw(st.one_of(st.none(), st.integers(-50, 50))),
                draw(
                    st.one_of(
                        st.none(),
                        st.integers(-400, 400).map(lambda x: x / 4),
                        st.just(float("nan")) if nan else st.nothing(),
                    )
                ),
                draw(st.integers(0, disorder)),
            )
        )
    rows.sort(key=lambda r: r[0] + r[5])  # arrival order: bounded disorder
    delay = draw(st.integers(0, disorder))
    lateness = disorder - delay + draw(st.sampled_from([0, 0, S]))
    cols = list(zip(*rows)) if rows else [[]] * 6
    table = pa.table(
        {
            "ts": pa.array(cols[0], pa.int64()).cast(pa.timestamp("us")),
            "k1": pa.array(cols[1], pa.string()),
            "k2": pa.array(cols[2], pa.int64()),
            "vi": pa.array(cols[3], pa.int64()),
            "vf": pa.array(cols[4], pa.float64()),
        },
        schema=INPUT,
    )
    sizes = []
    left = n
    while left > 0:
        k = draw(st.integers(1, max(1, min(left, 12))))
        sizes.append(k)
        left -= k
    if draw(st.booleans()):
        sizes.insert(draw(st.integers(0, len(sizes))), 0)  # an empty batch somewhere
    batches, pos = [], 0
    for k in sizes:
        if k:
            batches.append(table.slice(pos, k).combine_chunks().to_batches()[0])
        else:
            batches.append(pa.RecordBatch.from_pylist([], schema=INPUT))
        pos += k
    with_seq = table.append_column("seq", pa.array(range(n), pa.int64()))
    return Stream(with_seq, batches, delay, lateness, disorder)


def events(stream: Stream) -> list[tuple[str, Any]]:
    """The runtime's calls for ``stream``: ("batch", b) and ("wm", w), then ("wm", +inf), ("close", None)."""
    out: list[tuple[str, Any]] = []
    mx = START_OF_TIME
    last = START_OF_TIME
    for b in stream.batches:
        out.append(("batch", b))
        if b.num_rows:
            mx = max(mx, int(b.column("ts").cast(pa.int64()).to_numpy().max()))
        if mx != START_OF_TIME and mx - stream.delay > last:
            last = mx - stream.delay
            out.append(("wm", last))
    out.append(("wm", END_OF_TIME))
    out.append(("close", None))
    return out


def call(op: Any, event: tuple[str, Any]) -> list[pa.RecordBatch]:
    kind, arg = event
    if kind == "batch":
        return op.on_batch(arg)
    if kind == "wm":
        return op.on_watermark(arg)
    return op.on_close()


def make(kind: str, config: dict[str, Any]) -> Any:
    return operator_class(kind)("agg", config, [INPUT])


def window_config(
    kind: str,
    size: int,
    slide: int | None,
    keys: list[str],
    emit: str,
    lateness: int,
    which: str = "all",
    offset: int = 0,
) -> dict[str, Any]:
    window = {"kind": kind, "time_column": "ts", "size_us": size, "slide_us": slide}
    return {
        "window": {**window, "offset_us": offset},
        "keys": keys,
        "aggregates": agg_specs(which),
        "emit": emit,
        "allowed_lateness_us": lateness,
        "state_limit_rows": None,
        "order_column": "ts",
        "schema": output_schema(keys, window=True, changelog=emit == "changelog", which=which),
    }


def group_config(keys: list[str], which: str = "all") -> dict[str, Any]:
    return {
        "keys": keys,
        "aggregates": agg_specs(which),
        "state_limit_rows": None,
        "order_column": "ts",
        "schema": output_schema(keys, window=False, changelog=True, which=which),
    }


# -- the oracle --------------------------------------------------------------------------
def _floor(x: str, s: int) -> str:
    return f"({x} - ((({x}) % {s}) + {s}) % {s})"


def oracle(
    stream: Stream, keys: list[str], window: dict[str, Any] | None, which: str = "all"
) -> list[tuple]:
    """DuckDB's batch answer: rows (window_start_us, window_end_us, keys..., aggregates...)."""
    con = duckdb.connect()
    con.execute("SET threads = 1")
    rows = stream.table  # noqa: F841  (read by DuckDB's replacement scan)
    aggs = ", ".join(a[4] for a in AGG_SETS[which])
    keysel = "".join(f", {k}" for k in keys)
    if window is None:
        group = ", ".join(keys)
        sql = f"SELECT {', '.join(keys) + ', ' if keys else ''}{aggs} FROM rows"
        if keys:
            sql += f" GROUP BY {group}"
        elif stream.table.num_rows == 0:
            return []
        return [tuple(r) for r in con.execute(sql).fetchall()]
    size, slide = window["size_us"], window.get("slide_us") or window["size_us"]
    off = window.get("offset_us") or 0
    t = f"(epoch_us(ts) - {off})"  # windows are computed on times less the offset
    if window["kind"] == "tumble":
        src = f"SELECT *, {_floor(t, size)} AS ws FROM rows"
        ends = f"ws + {size}"
    elif window["kind"] == "hop":
        last = _floor(t, slide)
        first = f"({_floor(f'{t} - {size}', slide)} + {slide})"
        src = f"SELECT *, unnest(generate_series({first}, {last}, {slide})) AS ws FROM rows"
        ends = f"ws + {size}"
    elif window["kind"] == "cumulate":
        src = f"""
            SELECT *, unnest(generate_series({_floor(t, slide)} + {slide}, ws + {size}, {slide}))
                   AS we
            FROM (SELECT *, {_floor(t, size)} AS ws FROM rows)"""
        sql = f"""SELECT ws + {off}, we + {off}{keysel}, {aggs}
                  FROM ({src}) GROUP BY ws, we{keysel}"""
        return [tuple(r) for r in con.execute(sql).fetchall()]
    else:
        part = f"PARTITION BY {', '.join(keys)} " if keys else ""
        src = f"""
            SELECT *, sum(brk) OVER ({part}ORDER BY e, seq ROWS UNBOUNDED PRECEDING) AS sid
            FROM (SELECT *, epoch_us(ts) AS e,
                         CASE WHEN lag(epoch_us(ts)) OVER w IS NULL
                                OR epoch_us(ts) - lag(epoch_us(ts)) OVER w >= {size}
                              THEN 1 ELSE 0 END AS brk
                  FROM rows WINDOW w AS ({part}ORDER BY epoch_us(ts), seq))"""
        sql = f"""SELECT min(e) AS ws, max(e) + {size} AS we{keysel}, {aggs}
                  FROM ({src}) GROUP BY sid{keysel}"""
        return [tuple(r) for r in con.execute(sql).fetchall()]
    sql = (
        f"SELECT ws + {off}, {ends} + {off} AS we{keysel}, {aggs} FROM ({src}) GROUP BY ws{keysel}"
    )
    return [tuple(r) for r in con.execute(sql).fetchall()]


def as_rows(table: pa.Table, *, window: bool) -> list[tuple]:
    if window:
        for name in ("window_start", "window_end"):
            i = table.schema.get_field_index(name)
            table = table.set_column(i, name, table.column(name).cast(pa.int64()))
    if "_op" in table.column_names:
        table = table.drop_columns(["_op"])
    return [tuple(r.values()) for r in table.to_pylist()]


def final_rows(op: Any, outputs: list[pa.RecordBatch], *, window: bool) -> list[tuple]:
    schema = op.output_schema
    if "_op" in schema.names:
        state = None
        for b in outputs:
            state = apply_changelog(state, b)
        table = state if state is not None else schema.empty_table().drop_columns(["_op"])
    else:
        table = pa.Table.from_batches(outputs, schema=schema)
    return as_rows(table, window=window)


def _key(row: tuple) -> tuple:
    return tuple(
        (0, 0) if v is None else (1, round(v, 6) if isinstance(v, float) else v) for v in row
    )


def assert_same_rows(got: list[tuple], want: list[tuple]) -> None:
    got, want = sorted(got, key=_key), sorted(want, key=_key)
    assert len(got) == len(want), f"{len(got)} rows, want {len(want)}:\n{got}\n{want}"
    for g, w in zip(got, want):
        assert len(g) == len(w)
        for a, b in zip(g, w):
            assert _same(a, b), (g, w)


def _same(a: Any, b: Any) -> bool:
    """Equal values; floats (also inside lists) within 1e-9, NaN equal to NaN."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b
