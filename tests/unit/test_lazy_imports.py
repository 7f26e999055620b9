"""Start-up work stays out of the data path: ``import datum_sql`` loads no engine, and a
connector's module (and what it needs: DuckDB, aiokafka, the file formats) loads on the
first use of that connector only. Checked in fresh interpreters (``sys.modules``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from datum_sql.connectors import registry
from datum_sql.errors import PlanError

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["duckdb", "aiokafka", "datafusion", "sqlglot", "pandas", "polars", "pyarrow.parquet",
         "pyarrow.csv", "pyarrow.json", "pyarrow.dataset", "datum_sql.connectors.duckdb",
         "datum_sql.connectors.kafka", "datum_sql.connectors.files.csv",
         "datum_sql.connectors.files.jsonl", "datum_sql.connectors.files.parquet"]  # fmt: skip


def _loaded_after(code: str) -> set[str]:
    """The modules of ``HEAVY`` a fresh interpreter holds after running ``code``."""
    probe = (
        f"import sys, json\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, timeout=120, check=True)  # fmt: skip
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_datum_sql_loads_no_engine_and_no_connector() -> None:
    assert _loaded_after("import datum_sql") == set()


def test_register_arrow_and_a_query_over_it_load_no_other_connector() -> None:
    code = """
import pyarrow as pa
import datum_sql as ds
ctx = ds.Context(state_dir=None)
ctx.register_arrow("t", pa.table({"a": [1, 2, 3]}))
assert ctx.execute_streaming("SELECT a FROM t WHERE a > 1").to_arrow().num_rows == 2
assert ctx.sql("SELECT count(*) AS n FROM t").num_rows == 1
"""
    # the planner and the stateless operators run on DataFusion (which loads pandas and
    # pyarrow.dataset) and sqlglot: needed
    assert _loaded_after(code) == {"datafusion", "sqlglot", "pandas", "pyarrow.dataset"}


def test_a_connector_loads_on_first_use_of_its_name_only() -> None:
    code = """
import datum_sql as ds
ctx = ds.Context(state_dir=None)
ctx.execute("CREATE SOURCE p (a BIGINT) WITH (connector = 'parquet', path = 'nowhere/*.parquet')")
"""
    loaded = _loaded_after(code)
    assert "datum_sql.connectors.files.parquet" in loaded
    assert not loaded & {"duckdb", "aiokafka", "datum_sql.connectors.kafka",
                         "datum_sql.connectors.files.jsonl", "datum_sql.connectors.files.csv"}  # fmt: skip


def test_every_builtin_connector_is_listed_and_loads_by_its_name() -> None:
    assert set(registry.BUILTIN_SOURCES) <= set(registry.source_names())
    assert set(registry.BUILTIN_SINKS) <= set(registry.sink_names())
    for name in registry.BUILTIN_SOURCES:
        assert registry.source_class(name).__module__ == registry.BUILTIN_SOURCES[name]
    for name in registry.BUILTIN_SINKS:
        assert registry.sink_class(name).__module__ == registry.BUILTIN_SINKS[name]


def test_an_unknown_connector_fails_with_its_name_and_the_known_ones() -> None:
    with pytest.raises(PlanError, match=r"unknown source connector 'kafak'.*kafka.*'kafka'\?"):
        registry.source_class("kafak")
    with pytest.raises(PlanError, match=r"unknown sink connector 'nope'; available: .*parquet"):
        registry.sink_class("nope")


def test_the_planners_one_time_setup_runs_with_the_context_not_in_the_first_query() -> None:
    code = """
import pyarrow as pa
import datum_sql as ds
from datum_sql.plan import infer
ds.Context(state_dir=None)
assert infer.aggregate_function_names.cache_info().misses == 1
ctx = ds.Context(state_dir=None)
ctx.register_arrow("t", pa.table({"a": [1, 2, 3]}))
assert ctx.execute_streaming("SELECT a, count(*) AS n FROM t GROUP BY a").to_arrow().num_rows == 3
assert infer.aggregate_function_names.cache_info().misses == 1
"""
    assert "datafusion" in _loaded_after(code)  # and the child's own asserts held
