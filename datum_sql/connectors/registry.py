"""Connector names (``WITH (connector = '...')``) to Source and Sink classes.

Connectors register themselves with :func:`source` / :func:`sink`. A built-in connector's
module is imported on the first use of its name only (the DuckDB, Kafka and file modules
cost a fresh process a noticeable start-up: a query over Arrow data never pays it); a name
that is neither registered nor built in fails loudly, listing the names that exist.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from datum_sql.connectors.base import ConnectorSpec, Sink, Source
from datum_sql.errors import PlanError

#: Options every source takes; the runtime, not the connector, acts on them.
SOURCE_OPTIONS = {
    "idle_timeout": "after this long without rows a split stops holding back the watermark",
    "late_output": "a sink receiving this source's late rows with diagnostic columns",
}

#: The options that make a source that may run unbounded read what it holds now and end
#: (for a batch query or a sample of the table).
READ_TO_NOW: dict[str, dict[str, str]] = {
    "kafka": {"scan.bounded.mode": "latest"},
    **{fmt: {"scan.mode": "bounded"} for fmt in ("parquet", "csv", "jsonl")},
}

_SOURCES: dict[str, type[Source]] = {}
_SINKS: dict[str, type[Sink]] = {}
#: The built-in connectors: name -> the module that registers it when imported.
BUILTIN_SOURCES = {
    "arrow": "datum_sql.connectors.arrow",
    "csv": "datum_sql.connectors.files.csv",
    "datagen": "datum_sql.connectors.generators.datagen",
    "duckdb": "datum_sql.connectors.duckdb",
    "jsonl": "datum_sql.connectors.files.jsonl",
    "kafka": "datum_sql.connectors.kafka.source",
    "nexmark": "datum_sql.connectors.generators.nexmark",
    "parquet": "datum_sql.connectors.files.parquet",
}
BUILTIN_SINKS = {
    "callback": "datum_sql.connectors.callback",
    "csv": "datum_sql.connectors.files.csv",
    "duckdb": "datum_sql.connectors.duckdb",
    "jsonl": "datum_sql.connectors.files.jsonl",
    "kafka": "datum_sql.connectors.kafka.sink",
    "parquet": "datum_sql.connectors.files.parquet",
}

S = TypeVar("S", bound=type[Source])
K = TypeVar("K", bound=type[Sink])


def source(name: str) -> Callable[[S], S]:
    """Class decorator: make ``cls`` the source for ``connector = 'name'``."""

    def deco(cls: S) -> S:
        _SOURCES[name] = cls
        return cls

    return deco


def sink(name: str) -> Callable[[K], K]:
    """Class decorator: make ``cls`` the sink for ``connector = 'name'``."""

    def deco(cls: K) -> K:
        _SINKS[name] = cls
        return cls

    return deco


def source_names() -> list[str]:
    return sorted(set(_SOURCES) | set(BUILTIN_SOURCES))


def sink_names() -> list[str]:
    return sorted(set(_SINKS) | set(BUILTIN_SINKS))


def _lookup(table: dict[str, Any], builtin: dict[str, str], name: str, role: str) -> Any:
    if name not in table and name in builtin:
        importlib.import_module(builtin[name])  # registers the connector
        if name not in table:
            raise PlanError(f"internal: {builtin[name]} did not register {role} {name!r}")
    try:
        return table[name]
    except KeyError:
        known = sorted(set(table) | set(builtin))
        near = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise PlanError(
            f"unknown {role} connector {name!r}; available: {', '.join(known)}.{hint}"
        ) from None


def source_class(name: str) -> type[Source]:
    cls: type[Source] = _lookup(_SOURCES, BUILTIN_SOURCES, name, "source")
    return cls


def sink_class(name: str) -> type[Sink]:
    cls: type[Sink] = _lookup(_SINKS, BUILTIN_SINKS, name, "sink")
    return cls


def check_options(
    cls: type[Source] | type[Sink], connector: str, table: str, options: dict[str, Any]
) -> None:
    """Refuse unknown and missing options, naming them and listing the valid ones."""
    allowed = dict(cls.OPTIONS)
    allowed.setdefault("connector", "the connector name")
    if issubclass(cls, Source):
        allowed.update(SOURCE_OPTIONS)
    prefixes = tuple(k[:-1] for k in allowed if k.endswith(".*"))
    for key in options:
        if key in allowed or (prefixes and key.startswith(prefixes)):
            continue
        near = difflib.get_close_matches(key, list(allowed), n=1)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        valid = ", ".join(sorted(k for k in allowed if k != "connector"))
        raise PlanError(
            f"{table}: unknown option {key!r} for connector {connector!r}.{hint} "
            f"Valid options: {valid}"
        )
    missing = [k for k in cls.REQUIRED if k not in options]
    if missing:
        raise PlanError(
            f"{table}: connector {connector!r} needs option(s) {', '.join(map(repr, missing))}"
        )


def create_source(connector: str, spec: ConnectorSpec) -> Source:
    cls = source_class(connector)
    check_options(cls, connector, spec.name, spec.options)
    return cls(spec)


def create_sink(connector: str, spec: ConnectorSpec) -> Sink:
    cls = sink_class(connector)
    check_options(cls, connector, spec.name, spec.options)
    return cls(spec)
