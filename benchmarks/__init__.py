"""Benchmarks: datum-sql streaming beside DuckDB batch on the same data (``./dev bench``)."""
