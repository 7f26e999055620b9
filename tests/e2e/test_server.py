"""Server mode end to end: ``datum-sql serve`` in a child process on a loopback port, spoken
to by the ADBC Flight SQL driver and by ``pyarrow.flight``; ``ctx.serve`` in process."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql as adbc_flightsql
import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.flight as flight
import pytest

import datum_sql as ds
from datum_sql.server import protocol

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-sasl-Pa55word"
AUTH = adbc_flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value
TLS_ROOTS = adbc_flightsql.DatabaseOptions.TLS_ROOT_CERTS.value


class Server:
    """``datum-sql serve`` in a child process; its stderr collected in a file."""

    def __init__(self, state_dir: Path, token_file: Path, *extra: str) -> None:
        self.log = state_dir.parent / f"{state_dir.name}-server-{time.monotonic_ns()}.log"
        self._log_file = self.log.open("w")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "datum_sql.cli", "serve", "--state-dir", str(state_dir),
             "--listen", "127.0.0.1:0", "--token-file", str(token_file),
             "--checkpoint-interval", "1s", *extra],
            stdout=subprocess.PIPE, stderr=self._log_file, text=True, env=env,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("serving Flight SQL on "), (line, self.log.read_text())
        self.banner = line
        self.location = line.split()[4]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        self._log_file.close()
        return code


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("server")
    admin, read = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    path = root / "tokens"
    path.write_text(f"# test tokens\n{admin} admin\n{read} read\n")
    return {"admin": admin, "read": read, "file": path, "root": root}


@pytest.fixture(scope="module")
def server(tokens: dict[str, Any]) -> Iterator[Server]:
    root = tokens["root"]
    pacsv.write_csv(pa.table({"id": [1, 2, 3], "name": ["ann", "bob", "cy"]}), root / "people.csv")
    srv = Server(root / "state", tokens["file"])
    with connect(srv, tokens["admin"]) as conn:
        path = (root / "people.csv").as_posix()
        run(conn, f"CREATE SOURCE people (id BIGINT, name VARCHAR) "
                  f"WITH (connector = 'csv', path = '{path}')")  # fmt: skip
    yield srv
    assert srv.stop() == 0
    log = srv.log.read_text()
    assert tokens["admin"] not in log and tokens["read"] not in log
    assert SECRET not in log


def connect(server: Server | Any, token: str | None, **kw: str) -> Any:
    options = {AUTH: f"Bearer {token}"} if token else {}
    return flightsql.connect(server.location, db_kwargs={**options, **kw}, autocommit=True)


def run(conn: Any, sql: str, params: Any = None) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetch_arrow_table()


def raw_client(server: Server, token: str | None) -> tuple[flight.FlightClient, Any]:
    client = flight.connect(server.location)
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return client, flight.FlightCallOptions(headers=headers)


def statement(sql: str) -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_command(
        protocol.pack(protocol.message("CommandStatementQuery", query=sql))
    )


def test_a_csv_source_created_and_queried_over_adbc(server: Server, tokens: dict) -> None:
    with connect(server, tokens["admin"]) as conn:
        path = (tokens["root"] / "people.csv").as_posix()
        run(conn, f"CREATE SOURCE visitors (id BIGINT, name VARCHAR) "
                  f"WITH (connector = 'csv', path = '{path}')")  # fmt: skip
        table = run(conn, "SELECT id, name FROM visitors WHERE id > 1 ORDER BY id")
        assert table.to_pylist() == [{"id": 2, "name": "bob"}, {"id": 3, "name": "cy"}]
        with conn.cursor() as cur:  # the DB-API row interface too
            cur.execute("SELECT count(*) AS n FROM visitors")
            assert cur.fetchall() == [(3,)]


def test_pyarrow_flight_client_queries_and_updates(server: Server, tokens: dict) -> None:
    client, options = raw_client(server, tokens["admin"])
    info = client.get_flight_info(statement("SELECT 40 + 2 AS answer"), options)
    assert info.schema.names == ["answer"]
    table = client.do_get(info.endpoints[0].ticket, options).read_all()
    assert table.column("answer").to_pylist() == [42]
    # the ticket is good for one read
    with pytest.raises(flight.FlightServerError, match="already fetched"):
        client.do_get(info.endpoints[0].ticket, options).read_all()
    update = flight.FlightDescriptor.for_command(
        protocol.pack(
            protocol.message("CommandStatementUpdate", query="SET max_windows_per_row = 50")
        )
    )
    writer, reader = client.do_put(update, pa.schema([]), options)
    writer.done_writing()
    result = protocol.message("DoPutUpdateResult")
    result.ParseFromString(reader.read().to_pybytes())
    writer.close()
    assert result.record_count == -1
    health = list(client.do_action(flight.Action("health", b""), options))
    assert json.loads(health[0].body.to_pybytes())["status"] == "serving"
    # what is not served says so
    with pytest.raises(flight.FlightError, match="not served by datum-sql"):
        list(client.list_flights(options=options))


def test_metadata_browse_answers_from_the_catalog(server: Server, tokens: dict) -> None:
    with connect(server, tokens["read"]) as conn:
        objects = conn.adbc_get_objects(table_name_filter="people").read_all().to_pylist()
        (catalog,) = objects
        assert catalog["catalog_name"] == "datum"
        (schema,) = catalog["catalog_db_schemas"]
        assert schema["db_schema_name"] == "main"
        (table,) = schema["db_schema_tables"]
        assert table["table_type"] == "SOURCE"
        assert [c["column_name"] for c in table["table_columns"]] == ["id", "name"]
        assert conn.adbc_get_table_schema("people") == pa.schema(
            [("id", pa.int64()), ("name", pa.string())]
        )
        assert set(conn.adbc_get_table_types()) == {"SOURCE", "SINK", "MATERIALIZED VIEW", "VIEW"}
        assert conn.adbc_get_info()["vendor_name"] == "datum-sql"


def test_prepared_statement_binds_parameters_as_literals(server: Server, tokens: dict) -> None:
    with connect(server, tokens["read"]) as conn:
        assert run(conn, "SELECT name FROM people WHERE id >= ? ORDER BY id", (2,)).column(
            "name"
        ).to_pylist() == ["bob", "cy"]
        # a value is one literal, never SQL
        assert run(conn, "SELECT name FROM people WHERE name = ?", ("x' OR '1'='1",)).num_rows == 0
        assert run(conn, "SELECT name FROM people WHERE name = ?", ("cy",)).num_rows == 1


def test_insert_job_outlives_its_client_and_is_cancelled(server: Server, tokens: dict) -> None:
    out = (tokens["root"] / "bids_out").as_posix()
    with connect(server, tokens["admin"]) as conn:
        run(conn, "CREATE SOURCE bids WITH (connector = 'nexmark', stream = 'bid', "
                  "events_per_second = '200')")  # fmt: skip
        run(
            conn,
            f"CREATE SINK bids_out (auction BIGINT, price BIGINT) WITH (connector = 'parquet', path = '{out}')",
        )
        started = run(conn, "INSERT INTO bids_out SELECT auction, price FROM bids")
        assert started.to_pylist() == [{"query": "insert_into_bids_out", "state": "running"}]
    time.sleep(1.0)
    with connect(server, tokens["read"]) as conn:
        queries = run(conn, "SHOW QUERIES").to_pylist()
        assert [(q["name"], q["state"]) for q in queries] == [("insert_into_bids_out", "running")]
        assert queries[0]["rows_in"] > 0
        assert queries[0]["sql"] == "INSERT INTO bids_out SELECT auction, price FROM bids"
        with pytest.raises(flightsql.Error, match="admin token"):
            run(conn, "CANCEL QUERY insert_into_bids_out")
    with connect(server, tokens["admin"]) as conn:
        cancelled = run(conn, "CANCEL QUERY insert_into_bids_out").to_pylist()
        assert cancelled == [{"query": "insert_into_bids_out", "state": "cancelled"}]
        assert run(conn, "SHOW QUERIES").num_rows == 0
        assert run(conn, "SELECT count(*) AS n FROM bids_out").column("n")[0].as_py() > 0
        with pytest.raises(flightsql.Error, match="no running query named 'nope'"):
            run(conn, "CANCEL QUERY nope")


def test_a_read_token_cannot_change_anything(server: Server, tokens: dict) -> None:
    with connect(server, tokens["read"]) as conn:
        for sql in (
            "CREATE SOURCE sneaky WITH (connector = 'nexmark', stream = 'bid', rows = '5')",
            "SELECT 1; DROP SOURCE people",
            "SET checkpoint_interval = '1s'",
        ):
            with pytest.raises(flightsql.Error, match="admin token"):
                run(conn, sql)
        assert run(conn, "SHOW SOURCES").column("name").to_pylist().count("people") == 1
    with connect(server, tokens["admin"]) as conn:
        assert "sneaky" not in run(conn, "SHOW SOURCES").column("name").to_pylist()


def test_a_wrong_or_missing_token_is_unauthenticated_and_runs_nothing(
    server: Server, tokens: dict
) -> None:
    create = "CREATE SOURCE intruder WITH (connector = 'nexmark', stream = 'bid', rows = '5')"
    for token in ("not-a-token-of-this-server", None):
        client, options = raw_client(server, token)
        with pytest.raises(flight.FlightUnauthenticatedError, match="authentication failed"):
            client.get_flight_info(statement(create), options)
    with connect(server, tokens["admin"]) as conn:
        assert "intruder" not in run(conn, "SHOW SOURCES").column("name").to_pylist()
    log = server.log.read_text()
    assert "authentication failed from 127.0.0.1 (unknown token)" in log
    assert "authentication failed from 127.0.0.1 (no bearer token)" in log


def test_a_connector_secret_never_appears_in_a_response(server: Server, tokens: dict) -> None:
    create = (
        "CREATE SOURCE orders (id BIGINT, amount DOUBLE) WITH (connector = 'kafka', "
        "topic = 'orders', properties.bootstrap.server = '127.0.0.1:9', "
        "properties.security.protocol = 'SASL_PLAINTEXT', properties.sasl.mechanism = 'PLAIN', "
        f"properties.sasl.username = 'svc', properties.sasl.password = '{SECRET}') "
        "FORMAT PLAIN ENCODE JSON"
    )
    seen: list[str] = []
    with connect(server, tokens["admin"]) as conn:
        run(conn, create)
        for sql in ("SHOW SOURCES", "SHOW TABLES", "SHOW QUERIES", "EXPLAIN SELECT id FROM orders"):
            seen.append(str(run(conn, sql).to_pylist()))
        for failing in (create, create.replace("FORMAT PLAIN", "FORMAT NONSENSE")):
            with pytest.raises(flightsql.Error) as err:
                run(conn, failing)
            seen.append(str(err.value))
        seen.append(str(conn.adbc_get_objects().read_all().to_pylist()))
    client, options = raw_client(server, tokens["admin"])
    tables = flight.FlightDescriptor.for_command(
        protocol.pack(protocol.message("CommandGetTables", include_schema=True))
    )
    info = client.get_flight_info(tables, options)
    raw = client.do_get(info.endpoints[0].ticket, options).read_all()
    seen.append(str(raw.to_pylist()))
    assert "orders" in seen[0] and "******" in seen[0]
    assert "orders" in seen[-1]
    for text in seen:
        assert SECRET not in text


def test_sigterm_checkpoints_and_stops_and_a_restart_resumes_the_jobs(tokens: dict) -> None:
    root = tokens["root"]
    state, out = root / "resume-state", (root / "resume_out").as_posix()
    srv = Server(state, tokens["file"])
    with connect(srv, tokens["admin"]) as conn:
        run(conn, "CREATE SOURCE ticks WITH (connector = 'nexmark', stream = 'bid', "
                  "events_per_second = '500')")  # fmt: skip
        run(
            conn,
            f"CREATE SINK resume_out (auction BIGINT, price BIGINT) WITH (connector = 'parquet', path = '{out}')",
        )
        run(conn, "INSERT INTO resume_out SELECT auction, price FROM ticks")
    time.sleep(1.5)
    assert srv.stop(signal.SIGTERM) == 0
    assert "stopping: 1 running query to checkpoint" in srv.log.read_text()
    committed = _parquet_rows(root / "resume_out")
    assert committed > 0
    again = Server(state, tokens["file"])
    try:
        assert "resumed 1 job: insert_into_resume_out" in again.banner
        time.sleep(1.5)
        with connect(again, tokens["read"]) as conn:
            (job,) = run(conn, "SHOW QUERIES").to_pylist()
            assert (job["name"], job["state"]) == ("insert_into_resume_out", "running")
        with connect(again, tokens["admin"]) as conn:
            run(conn, "CANCEL QUERY insert_into_resume_out")
    finally:
        assert again.stop() == 0
    assert _parquet_rows(root / "resume_out") > committed
    third = Server(state, tokens["file"])  # cancelled: not resumed any more
    try:
        assert "resumed" not in third.banner
    finally:
        assert third.stop() == 0


def _parquet_rows(directory: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in directory.glob("*.parquet"))


def test_tls_with_a_self_signed_certificate(tokens: dict) -> None:
    root = tokens["root"]
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    srv = Server(root / "tls-state", tokens["file"], "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert srv.location.startswith("grpc+tls://127.0.0.1:")
        with connect(srv, tokens["read"], **{TLS_ROOTS: cert.read_text()}) as conn:
            assert run(conn, "SELECT 7 AS n").column("n").to_pylist() == [7]
        plain = flight.connect(srv.location.replace("grpc+tls", "grpc"))
        with pytest.raises(flight.FlightError):
            plain.get_flight_info(
                statement("SELECT 1"),
                flight.FlightCallOptions(
                    headers=[(b"authorization", f"Bearer {tokens['read']}".encode())], timeout=2
                ),
            )
    finally:
        assert srv.stop() == 0


def test_ctx_serve_in_process_with_backoff_and_loopback_only_insecure(tmp_path: Path) -> None:
    admin = secrets.token_urlsafe(24)
    token_file = tmp_path / "tokens"
    token_file.write_text(f"{admin} admin\n")
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("nums", pa.table({"x": [1, 2, 3]}))
    with ctx.serve("127.0.0.1:0", token_file=token_file) as handle:
        assert handle.location == f"grpc://{handle.address}"
        with connect(handle, admin) as conn:
            assert run(conn, "SELECT sum(x) AS s FROM nums").column("s").to_pylist() == [6]
        # the ADBC driver with a wrong token (several calls: the address gets held off)
        with (
            pytest.raises(flightsql.Error, match="UNAUTHENTICATED"),
            connect(handle, admin + "x") as conn,
        ):
            run(conn, "CREATE SOURCE intruder (x BIGINT) WITH (connector = 'nexmark')")
        assert ctx.catalog.get("intruder") is None
        client = flight.connect(handle.location)
        wrong = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer wrong-token")])
        for _ in range(5):
            with pytest.raises(flight.FlightUnauthenticatedError):
                client.get_flight_info(statement("SELECT 1"), wrong)
        # held off: even the right token is refused for a while
        right = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {admin}".encode())])
        with pytest.raises(flight.FlightUnauthenticatedError, match="too many failed"):
            client.get_flight_info(statement("SELECT 1"), right)
    with pytest.raises(ds.DatumError, match="loopback address only"):
        ctx.serve("0.0.0.0:0", insecure_no_auth=True)
    with pytest.raises(ds.DatumError, match="needs a token file"):
        ctx.serve("127.0.0.1:0")
    short = tmp_path / "short"
    short.write_text("abc admin\n")
    with pytest.raises(ds.DatumError, match=r"line 1: the token is shorter") as err:
        ctx.serve("127.0.0.1:0", token_file=short)
    assert "abc admin" not in str(err.value)
    with (
        ctx.serve("127.0.0.1:0", insecure_no_auth=True) as open_handle,
        connect(open_handle, None) as conn,
    ):
        assert run(conn, "SELECT count(*) AS n FROM nums").column("n").to_pylist() == [3]
