"""Nexmark queries the streaming planner refuses today, ready for ``test_nexmark_golden.py``.

Each entry is ``name -> (streaming SQL, DuckDB SQL, upsert key or None, streams read)``, the fields of
``test_nexmark_golden.Case``, written for the same events and conventions as that file
(streams ``bid``, ``auction``, ``person``; windows computed in DuckDB from ``epoch_us``). A
query moves there, as ``Case(*PENDING[name])``, once it streams equal to DuckDB; until
then planning it raises a ``PlanError``. This module holds data only: pytest collects
nothing from it.
"""

from __future__ import annotations

PENDING: dict[str, tuple[str, str, str | None, tuple[str, ...]]] = {}
