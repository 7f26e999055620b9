"""The planner's per-process set-up happens when a Context is made, not in the first query:
the first query builds none of sqlglot's generator tables (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import json
import pyarrow as pa
import sqlglot.generator as generator
import datum_sql as ds

ctx = ds.Context(state_dir=None)
ctx.register_arrow("t", pa.table({"a": [1, 2, 3]}))
before = {c.__name__ for c in generator._DISPATCH_CACHE}
rows = ctx.execute_streaming("SELECT a FROM t WHERE a = 2 OR a = 3").to_arrow().num_rows
after = {c.__name__ for c in generator._DISPATCH_CACHE}
print(json.dumps({"rows": rows, "built_by_the_query": sorted(after - before)}))
"""


def test_the_first_query_builds_no_sql_generator() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env=env, timeout=300, check=True)  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"rows": 2, "built_by_the_query": []}
