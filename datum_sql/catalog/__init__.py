"""What exists: sources, sinks and materialized views (metadata only)."""

from datum_sql.catalog.entries import Entry, SinkEntry, SourceEntry, ViewEntry
from datum_sql.catalog.store import Catalog

__all__ = ["Catalog", "Entry", "SinkEntry", "SourceEntry", "ViewEntry"]
