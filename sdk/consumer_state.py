"""What a consumer's background task shares with its API methods, and the requests
that state owes the broker. Split from consumer.py (one job: the shared state). Pure:
no asyncio, grpc or clock.

`drain_requests` empties what is pending into Subscribe requests, in the order the
broker needs them: nacks and acks before new permits (the broker must know what is
held back before it may send more).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sdk import errors
from sdk.core.model import HashRange
from sdk.core.offset_ranges import bounds_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.fetch_buffer import AckBuffer, FetchBuffer
from sdk.received import ReceivedBatch


@dataclass
class ConsumerState:
    """What the background task shares with the API methods."""

    buffer: FetchBuffer[ReceivedBatch]
    acks: AckBuffer = field(default_factory=AckBuffer)
    # (partition, offsets, delay_ms, rest_of_slots) per nack, in the order they were made
    nacks: list[tuple[int, list[int], int, list[int]]] = field(default_factory=list)
    cumulative: dict[int, int] = field(default_factory=dict)  # partition -> ack below this
    ranges: dict[int, list[HashRange]] = field(default_factory=dict)
    active: dict[int, bool] = field(default_factory=dict)
    error: errors.KeybusError | None = None

    def drain_requests(self) -> list[pb.SubscribeRequest]:
        """The nacks, acks and due permit grants, as requests; empties them."""
        requests = []
        nacks, self.nacks = self.nacks, []
        for partition, offsets, delay, rest in nacks:
            requests.append(pb.SubscribeRequest(nack=pb.Nack(
                partition=partition, delay_ms=delay, bounds=bounds_of(offsets),
                rest_of_slots=rest)))
        for partition, stop in self.cumulative.items():
            requests.append(pb.SubscribeRequest(ack=pb.Ack(
                partition=partition, cumulative=True, ranges=[pb.OffsetRange(start=0, stop=stop)])))
        self.cumulative.clear()
        for partition, (bounds, sent) in self.acks.drain().items():
            requests.append(pb.SubscribeRequest(ack=pb.Ack(partition=partition, bounds=bounds,
                                                           sent_ranges=sent)))
        for partition, count in self.buffer.grants_due():
            requests.append(pb.SubscribeRequest(permits=pb.Permits(partition=partition,
                                                                   count=count)))
        return requests
