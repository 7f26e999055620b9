"""SUBSCRIBE TO over the real server (``datum-sql serve`` in a child process), read with the
ADBC Flight SQL driver and ``pyarrow.flight``: batches as files arrive in a continuous
source, a changelog, disconnects, a slow client, tokens, SIGTERM."""

from __future__ import annotations

import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from test_server import Server, connect, raw_client, run, statement

WAIT_S = 15.0


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("subscribe")
    admin, read = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    (root / "tokens").write_text(f"{admin} admin\n{read} read\n")
    return {"admin": admin, "read": read, "file": root / "tokens", "root": root}


@pytest.fixture(scope="module")
def server(env: dict[str, Any]) -> Iterator[Server]:
    srv = Server(env["root"] / "state", env["file"])
    yield srv
    assert srv.stop() == 0
    log = srv.log.read_text()
    assert env["admin"] not in log and env["read"] not in log


def continuous_source(server: Server, env: dict[str, Any], name: str) -> Path:
    """A continuous Parquet source ``name`` (k VARCHAR, v BIGINT) over a new directory."""
    directory = env["root"] / name
    directory.mkdir()
    drop(directory, "f0", ["a", "b"], [1, 2])
    with connect(server, env["admin"]) as conn:
        run(conn, f"CREATE SOURCE {name} (k VARCHAR, v BIGINT) WITH (connector = 'parquet', "
                  f"path = '{directory.as_posix()}', scan.mode = 'continuous', "
                  "discovery_interval = '50ms')")  # fmt: skip
    return directory


def drop(directory: Path, name: str, keys: list[str], values: list[int]) -> None:
    """A new file, written aside then renamed in (the source never sees half of it)."""
    tmp = directory.parent / f"{directory.name}-{name}.tmp"
    pq.write_table(pa.table({"k": keys, "v": pa.array(values, pa.int64())}), tmp)
    tmp.rename(directory / f"{name}.parquet")


def rows_until(read: Callable[[], pa.RecordBatch], count: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while len(rows) < count:
        rows += read().to_pylist()
    return rows


def subscriptions(server: Server, token: str) -> list[str]:
    with connect(server, token) as conn:
        names = run(conn, "SHOW QUERIES").column("name").to_pylist()
    return sorted(n for n in names if n.startswith("subscription_"))


def eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_read_token_subscribes_and_gets_batches_as_files_arrive(
    server: Server, env: dict[str, Any]
) -> None:
    directory = continuous_source(server, env, "arrivals")
    with connect(server, env["read"]) as conn, conn.cursor() as cur:
        cur.execute("SUBSCRIBE TO SELECT k, v * 10 AS v10 FROM arrivals WHERE v > 1")
        reader = cur.fetch_record_batch()
        assert reader.schema.names == ["k", "v10"]
        assert rows_until(reader.read_next_batch, 1) == [{"k": "b", "v10": 20}]
        drop(directory, "f1", ["c", "d"], [3, 0])
        assert rows_until(reader.read_next_batch, 1) == [{"k": "c", "v10": 30}]
        drop(directory, "f2", ["e"], [5])
        assert rows_until(reader.read_next_batch, 1) == [{"k": "e", "v10": 50}]
        reader.close()
    eventually(lambda: subscriptions(server, env["read"]) == [])


def test_a_group_by_subscription_streams_its_changelog_over_pyarrow_flight(
    server: Server, env: dict[str, Any]
) -> None:
    directory = continuous_source(server, env, "totals")
    client, options = raw_client(server, env["read"])
    info = client.get_flight_info(
        statement("SUBSCRIBE TO SELECT k, sum(v) AS total FROM totals GROUP BY k"), options
    )
    assert info.schema.names == ["k", "total", "_op"]
    stream = client.do_get(info.endpoints[0].ticket, options)
    first = rows_until(lambda: stream.read_chunk().data, 2)
    assert sorted((r["_op"], r["k"], r["total"]) for r in first) == [
        ("+I", "a", 1), ("+I", "b", 2)
    ]  # fmt: skip
    drop(directory, "f1", ["a"], [40])
    changed = rows_until(lambda: stream.read_chunk().data, 2)
    assert sorted((r["_op"], r["k"], r["total"]) for r in changed) == [
        ("+U", "a", 41), ("-U", "a", 1)
    ]  # fmt: skip
    stream.cancel()
    client.close()
    eventually(lambda: subscriptions(server, env["read"]) == [])


def test_disconnecting_ends_that_subscription_only(server: Server, env: dict[str, Any]) -> None:
    directory = continuous_source(server, env, "shared")
    assert subscriptions(server, env["read"]) == []
    with connect(server, env["read"]) as one, connect(server, env["read"]) as two:
        c1, c2 = one.cursor(), two.cursor()
        c1.execute("SUBSCRIBE TO SELECT k FROM shared")
        c2.execute("SUBSCRIBE TO SELECT v FROM shared")
        r1, r2 = c1.fetch_record_batch(), c2.fetch_record_batch()
        assert len(rows_until(r1.read_next_batch, 2)) == 2
        assert len(rows_until(r2.read_next_batch, 2)) == 2
        with connect(server, env["read"]) as conn:
            during = {q["name"]: q["sql"] for q in run(conn, "SHOW QUERIES").to_pylist()}
        assert sorted(during.values()) == ["SELECT k FROM shared", "SELECT v FROM shared"]
        r1.close()
        c1.close()
        (kept,) = [name for name, sql in during.items() if sql == "SELECT v FROM shared"]
        eventually(lambda: subscriptions(server, env["read"]) == [kept])
        drop(directory, "f1", ["z"], [26])
        assert rows_until(r2.read_next_batch, 1) == [{"v": 26}]
        with connect(server, env["admin"]) as admin:
            run(admin, f"CANCEL QUERY {kept}")
        with pytest.raises(OSError, match=f"{kept} was cancelled"):  # the reader's error
            r2.read_next_batch()
        r2.close()
        c2.close()
    eventually(lambda: subscriptions(server, env["read"]) == [])


def test_without_a_token_nothing_is_subscribed(server: Server, env: dict[str, Any]) -> None:
    for token in (None, "not-a-token-of-this-server"):
        client, options = raw_client(server, token)
        with pytest.raises(flight.FlightUnauthenticatedError, match="authentication failed"):
            client.get_flight_info(statement("SUBSCRIBE TO SELECT 1 AS one"), options)
        client.close()
    assert subscriptions(server, env["read"]) == []


def test_what_cannot_be_subscribed_says_why(server: Server, env: dict[str, Any]) -> None:
    with connect(server, env["read"]) as conn:
        for sql, message in (
            ("SUBSCRIBE TO SELECT nope FROM nowhere", "nowhere"),
            ("SUBSCRIBE TO some_view", "materialized view's changes is not served"),
            ("SUBSCRIBE SELECT 1", "expected SUBSCRIBE TO SELECT"),
        ):
            with pytest.raises(flightsql.Error, match=message):
                run(conn, sql)


def test_a_slow_client_is_disconnected_and_sigterm_ends_subscriptions(
    env: dict[str, Any],
) -> None:
    root = env["root"]
    big = root / "big"
    big.mkdir()
    pq.write_table(pa.table({"x": pa.array(range(2_000_000), pa.int64())}), big / "big.parquet")
    srv = Server(root / "slow-state", env["file"],
                 "--subscription-stall-limit", "1s", "--subscription-buffer-rows", "100")  # fmt: skip
    try:
        with connect(srv, env["admin"]) as conn:
            run(conn, f"CREATE SOURCE big (x BIGINT) WITH (connector = 'parquet', "
                      f"path = '{big.as_posix()}', scan.mode = 'continuous', "
                      "discovery_interval = '50ms')")  # fmt: skip
        client, options = raw_client(srv, env["read"])
        info = client.get_flight_info(statement("SUBSCRIBE TO SELECT x FROM big"), options)
        stream = client.do_get(info.endpoints[0].ticket, options)
        stream.read_chunk()
        eventually(lambda: "subscription_1 was disconnected" in srv.log.read_text())
        assert subscriptions(srv, env["read"]) == []
        with pytest.raises(flight.FlightServerError) as err:
            stream.read_all()
        assert (
            "subscription_1 was disconnected: its client read nothing for 1 s (the "
            "subscription stall limit) while 100 unread rows filled its buffer"
        ) in str(err.value)
        client.close()

        # SIGTERM while a client reads a subscription (its stream ends saying why) and
        # another reads nothing and keeps its connection (the server exits all the same)
        idle, idle_options = raw_client(srv, env["read"])
        info = idle.get_flight_info(statement("SUBSCRIBE TO SELECT x FROM big"), idle_options)
        idle_stream = idle.do_get(info.endpoints[0].ticket, idle_options)
        idle_stream.read_chunk()
        directory = continuous_source(srv, env, "live")
        client, options = raw_client(srv, env["read"])
        info = client.get_flight_info(statement("SUBSCRIBE TO SELECT k FROM live"), options)
        stream = client.do_get(info.endpoints[0].ticket, options)
        assert stream.read_chunk().data.num_rows == 2
        outcome: dict[str, BaseException] = {}

        def read_on() -> None:
            try:
                stream.read_all()
            except flight.FlightError as exc:
                outcome["error"] = exc

        reading = threading.Thread(target=read_on)
        reading.start()
        drop(directory, "f1", ["q"], [1])
        assert srv.stop(signal.SIGTERM) == 0
        reading.join(WAIT_S)
        assert isinstance(outcome.get("error"), flight.FlightUnavailableError)
        assert "subscription_3 ended: the server is shutting down" in str(outcome["error"])
        client.close()
        idle.close()
        log = srv.log.read_text()
        assert "ended 2 subscriptions" in log
        assert "stopped (a client call was still open)" in log
    finally:
        srv.stop()
