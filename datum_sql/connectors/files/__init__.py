"""File connectors: ``parquet``, ``csv`` and ``jsonl`` sources and exactly-once sinks.

Importing this package registers all six.
"""

from datum_sql.connectors.files import csv, jsonl, parquet
from datum_sql.connectors.files.csv import CsvSink, CsvSource
from datum_sql.connectors.files.jsonl import JsonlSink, JsonlSource
from datum_sql.connectors.files.parquet import ParquetSink, ParquetSource

__all__ = [
    "CsvSink",
    "CsvSource",
    "JsonlSink",
    "JsonlSource",
    "ParquetSink",
    "ParquetSource",
    "csv",
    "jsonl",
    "parquet",
]
