"""Interval literals in plan expressions, as microseconds."""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError, SqlError
from datum_sql.sql.literals import interval_micros


def offset_of(node: exp.Expr) -> int:
    """Microseconds of an INTERVAL literal; PlanError for anything else."""
    try:
        return interval_micros(node, what="the interval")
    except SqlError as exc:
        raise PlanError(str(exc)) from None
