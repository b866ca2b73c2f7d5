"""Broker settings: one dataclass, every limit named with its unit.

Precedence, lowest to highest: defaults here, a TOML config file
(`--config`), environment variables `KEYBUS_<FIELD>` (upper case), then
command-line flags. An unknown key in the file or an out-of-range value
stops the broker with a message that names the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it and the allowed values."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Every broker setting. Limits carry their unit in the name."""

    data_dir: str = "./keybus-data"
    host: str = "127.0.0.1"
    port: int = 6650
    # Durability: fsync the RocksDB WAL before acknowledging a produce.
    # False acknowledges after the write reaches the OS (faster; a machine
    # crash, not a process crash, can lose the last acknowledged batches).
    fsync: bool = True
    metrics_port: int = 0  # 0 = no Prometheus endpoint
    # Limits on what clients send.
    event_bytes_max: int = 1 << 20
    batch_events_max: int = 100_000
    request_bytes_max: int = 32 << 20
    topic_name_bytes_max: int = 249
    partitions_max: int = 1024
    # Group commit: produce requests one partition writes in one WriteBatch.
    commit_requests_max: int = 64
    commit_bytes_max: int = 16 << 20
    partition_queue_requests_max: int = 1024
    produce_in_flight_max: int = 256  # per Produce stream
    producer_ids_max: int = 100_000  # idempotence state kept in memory per partition (LRU)
    # A producer id unused this long loses its idempotence state (on disk too):
    # a retry after that is refused as unknown. Kafka's producer.id.expiration.ms.
    producer_expiry_ms: int = 7 * 24 * 3600 * 1000
    producer_expiry_check_interval_ms: int = 3600 * 1000
    # Reads.
    read_events_max: int = 10_000  # per response message, default and cap
    read_bytes_max: int = 4 << 20  # per response message, default and cap
    # Retention (per topic settings override; these are the topic defaults).
    retention_ms: int = 0  # 0 = keep forever
    retention_bytes: int = 0  # per partition; 0 = no limit
    retention_check_interval_ms: int = 5_000
    # Default partitions for a new topic.
    default_partitions: int = 1
    # Subscriptions and dispatch.
    subscriptions_per_topic_max: int = 1_000
    consumers_per_subscription_max: int = 1_000
    consumer_permits_max: int = 100_000  # outstanding permits per consumer and partition
    consumer_unacked_events_max: int = 200_000  # per consumer and partition; past it no dispatch
    consumer_outbox_messages_max: int = 4_096  # messages queued for one consumer's stream
    # Bytes queued for one consumer's stream; past it the consumer is paused (sent nothing
    # more, its slots wait as if it had no permits) until half of them are written.
    consumer_outbox_bytes_max: int = 16 << 20
    look_ahead_events_max: int = 20_000  # events read and kept waiting in memory per partition
    # Key_Shared: of them, per waiting slot; past it the slot waits on a floor and its
    # events are read again from the log when it may deliver (see docs/architecture.md).
    waiting_slot_events_max: int = 64
    dispatch_read_events_max: int = 5_000  # events per log read of a dispatcher
    dispatch_read_bytes_max: int = 4 << 20  # record bytes per log read of a dispatcher
    dispatch_cache_bytes_max: int = 16 << 20  # memory of records a dispatcher keeps read
    # (past it the oldest go; a record needed again is read again)
    delivery_bytes_max: int = 4 << 20  # one Delivery message, whatever the permits
    key_shared_points_per_consumer: int = 100  # consistent-hashing ring points
    nack_delay_ms_default: int = 1_000  # a Nack with delay_ms 0 waits this long
    nack_delay_ms_max: int = 3_600_000
    ack_timeout_ms_min: int = 1_000  # a consumer's ack_timeout_ms: 0 (none) or within bounds
    ack_timeout_ms_max: int = 3_600_000
    max_redeliveries_max: int = 1_000
    cursor_persist_interval_ms: int = 50  # how often changed cursors are written, at most
    # Unacknowledged runs a persisted cursor keeps; past it the rest counts as
    # unacknowledged after a crash (redelivered, never lost).
    cursor_ranges_persisted_max: int = 100_000
    waiting_slots_reported_max: int = 100  # per partition in DescribeSubscription
    # Server-side filters per source (Databus config keys), raw strings.
    serversidefilter: dict[str, str] = field(default_factory=dict)
    # Relay chaining and leader election (docs/cluster.md; checked by broker/relay/settings.py).
    broker_id: str = ""  # this broker's name in a cluster; "" = its advertised address
    advertised_address: str = ""  # HOST:PORT other brokers and clients reach it on; "" = host:port
    zookeeper: str = ""  # ZooKeeper connect string HOST:PORT[,HOST:PORT]; "" = no election
    zookeeper_root: str = "/keybus"  # the znode every Keybus node of this cluster lives under
    zookeeper_session_timeout_ms: int = 4_000  # a dead leader is noticed after this long
    relay_retry_backoff_ms: int = 100  # a follower's first retry delay; it doubles ...
    relay_retry_backoff_max_ms: int = 60_000  # ... up to this cap (the seed's one minute)
    relay_sync_interval_ms: int = 1_000  # subscription cursors and topic lists copied this often
    acks_timeout_ms: int = 30_000  # a produce waiting for its copies fails (UNAVAILABLE) after this
    leader_handover_timeout_ms: int = 3_000  # a stopping leader waits this long for its followers
    # How this broker connects to its upstreams when they run with TLS and tokens
    # (PEM CA bundle, client certificate and key for mTLS, a token file); "" = plain text.
    relay_tls_ca_file: str = ""
    relay_tls_cert_file: str = ""
    relay_tls_key_file: str = ""
    relay_token_file: str = ""  # its principal needs consume and admin on chained topics
    # Per topic (or "*" for every other topic): upstream, leader, election, acks.
    replication: dict[str, dict[str, str]] = field(default_factory=dict)
    # Compacted view and bootstrap (topic settings override the defaults).
    view_default: bool = True  # a topic created without a view policy keeps a view
    delete_retention_ms: int = 24 * 3600 * 1000  # tombstones kept in the view (Kafka's default)
    view_pass_events_max: int = 100_000  # log events one view maintenance pass folds, at most
    # Before a pass, wait up to this long for a full pass of events: a pass
    # over more events writes each hot key once for all of them. Bounds the
    # view's lag when the log grows slowly.
    view_linger_ms: int = 1_000
    view_sweep_interval_ms: int = 60_000  # how often tombstones past delete retention go
    view_sweep_entries_max: int = 10_000  # tombstones one sweep pass looks at
    compaction_records_max: int = 1_000  # compacted topics: records rewritten per retention check
    bootstrap_streams_max: int = 64  # Bootstrap streams served at once by the broker
    # Security (docs/security.md); all off by default. TLS: the broker's PEM
    # certificate and key, both or neither.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # mTLS: clients must present a certificate signed by this CA (PEM bundle).
    tls_client_ca_file: str = ""
    # Authentication is on when any of the next three ways is set, and with it
    # per-topic permissions (grants in RocksDB; `keybus acl`).
    # Static tokens: a TOML file with a [tokens] table of principal = "token".
    auth_token_file: str = ""
    # JWTs: HS256 with this shared secret (file), and/or RS256 with this public key (PEM).
    auth_jwt_secret_file: str = ""
    auth_jwt_public_key_file: str = ""
    auth_jwt_issuer: str = ""  # when set, a token's iss claim must equal it
    auth_jwt_audience: str = ""  # when set, a token's aud claim must hold it
    auth_jwt_leeway_ms: int = 0  # clock skew allowed on exp/nbf
    # mTLS: a client certificate's subject common name is the principal (needs tls_client_ca_file).
    auth_certificate_principal: bool = False
    # Comma-separated principals holding every permission (they manage grants).
    auth_superusers: str = ""
    # TOML file of grants added to the store at start ([[grant]] principal, topic, permissions).
    acl_file: str = ""
    # Event processor stores (ownership and checkpoints of consumer groups).
    processor_store_queue_max: int = 4_096  # claims/checkpoints waiting for the store's task
    processor_commit_commands_max: int = 256  # commands written in one WriteBatch
    processor_name_bytes_max: int = 255  # namespace, consumer group and owner id
    # Supervision (broker/supervision.py): a partition or store task that stops on an
    # unexpected error is restarted after this delay, doubling up to the cap.
    task_restart_backoff_ms: int = 100
    task_restart_backoff_max_ms: int = 5_000

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and f.name not in ("metrics_port",) and value < 0:
                raise ConfigError(f"{f.name}={value} is negative; allowed: an integer >= 0")
        for name in ("event_bytes_max", "batch_events_max", "request_bytes_max",
                     "partitions_max", "commit_requests_max", "commit_bytes_max",
                     "partition_queue_requests_max", "produce_in_flight_max",
                     "read_events_max", "read_bytes_max", "default_partitions",
                     "subscriptions_per_topic_max", "consumers_per_subscription_max",
                     "consumer_permits_max", "consumer_unacked_events_max",
                     "consumer_outbox_messages_max", "look_ahead_events_max",
                     "dispatch_read_events_max", "key_shared_points_per_consumer",
                     "nack_delay_ms_max", "ack_timeout_ms_max", "cursor_persist_interval_ms",
                     "consumer_outbox_bytes_max", "waiting_slot_events_max",
                     "dispatch_read_bytes_max", "dispatch_cache_bytes_max",
                     "delivery_bytes_max", "cursor_ranges_persisted_max"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be > 0")
        for name in ("view_pass_events_max", "view_sweep_interval_ms", "view_sweep_entries_max",
                     "compaction_records_max", "bootstrap_streams_max",
                     "processor_store_queue_max", "processor_commit_commands_max",
                     "processor_name_bytes_max"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be > 0")
        if self.ack_timeout_ms_min > self.ack_timeout_ms_max:
            raise ConfigError(f"ack_timeout_ms_min={self.ack_timeout_ms_min} is above "
                              f"ack_timeout_ms_max={self.ack_timeout_ms_max}")
        if self.nack_delay_ms_default > self.nack_delay_ms_max:
            raise ConfigError(f"nack_delay_ms_default={self.nack_delay_ms_default} is above "
                              f"nack_delay_ms_max={self.nack_delay_ms_max}")
        if not 0 < self.task_restart_backoff_ms <= self.task_restart_backoff_max_ms:
            raise ConfigError(f"task_restart_backoff_ms={self.task_restart_backoff_ms} must be > 0 "
                              f"and at most task_restart_backoff_max_ms="
                              f"{self.task_restart_backoff_max_ms}")
        if not 0 <= self.port <= 65535 or not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"port {self.port}/{self.metrics_port} out of range; allowed 0..65535")
        from broker.security.setup import check_security_settings

        check_security_settings(self)


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def _coerce(name: str, raw: Any) -> Any:
    """Convert a raw file/env/flag value to the field's type, or explain."""
    kind = _FIELDS[name].type
    try:
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind == "int":
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(raw)
        if kind == "str":
            return str(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a valid {kind}") from None
    return raw


def _flatten_filters(table: Mapping[str, Any], prefix: str = "serversidefilter") -> dict[str, str]:
    """Turn a nested TOML table back into Databus's dotted property keys."""
    flat: dict[str, str] = {}
    for key, value in table.items():
        dotted = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten_filters(value, dotted))
        else:
            flat[dotted] = str(value)
    return flat


def load_settings(config_path: str | None = None, env: Mapping[str, str] | None = None,
                  overrides: Mapping[str, Any] | None = None) -> Settings:
    """Build Settings from file, environment and flag overrides (highest wins)."""
    values: dict[str, Any] = {}
    if config_path:
        try:
            with open(config_path, "rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise ConfigError(f"config file {config_path}: {e.strerror}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {config_path}: {e}") from None
        filters: dict[str, str] = {}
        for key, raw in data.items():
            if key == "serversidefilter" and isinstance(raw, Mapping):
                filters.update(_flatten_filters(raw))
            elif key == "replication":
                values["replication"] = replication_table(raw)
            elif key.startswith("serversidefilter."):
                filters[key] = str(raw)
            elif key not in _FIELDS:
                allowed = ", ".join(sorted(_FIELDS))
                raise ConfigError(f"config file {config_path}: unknown key {key!r}; allowed: {allowed}")
            else:
                values[key] = _coerce(key, raw)
        if filters:
            values["serversidefilter"] = filters
    for name in _FIELDS:
        env_value = (env if env is not None else os.environ).get(f"KEYBUS_{name.upper()}")
        if env_value is not None and not _FIELDS[name].type.startswith("dict"):
            values[name] = _coerce(name, env_value)
    for name, raw in (overrides or {}).items():
        if raw is not None:
            values[name] = _coerce(name, raw)
    settings = Settings(**values)
    check_filters(settings, config_path)
    check_replication(settings, config_path)
    return settings


PORT_UNBOUND = 65535  # stands for port 0 (any free port) while settings are only checked


def replication_table(raw: Any) -> dict[str, dict[str, str]]:
    """The `[replication.TOPIC]` tables as plain strings (checked later)."""
    if not isinstance(raw, Mapping):
        raise ConfigError("replication must hold one table per topic, e.g. [replication.orders] "
                          "with election = \"zookeeper\"")
    table: dict[str, dict[str, str]] = {}
    for topic, entry in raw.items():
        if not isinstance(entry, Mapping):
            raise ConfigError(f"replication.{topic} must be a table, e.g. "
                              f"[replication.{topic}] with election = \"zookeeper\"")
        table[topic] = {key: str(value) for key, value in entry.items()}
    return table


def check_replication(settings: Settings, config_path: str | None) -> None:
    """Refuse a bad relay setting, naming it (broker/relay/settings.py)."""
    from broker.relay.settings import ReplicationError, relay_settings

    try:
        relay_settings(settings, settings.port or PORT_UNBOUND)  # port 0: bound at start
    except ReplicationError as e:
        raise ConfigError(f"{config_path or 'config'}: {e}") from None


def check_filters(settings: Settings, config_path: str | None) -> None:
    """Refuse a bad serversidefilter block, naming the property and its line."""
    from sdk.core.filters import FilterError, from_config

    try:
        from_config(settings.serversidefilter)
    except FilterError as e:
        where = config_path or "config"
        match = re.search(r"serversidefilter\.(filter\([^)]*\)(?:\.[A-Za-z]+)*)", str(e))
        if config_path and match:
            with open(config_path) as f:
                for number, line in enumerate(f, 1):
                    if match[1] in line:
                        where = f"{config_path} line {number}"
                        break
        raise ConfigError(f"{where}: {e}") from None
