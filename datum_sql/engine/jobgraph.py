"""The job graph: the pure-data contract between the planner and the runtime.

Nodes are sources, operators and sinks, each named by a registered kind and configured
by JSON-able data; edges say which node feeds which input port. Nothing here runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pyarrow as pa

NodeRole = Literal["source", "operator", "sink"]

#: The columns a dead-letter sink receives for each record a source could not decode.
REJECTED_SCHEMA = pa.schema(
    [
        ("raw", pa.binary()),
        ("reason", pa.string()),
        ("position", pa.string()),
        ("source", pa.string()),
    ]
)


@dataclass(frozen=True)
class Node:
    id: str
    role: NodeRole
    #: For sources and sinks: the catalog table name; for operators: the registered kind.
    kind: str
    config: dict[str, Any] = field(default_factory=dict)
    #: Upstream node ids, in port order.
    inputs: tuple[str, ...] = ()
    schema: pa.Schema | None = None
    #: For a node whose output is a changelog (a sink: whose input is): each set of columns
    #: that identifies a row of it, so that an op replaces its key's whole row (an
    #: aggregate's group keys with its window's start or end; a top-N's partition keys and
    #: rank). Empty: append-only, or no key is known (the changelog then applies as a
    #: multiset of rows).
    upsert_keys: tuple[tuple[str, ...], ...] = ()

    @property
    def upsert_key(self) -> tuple[str, ...] | None:
        """The key a consumer upserts by: the first of :attr:`upsert_keys`, if any."""
        return self.upsert_keys[0] if self.upsert_keys else None

    def label(self) -> str:
        return f"{self.id}:{self.kind}"

    def content(self) -> dict[str, Any]:
        """What the node computes from its inputs, as JSON-able data: every field but the
        id. A Calc's compiled program is derived from its SQL (kept in the config): left out."""
        doc = {k: v for k, v in asdict(self).items() if k not in ("id", "schema", "upsert_keys")}
        doc["config"] = _without_program(doc["config"])
        if self.upsert_keys:
            doc["upsert_keys"] = [list(k) for k in self.upsert_keys]
        doc["schema"] = str(self.schema) if self.schema is not None else None
        return doc

    def signature(self) -> str:
        """:meth:`content` as text: equal for two nodes exactly when their content is."""
        return _text(self.content())


@dataclass(frozen=True)
class JobGraph:
    nodes: tuple[Node, ...]
    #: Query-level settings the runtime honours (allowed lateness, state limits, ...).
    settings: dict[str, Any] = field(default_factory=dict)

    def node(self, node_id: str) -> Node:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    @property
    def sources(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "source"]

    @property
    def sinks(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "sink"]

    @property
    def operators(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "operator"]

    def downstream(self, node_id: str) -> list[tuple[Node, int]]:
        """(node, port) pairs fed by ``node_id``."""
        out = []
        for n in self.nodes:
            for port, up in enumerate(n.inputs):
                if up == node_id:
                    out.append((n, port))
        return out

    def fingerprint(self) -> str:
        """Stable hash of the graph's shape and configs (a changed query gets a new one)."""
        text = _text([{"id": n.id, **n.content()} for n in self.nodes])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __str__(self) -> str:
        lines = []
        for n in self.nodes:
            ins = f" <- {', '.join(n.inputs)}" if n.inputs else ""
            cfg = ", ".join(f"{k}={v}" for k, v in n.config.items() if k not in ("schema",))
            lines.append(f"{n.id} [{n.role}] {n.kind}({cfg}){ins}")
        return "\n".join(lines)


def _text(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, default=str)


def _without_program(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != "program"} if "program" in config else config
