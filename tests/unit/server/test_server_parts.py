"""The server's parts on their own: token files, the backoff, listen addresses, metadata
shapes, which statements need the admin role, the Flight SQL messages."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import datum_sql as ds
from datum_sql.errors import DatumError, PlanError, SqlError
from datum_sql.server import is_loopback, metadata, parse_listen, protocol
from datum_sql.server.auth import Backoff, Tokens, bearer, peer_host
from datum_sql.server.statements import needs_admin, subscription_query

GOOD = "a" * 20


def test_token_file_roles_and_constant_time_lookup(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# comment\n\n{GOOD} admin\n{'b' * 20} read\n")
    tokens = Tokens.from_file(path)
    assert tokens.role_of(GOOD) == "admin"
    assert tokens.role_of("b" * 20) == "read"
    assert tokens.role_of("a" * 19) is None and tokens.role_of("") is None
    assert GOOD not in repr(tokens)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{GOOD}\n", "line 1: expected 'TOKEN ROLE'"),
        (f"{GOOD} root\n", "line 1: unknown role 'root'"),
        ("# nothing\nshort read\n", "line 2: the token is shorter than 16"),
        (f"{GOOD} read\n{GOOD} admin\n", "line 2: the same token appears twice"),
        ("# only comments\n", "holds no token"),
    ],
)
def test_token_file_errors_name_the_line_not_the_token(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(DatumError, match=message) as err:
        Tokens.from_file(path)
    assert GOOD not in str(err.value) and "short read" not in str(err.value)


def test_a_missing_token_file_says_which() -> None:
    with pytest.raises(DatumError, match="cannot read token file /nonexistent/tokens"):
        Tokens.from_file("/nonexistent/tokens")


def test_bearer_header_and_peer_address() -> None:
    assert bearer({"authorization": ["Bearer xyz"]}) == "xyz"
    assert bearer({"Authorization": ["bearer  xyz "]}) == "xyz"
    assert bearer({"authorization": ["Basic xyz"]}) is None
    assert bearer({}) is None
    assert peer_host("ipv4:127.0.0.1:5123") == "127.0.0.1"
    assert peer_host("ipv6:[::1]:5123") == "::1"


def test_backoff_holds_an_address_after_five_failures_and_doubles() -> None:
    backoff = Backoff()
    for _ in range(4):
        backoff.failed("10.0.0.1", "unknown token")
    assert backoff.held("10.0.0.1") == 0
    backoff.failed("10.0.0.1", "unknown token")
    assert 0 < backoff.held("10.0.0.1") <= 1
    backoff.failed("10.0.0.1", "unknown token")
    assert 1 < backoff.held("10.0.0.1") <= 2
    assert backoff.held("10.0.0.2") == 0  # per address


def test_listen_addresses() -> None:
    assert parse_listen("127.0.0.1:50051") == ("127.0.0.1", 50051)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad, message in [("50051", "expected HOST:PORT"), ("h:x", "not a number"),
                         ("h:70000", "within 0..65535")]:  # fmt: skip
        with pytest.raises(DatumError, match=message):
            parse_listen(bad)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")


@pytest.mark.parametrize(
    ("sql", "admin"),
    [
        ("SELECT 1", False),
        ("SHOW QUERIES", False),
        ("EXPLAIN SELECT 1", False),
        ("SELECT 1; SELECT 2", False),
        ("SELECT 1; DROP SOURCE x", True),
        ("SET checkpoint_interval = '1s'", True),
        ("INSERT INTO s SELECT 1", True),
        ("CREATE SOURCE s WITH (connector = 'nexmark')", True),
        ("cancel query q1", True),
        ("SUBSCRIBE TO SELECT 1", False),
    ],
)
def test_which_statements_need_admin(sql: str, admin: bool) -> None:
    assert needs_admin(sql) is admin


def test_a_malformed_cancel_says_how_to_write_it() -> None:
    with pytest.raises(SqlError, match="expected CANCEL QUERY name"):
        needs_admin("CANCEL QUERY")


def test_subscribe_takes_one_select_and_refuses_a_view_name() -> None:
    assert subscription_query("subscribe  to\n SELECT k FROM t WHERE v > 1 ;") == (
        "SELECT k FROM t WHERE v > 1"
    )
    assert subscription_query("SELECT 1") is None
    assert subscription_query("SUBSCRIBERS") is None
    for bad, message in (
        ("SUBSCRIBE SELECT 1", "expected SUBSCRIBE TO SELECT"),
        ("SUBSCRIBE TO", "expected SUBSCRIBE TO SELECT"),
        ("SUBSCRIBE TO SELECT 1; DROP SOURCE t", "takes one SELECT"),
        ("SUBSCRIBE TO SELECT 1 INTO t", "takes one SELECT"),
        ("SUBSCRIBE TO DROP SOURCE t", "takes one SELECT"),
    ):
        with pytest.raises(SqlError, match=message):
            subscription_query(bad)
    with pytest.raises(PlanError, match="a materialized view's changes is not served yet"):
        subscription_query("SUBSCRIBE TO totals")


def test_subscribe_in_a_context_says_it_is_for_server_clients() -> None:
    ctx = ds.Context(state_dir=None)
    with pytest.raises(SqlError, match=r"for clients of the server .* ctx.execute_streaming"):
        ctx.execute("SUBSCRIBE TO SELECT 1")
    with pytest.raises(SqlError, match="for clients of the server"):
        ctx.sql("SELECT 1; subscribe to SELECT 2")


def test_tables_filters_by_like_pattern_and_type_and_carries_ipc_schemas() -> None:
    schema = pa.schema([("id", pa.int64())])
    entries = [("orders", "SOURCE", schema), ("out_1", "SINK", None), ("outx1", "SINK", None)]
    table = metadata.tables(entries, catalog=None, schema_pattern="ma%", name_pattern="out\\_%",
                            types=[], include_schema=True)  # fmt: skip
    assert table.column("table_name").to_pylist() == ["out_1"]
    assert table.schema == metadata.tables_schema(True)
    all_sources = metadata.tables(entries, catalog="datum", schema_pattern=None,
                                  name_pattern=None, types=["SOURCE"], include_schema=True)  # fmt: skip
    ipc = all_sources.column("table_schema")[0].as_py()
    assert pa.ipc.read_schema(pa.py_buffer(ipc)) == schema
    other_catalog = metadata.tables(entries, catalog="elsewhere", schema_pattern=None,
                                    name_pattern=None, types=[], include_schema=False)  # fmt: skip
    assert other_catalog.num_rows == 0


def test_sql_info_is_a_dense_union_of_the_asked_ids() -> None:
    table = metadata.sql_info([0, 3, 9999])
    assert table.schema == metadata.SQL_INFO_SCHEMA
    assert table.column("info_name").to_pylist() == [0, 3]
    assert table.column("value").to_pylist() == ["datum-sql", False]
    assert metadata.sql_info([]).num_rows > 5


def test_messages_round_trip_and_unknown_commands_are_named() -> None:
    packed = protocol.pack(protocol.message("CommandGetTables", table_types=["SINK"]))
    name, msg = protocol.unpack(packed)
    assert name == "CommandGetTables" and list(msg.table_types) == ["SINK"]
    assert not msg.HasField("catalog")
    from google.protobuf import any_pb2

    other = any_pb2.Any(
        type_url="type.googleapis.com/arrow.flight.protocol.sql.CommandGetXdbcTypeInfo"
    )
    with pytest.raises(KeyError, match="CommandGetXdbcTypeInfo"):
        protocol.unpack(other.SerializeToString())
    with pytest.raises(ValueError, match="not a Flight SQL command"):
        protocol.unpack(b"\xff\xff")
