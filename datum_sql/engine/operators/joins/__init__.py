"""Join operators: streaming ASOF join (``asof``), interval join (``interval``; beside a
sparse input, ``interval_sparse``), lookup join against a bounded table (``lookup``) and the
semi-, anti- and scalar joins of WHERE subqueries against one (``subquery``). Importing
this registers ``asof_join``, ``interval_join``, ``sparse_interval_join``, ``lookup_join``
and ``subquery_join``; ``common`` holds what they share."""

from datum_sql.engine.operators.joins import (  # noqa: F401
    asof,
    interval,
    interval_sparse,
    lookup,
    subquery,
)
