"""plan/list_order.py: which array_agg/string_agg calls are refused for want of an order."""

from __future__ import annotations

import pytest
import sqlglot

from datum_sql.errors import PlanError
from datum_sql.plan import list_order
from datum_sql.sql.dialect import Datum


def _refusal(sql: str) -> str | None:
    try:
        list_order.refuse(sqlglot.parse_one(sql, read=Datum))
    except PlanError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("sql", "name"),
    [
        ("SELECT k, array_agg(v) FROM t GROUP BY k", "array_agg"),
        ("SELECT string_agg(s, ',') FROM t", "string_agg"),
        ("SELECT group_concat(s) FROM t", "string_agg"),  # sqlglot's spelling of string_agg
        ("SELECT array_agg(v) FILTER (WHERE v > 0) FROM t", "array_agg"),
        ("SELECT k FROM t GROUP BY k HAVING cardinality(array_agg(v)) > 1", "array_agg"),
        ("SELECT k, n FROM (SELECT k, array_agg(v) AS n FROM t GROUP BY k) AS d", "array_agg"),
        ("SELECT array_agg(v ORDER BY ts), string_agg(s, ',') FROM t", "string_agg"),
    ],
)
def test_a_list_in_no_order_is_refused(sql: str, name: str) -> None:
    assert _refusal(sql) == list_order.message(name)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT array_agg(v ORDER BY ts, id) FROM t",
        "SELECT string_agg(s, ',' ORDER BY s DESC) FILTER (WHERE v > 0) FROM t",
        "SELECT array_agg(DISTINCT v), string_agg(DISTINCT s, '|') FROM t",
        "SELECT array_agg(DISTINCT v ORDER BY v DESC) FROM t",
        # a window function: its order is the window's
        "SELECT array_agg(v) OVER (PARTITION BY k ORDER BY ts) FROM t",
        "SELECT array_agg(v) FILTER (WHERE v > 0) OVER (ORDER BY ts) FROM t",
    ],
)
def test_an_ordered_list_passes(sql: str) -> None:
    assert _refusal(sql) is None


def test_the_message_proposes_both_forms() -> None:
    text = list_order.message("string_agg")
    assert text.startswith(f"string_agg() needs ORDER BY: {list_order.WHY}; ")
    assert "write string_agg(x, ',' ORDER BY col)" in text
    assert "string_agg(DISTINCT x, ',') for the distinct values in ascending order" in text
