"""Operators: batches and watermarks in, batches out. Importing this registers them."""

from datum_sql.engine.operators import aggregate, joins, sort, stateless, topn, windows  # noqa: F401
from datum_sql.engine.operators.base import Operator, operator_class, register

__all__ = ["Operator", "operator_class", "register"]
