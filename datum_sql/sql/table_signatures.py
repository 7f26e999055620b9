"""The signatures of the registered Python table functions: what binding a call needs.

A table function's name, argument types and output columns are registered here (by
``datum_sql.functions``) as well as its callable in :mod:`datum_sql.engine.udtfs`, so that
the binder can resolve ``LATERAL f(t.x) AS f`` and ``FROM f(1, 'a')`` without importing
the engine.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Signature:
    """``name(input_types) RETURNS TABLE (output_schema)``."""

    name: str
    input_types: tuple[pa.DataType, ...]
    output_schema: pa.Schema


_signatures: dict[str, Signature] = {}
_lock = threading.Lock()


def register(signature: Signature) -> None:
    with _lock:
        _signatures[signature.name] = signature


def lookup(name: str) -> Signature | None:
    """The table function called ``name`` (case-insensitive), if one is registered."""
    with _lock:
        return _signatures.get(name.lower())
