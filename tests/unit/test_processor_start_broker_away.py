"""A partition that cannot reach the broker as it starts is part of the broker's outage.

Goal: under load a partition can still be starting (reading its checkpoint
from the broker's store, or opening its reader) when the broker goes. That
failure was said at WARNING once per partition, beside the processor's own
"lost the broker" WARNING: three warnings for one outage. Now a step that
calls the broker and finds it away is folded into `BrokerOutage`: the first
sign is the one WARNING, the others DEBUG, the partition's close DEBUG, and
the return names the partitions that closed. A failure that is not the
broker (a checkpoint store of the application's, an answer that says no) is
still the partition's own outage.
Method: `BrokerOutage` alone with time as an argument, and a real
`PartitionPump` whose checkpoint store (a small fake) raises Unavailable.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from sdk import errors
from sdk.processor.broker_outage import BrokerOutage
from sdk.processor.outages import PartitionOutages
from sdk.processor.pump import Callbacks, PartitionPump
from sdk.stores import FileCheckpointStore
from tests.unit.test_processor_context import context_of

WHAT = "event processor orders/billing"
GONE = errors.unreachable("b:1", "connection refused")


def test_the_first_failed_start_is_the_outage_warning_and_the_rest_debug() -> None:
    outage = BrokerOutage(WHAT, "b:1", 2_000)
    first = outage.process_partition_failed(0, "starting", GONE, True, [0, 1], 10.0)
    assert first is not None and first.level == logging.WARNING
    assert first.message.startswith(f"{WHAT}: partition 0 (starting) lost the broker at b:1 (")
    assert "and closes. Partitions [1] run on until their claims lapse" in first.message
    second = outage.process_partition_failed(1, "reading", GONE, False, [0, 1], 10.1)
    assert second is not None and second.level == logging.DEBUG
    back = outage.process_back(12.0)
    assert back is not None and back.message.endswith(
        "is back after 2.0 s (no claim lapsed; partitions [0, 1] closed when they could not "
        "reach it; they are balanced again now)")


def test_a_failure_that_is_not_the_broker_away_is_the_partitions_own() -> None:
    outage = BrokerOutage(WHAT, "b:1", 2_000)
    # the application's checkpoint store, not the broker's
    assert outage.process_partition_failed(0, "starting", GONE, False, [0], 1.0) is None
    # the broker answered no
    refused = errors.KeybusError("no", errors.INVALID_ARGUMENT)
    assert outage.process_partition_failed(0, "reading", refused, True, [0], 1.0) is None
    # a step that does not call the broker
    assert outage.process_partition_failed(0, "on_event", GONE, True, [0], 1.0) is None
    assert not outage.down


class _AwayStore(FileCheckpointStore):
    """The broker's checkpoint store as it answers when the broker is gone."""

    async def get_checkpoint(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        raise GONE


def _pump_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                broker_away: bool) -> list[tuple[int, str]]:
    outage = BrokerOutage(WHAT, "b:1", 2_000)
    context, _ = context_of(tmp_path, 0)

    async def run() -> None:
        pump = PartitionPump(
            context, _AwayStore(tmp_path), False, "earliest", Callbacks(lambda c, b: None),
            lambda p, s: pytest.fail("no reader opens"), lambda n: None,
            PartitionOutages(WHAT),
            broker_away=(lambda p, step, e: outage.process_partition_failed(
                p, step, e, True, [0], 1.0)) if broker_away else None)
        await pump.task

    caplog.set_level(logging.DEBUG, logger="keybus")
    asyncio.run(run())
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("keybus")]


def test_a_pump_that_cannot_reach_the_broker_says_it_as_the_outage(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = _pump_lines(tmp_path, caplog, broker_away=True)
    assert [level for level, _ in lines] == [logging.WARNING, logging.DEBUG], lines
    assert "partition 0 (starting) lost the broker at b:1" in lines[0][1]
    assert lines[1][1].endswith(": error")  # the close, quiet: part of the outage


def test_without_the_outage_a_failed_start_is_said_as_the_partitions(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = _pump_lines(tmp_path, caplog, broker_away=False)
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO], lines
    assert f"{WHAT} partition 0 (starting) failed (Unavailable)" in lines[0][1]
