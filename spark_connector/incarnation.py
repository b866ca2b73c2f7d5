"""Which incarnation of each topic a streaming query's offsets are of. Pure.

Why: a topic deleted and created again is another log under the same name
(TopicInfo.incarnation, 16 hex digits made when the topic is created, tells
them apart, as Kafka's topic IDs do). Offsets alone cannot tell: once the new
topic has grown past the checkpointed offsets, they look valid, and a query
would read on from them, skipping the new topic's first events without a
word. So the offsets the query writes to Spark's checkpoint name each topic's
incarnation, and planning compares them with DescribeTopic's.

Form: the offsets JSON gains one key, INCARNATIONS_KEY ({topic: incarnation}),
beside the topics, as "$snapshot" (never a topic name: topics are
[A-Za-z0-9._-]+). Offsets written before carry none, and a broker that does
not know a topic's incarnation names none (""): unknown, judged as before
(only offsets that went back are noticed, partitioning.moved_back).

Rules (source.py applies them):
1. latestOffset: a topic whose incarnation in the batch's start (the
   checkpoint) differs from DescribeTopic's now was deleted and created again:
   data loss. failOnDataLoss=true fails the query; false logs one warning
   and reads the new topic from its start (its partitions are new to the
   query, as a deleted topic's are when it comes back).
2. partitions(start, end): a topic whose start and end name different
   incarnations is one rule 1 let through: its partitions are read from their
   start_offset. A topic whose end names another incarnation than
   DescribeTopic now (created again after the batch was planned; a batch
   re-run after a restart) is data loss: true fails; false reads nothing of it
   in this batch, and the next batch's rule 1 reads the new topic from its
   start (and says so).
3. Tasks read with the incarnation the batch was planned with, so the broker
   refuses the read of a topic created again since (TopicRecreated), which
   the task reports as data loss (task_read.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sdk.core.model import TopicPartition
from spark_connector.partitioning import PartitionBounds, report_data_loss

INCARNATIONS_KEY = "$incarnations"  # never a topic name (topics are [A-Za-z0-9._-]+)


def split_incarnations(offsets: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(offsets JSON without the incarnations, {topic: incarnation}); an offsets
    JSON written before they were kept has none (every topic unknown)."""
    plain = {k: v for k, v in offsets.items() if k != INCARNATIONS_KEY}
    named = offsets.get(INCARNATIONS_KEY)
    if not isinstance(named, Mapping):
        return plain, {}
    return plain, {str(topic): str(value) for topic, value in named.items() if value}


def with_incarnations(offsets: Mapping[str, Any], incarnations: Mapping[str, str]
                      ) -> dict[str, Any]:
    """Offsets JSON that names the incarnation of each topic it holds (those known),
    in a fixed order (Spark compares offsets by their JSON text)."""
    named = {topic: incarnations[topic] for topic in sorted(incarnations)
             if topic in offsets and incarnations[topic]}
    return {**offsets, INCARNATIONS_KEY: named} if named else dict(offsets)


def incarnations_of(bounds: Mapping[TopicPartition, PartitionBounds]) -> dict[str, str]:
    """Each present topic's incarnation as DescribeTopic named it (known ones only)."""
    return {tp.topic: b.incarnation for tp, b in sorted(bounds.items()) if b.incarnation}


def recreated(was: Mapping[str, str], now: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """{topic: (incarnation was, incarnation now)} for each topic known in both whose
    incarnation differs: it was deleted and created again in between."""
    return {topic: (old, now[topic]) for topic, old in sorted(was.items())
            if old and now.get(topic) and now[topic] != old}


def drop_topics(offsets: Mapping[TopicPartition, int], topics: Collection[str]
                ) -> dict[TopicPartition, int]:
    """`offsets` without the partitions of `topics`."""
    return {tp: offset for tp, offset in offsets.items() if tp.topic not in topics}


def recreated_problems(changed: Mapping[str, tuple[str, str]],
                       reached: Mapping[TopicPartition, int]) -> list[str]:
    """One data loss report per topic of `changed` (from `recreated`), naming both
    incarnations and how far the query had got in the old one."""
    out = []
    for topic, (old, new) in sorted(changed.items()):
        read = ", ".join(f"{tp.topic}/{tp.partition} up to offset {offset}"
                         for tp, offset in sorted(reached.items()) if tp.topic == topic)
        had = f", the query had read {read}" if read else ""
        out.append(f"topic {topic!r} was deleted and created again: the query's offsets are "
                   f"of incarnation {old!r}{had}; the topic is now incarnation {new!r}, whose "
                   "offsets name other events")
    return out


def report_recreated(problems: Sequence[str], fail_on_data_loss: bool) -> list[str]:
    """Topics made again (`recreated_problems`), as `report_data_loss` says them.

    Raises:
        DataLossError: there are problems and fail_on_data_loss is true.
    """
    return report_data_loss(
        problems, fail_on_data_loss,
        "Events of the old topic the query had not read are gone. Set failOnDataLoss=false "
        "to read the new topic from its start (its earliest stored offset), or start the "
        "query with a new checkpointLocation to read it from startingOffsets",
        "events of the old topic the query had not read are gone, reading the new topic from "
        "its start (failOnDataLoss=false)")
