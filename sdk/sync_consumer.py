"""The blocking face of `Consumer` for code without an event loop.

Runs the async Consumer on a loop in a daemon thread (sdk.loop_thread.LoopThread).
Acks do not hop threads per call: they are handed to the loop with
call_soon_threadsafe and gather there as usual. Callbacks run on the SDK's
loop thread: keep them short and do not call blocking SDK methods in them.

Arguments are checked here, in the caller's thread: a wrong one handed over
to the loop would only reach its exception handler (a traceback on stderr, the
call returning as if it worked, a later flush_acks failing).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any

from sdk.consumer import ActiveCallback, Consumer, ConsumerConfig, Message, RangeCallback, ReceivedBatch
from sdk.consumer_config import check_ack_offsets, check_nack_delay
from sdk.core.model import HashRange
from sdk.loop_thread import LoopThread, check_timeout_s
from sdk.reconnect import ConnectionCallback


class SyncConsumer:
    """Blocking consumer (arguments as Consumer.subscribe).

    `SyncConsumer.subscribe(...)` (as `Consumer.subscribe`) and
    `SyncConsumer(...)` are the same call. Threads may share one (one
    receiving while others ack, or several receiving: each event goes to one).
    Left open at interpreter exit, its pending acks are sent then.

    Raises:
        as Consumer.subscribe.
    """

    def __init__(self, broker: str = "localhost:6650", topic: str = "", subscription: str = "",
                 *, config: ConsumerConfig | None = None,
                 on_range_change: RangeCallback | None = None,
                 on_active_change: ActiveCallback | None = None,
                 on_connection_change: ConnectionCallback | None = None,
                 **options: Any) -> None:
        self._thread = LoopThread(f"keybus-consumer-{topic}-{subscription}",
                                  f"SyncConsumer of {topic!r}/{subscription!r}")
        try:
            self._consumer = self._thread.run(Consumer.subscribe(
                broker, topic, subscription, config=config, on_range_change=on_range_change,
                on_active_change=on_active_change, on_connection_change=on_connection_change,
                **options))
        except BaseException:
            self._thread.stop()
            raise
        self.name = self._consumer.name
        self._thread.at_exit = self.close  # sends pending acks; bounded (~2 s)

    @classmethod
    def subscribe(cls, broker: str = "localhost:6650", topic: str = "", subscription: str = "",
                  **options: Any) -> SyncConsumer:
        """An attached consumer (arguments as Consumer.subscribe): the blocking
        twin of `await Consumer.subscribe(...)`."""
        return cls(broker, topic, subscription, **options)

    def receive(self, timeout_s: float | None = None) -> Message:
        """The next event, waiting up to timeout_s seconds (None: no limit).

        Raises:
            TimeoutError: none within timeout_s. KeybusError: the consumer failed,
            or is closed. ValueError: timeout_s is not None or a number >= 0.
            KeyboardInterrupt: Ctrl-C while waiting; no event is taken then.
        """
        check_timeout_s(timeout_s)
        try:
            return self._thread.run(self._consumer.receive(timeout_s))
        except TimeoutError as error:
            raise self._timeout(error, timeout_s) from None

    def receive_batch(self, timeout_s: float | None = None) -> ReceivedBatch:
        """The next delivered batch. Raises as receive()."""
        check_timeout_s(timeout_s)
        try:
            return self._thread.run(self._consumer.receive_batch(timeout_s))
        except TimeoutError as error:
            raise self._timeout(error, timeout_s) from None

    def _timeout(self, error: TimeoutError, timeout_s: float | None) -> TimeoutError:
        """The async consumer's bare TimeoutError, given words."""
        if error.args:
            return error
        return TimeoutError(f"{self._thread.owner}: no event within timeout_s={timeout_s}")

    def __iter__(self) -> Iterator[Message]:
        while True:
            yield self.receive()

    def ack(self, message: Message) -> None:
        """Acknowledge one event (sent with the next flush). Raises TypeError
        for anything but a Message; KeybusError after close()."""
        _check_type("ack", message, Message)
        self._thread.call_soon(self._consumer.ack, message)

    def ack_batch(self, batch: ReceivedBatch) -> None:
        _check_type("ack_batch", batch, ReceivedBatch)
        self._thread.call_soon(self._consumer.ack_batch, batch)

    def ack_offsets(self, partition: int, offsets: Iterable[int]) -> None:
        given = check_ack_offsets(partition, offsets, self._consumer.partitions)  # here, not
        self._thread.call_soon(self._consumer.ack_offsets, partition, given)  # on the loop

    def ack_cumulative(self, message: Message) -> None:
        _check_type("ack_cumulative", message, Message)
        self._thread.call_soon(self._consumer.ack_cumulative, message)

    def nack(self, message: Message | ReceivedBatch, delay_ms: int | None = None) -> None:
        _check_type("nack", message, (Message, ReceivedBatch))
        if delay_ms is not None:  # here, not on the loop thread, where the error was lost
            check_nack_delay(delay_ms)
        self._thread.call_soon(self._consumer.nack, message, delay_ms)

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
        if self._thread.loop.is_closed() or self._thread.forked:
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


def _check_type(call: str, given: object, allowed: type | tuple[type, ...]) -> None:
    if not isinstance(given, allowed):
        names = " or ".join(t.__name__ for t in (allowed if isinstance(allowed, tuple)
                                                  else (allowed,)))
        raise TypeError(f"{call}() takes a {names} (as receive() returns); "
                        f"got {type(given).__name__} {given!r:.60}")
