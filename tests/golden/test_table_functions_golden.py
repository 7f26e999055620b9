"""Golden rule for Python table functions: rows expanded by ``LATERAL f(t.x)`` (and
``LEFT JOIN LATERAL ... ON TRUE``), alone and under a tumble window and an unbounded
GROUP BY, equal DuckDB's batch result of the same query written with its built-in
equivalents (``generate_series`` for ``series``, ``unnest(string_split(...))`` for
``words``), streamed in several batch sizes, through a checkpoint and restore in the
middle, and run as a batch query by ``ctx.sql``.

Rows: counts 0 to 3 and NULL (zero output rows and NULL arguments are common), text with
repeated and empty words, event times on a half-second grid disordered within the bound
the watermark delay covers (no row is late).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from oracle import assert_restore_matches, assert_same_rows, duckdb_result

import datum_sql as ds

S = 1_000_000
BASE_US = 1_704_067_200_000_000  # 2024-01-01
BATCH_SIZES = (7, 64, 100_000)


def series(n: pa.Array) -> Iterator[pa.Table]:
    """0, 1, ..., n-1 for each n (none for NULL or n <= 0), in two parts."""
    counts = pc.fill_null(pc.max_element_wise(n, 0), 0).to_numpy().astype(np.int64)
    rows = np.repeat(np.arange(len(n)), counts)
    i = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    half = len(i) // 2
    yield pa.table({"i": i[:half], "input_row": rows[:half]})
    yield pa.table({"i": i[half:], "input_row": rows[half:]})


def words(s: pa.Array) -> pa.Table:
    """The space-separated words of each text (none for NULL)."""
    lists = pc.split_pattern(s, " ")
    return pa.table({"word": pc.list_flatten(lists), "input_row": pc.list_parent_indices(lists)})


ds.table_function(input_types=["BIGINT"], output_schema={"i": "BIGINT"})(series)
ds.table_function(input_types=["VARCHAR"], output_schema=[("word", "VARCHAR")])(words)


def _rows(seed: int = 13, n: int = 400) -> pa.Table:
    rnd = random.Random(seed)
    texts = ["a b", "b", "", "a  c", None, "c c c", "d"]
    ts = [BASE_US + (i // 2 + rnd.randint(0, 6)) * S // 2 for i in range(n)]
    return pa.table(
        {
            "k": pa.array([rnd.choice([1, 2, 3, None]) for _ in range(n)], pa.int64()),
            "n": pa.array([rnd.choice([0, 1, 2, 3, None]) for _ in range(n)], pa.int64()),
            "s": [rnd.choice(texts) for _ in range(n)],
            "ts": pa.array(ts, pa.timestamp("us")),
        }
    )


T = _rows()


def tumble_w(size_s: int) -> str:
    return f"epoch_us(ts) // {size_s * S} * {size_s * S}"


#: name -> (datum-sql SQL, DuckDB SQL, upsert key of the changelog or None if append-only)
CASES: dict[str, tuple[str, str, str | None]] = {
    "lateral_rows": (
        "SELECT t.k, t.ts, g.i FROM t, LATERAL series(t.n) AS g",
        "SELECT t.k, t.ts, g.i FROM t, LATERAL generate_series(0, t.n - 1) AS g(i)",
        None,
    ),
    "cross_join_lateral_words": (
        "SELECT t.k, w.word FROM t CROSS JOIN LATERAL words(t.s) AS w WHERE t.k IS NOT NULL",
        "SELECT k, unnest(string_split(s, ' ')) AS word FROM t WHERE k IS NOT NULL",
        None,
    ),
    "tumble_over_lateral": (
        "SELECT window_start, window_end, count(*) AS n, sum(i) AS total FROM "
        "tumble((SELECT t.ts, g.i FROM t, LATERAL series(t.n) AS g), ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end",
        f"SELECT make_timestamp(w) AS window_start, make_timestamp(w + {10 * S}) AS window_end, "
        "count(*) AS n, CAST(sum(i) AS BIGINT) AS total FROM (SELECT "
        f"{tumble_w(10)} AS w, g.i FROM t, LATERAL generate_series(0, t.n - 1) AS g(i)) "
        "GROUP BY w",
        "window_start",
    ),
    "words_per_window": (
        "SELECT window_start, word, count(*) AS c FROM "
        "tumble((SELECT t.ts, w.word FROM t, LATERAL words(t.s) AS w), ts, INTERVAL '5 seconds') "
        "GROUP BY window_start, window_end, word",
        f"SELECT make_timestamp(w) AS window_start, word, count(*) AS c FROM (SELECT "
        f"{tumble_w(5)} AS w, unnest(string_split(s, ' ')) AS word FROM t) GROUP BY w, word",
        "window_start, word",
    ),
    "left_lateral_group_by": (
        "SELECT coalesce(t.k, 0) AS k, count(g.i) AS c, count(*) AS n FROM t "
        "LEFT JOIN LATERAL series(t.n) AS g ON TRUE GROUP BY coalesce(t.k, 0)",
        "SELECT coalesce(t.k, 0) AS k, count(g.i) AS c, count(*) AS n FROM t "
        "LEFT JOIN LATERAL generate_series(0, t.n - 1) AS g(i) ON TRUE GROUP BY coalesce(t.k, 0)",
        "k",
    ),
}


def _context(batch_size: int) -> ds.Context:
    ctx = ds.Context(state_dir=None, checkpoint_interval=None)
    ctx.register_arrow(
        "t", T, event_time="ts", watermark=timedelta(seconds=4), batch_size=batch_size
    )
    return ctx


def test_the_cases_have_rows_of_each_kind() -> None:
    got = duckdb_result(CASES["lateral_rows"][1], {"t": T})
    assert T.num_rows < got.num_rows  # rows multiply, and some give none:
    assert pc.sum(pc.fill_null(T.column("n"), 0)).as_py() == got.num_rows
    assert duckdb_result(CASES["tumble_over_lateral"][1], {"t": T}).num_rows > 10


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("name", CASES)
def test_streamed_equals_duckdb(name: str, batch_size: int) -> None:
    sql, duck, _ = CASES[name]
    with _context(batch_size).execute_streaming(sql) as q:
        got = q.to_arrow(timeout=300)
    assert q.status()["late_rows"] == 0
    assert_same_rows(got, duckdb_result(duck, {"t": T}))


@pytest.mark.parametrize("name", CASES)
def test_batch_equals_duckdb(name: str) -> None:
    sql, duck, _ = CASES[name]
    assert_same_rows(_context(50).sql(sql), duckdb_result(duck, {"t": T}))


@pytest.mark.parametrize("name", CASES)
def test_through_checkpoint_and_restore(name: str, tmp_path: Path) -> None:
    sql, duck, key = CASES[name]
    assert_restore_matches(
        sql, duck, {"t": T.to_batches(max_chunksize=25)}, tmp_path / "state",
        event_time={"t": "ts"}, watermark={"t": timedelta(seconds=4)}, primary_key=key,
        timeout=300,
    )  # fmt: skip
