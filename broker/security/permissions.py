"""Who may do what: grants, topic patterns and the rule of every RPC. Pure.

Rules:
1. A grant gives one principal one permission (produce, consume, admin) on
   a topic pattern: an exact name, a prefix ending in `*` (`orders.*` covers
   `orders.eu` but not `orders`), or `*` for every topic.
2. Superusers hold every permission, including changing grants.
3. Every RPC has one line in `RULES`: the permissions that allow it (any of
   them) and where its topic is in the request. An RPC without a line is
   refused to everyone but superusers, so a new RPC is never open by
   accident. Describing a topic is allowed by any permission on it (as
   Kafka's Read and Write imply Describe): a producer must learn the
   partition count, a Spark reader the offsets.
4. A decision names the principal, the topic and the permission missing.
5. An RPC that acts on a subscription or an event processor group names
   it in its rule (`subscription`): a restricted name (restrictions.py) is
   refused to a principal its restrictions do not list, even one holding
   the topic's grant.

It knows nothing about gRPC, storage or how a principal was authenticated.
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.security.patterns import (
    PRINCIPAL_CHARACTERS_MAX,
    TOPIC_PATTERN_CHARS,
    GrantError,
    check_pattern,
    check_principal,
    pattern_covers,
)
from broker.security.restrictions import SubscriptionRestrictions

__all__ = ["PRINCIPAL_CHARACTERS_MAX", "TOPIC_PATTERN_CHARS", "GrantError", "check_pattern",
           "check_principal", "pattern_covers"]  # re-exported: where they lived before


class Permission(enum.IntEnum):
    """Values equal the wire enum `keybus.v1.Permission`."""

    PRODUCE = 1
    CONSUME = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    principal: str
    topic: str  # pattern
    permission: Permission


def check_grant(grant: Grant) -> Grant:
    check_principal(grant.principal)
    if grant.permission not in tuple(Permission):
        raise GrantError(f"permission {grant.permission!r} is invalid; allowed: produce, "
                         "consume, admin")
    check_pattern(grant.topic)
    return grant


@dataclass
class AccessTable:
    """The grants in memory, indexed by principal, with a decision cache.

    The cache is cleared on every change, so a revoke takes effect on the
    next call; Produce is checked per request, and a stream already open is
    re-checked at once after a revoke (`revoked`, called on the event loop by
    the ACL servicer, runs `revoke_listeners`: the open streams' sweep) and
    every auth_recheck_interval_ms (rpc/stream_rights.py).
    """

    superusers: frozenset[str] = frozenset()
    _by_principal: dict[str, set[Grant]] = field(default_factory=dict)
    _decisions: dict[tuple[str, str, Permission], bool] = field(default_factory=dict)
    revoke_listeners: list[Callable[[], object]] = field(default_factory=list)
    restrictions: SubscriptionRestrictions = field(default_factory=SubscriptionRestrictions)

    def revoked(self) -> None:
        """Grants were removed: let the listeners re-check what they hold."""
        for listener in self.revoke_listeners:
            listener()

    def replace(self, grants: Iterable[Grant]) -> None:
        self._by_principal.clear()
        for grant in grants:
            self._by_principal.setdefault(grant.principal, set()).add(grant)
        self._decisions.clear()

    def add(self, grant: Grant) -> bool:
        grants = self._by_principal.setdefault(grant.principal, set())
        added = grant not in grants
        grants.add(grant)
        self._decisions.clear()
        return added

    def remove(self, grant: Grant) -> bool:
        grants = self._by_principal.get(grant.principal, set())
        removed = grant in grants
        grants.discard(grant)
        self._decisions.clear()
        return removed

    def grants(self, principal: str = "", topic: str = "") -> list[Grant]:
        """Grants of `principal` (all when empty) that cover `topic` (all when empty)."""
        pools = ([self._by_principal.get(principal, set())] if principal
                 else list(self._by_principal.values()))
        return sorted(g for pool in pools for g in pool
                      if not topic or pattern_covers(g.topic, topic))

    def is_superuser(self, principal: str) -> bool:
        return principal in self.superusers

    def allows(self, principal: str, topic: str, permission: Permission) -> bool:
        if principal in self.superusers:
            return True
        key = (principal, topic, permission)
        decision = self._decisions.get(key)
        if decision is None:
            if len(self._decisions) > 100_000:
                self._decisions.clear()
            decision = any(g.permission == permission and pattern_covers(g.topic, topic)
                           for g in self._by_principal.get(principal, ()))
            self._decisions[key] = decision
        return decision

    def allows_any(self, principal: str, topic: str, permissions: Iterable[Permission]) -> bool:
        return any(self.allows(principal, topic, p) for p in permissions)

    def may_use(self, principal: str, topic: str, subscription: str) -> bool:
        """Whether the principal may use this subscription (or processor group)
        name on the topic: superusers always; others unless it is restricted to
        other principals (restrictions.py rule 2)."""
        return principal in self.superusers or self.restrictions.allows(
            principal, topic, subscription)

    def visible(self, principal: str, topic: str) -> bool:
        """Whether the principal holds any permission on the topic (ListTopics shows it)."""
        return self.allows_any(principal, topic, Permission)


# ---------------------------------------------------------------- rules per RPC

TopicsOf = Callable[[Any], list[str]]


def field_topic(path: str) -> TopicsOf:
    """Topics of a request at a dotted field path, e.g. "topic" or "open.topic"."""
    names = path.split(".")

    def topics(request: Any) -> list[str]:
        value = request
        for name in names:
            value = getattr(value, name)
        return [value]
    return topics


def subscribe_topics(request: Any) -> list[str]:
    """Subscribe: the `open` message names the topic; later messages act on the
    stream opened with it (permits, acks, nacks need no check of their own)."""
    return [request.open.topic] if request.WhichOneof("body") == "open" else []


def dead_letter_topic(request: Any) -> list[tuple[str, frozenset[Permission]]]:
    """A dead letter topic is written by the broker for the consumer: opening a
    subscription with one needs the produce permission on it."""
    if request.WhichOneof("body") == "open" and request.open.dead_letter_topic:
        return [(request.open.dead_letter_topic, frozenset({Permission.PRODUCE}))]
    return []


def replica_read(request: Any) -> list[tuple[str, frozenset[Permission]]]:
    """A relay follower's copy reads past the high watermark (unacknowledged
    events), and its view load (a replica Bootstrap) skips the broker's config
    filters: it needs the admin permission on the topic besides consume."""
    return [(request.topic, frozenset({Permission.ADMIN}))] if request.replica else []


# What a request acts on: (topic, subscription or processor group name) pairs.
NamesOf = Callable[[Any], list[tuple[str, str]]]


def field_names(path: str, name_field: str) -> NamesOf:
    """The (topic, name) a request names at a dotted path ("" = the request itself),
    e.g. ("", "subscription") or ("checkpoint", "consumer_group")."""
    steps = [step for step in path.split(".") if step]

    def names(request: Any) -> list[tuple[str, str]]:
        value = request
        for step in steps:
            value = getattr(value, step)
        return [(value.topic, getattr(value, name_field))]
    return names


def subscribe_names(request: Any) -> list[tuple[str, str]]:
    """Subscribe: the `open` names the subscription; permits, acks and nacks act
    on the stream opened with it, so they are never checked apart from it (a
    stream that loses the right is ended: rpc/stream_rights.py)."""
    if request.WhichOneof("body") == "open":
        return [(request.open.topic, request.open.subscription)]
    return []


@dataclass(frozen=True, slots=True)
class Rule:
    """What an RPC needs. permissions: any of them, on every topic the request
    names; none = only authentication (e.g. WhoAmI, ListTopics, whose answer
    is filtered to what the caller may see). superuser: superusers only.
    subscription: the subscription or processor group names it acts on, each
    checked against the restrictions (rule 5); `noun` says which in a denial."""

    permissions: frozenset[Permission] = frozenset()
    topics: TopicsOf | None = None
    superuser: bool = False
    # Other topics a request names that need a permission of their own.
    also: Callable[[Any], list[tuple[str, frozenset[Permission]]]] | None = None
    subscription: NamesOf | None = None
    noun: str = "subscription"


def _needs(*permissions: Permission, topic: str | TopicsOf = "topic",
           subscription: NamesOf | None = None, noun: str = "subscription") -> Rule:
    topics = field_topic(topic) if isinstance(topic, str) else topic
    return Rule(frozenset(permissions), topics, subscription=subscription, noun=noun)


_SUBSCRIPTION = field_names("", "subscription")
_GROUP = field_names("", "consumer_group")
GROUP = "event processor group"


ANY = tuple(Permission)
SUPERUSER = Rule(superuser=True)
AUTHENTICATED = Rule()

# One line per RPC (method name as in `service Keybus`). No line: superusers only.
RULES: dict[str, Rule] = {
    "Produce": _needs(Permission.PRODUCE),
    "InitProducer": _needs(Permission.PRODUCE),
    "Read": Rule(frozenset({Permission.CONSUME}), field_topic("topic"), also=replica_read),
    "Subscribe": Rule(frozenset({Permission.CONSUME}), subscribe_topics, also=dead_letter_topic,
                      subscription=subscribe_names),
    "CreateTopic": _needs(Permission.ADMIN),
    "ListTopics": AUTHENTICATED,
    "DescribeTopic": _needs(*ANY),
    "DeleteTopic": _needs(Permission.ADMIN),
    "ListSubscriptions": _needs(Permission.CONSUME, Permission.ADMIN),
    # A subscription's backlog and cursors are its users' (ListSubscriptions
    # leaves out the ones the caller may not use: rpc/auth.py).
    "DescribeSubscription": _needs(Permission.CONSUME, Permission.ADMIN,
                                   subscription=_SUBSCRIPTION),
    "SeekSubscription": _needs(Permission.ADMIN, subscription=_SUBSCRIPTION),
    "DeleteSubscription": _needs(Permission.ADMIN, subscription=_SUBSCRIPTION),
    "GrantPermissions": SUPERUSER,
    "RevokePermissions": SUPERUSER,
    "ListPermissions": SUPERUSER,
    "RestrictSubscription": SUPERUSER,
    "UnrestrictSubscription": SUPERUSER,
    "WhoAmI": AUTHENTICATED,
    # Event processor stores: a processor is a consumer of the topic, and its
    # consumer group a subscription name (restrictions.py rule 4).
    "ListOwnership": _needs(Permission.CONSUME, subscription=_GROUP, noun=GROUP),
    "ClaimOwnership": _needs(Permission.CONSUME, subscription=_GROUP, noun=GROUP),
    "ListCheckpoints": _needs(Permission.CONSUME, subscription=_GROUP, noun=GROUP),
    "UpdateCheckpoint": _needs(Permission.CONSUME, topic="checkpoint.topic",
                               subscription=field_names("checkpoint", "consumer_group"),
                               noun=GROUP),
    "FenceCheckpoints": _needs(Permission.CONSUME, subscription=_GROUP, noun=GROUP),
    # Relay chaining: who leads a topic (any right on it); a follower's handshake reads
    # the log (consume); its position reports release acknowledgements (admin).
    "DescribeCluster": _needs(*ANY),
    "EpochEnd": _needs(Permission.CONSUME),
    "ReportReplicaPositions": _needs(Permission.ADMIN),
    # Compacted view and bootstrap: a snapshot then the log, read as Read reads.
    "Bootstrap": Rule(frozenset({Permission.CONSUME}), field_topic("topic"), also=replica_read),
}


def rule_for(method: str) -> Rule:
    """The rule of an RPC by name; an RPC without a line is for superusers only."""
    return RULES.get(method, SUPERUSER)


SUPERUSER_NEEDED = "superuser"


@dataclass(frozen=True, slots=True)
class Denial:
    """Why a call is refused: PERMISSION_DENIED naming principal, topic and permission."""

    principal: str
    topic: str
    needed: str
    subscription: str = ""  # set: the topic's right is held, this name is restricted
    noun: str = "subscription"

    def message(self, method: str) -> str:
        """What is missing and how to get it: superusers are named in the broker's
        settings (no grant makes one); a request without a topic (DescribeCluster,
        ListSubscriptions of every topic) needs the permission on every topic; a
        restricted subscription names neither who it is restricted to nor how."""
        if self.subscription:
            own = "subscription" if self.noun == "subscription" else "group"
            command = " ".join(shlex.quote(part) for part in (
                "keybus", "acl", "restrict", self.topic, self.subscription, self.principal))
            return (f"principal {self.principal!r} may not use {self.noun} "
                    f"{self.subscription!r} on topic {self.topic!r}, needed for {method}: a "
                    f"superuser restricted it to other principals; use a {own} name of your "
                    f"own, or a superuser adds you ({command})")
        if self.needed == SUPERUSER_NEEDED:
            return (f"principal {self.principal!r} is not a superuser, and {method} is for "
                    "superusers only; they are named in the broker's auth_superusers setting "
                    "(no grant makes one)")
        if not self.topic:
            return (f"principal {self.principal!r} lacks the {self.needed} permission on every "
                    f"topic, needed for {method} without a topic; name a topic, or a superuser "
                    f"grants it on '*' (keybus acl grant)")
        return (f"principal {self.principal!r} lacks the {self.needed} permission on topic "
                f"{self.topic!r} needed for {method}; a superuser grants it (keybus acl grant)")


def decide(table: AccessTable, principal: str, rule: Rule, request: Any) -> Denial | None:
    """None when `principal` may make this request under `rule`, else why not."""
    if table.is_superuser(principal):
        return None
    if rule.superuser:
        return Denial(principal, "", SUPERUSER_NEEDED)
    if rule.topics is None:
        return None
    checks = [(topic, rule.permissions) for topic in rule.topics(request)]
    checks += rule.also(request) if rule.also is not None else []
    for topic, permissions in checks:
        if not table.allows_any(principal, topic, permissions):
            needed = " or ".join(p.label for p in sorted(permissions))
            return Denial(principal, topic, needed)
    if rule.subscription is None or table.restrictions.empty:
        return None  # the common case: nothing is restricted, nothing to read
    for topic, name in rule.subscription(request):
        if not table.may_use(principal, topic, name):
            return Denial(principal, topic, "", subscription=name, noun=rule.noun)
    return None
