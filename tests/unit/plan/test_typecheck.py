"""The comparison type check types what the plan knows (source columns, literals, arithmetic
on numbers) itself, and asks DataFusion only for the rest, or to name a refusal's types."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.errors import PlanError
from datum_sql.plan import typecheck

TABLE = pa.table(
    {
        "id": pa.array([1, 2], pa.int64()),
        "region": pa.array(["x", "y"], pa.string()),
        "amount": pa.array([0.5, 4.0], pa.float64()),
        "ts": pa.array([0, 1], pa.timestamp("us")),
    }
)


@pytest.fixture
def ctx() -> Any:
    c = ds.Context(state_dir=None)
    c.register_arrow("t", TABLE, event_time="ts")
    c.register_arrow("u", TABLE, event_time="ts")
    yield c
    c.close()


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SELECTs whose operands were typed by DataFusion."""
    seen: list[str] = []
    original = typecheck.types_of

    def spy(session: Any, select: Any, operands: Any) -> Any:
        seen.append(select.sql())
        return original(session, select, operands)

    monkeypatch.setattr(typecheck, "types_of", spy)
    return seen


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM t WHERE id = 3 OR id = 4 OR region = 'x'",
        "SELECT id, amount FROM t WHERE id % 123 = 0 AND -amount < 2.5 AND region IS NOT NULL",
        "SELECT a.id FROM t a JOIN u b ON a.id = b.id WHERE b.region <> 'y' AND a.id IN (1, 2)",
        "SELECT id FROM t WHERE id BETWEEN 1 AND (amount + 1) AND region = NULL",
    ],
)
def test_plan_typed_comparisons_need_no_probe(ctx: Any, probes: list[str], sql: str) -> None:
    ctx.explain(sql)
    assert ctx.sql(sql).num_rows >= 0
    assert probes == []


def test_other_operands_are_typed_by_datafusion(ctx: Any, probes: list[str]) -> None:
    ctx.explain("SELECT id FROM t WHERE length(region) = 1")
    assert len(probes) == 1


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT id FROM t WHERE region = id % 7",
            "cannot compare region (VARCHAR) with id % 7 (BIGINT) in region = id % 7",
        ),
        (
            "SELECT id FROM t WHERE amount * 2 > region",
            "cannot compare region (VARCHAR) with amount * 2 (DOUBLE) in amount * 2 > region",
        ),
    ],
)
def test_a_refusal_still_names_the_types_datafusion_gives(
    ctx: Any, probes: list[str], sql: str, message: str
) -> None:
    with pytest.raises(PlanError, match=re.escape(message)):
        ctx.explain(sql)
    with pytest.raises(PlanError, match=re.escape(message)):
        ctx.sql(sql)
    assert len(probes) == 2
