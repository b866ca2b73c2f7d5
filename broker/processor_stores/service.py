"""The event processor stores of one broker: one task owns every write.

Why one task: a claim is read, compare, write. With a single writer there is
no lock and no interleaving, so the compare-and-set is atomic (STYLE §5).
Commands wait in a bounded queue (`processor_store_queue_max`; past it the
caller gets RESOURCE_EXHAUSTED). The task takes what is ready, up to
`processor_commit_commands_max`, decides each in order (`rules.py`) against
the store plus what earlier commands of the same round decided (an
overlay), writes the round as one WriteBatch and answers. The batch is
fsynced like produce when it holds a checkpoint, a fence or a change of
owner; a round of renewals only is not (losing one loses nothing: the owner
renews again within an interval).

Reads (`list_*`) go to RocksDB directly: a WriteBatch is atomic, so a read
sees a round whole or not at all. Runs on the broker's event loop; the
write runs on a worker thread while the task waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.partition import now_ms
from broker.processor_stores import keys, rules
from broker.processor_stores.keys import Fence, Owned, Position
from broker.supervision import RestartBackoff, describe_cause, fail_pending, supervise
from broker.topics import TopicRegistry

log = logging.getLogger("keybus.processor_stores")
OWNERSHIP, CHECKPOINTS = "ownership", "checkpoints"


@dataclass(frozen=True, slots=True)
class Group:
    """A consumer group's records of one topic: what every command addresses."""

    namespace: str
    topic: str
    topic_id: int
    consumer_group: str
    incarnation: str = ""  # the topic's (TopicMeta.incarnation): its checkpoints' too

    def where(self, partition: int) -> rules.Where:
        return rules.Where(self.topic, partition, self.consumer_group)


@dataclass(slots=True)
class _Command:
    decide: Callable[[_Overlay, int], Any]
    group: Group | None  # whose records it writes (None: writes nothing)
    future: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


class _Overlay:
    """The store as this round sees it: RocksDB plus the round's own writes."""

    def __init__(self, store: RocksStore) -> None:
        self.store = store
        self.puts: dict[tuple[str, bytes], bytes] = {}
        self.durable = False

    def get(self, family: str, key: bytes) -> bytes | None:
        if (family, key) in self.puts:
            return self.puts[(family, key)]
        return self.store.get_value(family, key)

    def put(self, family: str, key: bytes, value: bytes, durable: bool) -> None:
        self.puts[(family, key)] = value
        self.durable = self.durable or durable

    def fence(self, group: Group, partition: int) -> Fence | None:
        value = self.get(CHECKPOINTS, keys.checkpoint_key(
            group.topic_id, group.namespace, group.consumer_group, partition, keys.FENCE))
        return keys.decode_fence(value) if value is not None else None

    def put_fence(self, group: Group, partition: int, fence: Fence) -> None:
        self.put(CHECKPOINTS, keys.checkpoint_key(group.topic_id, group.namespace,
                                                  group.consumer_group, partition, keys.FENCE),
                 keys.encode_fence(fence), durable=True)


class ProcessorStores:
    """Ownership and checkpoints of every consumer group on this broker."""

    def __init__(self, store: RocksStore, registry: TopicRegistry, settings: Settings,
                 clock: Callable[[], int] = now_ms) -> None:
        self.store = store
        self.registry = registry
        self.settings = settings
        self._clock = clock
        self._queue: asyncio.Queue[_Command] = asyncio.Queue(settings.processor_store_queue_max)
        self._task: asyncio.Task[None] | None = None
        # Supervision (broker/supervision.py): the round being decided, and
        # why commands are refused until the task restarts.
        self._in_flight: list[_Command] = []
        self._failure: dict[str, Any] | None = None

    def start(self) -> None:
        backoff = RestartBackoff(self.settings.task_restart_backoff_ms,
                                 self.settings.task_restart_backoff_max_ms)
        self._task = asyncio.get_running_loop().create_task(supervise(
            "the processor store task", self._run, self._fail, self._restart, backoff, log))

    def _check_live(self, group: Group | None) -> None:
        """Refuse a command of a topic deleted (or deleted and created again: a new
        id) since it was queued: its records went with the topic."""
        if group is None:
            return
        try:
            live = self.registry.meta(group.topic).topic_id == group.topic_id
        except BrokerError:
            live = False
        if not live:
            raise BrokerError("topic_deleted", topic=group.topic)

    def _fail(self, error: Exception, retry_ms: int) -> None:
        """Fail the round and the queue; refuse commands until `_restart`."""
        self._failure = {"what": "the processor store task", "cause": describe_cause(error),
                         "retry_ms": retry_ms}
        failure = self._failure
        fail_pending(self._in_flight, self._queue, lambda: BrokerError("task_failed", **failure))

    def _restart(self) -> None:
        """Nothing to reload: a round keeps its state in its overlay, and the
        store holds only whole rounds."""
        self._failure = None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        # cancelled mid-round: the round in flight is answered too
        fail_pending(self._in_flight, self._queue, lambda: BrokerError("shutting_down"))

    def group(self, namespace: str, topic: str, consumer_group: str) -> Group:
        """The group's address; refuses bad names and unknown topics."""
        rules.check_group(namespace, consumer_group, self.settings.processor_name_bytes_max)
        meta = self.registry.meta(topic)
        return Group(namespace, topic, meta.topic_id, consumer_group, meta.incarnation)

    # ------------------------------------------------------------ ownership

    def list_ownership(self, group: Group) -> list[tuple[int, Owned]]:
        prefix = keys.ownership_prefix(group.topic_id, group.namespace, group.consumer_group)
        return [(keys.partition_of_key(key), keys.decode_owned(value))
                for key, value in self.store.scan_prefix(OWNERSHIP, prefix)]

    async def claim(self, group: Group, claims: list[rules.Claim]) -> list[tuple[int, Owned]]:
        """Apply each claim as a compare-and-set; returns the ones that won."""
        partitions = self.registry.meta(group.topic).partitions
        rules.check_claims(claims, partitions, self.settings.processor_name_bytes_max)
        if not claims:
            return []

        def decide(overlay: _Overlay, now: int) -> list[tuple[int, Owned]]:
            won = []
            for claim in claims:
                key = keys.ownership_key(group.topic_id, group.namespace, group.consumer_group,
                                         claim.partition)
                value = overlay.get(OWNERSHIP, key)
                current = keys.decode_owned(value) if value is not None else None
                outcome = rules.decide_claim(current, overlay.fence(group, claim.partition),
                                             claim, now)
                if outcome is None:
                    continue
                overlay.put(OWNERSHIP, key, keys.encode_owned(outcome.owned),
                            durable=outcome.fence is not None)
                if outcome.fence is not None:
                    overlay.put_fence(group, claim.partition, outcome.fence)
                won.append((claim.partition, outcome.owned))
            return won

        result: list[tuple[int, Owned]] = await self._submit(decide, group)
        return result

    # ------------------------------------------------------------ checkpoints

    def list_checkpoints(self, group: Group, partitions: list[int]) -> list[tuple[int, Position]]:
        """The group's checkpoints, of the given partitions only when any are given
        (each must be one of the topic's: a typo would otherwise read as "no checkpoint")."""
        if partitions:
            found = []
            for partition in sorted(set(partitions)):
                self.registry.partition(group.topic, partition)  # refuses one out of range
                value = self.store.get_value(CHECKPOINTS, keys.checkpoint_key(
                    group.topic_id, group.namespace, group.consumer_group, partition))
                if value is not None:
                    found.append((partition, keys.decode_position(value)))
            return found
        prefix = keys.checkpoint_prefix(group.topic_id, group.namespace, group.consumer_group)
        return [(keys.partition_of_key(key), keys.decode_position(value))
                for key, value in self.store.scan_prefix(CHECKPOINTS, prefix)]

    async def update_checkpoint(self, group: Group, partition: int, position: Position,
                                incarnation: str = "") -> None:
        """Store a checkpoint (fsynced) unless its epoch is fenced off, or it says
        it is of another incarnation of the topic (written by a processor that read
        the topic before it was deleted and created again: its offset is not one of
        this log's). `incarnation` "" says nothing (older clients)."""
        if incarnation and group.incarnation and incarnation != group.incarnation:
            raise BrokerError("checkpoint_other_incarnation", topic=group.topic,
                              partition=partition, offset=position.offset,
                              written=incarnation, current=group.incarnation)
        # The durable log end, not the high watermark (a restarted broker of a
        # cluster holds readers back while checkpoints of what they read come).
        end_offset = self.registry.partition(group.topic, partition).log_end
        if position.offset >= end_offset:
            raise BrokerError("checkpoint_invalid", detail=(
                f"checkpoint offset {position.offset} of {group.topic!r}/{partition} is not "
                f"in the log; allowed 0..{end_offset - 1} (the offset of the last processed "
                "event)" if end_offset else f"{group.topic!r}/{partition} is empty: there is "
                "no event to checkpoint yet"))
        key = keys.checkpoint_key(group.topic_id, group.namespace, group.consumer_group, partition)

        def decide(overlay: _Overlay, now: int) -> None:
            rules.check_checkpoint_epoch(overlay.fence(group, partition), position.epoch,
                                         group.where(partition))
            overlay.put(CHECKPOINTS, key, keys.encode_position(position), durable=True)

        await self._submit(decide, group)

    async def fence(self, group: Group, partition: int, epoch: int, owner_id: str) -> None:
        """Register the epoch an owner won elsewhere: older epochs are refused from now on."""
        self.registry.partition(group.topic, partition)  # refuses an unknown partition
        rules.check_owner_id(owner_id, self.settings.processor_name_bytes_max, empty_ok=False)

        def decide(overlay: _Overlay, now: int) -> None:
            raised = rules.decide_fence(overlay.fence(group, partition), epoch, owner_id,
                                        group.where(partition))
            if raised is not None:
                overlay.put_fence(group, partition, raised)

        await self._submit(decide, group)

    # ------------------------------------------------------------ the task

    async def topic_deleted(self, topic: str) -> None:
        """A delete listener (`TopicRegistry.delete`): return once no round writes
        records of the topic, so none lands after its keys are deleted. The topic
        left the registry already, so rounds decided from now on refuse its
        commands (`_round`); a no-op command queued behind the others waits for
        the round writing now."""
        if self._task is None or self._task.done() or self._failure is not None:
            return  # nothing runs: a failed task's rounds were answered
        command = _Command(lambda overlay, now: None, None)
        await self._queue.put(command)  # behind the rounds queued before
        with contextlib.suppress(BrokerError):
            await command.future

    async def _submit(self, decide: Callable[[_Overlay, int], Any], group: Group) -> Any:
        if self._task is None or self._task.done():
            raise BrokerError("shutting_down")
        if self._failure is not None:
            raise BrokerError("task_failed", **self._failure)
        command = _Command(decide, group)
        try:
            self._queue.put_nowait(command)
        except asyncio.QueueFull:
            raise BrokerError("queue_full", what="the processor store queue",
                              max=self.settings.processor_store_queue_max) from None
        return await command.future

    async def _run(self) -> None:
        while True:
            self._in_flight = commands = [await self._queue.get()]
            while len(commands) < self.settings.processor_commit_commands_max \
                    and not self._queue.empty():
                commands.append(self._queue.get_nowait())
            await self._round(commands)

    async def _round(self, commands: list[_Command]) -> None:
        """Decide the commands in order, write them in one WriteBatch, answer."""
        overlay = _Overlay(self.store)
        now = self._clock()
        outcomes: list[tuple[_Command, Any, BaseException | None]] = []
        for command in commands:
            try:
                self._check_live(command.group)
                outcomes.append((command, command.decide(overlay, now), None))
            except BrokerError as e:
                outcomes.append((command, None, e))
        failure: BaseException | None = None
        if overlay.puts:
            puts = [(family, key, value) for (family, key), value in overlay.puts.items()]
            try:
                await asyncio.to_thread(self.store.put_many, puts, overlay.durable)
            except Exception as e:  # a RocksDB failure fails the whole round, loudly
                log.exception("processor store write failed")
                failure = e
        for command, result, error in outcomes:
            if command.future.done():
                continue
            if error is not None or failure is not None:
                command.future.set_exception(error or failure)  # type: ignore[arg-type]
            else:
                command.future.set_result(result)
