"""Deleting a topic while everything uses it, as a user would.

Goal: with a producer sending (requests in flight), a Key_Shared and a Shared
consumer acking, a following log reader and a following bootstrap reader, an
event processor checkpointing in the broker's stores and a `keybus consume`
child all active, and retention and view passes running, `keybus topics
delete` makes each of them fail within seconds with an error naming the
topic (no hang, no traceback, no retry until a delivery timeout, no "lost the
broker": the consumers and the CLI say "was deleted", also when grpcio failed
an ack's write on the ended stream). The broker
logs no ERROR and no traceback. The topic created again under the same name
starts from scratch: offsets from 0, no subscription, cursor, view entry,
checkpoint or ownership record of the old one. Once the broker stops, every
column family holds keys of live topics only.

The event processor may close and reopen its partitions before the delete
(under load its read falls behind the 20 kB retention, or a call misses its
deadline: docs/event-processor.md, "Not done"); what is checked of it is that
the delete closes every partition it has open, that it is told the topic is
gone, and that it was told of nothing but that and those failures of load.

Method: one broker process (retention every 50 ms, 20 kB per partition, view
passes of 500 events), the SDK parts in this process, the CLI as children;
every user attached (the CLI's subscription listed) before the delete, as a
CLI that subscribes after it is rightly told the topic "does not exist";
every wait bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.log.rocks_store import COLUMN_FAMILIES, RocksStore
from sdk import Admin, Consumer, Producer, Reader, SubscriptionAdmin, TopicNotFound
from sdk.errors import DEADLINE_EXCEEDED, KeybusError, OffsetOutOfRange
from sdk.processor import CloseReason, EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from sdk.stores import BrokerCheckpointStore, BrokerOwnershipStore
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.processors import wait_for

TOPIC = "doomed"
FAIL_WITHIN_S = 5.0


@pytest.fixture
def busy_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", "--retention-check-interval-ms", "50",
                            "--view-pass-events-max", "500")
    process.start()
    yield process
    process.stop()


def keybus(broker: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker)
    return subprocess.Popen([sys.executable, "-m", "keybus", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


class Users:
    """Every kind of user of the topic, each noting how it ended."""

    def __init__(self, broker: str) -> None:
        self.broker = broker
        self.ended: dict[str, BaseException | str] = {}
        self.sends: list[asyncio.Future[Any]] = []
        self.processed = 0
        self.opens: list[int] = []  # partitions, as the processor opened them
        self.closes: list[tuple[int, CloseReason]] = []
        self.processor_errors: list[tuple[int | None, BaseException]] = []  # (partition, error)
        self.tasks: list[asyncio.Task[None]] = []

    def note(self, who: str, what: BaseException | str) -> None:
        self.ended.setdefault(who, what)

    async def produce(self, producer: Producer, stop: asyncio.Event) -> None:
        key = 0
        while not stop.is_set():
            try:
                for _ in range(20):
                    self.sends.append(producer.send_nowait(key, b"v" * 200))
                    key += 1
            except Exception as e:
                self.note("producer send", e)
                return
            await asyncio.sleep(0.002)

    async def consume(self, kind: str) -> None:
        consumer = await Consumer.subscribe(self.broker, TOPIC, kind, type=kind,
                                            start="earliest")
        try:
            while True:
                consumer.ack(await consumer.receive(30))
        except Exception as e:
            self.note(f"{kind} consumer", e)
        finally:
            await consumer.close()

    async def read(self, start: str, partition: int) -> None:
        try:
            async with Reader(self.broker, TOPIC, partition, start=start, follow=True) as reader:
                async for _ in reader:
                    pass
            self.note(f"{start} reader", "ended without an error")
        except Exception as e:
            self.note(f"{start} reader", e)

    def processor(self) -> EventProcessor:
        async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
            self.processed += batch.count
            await context.update_checkpoint(batch)

        async def on_error(context: PartitionContext | None, error: BaseException) -> None:
            self.processor_errors.append((context.partition if context else None, error))

        async def on_open(context: PartitionContext) -> None:
            self.opens.append(context.partition)

        async def on_close(context: PartitionContext, reason: CloseReason) -> None:
            self.closes.append((context.partition, reason))
        return EventProcessor(self.broker, TOPIC, "billing", on_event=on_event,
                              on_error=on_error, on_partition_initialize=on_open,
                              on_partition_close=on_close,
                              load_balancing_interval_ms=500, ownership_expiration_ms=2_000)

    def open_partitions(self) -> set[int]:
        """Partitions the processor opened and has not closed."""
        return {p for p in (0, 1) if self.opens.count(p) > [c[0] for c in self.closes].count(p)}


def gone(error: BaseException) -> bool:
    return isinstance(error, TopicNotFound) and f"topic {TOPIC!r} " in str(error)


def under_load(error: BaseException) -> bool:
    """A processor's failure before the delete that load explains: its read fell
    behind the 20 kB retention, or a call to the broker missed its deadline."""
    return isinstance(error, OffsetOutOfRange) or \
        (isinstance(error, KeybusError) and error.code == DEADLINE_EXCEEDED)


def live_keys_only(data_dir: Path) -> dict[str, int]:
    """Keys of each column family whose topic id is no live topic's (only families with any)."""
    store = RocksStore(str(data_dir / "log.rocksdb"), fsync=False)
    try:
        live = {topic["topic_id"].to_bytes(4, "big") for topic in store.load_topics()}
        stale = {family: sum(1 for key, _ in store.scan_prefix(family, b"") if key[:4] not in live)
                 for family in COLUMN_FAMILIES if family not in ("meta", "acls")}
    finally:
        store.close()
    return {family: count for family, count in stale.items() if count}


def test_deleting_a_topic_in_use_ends_every_user_and_leaves_nothing(
        busy_broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    address = busy_broker.address

    async def go() -> None:
        async with Admin(address) as admin:
            await admin.create_topic(TOPIC, partitions=2, retention_bytes=20_000)
        users = Users(address)
        producer = await Producer.create(address, TOPIC)
        stop = asyncio.Event()
        processor = users.processor()
        cli = keybus(address, "consume", TOPIC, "-s", "cli", "--from", "earliest")
        users.tasks = [asyncio.create_task(c) for c in (
            users.produce(producer, stop), users.consume("key_shared"), users.consume("shared"),
            users.read("earliest", 0), users.read("bootstrap", 1))]
        await processor.start()
        try:
            async def retention_ran() -> bool:
                async with Admin(address) as admin:
                    info = await admin.describe_topic(TOPIC)
                return all(p.start_offset > 0 for p in info.partitions) and users.processed > 0
            await wait_for(retention_ran, 20, "retention trimmed both partitions while "
                           "the processor processed")

            async def all_attached() -> bool:  # a CLI started late would rightly be told
                async with SubscriptionAdmin(address) as subscriptions:  # "does not exist"
                    listed = await subscriptions.list_subscriptions(TOPIC)
                return {"key_shared", "shared", "cli"} <= {s.subscription for s in listed}
            await wait_for(all_attached, 30, "the consumers and `keybus consume` attached")
            # Under load the processor's read may fall behind the 20 kB retention, or a
            # checkpoint miss its deadline: the partition closes ("error") and reopens
            # next cycle (docs/event-processor.md). What the delete must do: close every
            # partition open then (or opened since), and tell the processor the topic is gone.
            open_at_delete = users.open_partitions()
            closes_before, errors_before = len(users.closes), len(users.processor_errors)
            deleting = await asyncio.to_thread(subprocess.run, [
                sys.executable, "-m", "keybus", "topics", "delete", TOPIC, "--broker", address],
                capture_output=True, text=True, timeout=30, env=dict(os.environ,
                                                                    PYTHONPATH=str(REPO)))
            deleted_at = time.monotonic()
            stop.set()  # sends from now on would only find no topic: those in flight count
            assert deleting.returncode == 0, deleting.stderr
            assert deleting.stdout.startswith(f"deleted topic {TOPIC} ("), deleting.stdout
            users_ended = ("key_shared consumer", "shared consumer", "earliest reader",
                           "bootstrap reader")
            await wait_for(lambda: all(u in users.ended for u in users_ended)
                           and all(f.done() for f in users.sends) and not users.open_partitions()
                           and any(gone(e) for _, e in users.processor_errors[errors_before:])
                           and cli.poll() is not None, FAIL_WITHIN_S,
                           f"every user ends: {users.ended}, processor partitions still open "
                           f"{users.open_partitions()}, processor told "
                           f"{[repr(e) for _, e in users.processor_errors[errors_before:]]}, "
                           f"{sum(not f.done() for f in users.sends)} sends unanswered, "
                           f"cli {cli.poll()}")
            took_s = time.monotonic() - deleted_at
            for who in users_ended:
                error = users.ended[who]
                assert isinstance(error, TopicNotFound), (who, error)
                assert f"topic {TOPIC!r} " in str(error), (who, error)
            failed = [f.exception() for f in users.sends if f.exception() is not None]
            assert failed, "no send was pending at the delete"
            assert all(isinstance(e, TopicNotFound) and repr(TOPIC) in str(e)
                       for e in failed), {f"{type(e).__name__}: {e}" for e in failed}
            since = users.closes[closes_before:]
            assert {p for p, _ in since} >= open_at_delete, (open_at_delete, users.closes)
            # "error": its read was ended by the delete; "ownership_lost": its claim lapsed
            # first (renewals that missed their deadline under load)
            assert all(reason in ("error", "ownership_lost") for _, reason in since), users.closes
            said = [(p, f"{type(e).__name__}: {e}") for p, e in users.processor_errors]
            assert all(gone(e) or under_load(e) for _, e in users.processor_errors), said
            _, stderr = cli.communicate(timeout=5)
            assert cli.returncode == 1 and "Traceback" not in stderr, stderr
            # "was deleted" also when grpcio failed an ack's write on the ended stream
            # before it read the broker's status (INTERNAL: the consumer asks again at
            # once, unreported, and is told "does not exist")
            assert stderr.strip().splitlines()[-1] == \
                f"keybus: error: topic {TOPIC!r} was deleted", stderr
            assert "lost the broker" not in stderr, stderr
            lost = [r.getMessage() for r in caplog.records if "lost the broker" in r.getMessage()]
            assert lost == [], lost  # no user of the topic took its delete for a lost broker
            retried = [r.getMessage() for r in caplog.records if r.name == "keybus.producer"
                       and "shutting down" in r.getMessage()]
            assert retried == [], retried  # told "deleted", a producer does not retry
            assert took_s < FAIL_WITHIN_S
        finally:
            stop.set()
            await processor.stop()
            await producer.close()
            for task in users.tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if cli.poll() is None:
                cli.kill()
                cli.communicate(timeout=5)

        async with Admin(address) as admin:  # the same name again: from scratch
            info = await admin.create_topic(TOPIC, partitions=2)
            assert [(p.start_offset, p.end_offset) for p in info.partitions] == [(0, 0), (0, 0)]
            assert [p.view_keys for p in info.partitions] == [0, 0]
        async with SubscriptionAdmin(address) as subscriptions:
            assert await subscriptions.list_subscriptions(TOPIC) == []
        checkpoints, ownership = BrokerCheckpointStore(address), BrokerOwnershipStore(address)
        assert await checkpoints.list_checkpoints("", TOPIC, "billing") == []
        assert await ownership.list_ownership("", TOPIC, "billing") == []
        await checkpoints.close()
        await ownership.close()
        async with await Producer.create(address, TOPIC) as again:
            sent = await (await again.send_batch([1, 2, 3], [b"a", b"b", b"c"], partition=0))
        assert [e.offset for e in sent] == [0, 1, 2]
        consumer = await Consumer.subscribe(address, TOPIC, "key_shared", type="key_shared",
                                            start="earliest")
        got = [await consumer.receive(5) for _ in range(3)]
        assert [(m.partition, m.offset, m.value) for m in got] == \
            [(0, 0, b"a"), (0, 1, b"b"), (0, 2, b"c")]
        await consumer.close()

    asyncio.run(go())
    busy_broker.stop()
    log = busy_broker.log_path.read_text()
    assert "ERROR" not in log and "Traceback" not in log, log[-3000:]
    assert live_keys_only(busy_broker.data_dir) == {}
