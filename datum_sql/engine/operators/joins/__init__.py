"""Join operators: streaming ASOF join (``asof``), interval join (``interval``), lookup
join against a bounded table (``lookup``) and the semi-, anti- and scalar joins of WHERE
subqueries against one (``subquery``). Importing this registers ``asof_join``,
``interval_join``, ``lookup_join`` and ``subquery_join``; ``common`` holds what they share."""

from datum_sql.engine.operators.joins import asof, interval, lookup, subquery  # noqa: F401
