"""The blocking face of `Consumer` for code without an event loop.

Runs the async Consumer on a loop in a daemon thread (sdk.sync.LoopThread).
Acks do not hop threads per call: they are handed to the loop with
call_soon_threadsafe and gather there as usual. Callbacks run on the SDK's
loop thread: keep them short and do not call blocking SDK methods in them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any

from sdk.consumer import ActiveCallback, Consumer, ConsumerConfig, Message, RangeCallback, ReceivedBatch
from sdk.core.model import HashRange
from sdk.reconnect import ConnectionCallback
from sdk.sync import LoopThread


class SyncConsumer:
    """Blocking consumer (arguments as Consumer.subscribe).

    `SyncConsumer.subscribe(...)` (as `Consumer.subscribe`) and
    `SyncConsumer(...)` are the same call.

    Raises:
        as Consumer.subscribe.
    """

    def __init__(self, broker: str = "localhost:6650", topic: str = "", subscription: str = "",
                 *, config: ConsumerConfig | None = None,
                 on_range_change: RangeCallback | None = None,
                 on_active_change: ActiveCallback | None = None,
                 on_connection_change: ConnectionCallback | None = None,
                 **options: Any) -> None:
        self._thread = LoopThread(f"keybus-consumer-{topic}-{subscription}")
        try:
            self._consumer = self._thread.run(Consumer.subscribe(
                broker, topic, subscription, config=config, on_range_change=on_range_change,
                on_active_change=on_active_change, on_connection_change=on_connection_change,
                **options))
        except BaseException:
            self._thread.stop()
            raise
        self.name = self._consumer.name

    @classmethod
    def subscribe(cls, broker: str = "localhost:6650", topic: str = "", subscription: str = "",
                  **options: Any) -> SyncConsumer:
        """An attached consumer (arguments as Consumer.subscribe): the blocking
        twin of `await Consumer.subscribe(...)`."""
        return cls(broker, topic, subscription, **options)

    def receive(self, timeout_s: float | None = None) -> Message:
        """The next event. Raises TimeoutError, KeybusError."""
        return self._thread.run(self._consumer.receive(timeout_s))

    def receive_batch(self, timeout_s: float | None = None) -> ReceivedBatch:
        """The next delivered batch. Raises TimeoutError, KeybusError."""
        return self._thread.run(self._consumer.receive_batch(timeout_s))

    def __iter__(self) -> Iterator[Message]:
        while True:
            yield self.receive()

    def ack(self, message: Message) -> None:
        self._thread.loop.call_soon_threadsafe(self._consumer.ack, message)

    def ack_batch(self, batch: ReceivedBatch) -> None:
        self._thread.loop.call_soon_threadsafe(self._consumer.ack_batch, batch)

    def ack_offsets(self, partition: int, offsets: Iterable[int]) -> None:
        self._thread.loop.call_soon_threadsafe(self._consumer.ack_offsets, partition,
                                               list(offsets))

    def ack_cumulative(self, message: Message) -> None:
        self._thread.loop.call_soon_threadsafe(self._consumer.ack_cumulative, message)

    def nack(self, message: Message | ReceivedBatch, delay_ms: int | None = None) -> None:
        self._thread.loop.call_soon_threadsafe(self._consumer.nack, message, delay_ms)

    def flush_acks(self) -> None:
        self._thread.run(self._consumer.flush_acks())

    @property
    def hash_ranges(self) -> dict[int, list[HashRange]]:
        return self._consumer.hash_ranges

    @property
    def active(self) -> dict[int, bool]:
        return self._consumer.active

    def close(self) -> None:
        """Send pending acks, end the stream, stop the loop thread. Idempotent."""
        if self._thread.loop.is_closed():
            return
        try:
            self._thread.run(self._consumer.close())
        finally:
            self._thread.stop()

    def __enter__(self) -> SyncConsumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
