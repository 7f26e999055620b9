"""Built-in generators for demos, tests and benchmarks: ``nexmark`` and ``datagen``.

Importing this package registers both sources.
"""

from datum_sql.connectors.generators import datagen, nexmark
from datum_sql.connectors.generators.nexmark import nexmark_table

__all__ = ["datagen", "nexmark", "nexmark_table"]
