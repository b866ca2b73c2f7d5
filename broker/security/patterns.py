"""Names in access control: topic and subscription patterns, principals. Pure.

A pattern is a name, a prefix ending in `*` (`orders.*` covers `orders.eu`
but not `orders`), or `*` for every name; grants (permissions.py) and
subscription restrictions (restrictions.py) share the rule.
"""

from __future__ import annotations

TOPIC_PATTERN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class GrantError(ValueError):
    """A grant that cannot be stored; the message says what is allowed."""


def check_pattern(pattern: str, name_bytes_max: int = 249) -> str:
    """Return a valid topic pattern or raise GrantError naming what is allowed."""
    body = pattern[:-1] if pattern.endswith("*") else pattern
    if not pattern or len(pattern) > name_bytes_max or not set(body) <= TOPIC_PATTERN_CHARS:
        raise GrantError(f"topic pattern {pattern!r} is invalid; allowed: a topic name, a prefix "
                         "ending in * (e.g. orders.*), or * for every topic")
    return pattern


def pattern_covers(pattern: str, topic: str) -> bool:
    """Whether a pattern (a grant's topic, a restriction's subscription) covers `topic`."""
    if pattern.endswith("*"):
        return topic.startswith(pattern[:-1])
    return pattern == topic


PRINCIPAL_CHARACTERS_MAX = 1024


def check_principal(principal: str) -> str:
    """Return a principal a grant can name or raise GrantError saying what is allowed."""
    if not principal or len(principal) > PRINCIPAL_CHARACTERS_MAX:
        raise GrantError(f"principal is empty or over {PRINCIPAL_CHARACTERS_MAX} characters; "
                         "name who the grant is for")
    return principal


