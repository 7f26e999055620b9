"""Golden rule for WHERE conditions on one table of a join, which the planner evaluates on
that table before the join where that keeps the result (``plan/pushdown.py``): streamed
equals DuckDB over the same rows, for the conditions that move (inner joins, the kept side
of LEFT and ASOF joins) and those that must stay after the join (the NULL-extended side of
a LEFT join, the right side of an ASOF join).

``p`` rows are ranges (``ts`` to ``e``), ``q`` rows points, both with bounded disorder;
``d`` is a bounded table (a lookup join's table), with duplicate and NULL keys.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import assert_same_rows, duckdb_result
from test_band_joins_golden import SETTINGS, p_table, points, q_table, ranges, streamed

import datum_sql as ds

names = st.lists(
    st.tuples(st.sampled_from([1, 2, 3, None]), st.sampled_from(["a", "b", None])), max_size=8
)

#: (SQL, whether a condition of it filters a table before the join)
CASES = {
    "lookup_both_sides": (
        "SELECT q.qid, d.name FROM q JOIN d ON q.k = d.k WHERE d.name <> 'b' AND q.qid % 2 = 0",
        True,
    ),
    "lookup_comma": ("SELECT q.qid, d.name FROM q, d WHERE q.k = d.k AND d.name = 'a'", True),
    "left_lookup_unmatched": (
        "SELECT q.qid, d.name FROM q LEFT JOIN d ON q.k = d.k WHERE d.name IS NULL",
        False,
    ),
    "left_lookup_kept_side": (
        "SELECT q.qid, d.name FROM q LEFT JOIN d ON q.k = d.k "
        "WHERE q.qid > 3 AND (d.name IS NULL OR d.name = 'a')",
        True,
    ),
    "interval_both_sides": (
        "SELECT p.pid, q.qid FROM p JOIN q ON p.k = q.k AND q.ts BETWEEN p.ts AND p.e "
        "WHERE p.pid % 3 <> 0 AND q.qid > 2",
        True,
    ),
    "left_interval_null_side": (
        "SELECT p.pid, q.qid FROM p LEFT JOIN q ON p.k = q.k AND q.ts BETWEEN p.ts AND p.e "
        "WHERE q.qid IS NULL OR q.qid > 3",
        False,
    ),
    "asof_right_side_stays": (
        "SELECT q.qid, p.pid FROM q ASOF JOIN p ON q.k = p.k AND q.ts >= p.ts WHERE p.pid % 2 = 0",
        False,
    ),
    "asof_left_side": (
        "SELECT q.qid, p.pid FROM q ASOF LEFT JOIN p ON q.k = p.k AND q.ts >= p.ts "
        "WHERE q.qid % 2 = 1",
        True,
    ),
}


def d_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[1] for r in rows], pa.string()),
        }
    )


@pytest.mark.parametrize("case", CASES)
@SETTINGS
@given(
    p=ranges,
    q=points,
    d=names,
    size=st.integers(1, 9),
    rnd=st.randoms(use_true_random=False),
)
def test_conditions_on_one_table_give_the_batch_result(
    case: str, p: list, q: list, d: list, size: int, rnd: random.Random
) -> None:
    sql, _ = CASES[case]
    if case.startswith("asof"):  # equal times on one key: which row ASOF picks is arbitrary
        p = list({(r[0], r[1]): r for r in p}.values())
    tables = {"p": p_table(p, rnd), "q": q_table(q, rnd), "d": d_table(d)}
    got = streamed(sql, tables, {"p": size, "q": size})
    assert_same_rows(got, duckdb_result(sql, tables))


@pytest.mark.parametrize("case", CASES)
def test_a_condition_moves_below_the_join_only_where_it_keeps_the_result(case: str) -> None:
    sql, moves = CASES[case]
    rng = random.Random(0)
    ctx = ds.Context(state_dir=None)
    try:
        ctx.register_arrow("p", p_table([], rng), event_time="ts")
        ctx.register_arrow("q", q_table([], rng), event_time="ts")
        ctx.register_arrow("d", d_table([]))
        plan = ctx.explain(sql).split("== job graph ==")[0].splitlines()
    finally:
        ctx.close()
    join = next(i for i, line in enumerate(plan) if "Join(" in line)
    below = any("WHERE" in line for line in plan[join + 1 :])
    above = any("WHERE" in line for line in plan[:join])
    assert below == moves, "\n".join(plan)
    if not moves:  # the condition is still evaluated, after the join
        assert above, "\n".join(plan)
