"""Kafka connector options: parsed once, validated with messages that name the option,
and held in frozen dataclasses whose reprs never show a secret.

Option values arrive as text (SQL ``WITH (...)``) or Python values (``register_kafka_topic``);
both are accepted. ``properties.*`` options follow Kafka's client property names and map to
aiokafka keyword arguments; an unknown ``properties.*`` name is refused (never silently
ignored) with the list of supported ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from datum_sql.errors import PlanError
from datum_sql.redaction import REDACTED, is_secret_option
from datum_sql.types import parse_duration

BOOTSTRAP = "properties.bootstrap.server"
#: Kafka's own spelling, accepted as an alias.
BOOTSTRAP_ALIAS = "properties.bootstrap.servers"
FETCH_WAIT_ALIAS = "properties.fetch.max.wait.ms"

STARTUP_MODES = ("earliest", "latest", "group-offsets", "timestamp", "specific-offsets")
BOUNDED_MODES = ("unbounded", "latest", "specific-offsets")
BAD_RECORD_POLICIES = ("fail", "skip", "dead_letter")
ENCODES = ("JSON", "CSV", "BYTES")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")

#: Security properties (both source and sink) -> meaning.
SECURITY_OPTIONS: dict[str, str] = {
    "properties.security.protocol": "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL",
    "properties.sasl.mechanism": "PLAIN (default), SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI",
    "properties.sasl.username": "SASL user name",
    "properties.sasl.password": "SASL password (secret)",
    "properties.sasl.jaas.config": 'JAAS line with username="..." password="..." (secret)',
    "properties.sasl.kerberos.service.name": "Kerberos service name (GSSAPI)",
    "properties.ssl.ca.location": "CA certificate file (PEM) to verify the broker",
    "properties.ssl.certificate.location": "client certificate file (PEM)",
    "properties.ssl.key.location": "client private key file (PEM)",
    "properties.ssl.key.password": "password of the client private key (secret)",
    "properties.ssl.endpoint.identification.algorithm": "'https' (default) or '' to skip "
    "the broker host name check",
}

# property -> (aiokafka keyword, parser name)
_CLIENT_PROPERTIES: dict[str, tuple[str, str]] = {
    "properties.client.id": ("client_id", "str"),
    "properties.request.timeout.ms": ("request_timeout_ms", "int"),
    "properties.metadata.max.age.ms": ("metadata_max_age_ms", "int"),
    "properties.retry.backoff.ms": ("retry_backoff_ms", "int"),
    "properties.connections.max.idle.ms": ("connections_max_idle_ms", "int"),
}
_CONSUMER_PROPERTIES: dict[str, tuple[str, str]] = {
    **_CLIENT_PROPERTIES,
    "properties.session.timeout.ms": ("session_timeout_ms", "int"),
    "properties.heartbeat.interval.ms": ("heartbeat_interval_ms", "int"),
    "properties.max.poll.interval.ms": ("max_poll_interval_ms", "int"),
    "properties.rebalance.timeout.ms": ("rebalance_timeout_ms", "int"),
    "properties.fetch.max.bytes": ("fetch_max_bytes", "int"),
    "properties.fetch.min.bytes": ("fetch_min_bytes", "int"),
    "properties.max.partition.fetch.bytes": ("max_partition_fetch_bytes", "int"),
    "properties.isolation.level": ("isolation_level", "str"),
    "properties.auto.offset.reset": ("auto_offset_reset", "str"),
    "properties.group.instance.id": ("group_instance_id", "str"),
    "properties.client.rack": ("client_rack", "str"),
}
_PRODUCER_PROPERTIES: dict[str, tuple[str, str]] = {
    **_CLIENT_PROPERTIES,
    "properties.linger.ms": ("linger_ms", "int"),
    "properties.batch.size": ("max_batch_size", "int"),
    "properties.max.request.size": ("max_request_size", "int"),
    "properties.enable.idempotence": ("enable_idempotence", "bool"),
}

SOURCE_OPTIONS: dict[str, str] = {
    "topic": "the topic to read",
    BOOTSTRAP: "comma-separated host:port list of brokers",
    BOOTSTRAP_ALIAS: f"alias of {BOOTSTRAP}",
    "properties.group.id": "consumer group: partitions are shared with the group's other "
    "members and offsets are committed to it after each checkpoint",
    "scan.startup.mode": "earliest (default), latest, group-offsets, timestamp, specific-offsets",
    "scan.startup.timestamp": "with scan.startup.mode = 'timestamp': epoch milliseconds or an "
    "ISO-8601 time",
    "scan.startup.specific-offsets": "with scan.startup.mode = 'specific-offsets': e.g. "
    "'partition:0,offset:42;partition:1,offset:0' (unlisted partitions start at the earliest)",
    "scan.bounded.mode": "unbounded (default); latest: stop at the end offsets seen at start; "
    "specific-offsets: stop before the offsets of scan.bounded.specific-offsets",
    "scan.bounded.specific-offsets": "with scan.bounded.mode = 'specific-offsets': e.g. "
    "'partition:0,offset:100;partition:1,offset:80' (each partition stops before its offset, "
    "or at its end offset at start if that comes first; unlisted partitions are not read)",
    "scan.partition.discovery.interval": "how often to look for partitions added to the topic "
    "(without a group id); default '10 seconds', '0' disables",
    "bad_records": "fail (default), skip or dead_letter",
    "dead_letter.sink": "with bad_records = 'dead_letter': the sink receiving rejected records",
    "idle_timeout": "a partition without messages for this long stops holding back the watermark",
    "batch_size": "maximum records per fetch (default 10000)",
    "fetch.max.wait.ms": "longest wait for data in one fetch (default 500)",
    FETCH_WAIT_ALIAS: "alias of fetch.max.wait.ms (FETCH is an SQL keyword: unquoted "
    "fetch.max.wait.ms does not parse in WITH (...))",
    "retry.deadline": "how long to retry an unreachable broker before failing (default "
    "'60 seconds')",
    **SECURITY_OPTIONS,
    **{k: f"Kafka client property (aiokafka {v[0]})" for k, v in _CONSUMER_PROPERTIES.items()},
}

SINK_OPTIONS: dict[str, str] = {
    "topic": "the topic to write",
    BOOTSTRAP: "comma-separated host:port list of brokers",
    BOOTSTRAP_ALIAS: f"alias of {BOOTSTRAP}",
    "key": "a column whose value (as UTF-8 text, binary as is) is the message key; required "
    "for changelog (upsert) output",
    "compression": "none (default), gzip, snappy, lz4 or zstd",
    "retry.deadline": "how long to retry an unreachable broker before failing (default "
    "'60 seconds')",
    **SECURITY_OPTIONS,
    **{k: f"Kafka client property (aiokafka {v[0]})" for k, v in _PRODUCER_PROPERTIES.items()},
}


# -- small parsers ----------------------------------------------------------------------------


def _err(table: str, key: str, message: str) -> PlanError:
    return PlanError(f"{table}: option {key!r} {message}")


def _text(options: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    value = options.get(key, default)
    return None if value is None else str(value).strip()


def _int(table: str, key: str, value: Any, *, minimum: int = 0) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        n = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise _err(table, key, f"must be an integer, got {value!r}") from None
    if n < minimum:
        raise _err(table, key, f"must be >= {minimum}, got {n}")
    return n


def _bool(table: str, key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise _err(table, key, f"must be true or false, got {value!r}")


def _choice(table: str, key: str, value: str | None, choices: tuple[str, ...]) -> str:
    assert value is not None
    folded = {c.lower(): c for c in choices}
    got = folded.get(value.lower().replace("_", "-")) or folded.get(value.lower())
    if got is None:
        raise _err(table, key, f"must be one of {', '.join(choices)}; got {value!r}")
    return got


def _offsets_option(
    table: str, options: Mapping[str, Any], prefix: str
) -> tuple[tuple[int, int], ...]:
    """The offsets of ``<prefix>.specific-offsets``, required by ``<prefix>.mode =
    'specific-offsets'``."""
    key = f"{prefix}.specific-offsets"
    raw = options.get(key)
    if raw is None:
        raise PlanError(
            f"{table}: {prefix}.mode = 'specific-offsets' needs option '{key}', "
            "e.g. 'partition:0,offset:42'"
        )
    return parse_specific_offsets(table, key, raw)


def _duration(table: str, key: str, value: Any) -> timedelta:
    try:
        return parse_duration(value, what=f"option {key!r}")
    except ValueError as exc:
        raise PlanError(f"{table}: {exc}") from None


def parse_timestamp_ms(value: Any) -> int:
    """Epoch milliseconds from an integer (or its text) or an ISO-8601 time (naive = UTC)."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    else:
        text = str(value).strip()
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def parse_specific_offsets(table: str, key: str, text: Any) -> tuple[tuple[int, int], ...]:
    """'partition:0,offset:42;partition:1,offset:0' -> ((0, 42), (1, 0))."""
    out: dict[int, int] = {}
    for part in str(text).split(";"):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"partition\s*:\s*(\d+)\s*,\s*offset\s*:\s*(\d+)", part)
        if not m:
            raise _err(
                table,
                key,
                f"cannot read {part!r}: write e.g. 'partition:0,offset:42;partition:1,offset:0'",
            )
        out[int(m.group(1))] = int(m.group(2))
    if not out:
        raise _err(table, key, "lists no partition")
    return tuple(sorted(out.items()))


def _jaas_credentials(jaas: str) -> tuple[str | None, str | None]:
    user = re.search(r'username\s*=\s*"([^"]*)"', jaas)
    password = re.search(r'password\s*=\s*"([^"]*)"', jaas)
    return (user.group(1) if user else None, password.group(1) if password else None)


# -- security ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaSecurity:
    """Security settings for an aiokafka client; secrets are masked in the repr."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    kerberos_service_name: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True

    def __repr__(self) -> str:
        shown = {
            "protocol": self.protocol,
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_username": self.sasl_username,
            "sasl_password": REDACTED if self.sasl_password is not None else None,
            "ssl_ca_location": self.ssl_ca_location,
            "ssl_certificate_location": self.ssl_certificate_location,
            "ssl_key_location": self.ssl_key_location,
            "ssl_key_password": REDACTED if self.ssl_key_password is not None else None,
        }
        inner = ", ".join(f"{k}={v!r}" for k, v in shown.items() if v is not None)
        return f"KafkaSecurity({inner})"

    @classmethod
    def parse(cls, table: str, options: Mapping[str, Any]) -> KafkaSecurity:
        protocol = _choice(
            table,
            "properties.security.protocol",
            _text(options, "properties.security.protocol", "PLAINTEXT"),
            ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        )
        mechanism = _choice(
            table,
            "properties.sasl.mechanism",
            _text(options, "properties.sasl.mechanism", "PLAIN"),
            ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"),
        )
        user = _text(options, "properties.sasl.username")
        password = options.get("properties.sasl.password")
        jaas = options.get("properties.sasl.jaas.config")
        if jaas is not None:
            j_user, j_password = _jaas_credentials(str(jaas))
            user = user or j_user
            password = password if password is not None else j_password
        algo = _text(options, "properties.ssl.endpoint.identification.algorithm", "https")
        sec = cls(
            protocol=protocol,
            sasl_mechanism=mechanism,
            sasl_username=user,
            sasl_password=None if password is None else str(password),
            kerberos_service_name=_text(options, "properties.sasl.kerberos.service.name"),
            ssl_ca_location=_text(options, "properties.ssl.ca.location"),
            ssl_certificate_location=_text(options, "properties.ssl.certificate.location"),
            ssl_key_location=_text(options, "properties.ssl.key.location"),
            ssl_key_password=(
                None
                if options.get("properties.ssl.key.password") is None
                else str(options["properties.ssl.key.password"])
            ),
            ssl_check_hostname=bool(algo),
        )
        needs_password = mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        missing = not sec.sasl_username or sec.sasl_password is None
        if protocol.startswith("SASL") and needs_password and missing:
            raise PlanError(
                f"{table}: properties.security.protocol = {protocol!r} with "
                f"{mechanism} needs 'properties.sasl.username' and "
                "'properties.sasl.password'"
            )
        return sec

    def connect_hint(self) -> str:
        """A hint for a failed connection under SASL/TLS (aiokafka reports a refused
        handshake or login only as "Unable to bootstrap"); empty for PLAINTEXT."""
        if self.protocol == "PLAINTEXT":
            return ""
        what = f"properties.security.protocol = {self.protocol!r}"
        if self.protocol.startswith("SASL"):
            what += f", mechanism {self.sasl_mechanism}, user {self.sasl_username!r}"
        return (
            f". With {what}, a broker that refuses the handshake or the credentials also "
            "looks unreachable: check these settings (the aiokafka log names the cause)"
        )

    def secrets(self) -> list[str]:
        """The secret values, to scrub from any text that could reach a user."""
        return [s for s in (self.sasl_password, self.ssl_key_password) if s]

    def client_kwargs(self) -> dict[str, Any]:
        """aiokafka keyword arguments (builds the SSL context: call when connecting)."""
        kw: dict[str, Any] = {"security_protocol": self.protocol}
        if self.protocol.startswith("SASL"):
            kw["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_username is not None:
                kw["sasl_plain_username"] = self.sasl_username
            if self.sasl_password is not None:
                kw["sasl_plain_password"] = self.sasl_password
            if self.kerberos_service_name:
                kw["sasl_kerberos_service_name"] = self.kerberos_service_name
        if self.protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            try:
                ctx = create_ssl_context(
                    cafile=self.ssl_ca_location,
                    certfile=self.ssl_certificate_location,
                    keyfile=self.ssl_key_location,
                    password=self.ssl_key_password,
                )
            except (OSError, ValueError) as exc:
                # the message of an SSL error never carries the key password, but scrub anyway
                raise ValueError(
                    "cannot build the TLS context from properties.ssl.* "
                    f"(ca={self.ssl_ca_location!r}, certificate="
                    f"{self.ssl_certificate_location!r}, key={self.ssl_key_location!r}): "
                    f"{scrub(str(exc), self.secrets())}"
                ) from None
            ctx.check_hostname = self.ssl_check_hostname
            kw["ssl_context"] = ctx
        return kw


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every secret value replaced by the redaction mark."""
    for s in secrets:
        if s:
            text = text.replace(s, REDACTED)
    return text


def _client_properties(
    table: str, options: Mapping[str, Any], known: dict[str, tuple[str, str]], allowed: set[str]
) -> tuple[tuple[str, Any], ...]:
    out: list[tuple[str, Any]] = []
    for key, value in options.items():
        if not key.startswith("properties.") or key in allowed:
            continue
        if key not in known:
            valid = ", ".join(sorted([*known, *allowed]))
            raise PlanError(
                f"{table}: unsupported Kafka client property {key!r}. Supported: {valid}"
            )
        kwarg, kind = known[key]
        if kind == "int":
            parsed: Any = _int(table, key, value, minimum=0)
        elif kind == "bool":
            parsed = _bool(table, key, value)
        else:
            parsed = str(value)
        out.append((kwarg, parsed))
    return tuple(out)


def _bootstrap(table: str, options: Mapping[str, Any]) -> str:
    value = _text(options, BOOTSTRAP) or _text(options, BOOTSTRAP_ALIAS)
    if not value:
        raise PlanError(f"{table}: connector 'kafka' needs option {BOOTSTRAP!r} (host:port)")
    return value


def _topic(table: str, options: Mapping[str, Any]) -> str:
    topic = _text(options, "topic")
    if not topic:
        raise PlanError(f"{table}: connector 'kafka' needs option 'topic'")
    return topic


_NON_CLIENT = {
    BOOTSTRAP,
    BOOTSTRAP_ALIAS,
    FETCH_WAIT_ALIAS,
    "properties.group.id",
    *SECURITY_OPTIONS,
}


# -- source -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaSourceOptions:
    topic: str
    bootstrap: str
    group_id: str | None = None
    startup_mode: str = "earliest"
    startup_timestamp_ms: int | None = None
    specific_offsets: tuple[tuple[int, int], ...] = ()
    bounded: bool = False
    #: With scan.bounded.mode = 'specific-offsets': partition -> the offset it stops before
    #: (unlisted partitions are not read); None: every partition reads to its end.
    stop_offsets: tuple[tuple[int, int], ...] | None = None
    bad_records: str = "fail"
    dead_letter_sink: str | None = None
    idle_timeout: timedelta | None = None
    batch_size: int = 10_000
    fetch_max_wait_ms: int = 500
    retry_deadline: timedelta = timedelta(seconds=60)
    discovery_interval: timedelta = timedelta(seconds=10)
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    #: extra aiokafka consumer keyword arguments from ``properties.*`` (none secret)
    client: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, table: str, options: Mapping[str, Any]) -> KafkaSourceOptions:
        mode = _choice(
            table,
            "scan.startup.mode",
            _text(options, "scan.startup.mode", "earliest"),
            STARTUP_MODES,
        )
        ts_ms = None
        if mode == "timestamp":
            raw = options.get("scan.startup.timestamp")
            if raw is None:
                raise PlanError(
                    f"{table}: scan.startup.mode = 'timestamp' needs option "
                    "'scan.startup.timestamp' (epoch milliseconds or ISO-8601)"
                )
            try:
                ts_ms = parse_timestamp_ms(raw)
            except ValueError:
                raise _err(
                    table,
                    "scan.startup.timestamp",
                    f"must be epoch milliseconds or an ISO-8601 time, got {raw!r}",
                ) from None
        specific: tuple[tuple[int, int], ...] = ()
        if mode == "specific-offsets":
            specific = _offsets_option(table, options, "scan.startup")
        group_id = _text(options, "properties.group.id") or None
        if mode == "group-offsets" and not group_id:
            raise PlanError(
                f"{table}: scan.startup.mode = 'group-offsets' needs 'properties.group.id'"
            )
        bounded_mode = _choice(
            table,
            "scan.bounded.mode",
            _text(options, "scan.bounded.mode", "unbounded"),
            BOUNDED_MODES,
        )
        bounded = bounded_mode != "unbounded"
        stop = None
        if bounded_mode == "specific-offsets":
            stop = _offsets_option(table, options, "scan.bounded")
        policy = _choice(
            table,
            "bad_records",
            _text(options, "bad_records", "fail"),
            BAD_RECORD_POLICIES,
        ).replace("-", "_")
        dl_sink = _text(options, "dead_letter.sink")
        if policy == "dead_letter" and not dl_sink:
            raise PlanError(
                f"{table}: bad_records = 'dead_letter' needs option 'dead_letter.sink' "
                "(the sink receiving the rejected records)"
            )
        idle = options.get("idle_timeout")
        return cls(
            topic=_topic(table, options),
            bootstrap=_bootstrap(table, options),
            group_id=group_id,
            startup_mode=mode,
            startup_timestamp_ms=ts_ms,
            specific_offsets=specific,
            bounded=bounded,
            stop_offsets=stop,
            bad_records=policy,
            dead_letter_sink=dl_sink,
            idle_timeout=None if idle is None else _duration(table, "idle_timeout", idle),
            batch_size=_int(table, "batch_size", options.get("batch_size", 10_000), minimum=1),
            fetch_max_wait_ms=_int(
                table,
                "fetch.max.wait.ms",
                options.get("fetch.max.wait.ms", options.get(FETCH_WAIT_ALIAS, 500)),
                minimum=1,
            ),
            retry_deadline=_duration(
                table, "retry.deadline", options.get("retry.deadline", "60 seconds")
            ),
            discovery_interval=_duration(
                table,
                "scan.partition.discovery.interval",
                options.get("scan.partition.discovery.interval", "10 seconds"),
            ),
            security=KafkaSecurity.parse(table, options),
            client=_client_properties(table, options, _CONSUMER_PROPERTIES, _NON_CLIENT),
        )

    def consumer_kwargs(self) -> dict[str, Any]:
        """aiokafka AIOKafkaConsumer keyword arguments (manual offsets, never auto-commit)."""
        kw: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "group_id": self.group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "fetch_max_wait_ms": self.fetch_max_wait_ms,
            "max_poll_records": self.batch_size,
            "metadata_max_age_ms": max(
                1000, int(self.discovery_interval.total_seconds() * 1000) or 300_000
            ),
        }
        kw.update(dict(self.client))
        kw["request_timeout_ms"] = self._client_request_timeout_ms()
        kw.update(self.security.client_kwargs())
        return kw

    def _client_request_timeout_ms(self) -> int:
        """aiokafka's request timeout: the configured one (default 40 s), at most half of
        ``retry.deadline``, so a hung request (a frozen broker, a dead connection) is given
        up and its connection renewed well before the deadline; never below a fetch's wait,
        nor, with a group, below the rebalance timeout (the broker may take that long to
        answer a JoinGroup)."""
        client = dict(self.client)
        half_deadline_ms = int(self.retry_deadline.total_seconds() * 500)
        floor = self.fetch_max_wait_ms + 1000
        if self.group_id:
            rebalance = client.get("rebalance_timeout_ms", client.get("session_timeout_ms", 10_000))
            floor = max(floor, int(rebalance) + 1000)
        return max(floor, min(int(self.request_timeout * 1000), half_deadline_ms))

    @property
    def request_timeout(self) -> float:
        """Seconds before one broker request counts as failed (as configured)."""
        return float(dict(self.client).get("request_timeout_ms", 40_000)) / 1000


# -- sink -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaSinkOptions:
    topic: str
    bootstrap: str
    key: str | None = None
    compression: str = "none"
    retry_deadline: timedelta = timedelta(seconds=60)
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    client: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, table: str, options: Mapping[str, Any]) -> KafkaSinkOptions:
        compression = _choice(
            table, "compression", _text(options, "compression", "none"), COMPRESSIONS
        )
        return cls(
            topic=_topic(table, options),
            bootstrap=_bootstrap(table, options),
            key=_text(options, "key") or None,
            compression=compression,
            retry_deadline=_duration(
                table, "retry.deadline", options.get("retry.deadline", "60 seconds")
            ),
            security=KafkaSecurity.parse(table, options),
            client=_client_properties(table, options, _PRODUCER_PROPERTIES, _NON_CLIENT),
        )

    def producer_kwargs(self) -> dict[str, Any]:
        """aiokafka AIOKafkaProducer keyword arguments: acks=all, internal retries.

        aiokafka retries a message until its request timeout, counted from when the
        message was batched: that is ``retry.deadline`` (a smaller configured
        ``properties.request.timeout.ms`` wins)."""
        kw: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "acks": "all",
            "compression_type": None if self.compression == "none" else self.compression,
            "linger_ms": 5,
            "max_batch_size": 256 * 1024,
        }
        kw.update(dict(self.client))
        deadline_ms = int(self.retry_deadline.total_seconds() * 1000)
        configured = dict(self.client).get("request_timeout_ms", deadline_ms)
        kw["request_timeout_ms"] = max(1000, min(int(configured), deadline_ms))
        kw.update(self.security.client_kwargs())
        return kw

    @property
    def request_timeout(self) -> float:
        return float(dict(self.client).get("request_timeout_ms", 40_000)) / 1000


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options with secret values masked (for messages and status)."""
    return {k: (REDACTED if is_secret_option(k) else v) for k, v in options.items()}
