"""The connector's broker calls for reads and describes, through the SDK.

Reads go through `sdk.sync.SyncReader` (bounded, with hash ranges and a
filter; it reconnects and resumes on a broken stream) and describes through
`sdk.sync.SyncAdmin`; this module only adds the context a Spark user needs
in error messages (which call, which broker, what to check). Writes go
through `sdk.producer.Producer` (task_producer.py), which reports its
failures with `call_failure` too.

Runs on the driver (describe) and in Spark tasks (read). Every channel is
opened and closed by the call that needs it: nothing here is pickled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

from sdk import errors
from sdk.cluster import describe_role
from sdk.core.columns import record_events
from sdk.core.model import HashRange, TopicPartition
from sdk.core.pb import keybus_pb2 as pb
from sdk.loop_thread import LoopThread
from sdk.security import ClientSecurity
from sdk.subscription_admin import SubscriptionAdmin
from sdk.sync import SyncAdmin, SyncReader
from spark_connector.partitioning import PartitionBounds

_log = logging.getLogger("keybus.spark")
T = TypeVar("T")

CALL_TIMEOUT_S = 30.0
# How long a running stream's driver keeps asking a broker it cannot reach
# (a broker restart takes seconds), as Kafka's source waits for its brokers
# (default.api.timeout.ms 60 s) before the query fails.
STREAM_UNREACHABLE_WAIT_S = 60.0
_RETRY_PAUSE_S = (0.1, 0.25, 0.5, 1.0, 2.0)


class Failure:
    """Why a broker call failed, as far as a Spark task must tell them apart.

    OUT_OF_RANGE has several causes on the broker (broker/errors.py), and each
    asks for a different answer: RETENTION (offset_before_start,
    bootstrap_snapshot_gone: the offsets were removed, data loss), PAST_END
    (offset_past_end: the log now ends below the offset, so its offsets went
    back: the topic was deleted and created again), TRUNCATED (log_truncated:
    a cluster broker cut events that were never acknowledged). TOPIC_GONE: the
    topic does not exist (deleted). RECREATED: a read that lost its broker and
    reopened found the topic deleted and created again (TopicRecreated,
    `read_other_incarnation`), so its offsets name other events. OTHER:
    anything else.
    """

    RETENTION = "retention"
    PAST_END = "past end"
    TRUNCATED = "truncated"
    TOPIC_GONE = "topic gone"
    RECREATED = "recreated"
    OTHER = "other"


# Each OUT_OF_RANGE by the broker's name for it (sdk/core/error_names.py)...
_OUT_OF_RANGE_NAMES = {"offset_before_start": Failure.RETENTION,
                       "bootstrap_snapshot_gone": Failure.RETENTION,
                       "offset_past_end": Failure.PAST_END,
                       "log_truncated": Failure.TRUNCATED}
# ... or, from a broker that does not name its errors, by its words.
_OUT_OF_RANGE_WORDS = (("removed by retention", Failure.RETENTION),
                       ("is past the end", Failure.PAST_END),
                       ("was truncated to offset", Failure.TRUNCATED))


def failure_of(error: errors.KeybusError) -> str:
    """The Failure value of an SDK error."""
    if isinstance(error, errors.TopicNotFound):
        return Failure.TOPIC_GONE
    if isinstance(error, errors.TopicRecreated):
        return Failure.RECREATED
    if isinstance(error, errors.OffsetOutOfRange):
        if error.broker_error:
            return _OUT_OF_RANGE_NAMES.get(error.broker_error, Failure.OTHER)
        for words, failure in _OUT_OF_RANGE_WORDS:
            if words in error.message:
                return failure
    return Failure.OTHER


class BrokerCallError(RuntimeError):
    """A broker call failed; the message says which call, which broker and why.

    Attributes:
        failure: why, as a Failure value (a task answers retention, offsets
            that went back and a deleted topic differently).
    """

    def __init__(self, message: str, failure: str = Failure.OTHER, *,
                 unreachable: bool = False) -> None:
        super().__init__(message)
        self.failure = failure
        self.unreachable = unreachable  # the broker could not be reached (UNAVAILABLE)

    @property
    def out_of_range(self) -> bool:
        """Offsets a read needs are no longer stored (retention)."""
        return self.failure == Failure.RETENTION


def call_failure(call: str, broker: str, error: errors.KeybusError) -> BrokerCallError:
    """The BrokerCallError for an SDK error of `call` on `broker`, with a hint."""
    hint = ""
    if isinstance(error, errors.Unavailable):
        hint = " (is the broker running, and is option 'broker' its address?)"
    return BrokerCallError(f"keybus {call} on broker {broker} failed: {error.message}{hint}",
                           failure_of(error), unreachable=isinstance(error, errors.Unavailable))


def describe(broker: str, topics: Sequence[str], security: ClientSecurity | None = None,
             *, missing_ok: bool = False, unreachable_wait_s: float = 0.0
             ) -> dict[TopicPartition, PartitionBounds]:
    """Stored offsets of every partition of `topics` (DescribeTopic).

    Args:
        missing_ok: a topic that does not exist has no partitions here (a
            running streaming query whose topic was deleted: data loss, which
            the caller judges) instead of failing the call.
        unreachable_wait_s: how long to keep asking while the broker cannot be
            reached (a running stream: its broker may be restarting); 0 = fail
            at once (a read being defined: the address may be wrong).
    Raises:
        BrokerCallError: a topic does not exist (unless missing_ok), or the
            broker cannot be reached (for unreachable_wait_s).
    """
    infos = retry_while_unreachable(
        lambda: topic_infos(broker, topics, security, missing_ok), unreachable_wait_s,
        "a running stream", warn=True)
    return {TopicPartition(topic, p.partition): PartitionBounds(p.start_offset, p.end_offset,
                                                                info.incarnation)
            for topic, info in infos.items() for p in info.partitions}


def retry_while_unreachable(call: Callable[[], T], wait_s: float, waiter: str, *,
                            warn: bool = False) -> T:
    """`call()`, asked again with growing pauses while it fails because the broker
    cannot be reached (a BrokerCallError with `unreachable`), for up to `wait_s`:
    a broker restart takes seconds. Then the last failure is raised, saying how
    long `waiter` waited; any other failure at once (`wait_s` 0: the first too).

    Args:
        warn: log the first failure as a WARNING that says it is asked again.
    """
    began = time.monotonic()
    attempt = 0
    while True:
        try:
            return call()
        except BrokerCallError as e:
            waited_s = time.monotonic() - began
            if not e.unreachable or waited_s >= wait_s:
                if e.unreachable and wait_s > 0:
                    raise BrokerCallError(f"{e} (unreachable for {waited_s:.0f} s, the most "
                                          f"{waiter} waits)", e.failure,
                                          unreachable=True) from None
                raise
            if warn and attempt == 0:
                _log.warning("%s; asking again for up to %.0f s", e, wait_s)
            pause_s = _RETRY_PAUSE_S[min(attempt, len(_RETRY_PAUSE_S) - 1)]
            time.sleep(min(pause_s, max(wait_s - waited_s, 0.0)))
            attempt += 1


def offsets_for_scns(broker: str, scns: Sequence[tuple[TopicPartition, int]],
                     bounds: Mapping[TopicPartition, PartitionBounds],
                     security: ClientSecurity | None = None) -> dict[TopicPartition, int]:
    """The offset of each partition's first stored event whose SCN is >= the given
    one (its end offset when none is), as the broker resolves StartPosition.scn.

    One bounded read per partition, up to its end offset in `bounds`, that stops
    at the first event it gets: Spark's offsets are log offsets, so an SCN start
    is turned into one on the driver, once, when the read is planned.
    """
    out: dict[TopicPartition, int] = {}
    for tp, scn in scns:
        end = bounds[tp].end_offset
        out[tp] = end
        try:
            with SyncReader(broker, tp.topic, tp.partition, start={"scn": scn}, stop_offset=end,
                            events_max=1, security=security) as reader:
                out[tp] = next((e.offset for batch in reader for e in record_events(batch.record)
                                if e.scn >= scn), end)
        except errors.KeybusError as e:
            raise call_failure(f"Read({tp.topic!r}/{tp.partition}, scn {scn})", broker,
                               e) from None
    return out


def topic_infos(broker: str, topics: Sequence[str], security: ClientSecurity | None = None,
                missing_ok: bool = False) -> dict[str, pb.TopicInfo]:
    """DescribeTopic of each topic (missing_ok: leaves out those that do not exist).

    Raises:
        BrokerCallError: a topic does not exist, or the broker cannot be reached.
    """
    out: dict[str, pb.TopicInfo] = {}
    with SyncAdmin(broker, security=security) as admin:
        for topic in topics:
            try:
                out[topic] = admin.describe_topic(topic)
            except errors.TopicNotFound as e:
                if not missing_ok:
                    raise call_failure(f"DescribeTopic({topic!r})", broker, e) from None
            except errors.KeybusError as e:
                raise call_failure(f"DescribeTopic({topic!r})", broker, e) from None
    return out


def durable_ends(broker: str, topics: Sequence[str], security: ClientSecurity | None = None
                 ) -> dict[TopicPartition, int]:
    """Each partition's durable log end on `broker` (DescribeCluster), for a broker
    that reports them; DescribeTopic's end_offset is the readable end, held back
    to the high watermark on a broker of a cluster. Empty when the broker does
    not answer: the caller then goes by DescribeTopic alone."""
    loop = LoopThread("keybus-spark-describe")
    out: dict[TopicPartition, int] = {}
    try:
        for topic in topics:
            try:
                info = loop.run(describe_role(broker, topic, security=security), CALL_TIMEOUT_S)
            except errors.KeybusError:
                continue
            out.update({TopicPartition(topic, p.partition): p.log_end_offset
                        for p in info.partitions})
    finally:
        loop.stop()
    return out


def subscription_ranges(broker: str, topics: Sequence[str], subscription: str,
                        security: ClientSecurity | None = None
                        ) -> dict[TopicPartition, list[list[HashRange]]]:
    """Each consumer's hash ranges per topic partition of a Key_Shared
    subscription, as DescribeSubscription (and `keybus subscriptions describe`)
    reports them.

    Raises:
        BrokerCallError: the topic or subscription does not exist, or the
            broker cannot be reached.
    """
    loop = LoopThread("keybus-spark-describe")
    out: dict[TopicPartition, list[list[HashRange]]] = {}
    try:
        for topic in topics:
            try:
                info = loop.run(_describe_subscription(broker, topic, subscription, security),
                                CALL_TIMEOUT_S)
            except errors.KeybusError as e:
                raise call_failure(f"DescribeSubscription({topic!r}, {subscription!r})", broker,
                               e) from None
            for p in info.partitions:
                out[TopicPartition(topic, p.partition)] = [
                    [HashRange(r.slot_first, r.slot_last) for r in c.ranges] for c in p.consumers]
    finally:
        loop.stop()
    return out


async def _describe_subscription(broker: str, topic: str, subscription: str,
                                 security: ClientSecurity | None) -> pb.SubscriptionInfo:
    async with SubscriptionAdmin(broker, security=security) as admin:
        return await admin.describe_subscription(topic, subscription)


def read_records(broker: str, topic: str, partition: int, start: int | str, stop: int,
                 ranges: Sequence[HashRange] | None, key_filter: pb.KeyFilter | None,
                 events_max: int, security: ClientSecurity | None = None,
                 incarnation: str | None = None) -> Iterator[pb.Record]:
    """The records of a bounded read of [start, stop); ranges None = every slot.

    Args:
        start: an offset, or "earliest".
        incarnation: the topic's incarnation the offsets are of (the batch's
            planned one): the broker refuses the read of another (RECREATED);
            None = whichever the broker holds.
    Raises:
        BrokerCallError: the read failed (its `failure` says why).
    """
    try:
        with SyncReader(broker, topic, partition, start=start, stop_offset=stop,
                        hash_ranges=ranges, key_filter=key_filter,
                        events_max=events_max, security=security,
                        incarnation=incarnation or None) as reader:
            for batch in reader:
                yield batch.record
    except errors.KeybusError as e:
        raise call_failure(f"Read({topic!r}/{partition})", broker, e) from None
