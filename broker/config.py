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

from sdk.core.columns import EVENT_BYTES_MAX_DEFAULT

# The store's defaults too (broker/log/rocks_options.py; tests open stores without Settings).
WAL_BYTES_MAX = 256 << 20
WAL_RECYCLE_FILES = 2  # each stays on disk at its size (about a memtable: 64 MiB)
VIEW_PASS_BYTES_MAX = 16 << 20  # broker/view/store.py's default too


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it and the allowed values."""


def setting(default: Any, description: str) -> Any:
    """A Settings field with its description (shown by `keybus broker --help`)."""
    return field(default=default, metadata={"help": description})


# The int settings for which 0 means nothing usable: no topic, no event, no read,
# a loop that never waits, producer state forgotten at once. Every other int
# setting may be 0, which its help says the meaning of ("0 = forever", "0 = none").
POSITIVE_SETTINGS = frozenset({
    "event_bytes_max", "batch_events_max", "request_bytes_max", "topic_name_bytes_max",
    "partitions_max", "commit_requests_max", "commit_bytes_max", "partition_queue_requests_max",
    "produce_in_flight_max", "producer_expiry_ms", "read_events_max", "read_bytes_max",
    "read_passed_interval_ms", "read_passed_events_max",
    "retention_check_interval_ms", "auth_recheck_interval_ms", "default_partitions",
    "subscriptions_per_topic_max",
    "consumers_per_subscription_max", "consumer_permits_max", "consumer_unacked_events_max",
    "consumer_outbox_messages_max", "consumer_outbox_bytes_max",
    "consumer_outbox_broker_bytes_max", "look_ahead_events_max",
    "waiting_slot_events_max", "dispatch_read_events_max", "dispatch_read_bytes_max",
    "dispatch_cache_bytes_max", "dispatch_cache_broker_bytes_max", "delivery_bytes_max",
    "key_shared_points_per_consumer", "nack_delay_ms_max", "ack_timeout_ms_max",
    "cursor_persist_interval_ms", "cursor_ranges_persisted_max",
    "zookeeper_session_timeout_ms", "relay_retry_backoff_ms", "relay_retry_backoff_max_ms",
    "relay_sync_interval_ms", "relay_idle_answer_ms", "acks_timeout_ms", "view_pass_events_max",
    "view_pass_bytes_max",
    "view_sweep_interval_ms", "view_sweep_entries_max", "compaction_records_max",
    "bootstrap_streams_max", "view_loads_max", "processor_store_queue_max", "processor_commit_commands_max",
    "processor_name_bytes_max", "task_restart_backoff_ms", "task_restart_backoff_max_ms",
    "gil_switch_interval_us", "client_keepalive_timeout_ms", "wal_bytes_max",
    "topic_delete_wait_ms",
})


@dataclass(frozen=True, slots=True)
class Settings:
    """Every broker setting. Limits carry their unit in the name; each field's
    metadata["help"] says what it does (the `keybus broker` flags are built
    from these fields, so flags and settings cannot drift apart)."""

    data_dir: str = setting("./keybus-data", "Directory of the RocksDB log and cursors; one "
                            "broker process per directory.")
    host: str = setting("127.0.0.1", "Address to listen on (0.0.0.0 for every interface).")
    port: int = setting(6650, "gRPC port (6650, as Pulsar's default; 0 = any free port).")
    fsync: bool = setting(True, "Fsync the WAL before acknowledging a produce. --no-fsync "
                          "acknowledges once the OS has the write: faster, and a machine "
                          "crash (not a process crash) may lose the last acknowledged batches.")
    wal_bytes_max: int = setting(
        WAL_BYTES_MAX, "Most bytes of RocksDB write-ahead log kept; past it RocksDB flushes "
        "the column families that still need the oldest log file. Bounds the log's disk use "
        "and what a restart after a crash replays.")
    wal_recycle_files: int = setting(
        WAL_RECYCLE_FILES, "Obsolete write-ahead log files kept for reuse: an fsync into a "
        "reused file need not record its size, so it takes less time (0 = none).")
    metrics_port: int = setting(0, "Port of the Prometheus /metrics endpoint (0 = none).")
    metrics_host: str = setting(
        "", "Address of the /metrics endpoint ('' = host). It is plain HTTP without "
        "authentication and names every topic and subscription: on a broker whose host is "
        "public, bind it to 127.0.0.1 or a private address.")
    # Limits on what clients send.
    event_bytes_max: int = setting(EVENT_BYTES_MAX_DEFAULT, "Largest value of one event, in bytes.")
    batch_events_max: int = setting(100_000, "Most events in one produce batch or window.")
    request_bytes_max: int = setting(32 << 20, "Largest request message, in bytes.")
    topic_name_bytes_max: int = setting(249, "Longest topic, subscription or consumer name.")
    partitions_max: int = setting(1024, "Most partitions a topic may have.")
    # Group commit: produce requests one partition writes in one WriteBatch.
    commit_requests_max: int = setting(64, "Produce requests one partition writes in one "
                                       "RocksDB WriteBatch (group commit).")
    commit_bytes_max: int = setting(16 << 20, "Bytes one partition writes in one WriteBatch.")
    partition_queue_requests_max: int = setting(
        1024, "Produce requests queued per partition; past it the broker answers "
        "RESOURCE_EXHAUSTED.")
    produce_in_flight_max: int = setting(256, "Unanswered requests per Produce stream.")
    producer_ids_max: int = setting(100_000, "Producer ids whose idempotence state a partition "
                                    "keeps in memory (least recently used go first).")
    producer_expiry_ms: int = setting(
        7 * 24 * 3600 * 1000, "A producer id unused this long loses its idempotence state, on "
        "disk too; a retry after that is refused (Kafka's producer.id.expiration.ms).")
    producer_expiry_check_interval_ms: int = setting(3600 * 1000, "How often expired producer "
                                                     "ids are looked for.")
    # Reads.
    read_events_max: int = setting(10_000, "Events per read response: the default and the cap.")
    read_bytes_max: int = setting(4 << 20, "Bytes of one Read or Bootstrap response message, "
                                  "framing included: the default and the cap.")
    read_passed_interval_ms: int = setting(
        1_000, "A filtered follow read tells how far it passed records its filter dropped "
        "whole (ReadResponse.passed_scn: a Databus consumer checkpoints past them) once "
        "this long passed since its last response, or --read-passed-events-max such events.")
    read_passed_events_max: int = setting(100_000, "See --read-passed-interval-ms.")
    # Retention (per topic settings override; these are the topic defaults).
    retention_ms: int = setting(0, "Default age limit of a new topic's events (0 = forever).")
    retention_bytes: int = setting(0, "Default size limit per partition of a new topic "
                                   "(0 = none).")
    retention_check_interval_ms: int = setting(5_000, "How often retention runs.")
    default_partitions: int = setting(1, "Partitions of a topic created without a count.")
    # Subscriptions and dispatch.
    subscriptions_per_topic_max: int = setting(1_000, "Most subscriptions per topic.")
    consumers_per_subscription_max: int = setting(1_000, "Most consumers per subscription.")
    consumer_permits_max: int = setting(100_000, "Outstanding permits per consumer and "
                                        "partition.")
    consumer_unacked_events_max: int = setting(
        200_000, "Unacknowledged events per consumer and partition; past it the consumer gets "
        "nothing more until it acknowledges.")
    consumer_outbox_messages_max: int = setting(
        4_096, "Messages queued for one consumer's stream; a consumer that does not read "
        "past it is disconnected.")
    consumer_outbox_bytes_max: int = setting(
        16 << 20, "Bytes queued for one consumer's stream; past it the consumer is paused "
        "(sent nothing more, its slots wait as if it had no permits) until half of them are "
        "written.")
    consumer_outbox_broker_bytes_max: int = setting(
        256 << 20, "Bytes queued for all consumers' streams of the broker together: each "
        "consumer is paused past an equal share of it (at most consumer_outbox_bytes_max, "
        "at least event_bytes_max), and every consumer once all together hold it; each may "
        "pass it by one round's sends.")
    look_ahead_events_max: int = setting(20_000, "Events a dispatcher reads ahead and keeps "
                                         "waiting in memory per partition.")
    waiting_slot_events_max: int = setting(
        64, "Key_Shared: of the events kept waiting, most per waiting slot; past it the slot "
        "waits on a floor and its events are read again from the log when it may deliver.")
    dispatch_read_events_max: int = setting(5_000, "Events per log read of a dispatcher.")
    dispatch_read_bytes_max: int = setting(4 << 20, "Record bytes per log read of a "
                                           "dispatcher.")
    dispatch_cache_bytes_max: int = setting(
        16 << 20, "Memory of records a dispatcher keeps read (past it the oldest go; a record "
        "needed again is read again).")
    dispatch_cache_broker_bytes_max: int = setting(
        256 << 20, "Memory of records all dispatchers of the broker keep read together: each "
        "keeps at most an equal share of it (and at most dispatch_cache_bytes_max).")
    delivery_bytes_max: int = setting(4 << 20, "Bytes of one Delivery message to a consumer, "
                                      "whatever its permits.")
    key_shared_points_per_consumer: int = setting(100, "Key_Shared consistent mode: points "
                                                  "per consumer on the hash ring.")
    key_shared_default_mode: str = setting(
        "consistent", "Key_Shared mode of a subscription whose first consumer names none: "
        "consistent (consistent hashing, Pulsar's default) or auto_split (PIP-34 hash ranges).")
    nack_delay_ms_default: int = setting(1_000, "Redelivery delay of a nack that gives none.")
    nack_delay_ms_max: int = setting(3_600_000, "Longest redelivery delay a nack may ask for.")
    ack_timeout_ms_min: int = setting(1_000, "Shortest ack timeout a consumer may ask for.")
    ack_timeout_ms_max: int = setting(3_600_000, "Longest ack timeout a consumer may ask for.")
    max_redeliveries_max: int = setting(1_000, "Highest max_redeliveries a subscription may "
                                        "ask for before dead-lettering.")
    cursor_persist_interval_ms: int = setting(50, "How often changed cursors are written, at "
                                              "most.")
    cursor_ranges_persisted_max: int = setting(
        100_000, "Unacknowledged runs a persisted cursor keeps; past it the rest counts as "
        "unacknowledged after a crash (redelivered, never lost).")
    waiting_slots_reported_max: int = setting(100, "Waiting slots per partition that "
                                              "DescribeSubscription lists.")
    # Keepalive of clients' connections (broker/keepalive.py).
    client_keepalive_time_ms: int = setting(
        30_000, "A client connection silent this long gets an HTTP/2 ping; one not answered "
        "within --client-keepalive-timeout-ms is closed, so a frozen consumer's streams end and "
        "its unacknowledged events go to the others (Pulsar's keepAliveIntervalSeconds; 0 = "
        "gRPC's default, a ping after 2 hours).")
    client_keepalive_timeout_ms: int = setting(10_000, "How long a client has to answer the "
                                               "broker's keepalive ping.")
    # Server-side filters per source (Databus config keys), raw strings; set
    # in the --config file only (a table, not a flag).
    serversidefilter: dict[str, str] = field(default_factory=dict, metadata={
        "help": "Per-source server-side filters, as Databus's serversidefilter.* keys (config "
                "file only)."})
    # Relay chaining and leader election (docs/cluster.md; checked by broker/relay/settings.py).
    broker_id: str = setting("", "This broker's name in a cluster (empty: its advertised "
                             "address).")
    advertised_address: str = setting("", "HOST:PORT other brokers and clients reach this broker "
                                      "on (empty: host:port).")
    zookeeper: str = setting("", "ZooKeeper connect string HOST:PORT[,HOST:PORT] for topics "
                             "with election = \"zookeeper\" (empty: no election).")
    zookeeper_root: str = setting("/keybus", "The znode every Keybus broker of this cluster "
                                  "lives under.")
    zookeeper_session_timeout_ms: int = setting(4_000, "ZooKeeper session timeout: a dead leader "
                                                "is noticed after this long.")
    relay_retry_backoff_ms: int = setting(100, "A follower's first retry delay after losing its "
                                          "upstream; it doubles up to "
                                          "--relay-retry-backoff-max-ms.")
    relay_retry_backoff_max_ms: int = setting(60_000, "Longest retry delay of a follower (the "
                                              "seed's one minute).")
    relay_sync_interval_ms: int = setting(1_000, "How often a follower copies subscription "
                                          "cursors and topic lists from its upstream.")
    relay_idle_answer_ms: int = setting(1_000, "As an upstream: how often a follower's idle "
                                        "copy stream gets an answer without records, so the "
                                        "follower hears a healthy upstream of a quiet topic "
                                        "(keybus_relay_seconds_since_upstream_read stays below "
                                        "it); one small message per followed partition each time. "
                                        "As a follower: an upstream silent for three of these "
                                        "(at least 3 s) shows as unreachable.")
    acks_timeout_ms: int = setting(30_000, "A produce waiting for its copies on followers "
                                   "(acks = N) fails with UNAVAILABLE after this long.")
    relay_follower_grace_ms: int = setting(5_000, "A follower whose position-report stream "
                                           "closed (token expiry, network blip, restart) still "
                                           "counts for acks = N this long (0 = not at all).")
    leader_handover_timeout_ms: int = setting(3_000, "How long a stopping leader waits for its "
                                              "followers to report their whole log.")
    relay_tls_ca_file: str = setting("", "Relay: CA bundle (PEM) that upstream brokers' TLS "
                                     "certificates are checked against (empty: plaintext).")
    relay_tls_cert_file: str = setting("", "Relay: this broker's client certificate (PEM) for "
                                       "upstreams that require mTLS.")
    relay_tls_key_file: str = setting("", "Relay: the private key (PEM) of "
                                      "--relay-tls-cert-file.")
    relay_token_file: str = setting("", "Relay: file holding the token sent to upstreams; its "
                                    "principal needs consume and admin on chained topics.")
    # Per topic (or "*" for every other topic): upstream, leader, election, acks.
    replication: dict[str, dict[str, str]] = field(default_factory=dict, metadata={
        "help": "Per-topic replication as [replication.TOPIC] tables (\"*\" = every other "
                "topic) with upstream, leader, election and acks (config file only; "
                "docs/cluster.md)."})
    # Compacted view and bootstrap (topic settings override the defaults).
    view_default: bool = setting(True, "A topic created without a view policy keeps a "
                                 "compacted view.")
    delete_retention_ms: int = setting(24 * 3600 * 1000, "Tombstones kept in the compacted "
                                       "view this long (Kafka's default).")
    view_pass_events_max: int = setting(100_000, "Log events one view maintenance pass folds, "
                                        "at most.")
    view_pass_bytes_max: int = setting(
        VIEW_PASS_BYTES_MAX, "Bytes of log records one view maintenance pass folds, at most "
        "(one record at least): a pass holds its records, their latest entries and its writes "
        "in memory at once.")
    view_linger_ms: int = setting(5_000, "Before a view pass, wait up to this long for a full "
                                  "pass of events (a pass over more events writes each hot "
                                  "key once: fewer view writes, which share the event loop's "
                                  "GIL); bounds the view's lag when the log grows slowly.")
    view_sweep_interval_ms: int = setting(60_000, "How often tombstones past delete retention "
                                          "go.")
    view_sweep_entries_max: int = setting(10_000, "Tombstones one sweep pass looks at.")
    view_sizes_remembered_max: int = setting(200_000, "Keys whose view entry sizes the broker "
                                             "keeps in memory (about 130 bytes each), so a "
                                             "pass counts the view without reading the "
                                             "entries it replaces; 0 reads them every pass.")
    compaction_records_max: int = setting(1_000, "Compacted topics: records rewritten per "
                                          "retention check.")
    view_thread_nice: int = setting(19, "Latency: the nice value (0-19) of the thread that "
                                    "runs view passes (Linux), so their CPU bursts wait for "
                                    "an idle core instead of taking one from the event loop; "
                                    "0 runs them at the broker's priority.")
    view_loads_max: int = setting(1, "Relay followers: views loaded from the upstream at once "
                                  "(broker/view/load.py). Each load holds one of the "
                                  "upstream's bootstrap_streams_max slots while it runs; "
                                  "loads share one view thread, so more at once hold more "
                                  "slots for about the same total time.")
    bootstrap_streams_max: int = setting(64, "Bootstrap streams in their snapshot or "
                                         "catch-up at once (a stream that is caught up "
                                         "and follows the log does not count).")
    # Security (docs/security.md); all off by default.
    tls_cert_file: str = setting("", "TLS: the broker's certificate (PEM); with "
                                 "--tls-key-file, both or neither. Empty: plaintext.")
    tls_key_file: str = setting("", "TLS: the private key (PEM) of --tls-cert-file.")
    tls_client_ca_file: str = setting("", "mTLS: clients must present a certificate signed by "
                                      "this CA (PEM bundle).")
    # Authentication is on when any of the next three ways is set, and with it
    # per-topic permissions (grants in RocksDB; `keybus acl`).
    auth_token_file: str = setting("", "Static tokens: a TOML file with a [tokens] table of "
                                   "principal = \"token\" (turns authentication on).")
    auth_jwt_secret_file: str = setting("", "JWTs signed HS256 with the shared secret in this "
                                        "file (turns authentication on).")
    auth_jwt_public_key_file: str = setting("", "JWTs signed RS256, checked with this public "
                                            "key (PEM) (turns authentication on).")
    auth_jwt_issuer: str = setting("", "When set, a JWT's iss claim must equal it.")
    auth_jwt_audience: str = setting("", "When set, a JWT's aud claim must hold it.")
    auth_jwt_leeway_ms: int = setting(0, "Clock skew allowed on a JWT's exp and nbf.")
    auth_certificate_principal: bool = setting(
        False, "mTLS: a client certificate's subject common name is the principal (needs "
        "--tls-client-ca-file).")
    auth_superusers: str = setting("", "Comma-separated principals holding every permission "
                                   "(they manage grants).")
    auth_recheck_interval_ms: int = setting(
        5_000, "How often open streams (Subscribe, Read, Bootstrap, Produce) are re-checked "
        "against the grants: a revoked right ends its streams within this time. A token's "
        "expiry ends them at once, by a timer.")
    acl_file: str = setting("", "TOML file of grants added to the store at start ([[grant]] "
                            "principal, topic, permissions; [[restriction]] topic, "
                            "subscription, principals).")
    # Event processor stores (ownership and checkpoints of consumer groups).
    processor_store_queue_max: int = setting(
        4_096, "Event processor store: claims and checkpoints waiting for the store's task.")
    processor_commit_commands_max: int = setting(
        256, "Event processor store: commands written in one WriteBatch.")
    processor_name_bytes_max: int = setting(
        255, "Event processor store: longest namespace, consumer group or owner id.")
    topic_delete_wait_ms: int = setting(
        20_000, "DeleteTopic answers within this long: a delete still waiting for the topic's "
        "tasks to end is answered UNAVAILABLE (topic_delete_slow) and goes on in the broker. "
        "Below the SDK's 30 s request timeout, so the client gets the broker's answer.")
    # Supervision (broker/supervision.py).
    task_restart_backoff_ms: int = setting(
        100, "A partition or store task that stops on an unexpected error is restarted after "
        "this delay, doubling up to --task-restart-backoff-max-ms.")
    task_restart_backoff_max_ms: int = setting(5_000, "Longest delay before a failed partition "
                                               "or store task is restarted.")
    recent_records_bytes_max: int = setting(
        256 << 10, "Latency: bytes of each partition's last durable records kept in memory, so "
        "dispatchers following the tail read them without a RocksDB read on a worker thread "
        "(broker/log/recent.py); 0 turns it off.")
    recent_records_max: int = setting(
        64, "Latency: records of each partition kept in memory (see recent_records_bytes_max).")
    gil_switch_interval_us: int = setting(
        500, "Latency: how long a worker thread running Python (view passes, log reads on a "
        "thread) keeps the GIL while the event loop waits for it (sys.setswitchinterval; "
        "Python's default is 5000).")
    gc_freeze: bool = setting(True, "Latency: leave the objects start-up made out of every "
                              "later garbage collection (gc.freeze), so a full collection "
                              "stops the event loop for well under a millisecond instead "
                              "of 8-15 ms (broker/gc_pauses.py).")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type != "int" or f.name in ("port", "metrics_port"):
                continue  # ports: checked below
            if f.name in POSITIVE_SETTINGS and value <= 0:
                raise ConfigError(f"{f.name}={value} must be > 0; allowed: an integer >= 1")
            if value < 0:
                raise ConfigError(f"{f.name}={value} is negative; allowed: an integer >= 0")
        if self.view_thread_nice > 19:
            raise ConfigError(f"view_thread_nice={self.view_thread_nice} is above 19; allowed: "
                              f"0-19 (a nice value)")
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
        if self.key_shared_default_mode not in ("consistent", "auto_split"):
            raise ConfigError(f"key_shared_default_mode={self.key_shared_default_mode!r} is "
                              "invalid; allowed: consistent, auto_split (sticky needs each "
                              "consumer's ranges)")
        for name in ("port", "metrics_port"):
            value = getattr(self, name)
            if not 0 <= value <= 65535:
                raise ConfigError(f"{name}={value} is out of range; allowed 0..65535 "
                                  "(port 0 = any free port, metrics_port 0 = no endpoint)")
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
