"""Subscription restrictions: who may use a subscription name on a topic. Pure.

The per-topic grants (permissions.py) let any principal with `consume` on a
topic attach to every subscription on it, and ack its events, or write any
event processor group's ownership and checkpoints. A restriction closes one
name to the principals it lists, as Pulsar's subscription permission does
(`pulsar-admin namespaces grant-subscription-permission`; its
PulsarAuthorizationProvider.canConsumeAsync checks the subscription's role
list before the topic's consume right).

Rules:
1. A restriction names a topic pattern (as a grant's), a subscription
   pattern (a name, a prefix ending in `*`, or `*`) and one principal.
2. A subscription name on a topic is *restricted* when at least one
   restriction covers both; then only the principals of the restrictions
   that cover it (the union) and superusers may use it. A name no
   restriction covers stays open to every principal the grants allow, so
   nothing changes until a superuser restricts a name.
3. A restriction adds no right: the topic's grant (consume, or admin for
   seek and delete) is still needed. It takes none from superusers.
4. An event processor's consumer group shares the subscription names'
   namespace (as an Event Hubs consumer group is the group's one cursor):
   restricting `billing` on `orders` covers the Subscribe subscription
   `billing` and the processor group `billing`, in every processor
   namespace.
5. Removing a name's last restriction opens it again (Pulsar's too): the
   caller is told (`still_restricted`).

It knows nothing about gRPC, storage or how a principal was authenticated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.security.patterns import (
    TOPIC_PATTERN_CHARS,
    GrantError,
    check_pattern,
    check_principal,
    pattern_covers,
)

SUBSCRIPTION_PATTERN_BYTES_MAX = 255  # the broker's default subscription name limit
DECISIONS_MAX = 100_000


def check_subscription_pattern(pattern: str) -> str:
    """Return a valid subscription pattern or raise GrantError naming what is allowed."""
    body = pattern[:-1] if pattern.endswith("*") else pattern
    if not pattern or len(pattern) > SUBSCRIPTION_PATTERN_BYTES_MAX \
            or not set(body) <= TOPIC_PATTERN_CHARS:
        raise GrantError(f"subscription pattern {pattern!r} is invalid; allowed: a subscription "
                         "(or event processor group) name of [A-Za-z0-9._-], a prefix ending "
                         "in * (e.g. team-a.*), or * for every subscription")
    return pattern


@dataclass(frozen=True, slots=True, order=True)
class Restriction:
    """Principal `principal` may use the subscriptions `subscription` (pattern) on
    the topics `topic` (pattern); others (but superusers) may not (rule 2)."""

    topic: str
    subscription: str
    principal: str

    def covers(self, topic: str, subscription: str) -> bool:
        return pattern_covers(self.topic, topic) and pattern_covers(self.subscription, subscription)


def check_restriction(restriction: Restriction) -> Restriction:
    """The restriction, or GrantError saying which part is wrong and what is allowed."""
    check_principal(restriction.principal)
    if "\x00" in restriction.principal:
        raise GrantError("a principal may not contain a NUL character")
    check_pattern(restriction.topic)
    check_subscription_pattern(restriction.subscription)
    return restriction


@dataclass
class SubscriptionRestrictions:
    """The restrictions in memory, with a decision cache cleared on every change.

    With no restriction at all `allows` answers at once: a broker that uses
    none pays one truth test per check.
    """

    _all: set[Restriction] = field(default_factory=set)
    _decisions: dict[tuple[str, str, str], bool] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self._all

    def replace(self, restrictions: Iterable[Restriction]) -> None:
        self._all = set(restrictions)
        self._decisions.clear()

    def add(self, restriction: Restriction) -> bool:
        added = restriction not in self._all
        self._all.add(restriction)
        self._decisions.clear()
        return added

    def remove(self, restriction: Restriction) -> bool:
        removed = restriction in self._all
        self._all.discard(restriction)
        self._decisions.clear()
        return removed

    def matching(self, topic: str, subscription: str, principal: str = "") -> list[Restriction]:
        """The stored restrictions with exactly these patterns; every principal's
        when `principal` is empty (what `keybus acl unrestrict T S` removes)."""
        return sorted(r for r in self._all if r.topic == topic and r.subscription == subscription
                      and (not principal or r.principal == principal))

    def still_restricted(self, topic: str, subscription: str) -> bool:
        """Whether restrictions with these exact patterns remain (rule 5)."""
        return bool(self.matching(topic, subscription))

    def listed(self, principal: str = "", topic: str = "") -> list[Restriction]:
        """Restrictions naming `principal` (all when empty) whose topic pattern
        covers `topic` (all when empty)."""
        return sorted(r for r in self._all if (not principal or r.principal == principal)
                      and (not topic or pattern_covers(r.topic, topic)))

    def allows(self, principal: str, topic: str, subscription: str) -> bool:
        """Rule 2 (superusers are the caller's to let through: rule 3)."""
        if not self._all:
            return True
        key = (principal, topic, subscription)
        decision = self._decisions.get(key)
        if decision is None:
            if len(self._decisions) > DECISIONS_MAX:
                self._decisions.clear()
            covering = [r for r in self._all if r.covers(topic, subscription)]
            decision = not covering or any(r.principal == principal for r in covering)
            self._decisions[key] = decision
        return decision
