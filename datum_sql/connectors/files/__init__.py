"""File connectors: ``parquet``, ``csv`` and ``jsonl`` sources and exactly-once sinks.

Each format's module (``csv``, ``jsonl``, ``parquet``) registers its source and sink when
imported; the registry imports it on the first use of its name, so one format's
dependencies (DuckDB for JSON lines) load only when that format is used.
"""
