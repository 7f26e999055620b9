"""Operators: batches and watermarks in, batches out. Importing this registers them."""

from datum_sql.engine.operators import (  # noqa: F401
    agg_bits,
    agg_distinct,
    agg_distinct_lists,
    agg_moments,
    agg_ordered,
    agg_python,
    agg_retract,
    aggregate,
    changelog_aggregate,
    joins,
    lateral,
    over,
    over_changelog,
    sort,
    stateless,
    topn,
    union,
    windows,
)
from datum_sql.engine.operators.base import Operator, operator_class, register

__all__ = ["Operator", "operator_class", "register"]
