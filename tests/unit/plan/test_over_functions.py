"""plan/over_functions.py: every aggregate the streaming planner knows is either computed
over a frame or refused as a window function with a reason; ctx.sql's forms of the window
functions DataFusion computes otherwise."""

from __future__ import annotations

import pytest
import sqlglot

from datum_sql.errors import PlanError
from datum_sql.plan import build, over, over_functions
from datum_sql.sql.dialect import Datum


def test_every_aggregate_is_computed_over_a_frame_or_refused_with_a_reason() -> None:
    framed = {cls.__name__ for cls in over.AGGREGATES}
    for name in set(build.AGGREGATES) - {"First", "Last"}:  # sqlglot's, no SQL of the dialect
        assert (name in framed) != (name in over_functions.REFUSED), name


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT corr(x, y) OVER (ORDER BY ts) FROM t", "corr() OVER (...) is not supported"),
        ("SELECT 1 + array_agg(x) OVER (PARTITION BY k) FROM t", "array_agg() OVER (...)"),
        ("SELECT sum(x) FILTER (WHERE x > 0) OVER (ORDER BY ts) FROM t", "sum() FILTER"),
        ("SELECT avg(DISTINCT x) OVER (ORDER BY ts) FROM t", "avg(DISTINCT ...) OVER"),
    ],
)
def test_refused_window_functions_name_the_function(sql: str, message: str) -> None:
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        over_functions.refuse(sqlglot.parse_one(sql, dialect=Datum))


def test_aggregates_without_over_are_not_refused_here() -> None:
    over_functions.refuse(
        sqlglot.parse_one("SELECT corr(x, y), array_agg(x) FROM t", dialect=Datum)
    )


def test_batch_forms_of_bools_and_moments() -> None:
    ast = sqlglot.parse_one(
        "SELECT bool_and(b) OVER w1 AS a, stddev_pop(x) OVER w1 AS s, var_samp(x) OVER w1 AS v "
        "FROM t WINDOW w1 AS (ORDER BY ts)",
        dialect=Datum,
    )
    over_functions.batch_forms(ast)
    sql = ast.sql(dialect=Datum, normalize_functions="lower")
    assert "min(b) OVER" in sql and "bool_and" not in sql
    assert "sqrt(CASE WHEN var_pop(x) OVER w1 < 0 THEN 0.0 ELSE var_pop(x) OVER w1 END)" in sql
    assert "CASE WHEN var_samp(x) OVER w1 < 0 THEN 0.0 ELSE var_samp(x) OVER w1 END AS v" in sql
