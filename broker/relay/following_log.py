"""On a leader with `acks = n`: one log line per change of who follows a partition.

Why: a follower that drops out of the following set when its grace is over
(broker/relay/acks.py rules 4 and 6) makes produce be refused with
`followers_missing`; an operator reading the leader's log must see when and
why that began and when it ended, as Kafka's "Shrinking ISR from ... to ..."
and "Expanding ISR" lines say, once per change, never once per produce.
`change_line` is pure; `log_changes` asks the tracker and logs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.relay.acks import AckTracker
    from broker.relay.topic_role import TopicRole

log = logging.getLogger("keybus.relay")


def change_line(topic: str, partition: int, follower: str, address: str, follows: bool,
                following: int, copies: int, grace_ms: int) -> tuple[int, str]:
    """(level, text) of one follower that began (`follows`) or stopped following
    `topic`/`partition`; `following`: how many follow now. A WARNING when fewer than
    `copies` follow after it stopped: produce is refused until one is back."""
    who = f"follower {follower}" + (f" ({address})" if address and address != follower else "")
    where = f"topic {topic}/{partition}"
    count = f"{following} follow(s) now, acks={copies} needs {copies}"
    if follows:
        taken = "; enough follow: produce is taken" if following == copies else ""
        return logging.INFO, f"{where}: {who} follows; {count}{taken}"
    why = f"its report stream closed {grace_ms} ms ago (relay_follower_grace_ms) and it " \
          "did not come back" if grace_ms else "its report stream closed"
    if following >= copies:
        return logging.INFO, f"{where}: {who} stopped following ({why}); {count}"
    return logging.WARNING, (f"{where}: {who} stopped following ({why}); {count}: produce to "
                             "this partition is refused (followers_missing) until one is back")


def log_changes(role: TopicRole, partition: int, tracker: AckTracker[Any], now_ms: float) -> None:
    """Log each change of `tracker`'s following set since it was last asked (rule 6).
    `now_ms`: the trackers' clock. Nothing with acks = leader (nobody needs to follow)."""
    if not tracker.copies:
        return
    changes = tracker.following_changes(now_ms)
    if not changes:
        return
    following = tracker.following(now_ms)
    for follower, follows in changes:
        address = role.reports.get((follower, partition), ("",))[0]
        level, text = change_line(role.topic, partition, follower, address, follows, following,
                                  tracker.copies, tracker.follower_grace_ms)
        log.log(level, text)
