"""A Spark split whose read ends with OUT_OF_RANGE partway keeps what arrived.

Goal: records a task received before the broker ended its read with
OUT_OF_RANGE (retention removed events the split had not read yet: the
broker ends the read rather than skip them) go to Spark, never dropped while
still gathered into an Arrow batch; then failOnDataLoss=true fails the task
with DataLossError naming the first lost offset and the broker's message
(the missing offsets, what is stored), and false reads on from the earliest
stored offset. An OUT_OF_RANGE that is not retention (the split's start is
past the log's end: the topic was deleted and created again since planning)
and a topic deleted under the read are data loss of their own kind: true
fails naming it, false skips the rest of the split with a warning; neither
reads the new log from its start; nor does a read that reconnected to the
topic made again (TopicRecreated). Any other failure is raised as it is,
after what arrived.
Method: `read_split` with the connector's broker read replaced by a fake that
yields records of 10 events (a filtered one among them) and then raises the
BrokerCallError the real one raises for OUT_OF_RANGE; events_max 100, so
the records are still gathered when the read fails. The same against a real
broker: tests/integration/test_retention_during_read.py (the broker's side)
and tests/e2e/test_spark_data_loss.py (a query restarted past a trim).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from sdk import errors
from sdk.core.model import FULL_RANGE
from sdk.core.pb import keybus_pb2 as pb
from spark_connector import _client
from spark_connector.partitioning import DataLossError, Split
from spark_connector.schema import arrow_schema, spark_schema
from spark_connector.task_read import KeybusInputPartition, read_split
from tests.support.wire import int_batch

BROKER_MESSAGE = ("keybus Read('t'/0) on broker 127.0.0.1:1 failed: offsets 40..79 of t/0, which "
                  "this read had reached, were removed by retention: the partition holds "
                  "offsets 80..99; allowed 80..100, or earliest, latest, scn:N")


def _record(base: int, keep: list[int] | None = None) -> pb.Record:
    """10 events from `base`; `keep`: a filtered record with only these offsets."""
    offsets = keep or list(range(base, base + 10))
    record = pb.Record(topic="t", partition=0, base_offset=base, batch=int_batch(offsets))
    if keep is not None:
        record.offsets.extend(keep)
    return record


class FakeBroker:
    """The connector's read: records, then the error it raises (\"earliest\": the stored rest)."""

    def __init__(self, error: _client.BrokerCallError) -> None:
        self.error = error
        self.starts: list[int | str] = []

    def read_records(self, broker: str, topic: str, partition: int, start: int | str,
                     stop: int, *args: Any) -> Iterator[pb.Record]:
        self.starts.append(start)
        if start == "earliest":
            yield from (_record(80), _record(90))
            return
        yield from (_record(0), _record(10), _record(20, keep=[21, 25]))
        raise self.error


def _read(monkeypatch: pytest.MonkeyPatch, fail_on_data_loss: bool,
          error: _client.BrokerCallError) -> tuple[list[int], BaseException | None, FakeBroker]:
    fake = FakeBroker(error)
    monkeypatch.setattr(_client, "read_records", fake.read_records)
    partition = KeybusInputPartition(Split("t", 0, (FULL_RANGE,), 0, 100), "127.0.0.1:1",
                                     None, 100, fail_on_data_loss)
    offsets: list[int] = []
    raised = None
    try:
        for batch in read_split(partition, arrow_schema(spark_schema(False))):
            offsets += batch.column("offset").to_pylist()
    except Exception as e:
        raised = e
    return offsets, raised, fake


RECEIVED = [*range(20), 21, 25]


def test_fail_on_data_loss_hands_out_what_arrived_then_names_the_lost_offsets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    offsets, raised, fake = _read(monkeypatch, True,
                                  _client.BrokerCallError(BROKER_MESSAGE, _client.Failure.RETENTION))
    assert offsets == RECEIVED and fake.starts == [0]
    assert isinstance(raised, DataLossError)
    message = str(raised)
    assert message.startswith("t/0: events from offset 26 on, which this task read "
                              "(offsets 0..99), are no longer stored: "), message
    assert BROKER_MESSAGE in message and "failOnDataLoss=false" in message, message


def test_without_fail_on_data_loss_it_goes_on_from_the_earliest_stored_offset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    offsets, raised, fake = _read(monkeypatch, False,
                                  _client.BrokerCallError(BROKER_MESSAGE, _client.Failure.RETENTION))
    assert raised is None and fake.starts == [0, "earliest"]
    assert offsets == RECEIVED + list(range(80, 100))  # nothing that arrived is dropped


def test_another_failure_is_raised_as_it_is_after_what_arrived(
        monkeypatch: pytest.MonkeyPatch) -> None:
    error = _client.BrokerCallError("keybus Read('t'/0) on broker 127.0.0.1:1 failed: gone")
    offsets, raised, fake = _read(monkeypatch, True, error)
    assert raised is error and offsets == RECEIVED and fake.starts == [0]


# What the broker says when the split's start is past the log's end: the topic was
# deleted and created again after the batch was planned (its offsets went back).
PAST_END = ("keybus Read('t'/0) on broker 127.0.0.1:1 failed: start offset 26 of t/0 is past "
            "the end: the partition holds offsets 0..9; allowed 0..10 (the end waits for the "
            "next event), or earliest, latest, scn:N")


def test_offsets_that_went_back_are_not_taken_for_retention(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # The old code read the new log from its start ("earliest") as if retention had
    # trimmed it: events of another topic's life under offsets the query had planned.
    error = _client.call_failure("Read('t'/0)", "127.0.0.1:1", errors.OffsetOutOfRange(
        PAST_END.split("failed: ", 1)[1]))
    assert error.failure == _client.Failure.PAST_END and not error.out_of_range
    offsets, raised, fake = _read(monkeypatch, True, error)
    assert offsets == RECEIVED and fake.starts == [0]
    assert isinstance(raised, DataLossError)
    message = str(raised)
    assert "t/0: events from offset 26 on" in message, message
    assert "offsets went back" in message and "deleted and created again" in message, message
    assert "is past the end" in message and "failOnDataLoss=false" in message, message
    assert "no longer stored" not in message, message

    with caplog.at_level(logging.WARNING, logger="keybus.spark"):
        offsets, raised, fake = _read(monkeypatch, False, error)
    assert raised is None and fake.starts == [0] and offsets == RECEIVED  # the rest skipped
    assert "offsets went back" in caplog.text and "skipped (failOnDataLoss=false)" in caplog.text


def test_a_topic_deleted_under_the_read_is_data_loss(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    error = _client.call_failure("Read('t'/0)", "127.0.0.1:1",
                                 errors.TopicNotFound("topic 't' was deleted"))
    assert error.failure == _client.Failure.TOPIC_GONE
    offsets, raised, _ = _read(monkeypatch, True, error)
    assert offsets == RECEIVED and isinstance(raised, DataLossError)
    assert "the topic was deleted while the query ran" in str(raised), raised
    with caplog.at_level(logging.WARNING, logger="keybus.spark"):
        offsets, raised, fake = _read(monkeypatch, False, error)
    assert raised is None and fake.starts == [0] and offsets == RECEIVED
    assert "topic was deleted" in caplog.text


RECREATED = ("this read of 't'/0 from offset 26 is of incarnation '5f0c9a1e2b3d4c6a' of the "
             "topic, which was deleted and created again (it is now incarnation "
             "'9d2e7b4a1c0f3e58'): its position names no event of this log, so nothing was "
             "sent; read the new topic from a start of its own (earliest, latest, an offset "
             "of it) with a new reader")


def test_a_topic_made_again_under_a_reconnected_read_is_data_loss(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # The task's Reader lost its broker and came back to a topic made again: the
    # broker refuses the reopened read (TopicRecreated), which failed the task as
    # an unknown error; Spark's retry of the task could then read the new topic's events
    # under the planned offsets.
    refusal = errors.TopicRecreated(RECREATED, errors.FAILED_PRECONDITION)
    refusal.broker_error = "read_other_incarnation"
    error = _client.call_failure("Read('t'/0)", "127.0.0.1:1", refusal)
    assert error.failure == _client.Failure.RECREATED
    offsets, raised, _ = _read(monkeypatch, True, error)
    assert offsets == RECEIVED and isinstance(raised, DataLossError)
    message = str(raised)
    assert "deleted and created again since the batch was planned" in message, message
    assert "failOnDataLoss=false" in message and "'9d2e7b4a1c0f3e58'" in message, message
    with caplog.at_level(logging.WARNING, logger="keybus.spark"):
        offsets, raised, fake = _read(monkeypatch, False, error)
    assert raised is None and fake.starts == [0] and offsets == RECEIVED
    assert "deleted and created again since the batch was planned" in caplog.text
