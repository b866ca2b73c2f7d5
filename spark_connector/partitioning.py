"""Which events each Spark task reads: ranges, offsets and input splits. Pure.

Rules:
1. An input split is one (topic partition, hash range) over a half-open
   offset span [start, stop). The splits of one topic partition share the
   span and their ranges are disjoint, so together they hold every event of
   the span exactly once (an event's slot is in exactly one range).
2. `ranges` is `N` (equal splits of 0..65535), an explicit list of
   inclusive slot ranges "0-16383,16384-65535" (they need not cover every
   slot: events in uncovered slots are not read), or `subscription:NAME`.
3. Offsets are per topic partition and name the next event to read, as
   Kafka's do; in JSON, -2 is earliest and -1 is latest. A partition the
   JSON leaves out takes the option's default (earliest for a start,
   latest for an end).
4. Admission control (`limit_offsets`) splits a budget of events over the
   topic partitions in proportion to their backlog, as Kafka's
   maxOffsetsPerTrigger does; the budget counts log offsets, so events the
   ranges or filter skip still count.
5. A micro-batch is checked against the partitions' stored offsets when it
   is planned, as Kafka's source does (`plan_stream_batch`): a start below
   a partition's start (retention) or offsets above its end (they went
   back: topic re-created, log truncated) or a topic that was deleted are
   data loss, which fails the query with failOnDataLoss=true and is skipped
   with a warning otherwise.

This module must not know about Spark, gRPC or the clock: callers pass the
partitions' current start/end offsets in.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from sdk.core.model import FULL_RANGE, HashRange, RangeError, TopicPartition, equal_splits, parse_ranges

EARLIEST = -2
LATEST = -1
SUBSCRIPTION_PREFIX = "subscription:"

Offsets = dict[TopicPartition, int]


class PartitioningError(ValueError):
    """A ranges or offsets value that cannot be used; the message names the option."""


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (retention) and failOnDataLoss is true."""


# ---------------------------------------------------------------- ranges


@dataclass(frozen=True, slots=True)
class RangesSpec:
    """The parsed `ranges` option: explicit ranges, or a subscription to ask."""

    ranges: tuple[HashRange, ...]
    subscription: str | None = None


def parse_ranges_option(text: str) -> RangesSpec:
    """Parse `ranges`: "N", "0-16383,16384-65535" or "subscription:NAME".

    Raises:
        PartitioningError: naming the option, the value and the allowed forms.
    """
    body = text.strip()
    if body.lower().startswith(SUBSCRIPTION_PREFIX):
        name = body[len(SUBSCRIPTION_PREFIX):].strip()
        if not name:
            raise PartitioningError(f"option 'ranges'={text!r}: give the subscription name "
                                    "after 'subscription:', e.g. subscription:billing")
        return RangesSpec((), name)
    try:
        if body.isdigit():
            return RangesSpec(tuple(equal_splits(int(body))))
        if "-" not in body:
            raise RangeError("need N or FIRST-LAST entries")
        return RangesSpec(tuple(parse_ranges(body)))
    except RangeError as e:
        raise PartitioningError(
            f"option 'ranges'={text!r}: {e}. Allowed: N (1..65536 equal splits of 0..65535), "
            "a list of inclusive slot ranges such as 0-16383,16384-65535, or "
            "subscription:NAME") from None


def resolve_ranges(spec: RangesSpec) -> list[HashRange]:
    """The explicit ranges to split by (empty for subscription:NAME, whose
    ranges come from the broker when the read is planned)."""
    return list(spec.ranges)


RangeGroups = dict[TopicPartition, list[list[HashRange]]]


def range_groups(spec: RangesSpec, partitions: Sequence[TopicPartition],
                 live: Mapping[TopicPartition, list[list[HashRange]]] | None = None
                 ) -> RangeGroups:
    """One group of slot ranges per Spark input partition, per topic partition.

    Explicit ranges: every topic partition gets one group per range. For
    subscription:NAME, `live` holds each consumer's ranges per topic partition
    (as `keybus subscriptions describe` shows them): one group per consumer.

    Raises:
        PartitioningError: the subscription has no consumer on a partition.
    """
    if spec.subscription is None:
        return {tp: [[r] for r in spec.ranges] for tp in partitions}
    groups: RangeGroups = {}
    for tp in partitions:
        found = [g for g in (live or {}).get(tp, []) if g]
        if not found:
            raise PartitioningError(
                f"option 'ranges'='subscription:{spec.subscription}': the subscription has no "
                f"Key_Shared consumer with hash ranges on {tp.topic}/{tp.partition}; start its "
                "consumers first, or use ranges=N or an explicit list")
        groups[tp] = found
    return groups


# ---------------------------------------------------------------- offsets


@dataclass(frozen=True, slots=True)
class OffsetsSpec:
    """A parsed startingOffsets/endingOffsets value.

    `default` (EARLIEST or LATEST) applies to every topic partition that
    `per_partition` does not name; per_partition values are offsets >= 0 or
    EARLIEST/LATEST. `scns` (startingOffsets only) names partitions that start
    at their first event whose SCN is at least the value: the driver asks the
    broker for that offset (the broker's StartPosition.scn) before it plans.
    """

    default: int
    per_partition: tuple[tuple[TopicPartition, int], ...] = ()
    scns: tuple[tuple[TopicPartition, int], ...] = ()

    def offset_of(self, tp: TopicPartition) -> int:
        for named, offset in self.per_partition:
            if named == tp:
                return offset
        return self.default


def parse_offsets(text: str, option: str, topics: Sequence[str], *, allow_latest: bool,
                  allow_earliest: bool) -> OffsetsSpec:
    """Parse "earliest", "latest" or JSON such as {"orders":{"0":23,"1":-2}}.

    Raises:
        PartitioningError: naming the option and the offending entry.
    """
    body = text.strip()
    allowed = _allowed_words(allow_latest, allow_earliest)
    if body.lower() in ("earliest", "latest"):
        word = body.lower()
        if word not in allowed:
            raise PartitioningError(f"option {option!r}={text!r} is not allowed here; "
                                    f"allowed: {' or '.join(allowed)} or JSON per partition")
        return OffsetsSpec(EARLIEST if word == "earliest" else LATEST)
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise PartitioningError(
            f"option {option!r}={text!r}: allowed {' or '.join(allowed)}, or JSON per topic "
            'partition such as {"orders":{"0":23,"1":-2}} (-2 = earliest, -1 = latest)')
    starting = option == "startingOffsets"
    entries, scns = _json_entries(parsed, option, topics, allow_latest, allow_earliest, starting)
    default = EARLIEST if starting else LATEST
    return OffsetsSpec(default, tuple(sorted(entries.items())), tuple(sorted(scns.items())))


def _allowed_words(allow_latest: bool, allow_earliest: bool) -> list[str]:
    return [w for w, ok in (("earliest", allow_earliest), ("latest", allow_latest)) if ok]


def _json_entries(parsed: dict[str, object], option: str, topics: Sequence[str],
                  allow_latest: bool, allow_earliest: bool, allow_scn: bool
                  ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Offsets, and SCNs ({"scn": n} entries, when allow_scn), per topic partition."""
    entries: dict[TopicPartition, int] = {}
    scns: dict[TopicPartition, int] = {}
    for topic, partitions in parsed.items():
        if topic not in topics:
            raise PartitioningError(f"option {option!r} names topic {topic!r}, which is not "
                                    f"in option 'topic' ({', '.join(topics)})")
        if not isinstance(partitions, dict):
            raise PartitioningError(f"option {option!r} topic {topic!r}: need an object of "
                                    'partition to offset, e.g. {"0":23}')
        for key, offset in partitions.items():
            if allow_scn and str(key).isdigit() and isinstance(offset, dict):
                scns[TopicPartition(topic, int(key))] = _scn_entry(option, topic, key, offset)
                continue
            if not str(key).isdigit() or type(offset) is not int or offset < EARLIEST:
                scn = ', or {"scn": N} (the first event whose SCN is >= N)' if allow_scn else ""
                raise PartitioningError(
                    f"option {option!r} entry {topic}/{key}={offset!r}: need a partition "
                    f"number and an offset >= 0, or -2 (earliest) or -1 (latest){scn}")
            if (offset == LATEST and not allow_latest) or (offset == EARLIEST
                                                           and not allow_earliest):
                word = "latest (-1)" if offset == LATEST else "earliest (-2)"
                raise PartitioningError(f"option {option!r} entry {topic}/{key}: {word} is "
                                        "not allowed here (as in Spark's Kafka connector)")
            entries[TopicPartition(topic, int(key))] = offset
    return entries, scns


def _scn_entry(option: str, topic: str, key: str, value: dict[str, object]) -> int:
    scn = value.get("scn")
    if set(value) != {"scn"} or type(scn) is not int or not 0 <= scn < 1 << 64:
        raise PartitioningError(f"option {option!r} entry {topic}/{key}={value!r}: an SCN "
                                'start is {"scn": N} with N an integer 0..2**64-1')
    return scn


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """A topic partition's stored offsets: [start_offset, end_offset), and its topic's
    incarnation ("" = not known; spark_connector/incarnation.py)."""

    start_offset: int
    end_offset: int
    incarnation: str = ""


def resolve_offsets(spec: OffsetsSpec, bounds: Mapping[TopicPartition, PartitionBounds],
                    option: str, scn_offsets: Mapping[TopicPartition, int] | None = None
                    ) -> dict[TopicPartition, int]:
    """Concrete offsets for every topic partition in `bounds`.

    Args:
        scn_offsets: the offset the broker gave for each of `spec.scns`.
    Raises:
        PartitioningError: the spec names a partition the topic does not have.
    """
    for tp, _ in spec.per_partition + spec.scns:
        if tp not in bounds:
            raise PartitioningError(f"option {option!r} names partition {tp.partition} of "
                                    f"topic {tp.topic!r}, which does not exist")
    out: dict[TopicPartition, int] = {}
    for tp, b in sorted(bounds.items()):
        offset = spec.offset_of(tp)
        if offset == EARLIEST:
            offset = b.start_offset
        elif offset == LATEST:
            offset = b.end_offset
        out[tp] = offset
    for tp, _ in spec.scns:
        out[tp] = (scn_offsets or {})[tp]
    return out


def check_data_loss(starts: Mapping[TopicPartition, int],
                    bounds: Mapping[TopicPartition, PartitionBounds],
                    fail_on_data_loss: bool) -> dict[TopicPartition, int]:
    """Starts moved up to what is still stored; raise if that loses data and we must fail.

    Raises:
        DataLossError: a start is below the partition's start_offset and
            fail_on_data_loss is true.
    """
    out = dict(starts)
    for tp, start in starts.items():
        b = bounds.get(tp)
        if b is None or start >= b.start_offset:
            continue
        if fail_on_data_loss:
            raise DataLossError(
                f"{tp.topic}/{tp.partition}: offsets {start}..{b.start_offset - 1} are no longer "
                f"stored (retention removed them; the earliest is {b.start_offset}). Set "
                "failOnDataLoss=false to skip them and go on")
        out[tp] = b.start_offset
    return out


def moved_back(reached: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int],
               durable_ends: Mapping[TopicPartition, int] | None = None
               ) -> dict[TopicPartition, int | None]:
    """The topic partitions whose offsets went back below what the query reached:
    each one's end now, None when it is gone (the topic now has fewer partitions).

    A partition whose durable log end (`durable_ends`, a cluster broker's
    DescribeCluster) still reaches the offset went nowhere: the broker holds its
    readers back (restarted, it shows nothing until it learns the high
    watermark), and the caller waits for it as for any partition with no news.
    """
    durable = durable_ends or {}
    out: dict[TopicPartition, int | None] = {}
    for tp, offset in sorted(reached.items()):
        end = ends.get(tp)
        if (end is None or end < offset) and durable.get(tp, -1) < offset:
            out[tp] = end
    return out


def offsets_moved_back(reached: Mapping[TopicPartition, int],
                       moved: Mapping[TopicPartition, int | None],
                       present: Collection[str] | None = None) -> list[str]:
    """Kafka's data loss reports for offsets that went backwards, one per topic
    partition of `moved` (from `moved_back`); `present`: the topics that exist
    now (a partition gone with its topic: the topic was deleted).

    Events produced since the change may take offsets the checkpoint says were
    read. Kafka's source reports this at planning ("Partition X's offset was
    changed from A to B, some data may have been missed"); so do we. A deleted
    topic is data loss too: Kafka's source reports its partitions as gone and
    goes on (failOnDataLoss=false), reading the topic from its start if it is
    created again (its partitions are then new to the query).
    """
    out = []
    for tp, end in sorted(moved.items()):
        if end is None and present is not None and tp.topic not in present:
            out.append(f"topic {tp.topic!r} was deleted, the query had read {tp.topic}/"
                       f"{tp.partition} up to offset {reached[tp]} (if the topic is created "
                       "again, the query reads it from its start)")
        elif end is None:
            out.append(f"{tp.topic}/{tp.partition} is gone (the topic now has fewer "
                       f"partitions), the query had read it up to offset {reached[tp]}")
        else:
            out.append(f"{tp.topic}/{tp.partition}'s offset was changed from {reached[tp]} to "
                       f"{end}: its log now ends below the offset the query had reached (the "
                       "topic was deleted and created again, or its log was truncated)")
    return out


def report_data_loss(problems: Sequence[str], fail_on_data_loss: bool, advice: str,
                     going_on: str) -> list[str]:
    """The problems as warnings to log, each followed by `going_on`; raise instead, all
    of them followed by `advice`, when failOnDataLoss is true.

    Raises:
        DataLossError: there are problems and fail_on_data_loss is true.
    """
    if problems and fail_on_data_loss:
        raise DataLossError(f"{'; '.join(problems)}. {advice}")
    return [f"{p}; {going_on}" for p in problems]


def report_moved_back(problems: Sequence[str], fail_on_data_loss: bool) -> list[str]:
    """Offsets that went back (`offsets_moved_back`), as `report_data_loss` says them.

    Raises:
        DataLossError: there are problems and fail_on_data_loss is true.
    """
    return report_data_loss(
        problems, fail_on_data_loss,
        "Some data may have been missed. Set failOnDataLoss=false to go on from the "
        "partitions' new end offsets (events below them are skipped; a deleted topic is "
        "skipped until it is created again), or start the query with a new checkpointLocation "
        "to read the topic again from startingOffsets",
        "some data may have been missed, going on (failOnDataLoss=false)")


def plan_stream_batch(starts: Mapping[TopicPartition, int], stops: Mapping[TopicPartition, int],
                      bounds: Mapping[TopicPartition, PartitionBounds], fail_on_data_loss: bool,
                      durable_ends: Mapping[TopicPartition, int] | None = None
                      ) -> tuple[Offsets, Offsets, list[str]]:
    """The offsets a micro-batch [starts, stops) reads, checked against the partitions'
    stored offsets now; also the warnings to log (failOnDataLoss=false).

    Kafka's rules, on the driver (a task finds the same only after it started):
    1. A stop below its start (latestOffset found the offsets went back and
       failOnDataLoss is false), or a start or stop above the partition's end
       now (they went back since the batch was planned: a re-run batch, see
       `moved_back` for `durable_ends`), or a partition that is gone: data
       loss (`offsets_moved_back`); nothing of that partition is read (false).
    2. A start below the partition's start_offset (retention removed it):
       data loss (`check_data_loss`); false moves the start up.

    Raises:
        DataLossError: either rule, with fail_on_data_loss true.
    """
    backwards = {tp: stops[tp] for tp in sorted(starts) if stops.get(tp, starts[tp]) < starts[tp]}
    present = {tp.topic for tp in bounds}
    problems = offsets_moved_back(starts, backwards, present)
    reached = {tp: max(start, stops.get(tp, start)) for tp, start in starts.items()
               if tp not in backwards}
    gone = moved_back(reached, {tp: b.end_offset for tp, b in bounds.items()}, durable_ends)
    problems += offsets_moved_back(reached, gone, present)
    warnings = report_moved_back(problems, fail_on_data_loss)
    moved = backwards.keys() | gone.keys()
    kept = check_data_loss({tp: o for tp, o in starts.items() if tp not in moved}, bounds,
                           fail_on_data_loss)
    warnings += [f"{tp.topic}/{tp.partition}: offsets {starts[tp]}..{kept[tp] - 1} are no longer "
                 "stored (retention removed them); skipped (failOnDataLoss=false)"
                 for tp in sorted(kept) if kept[tp] != starts[tp]]
    return kept, {tp: stop for tp, stop in stops.items() if tp not in moved}, warnings


# ---------------------------------------------------------------- splits


@dataclass(frozen=True, slots=True)
class Split:
    """One Spark input partition: a topic partition, its slot ranges, [start, stop)."""

    topic: str
    partition: int
    ranges: tuple[HashRange, ...]
    start: int
    stop: int

    @property
    def full_range(self) -> bool:
        """True when the split reads every slot (no hash_ranges on the wire)."""
        return self.ranges == (FULL_RANGE,)


def plan_splits(starts: Mapping[TopicPartition, int], stops: Mapping[TopicPartition, int],
                groups: Mapping[TopicPartition, Sequence[Sequence[HashRange]]]) -> list[Split]:
    """Splits = topic partitions with start < stop, times range groups (rule 1).

    Args:
        groups: per topic partition, one group of slot ranges per split
            (normally one range each; a subscription consumer's ranges form
            one group; pushdown may narrow a group).
    """
    splits: list[Split] = []
    for tp in sorted(starts):
        start, stop = starts[tp], stops.get(tp, starts[tp])
        if start >= stop:
            continue
        splits.extend(Split(tp.topic, tp.partition, tuple(group), start, stop)
                      for group in groups[tp] if group)
    return splits


# ---------------------------------------------------------------- streaming


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's offset form: {topic: {"partition": next offset}}, in a fixed order
    (Spark compares offsets by their JSON text)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json(value: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Read back `offsets_to_json`'s form (as Spark stores it in the checkpoint)."""
    return {TopicPartition(topic, int(p)): int(offset)
            for topic, partitions in value.items() for p, offset in partitions.items()}


def limit_offsets(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
                  events_max: int | None) -> Offsets:
    """End offsets admitting at most `events_max` events, split by backlog (rule 4).

    Every partition in `latest` gets an end; one missing from `start` is taken
    to have no backlog (callers add new partitions to `start` first). With
    events_max None everything is admitted.
    """
    ends = {tp: max(latest[tp], start.get(tp, latest[tp])) for tp in latest}
    backlog = {tp: ends[tp] - start.get(tp, ends[tp]) for tp in ends}
    total = sum(backlog.values())
    if events_max is None or total <= events_max:
        return dict(sorted(ends.items()))
    assert events_max >= 1
    shares = {tp: events_max * n // total for tp, n in backlog.items()}
    left = events_max - sum(shares.values())
    # Hand what rounding left over to the largest remainders (ties: lowest partition).
    order = sorted(backlog, key=lambda tp: (-(events_max * backlog[tp] % total), tp))
    for tp in order[:left]:
        shares[tp] += 1
    return {tp: start.get(tp, ends[tp]) + shares[tp] for tp in sorted(ends)}
