"""Is the upstream's topic the one this follower copies? Its incarnation says.

A broker gives a topic a new incarnation each time it is created
(`TopicMeta.incarnation`, `TopicInfo.incarnation`; Kafka's topic ID,
KIP-516), and a follower's copy takes its upstream's, so every broker of a
chain or cluster shows one incarnation per topic. The handshake's record
comparison (divergence.py) tells a topic deleted and created again upstream
from the copy only while the upstream still holds the offset compared; once
its retention trimmed the new log past the copy's end there is nothing to
compare, and the copy went on from the upstream's start as if retention had
overtaken it, one log of the follower spanning two topics (its cursors,
checkpoints and readers carried from the old to the new). The incarnation
tells them apart whatever the logs hold.

`judge` is the pure decision (the follower, follower.py, acts on it):

- "same": the upstream's is this copy's incarnation, or says none (an older
  upstream): the records decide, as before;
- "adopt": take the upstream's as this topic's. This copy has none (one a
  broker made up when it loaded a topic stored before brokers set them counts
  as none: `TopicMeta.incarnation_backfilled`), or the logs agree on a record both hold (two
  brokers that each made one up for the same log: a topic created on each
  before it was chained), or the copy holds nothing yet;
- "another": both known and different, and no record shows the logs to be
  one: the upstream's topic was deleted and created again. Every partition's
  copy is dropped and starts over at 0 (replica_log.py rule 6), and the topic
  takes the upstream's incarnation after that (in this order: a crash in
  between finds the old incarnation and drops again, never a new incarnation
  over old offsets).
"""

from __future__ import annotations

from typing import Literal

Verdict = Literal["same", "adopt", "another"]


def judge(ours: str, theirs: str, records_agree: bool, holds_nothing: bool) -> Verdict:
    """What a follower does with the upstream's incarnation (module docstring).

    Args:
        ours: this broker's incarnation of the topic ("" = not known).
        theirs: the upstream's ("" = it does not say).
        records_agree: a record both logs hold was compared and agrees.
        holds_nothing: this copy holds no record of the topic (nothing to mix).
    """
    if not theirs or ours == theirs:
        return "same"
    if not ours or records_agree or holds_nothing:
        return "adopt"
    return "another"


def another_message(topic: str, index: int, upstream: str, ours: str, theirs: str,
                    dropped: str) -> str:
    """The WARNING line of a partition dropped because the upstream's topic is
    another incarnation. `dropped`: what was dropped, in words."""
    return (f"topic {topic}/{index}: upstream {upstream} holds another incarnation of the "
            f"topic ({theirs!r}) than the one copied here ({ours!r}): it was deleted and created "
            f"again there; {dropped}, this log starts over at 0 and copies the upstream's from "
            "its start (one log never holds two topics)")
