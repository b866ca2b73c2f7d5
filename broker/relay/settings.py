"""Which topics a broker leads, chains or elects, read from its settings. Pure.

A topic's entry in the `[replication.TOPIC]` tables (`"*"` = every topic not
named) holds at most one of:

* `upstream = "HOST:PORT"`: chain the topic from that broker, always (the
  seed's chained relay; the upstream may itself be a follower).
* `leader = "HOST:PORT"`: static leadership: the named broker leads, every
  other broker with the same entry chains from it. Works without ZooKeeper.
* `election = "zookeeper"`: the brokers of the topic elect a leader through
  ZooKeeper (`zookeeper` setting) and fail over without a person acting.

and `acks = "leader" | N`: a produce is acknowledged once N followers hold it
durably (`leader`, the default, = 0: once the leader holds it).
A topic without an entry is led by whichever broker has it, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sdk.channel import parse_broker
from sdk.security import ClientSecurity

if TYPE_CHECKING:
    from broker.config import Settings

ELECTIONS = ("none", "static", "zookeeper")
KEYS = ("upstream", "leader", "election", "acks")
ACKS_MAX = 100


class ReplicationError(ValueError):
    """A relay setting that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class TopicReplication:
    """How one topic is replicated on this broker."""

    election: str  # none (this broker leads), static, zookeeper
    upstream: str = ""  # static: the broker copied from ("" = this broker leads)
    acks: int = 0  # followers that must hold an event before it is acknowledged

    @property
    def leads(self) -> bool:
        """Static or no election: this broker accepts produce for the topic."""
        return self.election != "zookeeper" and not self.upstream


@dataclass(frozen=True, slots=True)
class RelaySettings:
    """The relay part of the broker settings, checked."""

    broker_id: str
    address: str
    zookeeper: str
    zookeeper_root: str
    session_timeout_ms: int
    backoff_first_ms: int
    backoff_max_ms: int
    sync_interval_ms: int
    acks_timeout_ms: int
    handover_timeout_ms: int
    topics: Mapping[str, TopicReplication] = field(default_factory=dict)
    client_security: ClientSecurity | None = None  # how followers reach upstreams
    follower_grace_ms: int = 5_000  # a follower whose report stream closed counts this long
    # an upstream not heard this long (records or its idle answer, each
    # relay_idle_answer_ms) counts as unreachable: frozen with its connection open
    upstream_silence_ms: int = 3_000

    def for_topic(self, topic: str) -> TopicReplication | None:
        """The topic's replication, its "*" default, or None (leads alone)."""
        return self.topics.get(topic) or self.topics.get("*")

    @property
    def elects(self) -> bool:
        return any(t.election == "zookeeper" for t in self.topics.values())


def upstream_silence(idle_answer_ms: int) -> int:
    """How long a follower may hear nothing from its upstream before it counts it
    as unreachable: three of the upstream's idle answers missed (this broker's own
    relay_idle_answer_ms, which brokers of one cluster share), and at least 3 s,
    so one slow loop turn of a busy upstream is not taken for an outage.

    Why: a frozen upstream (SIGSTOP, a hung process, a paused VM) keeps its TCP
    connection open, and the stream breaks only when the keepalive gives up,
    about 15 s on; until then the follower showed its last lag, most often 0,
    "caught up"."""
    return max(3 * idle_answer_ms, 3_000)


def relay_settings(settings: Settings, port: int | None = None) -> RelaySettings:
    """Check and collect the relay settings.

    Args:
        port: the bound port when the configured one is 0 (the advertised
            address then uses it).
    Raises:
        ReplicationError: naming the setting and what is allowed.
    """
    address = settings.advertised_address or f"{settings.host}:{port or settings.port}"
    _check_address("advertised_address", address)
    for name in ("zookeeper_session_timeout_ms", "relay_retry_backoff_ms",
                 "relay_retry_backoff_max_ms", "relay_sync_interval_ms", "acks_timeout_ms"):
        if getattr(settings, name) <= 0:
            raise ReplicationError(f"{name}={getattr(settings, name)} must be > 0")
    if settings.relay_retry_backoff_ms > settings.relay_retry_backoff_max_ms:
        raise ReplicationError(f"relay_retry_backoff_ms={settings.relay_retry_backoff_ms} is above "
                               f"relay_retry_backoff_max_ms={settings.relay_retry_backoff_max_ms}")
    if not settings.zookeeper_root.startswith("/") or settings.zookeeper_root.endswith("/"):
        raise ReplicationError(f"zookeeper_root={settings.zookeeper_root!r} must start with / and "
                               "not end with one, e.g. /keybus")
    topics = {name: topic_replication(name, entry, address)
              for name, entry in settings.replication.items()}
    relay = RelaySettings(
        settings.broker_id or address, address, settings.zookeeper, settings.zookeeper_root,
        settings.zookeeper_session_timeout_ms, settings.relay_retry_backoff_ms,
        settings.relay_retry_backoff_max_ms, settings.relay_sync_interval_ms,
        settings.acks_timeout_ms, settings.leader_handover_timeout_ms, topics,
        _client_security(settings), settings.relay_follower_grace_ms,
        upstream_silence(settings.relay_idle_answer_ms))
    if "/" in relay.broker_id:
        raise ReplicationError(f"broker_id={relay.broker_id!r} may not contain '/'")
    if relay.elects and not settings.zookeeper:
        raise ReplicationError("a topic has election = \"zookeeper\" but the zookeeper setting is "
                               "empty; set zookeeper = \"HOST:PORT\"")
    return relay


def _client_security(settings: Settings) -> ClientSecurity | None:
    """The SDK security followers use toward their upstreams (None: plain text)."""
    files = (settings.relay_tls_ca_file, settings.relay_tls_cert_file,
             settings.relay_tls_key_file, settings.relay_token_file)
    if not any(files):
        return None
    try:
        return ClientSecurity(ca_file=files[0], cert_file=files[1], key_file=files[2],
                              token_file=files[3])
    except ValueError as e:
        raise ReplicationError(f"relay_tls_*/relay_token_file: {e}") from None


def topic_replication(topic: str, entry: Mapping[str, str], address: str) -> TopicReplication:
    """One `[replication.TOPIC]` table, checked."""
    where = f"replication.{topic}"
    unknown = sorted(set(entry) - set(KEYS))
    if unknown:
        raise ReplicationError(f"{where} has unknown key {unknown[0]!r}; allowed: {', '.join(KEYS)}")
    given = [key for key in ("upstream", "leader", "election") if entry.get(key)]
    if len(given) > 1:
        raise ReplicationError(f"{where} sets {' and '.join(given)}; give at most one of "
                               "upstream, leader, election")
    acks = parse_acks(where, entry.get("acks", "leader"))
    if "election" in given:
        if entry["election"] not in ("zookeeper", "static", "none"):
            raise ReplicationError(f"{where}.election={entry['election']!r} is invalid; allowed: "
                                   "zookeeper (or give leader/upstream for static leadership)")
        if entry["election"] == "zookeeper":
            return TopicReplication("zookeeper", "", acks)
        return TopicReplication("none", "", acks)
    if "upstream" in given:
        upstream = _check_address(f"{where}.upstream", entry["upstream"])
        if upstream == address:
            raise ReplicationError(f"{where}.upstream={upstream} is this broker; a topic cannot "
                                   "chain from itself")
        return TopicReplication("static", upstream, acks)
    if "leader" in given:
        leader = _check_address(f"{where}.leader", entry["leader"])
        return TopicReplication("static", "" if leader == address else leader, acks)
    return TopicReplication("none", "", acks)


def parse_acks(where: str, text: str) -> int:
    """`leader` (0) or a number of followers 0..ACKS_MAX."""
    if text.strip().lower() == "leader":
        return 0
    if not text.strip().isdigit() or int(text) > ACKS_MAX:
        raise ReplicationError(f"{where}.acks={text!r} is invalid; allowed: \"leader\" or a number "
                               f"of followers 0..{ACKS_MAX}")
    return int(text)


def _check_address(name: str, address: str) -> str:
    try:
        host, port = parse_broker(address)
    except ValueError as e:
        raise ReplicationError(f"{name}: {e}") from None
    return f"{host}:{port}"
