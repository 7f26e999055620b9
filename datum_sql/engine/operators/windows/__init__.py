"""Window operators: assignment (``assign``), tumble/hop aggregation (``aggregate``) and
session aggregation (``session``). Importing this registers ``window_aggregate`` and
``session_aggregate``."""

from datum_sql.engine.operators.windows import aggregate, session  # noqa: F401
