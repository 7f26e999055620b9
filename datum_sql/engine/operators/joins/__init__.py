"""Join operators: streaming ASOF join (``asof``), interval join (``interval``) and lookup
join against a bounded table (``lookup``). Importing this registers ``asof_join``,
``interval_join`` and ``lookup_join``; ``common`` holds what they share."""

from datum_sql.engine.operators.joins import asof, interval, lookup  # noqa: F401
