"""Golden rule for Python functions in join conditions: an interval join whose ON residual
calls registered scalar UDFs, an inner lookup join whose other ON conditions do (a filter
on the joined rows), and an EXISTS subquery whose correlated condition does,
streamed (several batch sizes, disorder within the watermark, a checkpoint and a restore)
and run by ``ctx.sql``, equal DuckDB running the same query with each UDF written as its
built-in equivalent."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from oracle import assert_restore_matches, assert_same_rows, duckdb_result

import datum_sql as ds

TS = pa.timestamp("us")
BASE = dt.datetime(2024, 1, 1)
DELAY = ds.BoundedOutOfOrderness(dt.timedelta(seconds=3))


@ds.udf(input_types=["DOUBLE"], return_type="BIGINT")
def band10(x: pa.Array) -> pa.Array:
    return pc.floor(pc.divide(x, 10.0)).cast(pa.int64())


@ds.udf(input_types=["VARCHAR"], return_type="VARCHAR")
def mirrored(s: pa.Array) -> pa.Array:
    return pc.utf8_reverse(s)


#: Each UDF call as DuckDB writes it with built-ins.
BUILTIN: dict[str, Callable[[str], str]] = {
    "band10": lambda x: f"CAST(floor(({x}) / 10) AS BIGINT)",
    "mirrored": lambda x: f"reverse({x})",
}


def queries(udf: bool) -> dict[str, str]:
    """Each shape, calling the UDFs (``udf``) or their built-in equivalents."""

    def f(name: str, arg: str) -> str:
        return f"{name}({arg})" if udf else BUILTIN[name](arg)

    between = "t.ts BETWEEN q.ts - INTERVAL '2 seconds' AND q.ts + INTERVAL '1 second'"
    residual = (
        f"{f('band10', 't.px')} >= {f('band10', 'q.bid')} AND {f('mirrored', 'q.sym')} <> 'b'"
    )
    interval = (
        "SELECT t.sym, t.ts, t.px, q.bid FROM trades t {join} quotes q ON t.sym = q.sym AND {on}"
    )
    return {
        "interval_inner": interval.format(join="JOIN", on=f"{between} AND {residual}"),
        "interval_left": interval.format(join="LEFT JOIN", on=f"{between} AND {residual}"),
        "interval_residual_only": interval.format(
            join="JOIN", on=f"{between} AND {f('band10', 't.px + q.bid')} BETWEEN 3 AND 7"
        ),
        "lookup_inner": (
            "SELECT t.sym, t.ts, t.px, v.n FROM trades t JOIN venues v ON t.sym = v.sym "
            f"AND {f('band10', 't.px')} > v.n + 1 AND {f('mirrored', 'v.code')} <> 'ax'"
        ),
        "exists": (
            "SELECT t.sym, t.ts, t.px FROM trades t WHERE EXISTS (SELECT 1 FROM venues v "
            f"WHERE v.sym = t.sym AND {f('band10', 't.px')} > v.n + 1)"
        ),
        "not_exists": (
            "SELECT t.sym, t.ts, t.px FROM trades t WHERE NOT EXISTS (SELECT 1 FROM venues v "
            f"WHERE v.sym = t.sym AND {f('mirrored', 'v.code')} = t.sym || 'x')"
        ),
    }


STREAM, DUCK = queries(udf=True), queries(udf=False)


def inputs(seed: str, n: int) -> dict[str, pa.Table]:
    """Trades and quotes at second ``i`` plus 0-2 s of disorder; a small venues table."""
    rnd = random.Random(seed)

    def side(value: str, offset: float) -> pa.Table:
        return pa.table(
            {
                "sym": pa.array([rnd.choice(["a", "b", "c", None]) for _ in range(n)]),
                "ts": pa.array(
                    [BASE + dt.timedelta(seconds=i // 2 + rnd.randint(0, 2)) for i in range(n)], TS
                ),
                value: pa.array([rnd.randint(0, 60) + offset for _ in range(n)], pa.float64()),
            }
        )

    venues = pa.table(
        {
            "sym": pa.array(["a", "b", "b", "c", None]),
            "n": pa.array([0, 1, 3, None, 2], pa.int64()),
            "code": pa.array(["xa", "xb", None, "yc", "xa"]),
        }
    )
    return {"trades": side("px", 0.0), "quotes": side("bid", 0.5), "venues": venues}


def streamed(sql: str, tables: dict[str, pa.Table], size: int) -> pa.Table:
    ctx = ds.Context(state_dir=None)
    for name, t in tables.items():
        timed = name != "venues"
        ctx.register_arrow(
            name,
            t,
            event_time="ts" if timed else None,
            watermark=DELAY if timed else None,
            batch_size=size if timed else None,
        )
    return ctx.execute_streaming(sql).to_arrow(timeout=60)


@pytest.mark.parametrize("shape", sorted(STREAM))
def test_udf_join_conditions_equal_duckdb_streaming_and_batch(shape: str) -> None:
    tables = inputs(shape, 80)
    want = duckdb_result(DUCK[shape], tables)
    assert want.num_rows > 0
    for size in (1, 4, 9):
        assert_same_rows(streamed(STREAM[shape], tables, size), want)
    ctx = ds.Context(state_dir=None)
    for name, t in tables.items():
        ctx.register_arrow(name, t)
    assert_same_rows(ctx.sql(STREAM[shape]), want)


@pytest.mark.parametrize("shape", sorted(STREAM))
def test_udf_join_conditions_through_checkpoint_and_restore(shape: str, tmp_path: Path) -> None:
    tables = inputs(f"restore-{shape}", 120)
    rnd = random.Random(shape)
    timed = [n for n in tables if n != "venues"]
    assert_restore_matches(
        STREAM[shape],
        DUCK[shape],
        {
            n: t.to_batches(max_chunksize=rnd.randint(3, 9) if n in timed else None)
            for n, t in tables.items()
        },
        tmp_path / "state",
        hold=[n for n in timed if n in STREAM[shape].split()],
        event_time={n: "ts" for n in timed},
        watermark={n: DELAY for n in timed},
        sink="parquet",
    )


def test_a_failing_udf_in_a_join_condition_names_function_and_operator() -> None:
    def broken(x: pa.Array) -> pa.Array:
        raise ValueError("no band today")

    ds.udf(input_types=["DOUBLE"], return_type="BIGINT", name="broken_band")(broken)
    tables = inputs("broken", 20)
    sql = STREAM["interval_inner"].replace("band10(t.px)", "broken_band(t.px)")
    with pytest.raises(ds.QueryFailed) as info:
        streamed(sql, tables, 5)
    text = str(info.value)
    assert "broken_band() raised ValueError" in text and "no band today" in text
    assert "Traceback" in text and "join" in text.rsplit("(in ", 1)[1]


def test_a_udf_computing_a_join_key_is_refused_with_the_subquery_form() -> None:
    ctx = ds.Context(state_dir=None)
    for name, t in inputs("key", 10).items():
        ctx.register_arrow(name, t, event_time="ts" if name != "venues" else None)
    sql = (
        "SELECT t.sym, q.bid FROM trades t JOIN quotes q ON mirrored(t.sym) = q.sym "
        "AND t.ts BETWEEN q.ts - INTERVAL '2 seconds' AND q.ts"
    )
    with pytest.raises(
        ds.PlanError, match=r"keys are columns.*compute the expression in a subquery"
    ):
        ctx.execute_streaming(sql)


def test_a_left_lookup_join_with_conditions_beyond_its_keys_says_how_to_filter() -> None:
    ctx = ds.Context(state_dir=None)
    for name, t in inputs("left", 10).items():
        ctx.register_arrow(name, t, event_time="ts" if name != "venues" else None)
    sql = (
        "SELECT t.sym, v.n FROM trades t LEFT JOIN venues v ON t.sym = v.sym "
        "AND mirrored(v.code) <> 'ax'"
    )
    with pytest.raises(ds.PlanError, match=r"LEFT JOIN of a table \(a lookup join\) matches"):
        ctx.execute_streaming(sql)
