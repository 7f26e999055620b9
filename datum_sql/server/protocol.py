"""The Flight SQL messages the server reads and writes, as protobuf classes.

Flight SQL puts its commands in the ``cmd`` of a Flight descriptor, in a ticket or in an
action body, each wrapped in a ``google.protobuf.Any`` whose type URL names the message
(``type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery``). pyarrow speaks
Flight but ships no Flight SQL messages, so the few this server needs are declared here as a
``FileDescriptorProto`` built in code and turned into message classes by protobuf itself.
That keeps the wire format protobuf's (field numbers, presence, unknown fields a newer
client adds are skipped) without generated ``_pb2`` files to keep in step with a ``protoc``
version, and without a dependency on a second Flight SQL implementation. The field numbers
are those of the Flight SQL protocol definition; messages the server does not serve are not
declared: a command naming one is refused by name (:func:`command_name`).

The file is declared with proto2 syntax so that ``optional`` fields keep presence
(``HasField``) without proto3's synthetic oneofs; on the wire the two are the same.
"""

from __future__ import annotations

from typing import Any

from datum_sql.optional import require

__all__ = ["PACKAGE", "command_name", "message", "pack", "unpack"]

PACKAGE = "arrow.flight.protocol.sql"
_TYPE_URL_PREFIX = f"type.googleapis.com/{PACKAGE}."

_OPTIONAL, _REPEATED = 1, 3  # FieldDescriptorProto.Label
_BOOL, _STRING, _BYTES, _UINT32, _INT64 = 8, 9, 12, 13, 3  # FieldDescriptorProto.Type

#: message name -> (field name, number, type, label)
_MESSAGES: dict[str, list[tuple[str, int, int, int]]] = {
    "CommandGetSqlInfo": [("info", 1, _UINT32, _REPEATED)],
    "CommandGetCatalogs": [],
    "CommandGetDbSchemas": [
        ("catalog", 1, _STRING, _OPTIONAL),
        ("db_schema_filter_pattern", 2, _STRING, _OPTIONAL),
    ],
    "CommandGetTables": [
        ("catalog", 1, _STRING, _OPTIONAL),
        ("db_schema_filter_pattern", 2, _STRING, _OPTIONAL),
        ("table_name_filter_pattern", 3, _STRING, _OPTIONAL),
        ("table_types", 4, _STRING, _REPEATED),
        ("include_schema", 5, _BOOL, _OPTIONAL),
    ],
    "CommandGetTableTypes": [],
    "CommandStatementQuery": [
        ("query", 1, _STRING, _OPTIONAL),
        ("transaction_id", 2, _BYTES, _OPTIONAL),
    ],
    "TicketStatementQuery": [("statement_handle", 1, _BYTES, _OPTIONAL)],
    "CommandStatementUpdate": [
        ("query", 1, _STRING, _OPTIONAL),
        ("transaction_id", 2, _BYTES, _OPTIONAL),
    ],
    "DoPutUpdateResult": [("record_count", 1, _INT64, _OPTIONAL)],
    "ActionCreatePreparedStatementRequest": [
        ("query", 1, _STRING, _OPTIONAL),
        ("transaction_id", 2, _BYTES, _OPTIONAL),
    ],
    "ActionCreatePreparedStatementResult": [
        ("prepared_statement_handle", 1, _BYTES, _OPTIONAL),
        ("dataset_schema", 2, _BYTES, _OPTIONAL),
        ("parameter_schema", 3, _BYTES, _OPTIONAL),
    ],
    "ActionClosePreparedStatementRequest": [("prepared_statement_handle", 1, _BYTES, _OPTIONAL)],
    "CommandPreparedStatementQuery": [("prepared_statement_handle", 1, _BYTES, _OPTIONAL)],
    "CommandPreparedStatementUpdate": [("prepared_statement_handle", 1, _BYTES, _OPTIONAL)],
    "DoPutPreparedStatementResult": [("prepared_statement_handle", 1, _BYTES, _OPTIONAL)],
}

_CLASSES: dict[str, Any] = {}


def _build() -> dict[str, Any]:
    if _CLASSES:
        return _CLASSES
    require("google.protobuf", "the Flight SQL server (datum-sql[server])")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(
        name="datum_sql/server/flight_sql.proto", package=PACKAGE, syntax="proto2"
    )
    for name, fields in _MESSAGES.items():
        msg = proto.message_type.add(name=name)
        for field_name, number, kind, label in fields:
            msg.field.add(name=field_name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()  # private: no clash with another copy
    pool.Add(proto)
    for name in _MESSAGES:
        descriptor = pool.FindMessageTypeByName(f"{PACKAGE}.{name}")
        _CLASSES[name] = message_factory.GetMessageClass(descriptor)
    return _CLASSES


def message(name: str, **fields: Any) -> Any:
    """A new Flight SQL message ``name`` with ``fields`` set."""
    return _build()[name](**fields)


def pack(msg: Any) -> bytes:
    """``msg`` wrapped in an ``Any``, serialized (a descriptor's cmd, a ticket, a result)."""
    from google.protobuf import any_pb2

    wrapper = any_pb2.Any()
    wrapper.Pack(msg, type_url_prefix="type.googleapis.com/")
    return bytes(wrapper.SerializeToString())


def command_name(data: bytes) -> str:
    """The Flight SQL message name an ``Any``-wrapped ``data`` holds ("" when it is not one)."""
    _build()
    from google.protobuf import any_pb2
    from google.protobuf.message import DecodeError

    wrapper = any_pb2.Any()
    try:
        wrapper.ParseFromString(data)
    except DecodeError:
        return ""
    url = wrapper.type_url
    return url[len(_TYPE_URL_PREFIX) :] if url.startswith(_TYPE_URL_PREFIX) else ""


def unpack(data: bytes) -> tuple[str, Any]:
    """The name and message of an ``Any``-wrapped Flight SQL command; KeyError for a message
    this server does not declare (the name is in the error's args), ValueError for bytes that
    are no Flight SQL command."""
    from google.protobuf import any_pb2

    classes = _build()
    name = command_name(data)
    if not name:
        raise ValueError("not a Flight SQL command (expected a protobuf Any of its messages)")
    if name not in classes:
        raise KeyError(name)
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(data)
    msg = classes[name]()
    msg.ParseFromString(wrapper.value)
    return name, msg
