"""A plain bootstrap Reader waits for a slot of a busy broker, and says so as a wait.

Goal: the broker serves `bootstrap_streams_max` bootstrap streams in their
snapshot or catch-up at once and refuses more with RESOURCE_EXHAUSTED
(`too_many_bootstraps`, "retry later"). The Databus client and `keybus
bootstrap` waited for a slot above the Reader, but an application reading
with `Reader(start="bootstrap")` itself failed at once with ResourceExhausted
(a probe against a broker with one slot held: the second Reader raised before
its first batch). Now the Reader waits, with its reconnect backoff, says the
wait at WARNING on `keybus.bootstrap` and the slot it got at INFO, and never
tells the application its broker was lost (`on_connection_change` is for
outages: a Databus registration turns it into on_error(Unavailable)).
Method: one broker process with --bootstrap-streams-max 1. A first plain
Reader bootstraps a 400 KB topic on a channel without BDP probing (HTTP/2's
64 KB window) and takes one batch, so its stream stays in its snapshot or
catch-up and holds the one slot. A second Reader bootstraps another topic;
once it says it waits, the first reads on to its end, which frees the slot;
the second then reads its whole topic. Bounded waits throughout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import grpc
import pytest

from sdk import Admin, Producer, Reader
from sdk.core.columns import Event
from tests.support.broker_process import BrokerProcess

HELD, WANTED = "slot-held", "slot-wanted"
HELD_EVENTS, HELD_VALUE_BYTES = 200, 2_000  # 400 KB: far past a 64 KB window
WANTED_KEYS = 500
BOUND_S = 60.0


async def _fill(address: str) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(HELD, partitions=1)
        await admin.create_topic(WANTED, partitions=1)
    async with await Producer.create(address, HELD) as producer:
        await producer.send_window([{"key": k, "value": b"x" * HELD_VALUE_BYTES}
                                    for k in range(HELD_EVENTS)], partition=0)
    async with await Producer.create(address, WANTED) as producer:
        await producer.send_window([{"key": k, "value": f"v{k}".encode()}
                                    for k in range(WANTED_KEYS)], partition=0)


async def _read_all(reader: Reader) -> list[Event]:
    events: list[Event] = []
    async with reader:
        async for batch in reader:
            events.extend(batch.events())
    return events


def _said(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "keybus.bootstrap" and r.levelno == level and text in r.getMessage()]


def test_a_second_bootstrap_reader_waits_for_the_slot_and_is_told_no_outage(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = BrokerProcess(tmp_path / "data", "--bootstrap-streams-max", "1")
    broker.start()
    outage: list[tuple[bool, str]] = []

    async def go() -> tuple[int, list[Event]]:
        await _fill(broker.address)
        slow = grpc.aio.insecure_channel(broker.address, options=[("grpc.http2.bdp_probe", 0)])
        first = Reader(broker.address, HELD, 0, start="bootstrap", bytes_max=4_096,
                       channel=slow)
        try:
            held = await first.__anext__()  # its stream is open: it holds the slot
            assert held.marker is not None and held.marker.phase == "snapshot"
            second = asyncio.create_task(_read_all(Reader(
                broker.address, WANTED, 0, start="bootstrap",
                on_connection_change=lambda up, text: outage.append((up, text)))))
            deadline = time.monotonic() + BOUND_S
            while not _said(caplog, logging.WARNING, "waits for a bootstrap slot"):
                if second.done():  # the old Reader: ResourceExhausted, no wait
                    second.result()
                    raise AssertionError("the second Reader ended without waiting")
                assert time.monotonic() < deadline, "the second Reader never said it waits"
                await asyncio.sleep(0.05)
            assert not second.done()
            held_events = len(await asyncio.wait_for(_read_all(first), BOUND_S))
            return held_events, await asyncio.wait_for(second, BOUND_S)
        finally:
            await first.close()
            await slow.close()

    try:
        with caplog.at_level(logging.INFO, logger="keybus.bootstrap"):
            held_events, events = asyncio.run(go())
    finally:
        broker.stop()
    assert held_events == HELD_EVENTS
    assert sorted((e.key, e.value) for e in events) == \
        [(k, f"v{k}".encode()) for k in range(WANTED_KEYS)]
    assert outage == [], "a wait for a slot was reported as a lost broker"
    waits = _said(caplog, logging.WARNING, "waits for a bootstrap slot")
    assert len(waits) == 1, waits
    assert f"{WANTED}/0 waits for a bootstrap slot of the broker at {broker.address}" in waits[0]
    assert "bootstrap_streams_max" in waits[0]  # the broker's words, with its limit
    got = _said(caplog, logging.INFO, "got a bootstrap slot")
    assert len(got) == 1 and f"{WANTED}/0 got a bootstrap slot" in got[0], got
