"""Identical job-graph operators on the same inputs run once, their output fanned out.

A query that spells one subquery twice (Nexmark q5 aggregates the same hop window in
both sides of its join) lowers to two equal chains of operators over one shared source.
An operator whose output depends only on its config and its input streams (batches and
watermarks, in order) gives both copies the same output, so the later copy is dropped
and its consumers read the earlier one. Only the kinds listed in :data:`SHAREABLE` are
merged: each is a deterministic function of its inputs (no expression that could call
``random()`` or a Python function with side effects, no external I/O). An aggregate with
a Python aggregate function among its calls (``func`` ``"python"``) is not: the call names
code its text does not describe (an object that may keep state of its own or have side
effects), so each of its copies runs.

The pass runs on the finished node list, so two nodes a later step configured apart (a
result's key-number column, a state limit) stay apart.
"""

from __future__ import annotations

import dataclasses

from datum_sql.engine.jobgraph import Node

#: Operator kinds whose output is a function of their config and input streams only.
SHAREABLE = frozenset(
    {
        "project",
        "watermark_lag",
        "window_aggregate",
        "session_aggregate",
        "group_aggregate",
    }
)


def _shareable(node: Node) -> bool:
    """Whether ``node``'s output is told by its text (kind, config) and inputs alone."""
    if node.role != "operator" or node.kind not in SHAREABLE:
        return False
    return all(call["func"] != "python" for call in node.config.get("aggregates", ()))


def share_equal_operators(nodes: list[Node]) -> list[Node]:
    """``nodes`` (inputs before consumers) with every repeated shareable operator dropped
    and its consumers fed by its first copy; other nodes keep their ids."""
    alias: dict[str, str] = {}
    seen: dict[str, str] = {}
    out: list[Node] = []
    for node in nodes:
        inputs = tuple(alias.get(i, i) for i in node.inputs)
        if inputs != node.inputs:
            node = dataclasses.replace(node, inputs=inputs)
        if _shareable(node):
            sig = node.signature()
            first = seen.get(sig)
            if first is not None:
                alias[node.id] = first
                continue
            seen[sig] = node.id
        out.append(node)
    return out


__all__ = ["SHAREABLE", "share_equal_operators"]
