"""A streaming SELECT's updating result kept by the key numbers of the operator making it.

When the changelog a SELECT returns comes straight from an unbounded GROUP BY or a
ROW_NUMBER top-N (through column renames only) and the result's upsert key is that
operator's own key, the operator already gives each key a state slot. It then adds each
row's key number (the slot; for a top-N keyed by partition and rank, the slot times the
ranks shown plus the rank's place among them) as one more column, the renames pass it on,
and the result keeps its rows by that number instead of hashing the key columns again.
The column goes just before ``_op``, and no reader of the result ever sees it.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from datum_sql.engine.jobgraph import Node

#: The column that carries a row's key number to the result.
KEY_NUMBER = "__key_number"
#: A top-N keyed by partition and rank numbers its keys only for at most this many ranks
#: (the result then holds ranks x partitions numbers).
MAX_RANKS = 64
#: The sink kind of a streaming SELECT: the runtime returns its batches to the caller.
COLLECT = "collect"


def number_result_keys(nodes: list[Node]) -> list[Node]:
    """``nodes`` with the key-number column added where a SELECT's result can use it."""
    out = list(nodes)
    at = {n.id: i for i, n in enumerate(out)}
    for sink in nodes:
        if sink.role != "sink" or sink.kind != COLLECT or sink.upsert_key is None:
            continue
        chain = []  # the renames between the producer and the result, nearest first
        up = out[at[sink.inputs[0]]]
        while up.role == "operator" and up.kind == "project" and _op_last(up):
            chain.append(up)
            up = out[at[up.inputs[0]]]
        key = _key_at_producer(sink.upsert_key, chain)
        if key is None or not _numbers(up, key):
            continue
        for node in [up, *chain]:
            out[at[node.id]] = _with_number(node, key if node is up else None)
        config = {**sink.config, "key_column": KEY_NUMBER}
        out[at[sink.id]] = dataclasses.replace(sink, config=config, schema=_insert(sink.schema))
    return out


def _op_last(node: Node) -> bool:
    return node.schema is not None and node.schema.names[-1:] == ["_op"]


def _key_at_producer(key: tuple[str, ...], chain: list[Node]) -> tuple[str, ...] | None:
    """The result's key columns under the names the producer gives them."""
    names = list(key)
    for project in chain:
        back = {dst: src for src, dst in project.config["columns"]}
        if any(n not in back for n in names):
            return None
        names = [back[n] for n in names]
    return tuple(names)


def _numbers(producer: Node, key: tuple[str, ...]) -> bool:
    """The producer can number the keys ``key`` (one of its upsert keys) of its rows."""
    if producer.role != "operator" or key not in producer.upsert_keys or not _op_last(producer):
        return False
    if producer.kind == "group_aggregate":
        return True
    if producer.kind != "top_n" or producer.config.get("emit") != "changelog":
        return False
    rank = producer.config.get("rank_column")
    width = int(producer.config["upper"]) - int(producer.config.get("lower", 1)) + 1
    return rank not in key or width <= MAX_RANKS


def _with_number(node: Node, key: tuple[str, ...] | None) -> Node:
    config = dict(node.config)
    if key is not None:  # the producer
        config["key_number"] = {"column": KEY_NUMBER, "key": list(key)}
    else:  # a rename passes the column on
        columns = [list(c) for c in config["columns"]]
        config["columns"] = [*columns[:-1], [KEY_NUMBER, KEY_NUMBER], columns[-1]]
    return dataclasses.replace(node, config=config, schema=_insert(node.schema))


def _insert(schema: pa.Schema | None) -> pa.Schema:
    assert schema is not None
    return schema.insert(len(schema) - 1, pa.field(KEY_NUMBER, pa.int64()))
