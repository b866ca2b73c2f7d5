"""Frame a Key_Shared consumer's deliveries into windows: the pure part.

Job: a Key_Shared consumer gets only its share of each window, possibly in
several deliveries (permits run out, a reconnect redelivers). Every record
it receives says where its window ends (`window_last_offset`). This turns
that stream of parts into the window shares the runner presents.

Rules (per partition, parts arrive in offset order unless redelivered):
1. A window record's share is complete when a part reaches the window's last
   offset, when the broker marks a part as the end of this consumer's share
   (`Part.ends`: Delivery.open_windows), when a part of a later window of the
   same partition arrives, or when no part arrived for `linger_ms` (the rest
   of the window went to other consumers: the only sign an older broker
   gives, and the fallback when the broker said more would follow and the
   key moved to another consumer meanwhile). A plain batch's events are each
   a window of their own, complete on arrival.
2. A part whose first offset is not above what the open share already holds
   is a redelivery (the consumer reconnected): the share starts again from
   that part. Buffered, nothing was shown yet, so the restart is silent;
   streamed, it is an `Abort` (the runner rolls the window back).
3. Buffered (`buffering=True`): a share is emitted once, whole. Streamed:
   the share of one window at a time is emitted part by part as it
   arrives; parts of other partitions wait, buffered, until it closes, so
   windows still reach the runner one at a time.
4. A share holding more than `bytes_max` value bytes is an `Overflow`.
5. When the transport goes away (`process_reset`), open shares are dropped
   as in rule 2: a reconnect redelivers them, and the linger must not close
   a share only because the broker was down. The shell calls `process_idle`
   only once it has seen, after the linger, that the stream which brought the
   shares' parts is still up (share_windows.py), and `process_reset` when
   that stream is gone.

It must not know about protobuf, asyncio or clocks (time is `now_ms`, and the
shell decides what it counts: time spent waiting for deliveries); the shell's
parts travel through as opaque payloads.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Part:
    """One delivered record (or the part of it this consumer got)."""

    partition: int
    scn: int
    offset_first: int
    offset_last: int
    window_last_offset: int
    window: bool  # False: a plain batch, each event its own window
    size_bytes: int
    payload: object
    # The broker's word: True, this consumer's share of the window ends with this part;
    # False, more follows; None, the broker does not say (rule 1)
    ends: bool | None = None


@dataclass(frozen=True, slots=True)
class Emit:
    """Parts to present: opens starts a window, closes ends it."""

    partition: int
    scn: int
    window_last_offset: int
    parts: tuple[Part, ...]
    opens: bool
    closes: bool


@dataclass(frozen=True, slots=True)
class Abort:
    """The streamed window (partition, scn) restarts (rules 2 and 5)."""

    partition: int
    scn: int


@dataclass(frozen=True, slots=True)
class Overflow:
    partition: int
    scn: int
    size_bytes: int


Output = Emit | Abort | Overflow


@dataclass(slots=True)
class _Share:
    partition: int
    scn: int
    window_last_offset: int
    parts: list[Part] = field(default_factory=list)
    offset_seen: int = -1
    size_bytes: int = 0
    arrived_ms: int = 0
    shown: int = 0  # streamed: how many parts were emitted

    @property
    def complete(self) -> bool:
        """Its parts reach the window's last offset, or the broker marked the last one
        the end of this consumer's share."""
        return self.offset_seen >= self.window_last_offset or \
            (bool(self.parts) and self.parts[-1].ends is True)


class ShareAssembler:
    """Turns parts into window shares (see the module docstring)."""

    def __init__(self, buffering: bool, linger_ms: int, bytes_max: int) -> None:
        self.buffering = buffering
        self.linger_ms = linger_ms
        self.bytes_max = bytes_max
        self._shares: dict[int, _Share] = {}
        self._ready: deque[Output] = deque()
        self._stream: _Share | None = None

    def process_part(self, part: Part, now_ms: int) -> list[Output]:
        """A part arrived; what can be presented now."""
        out = self._expire(now_ms, exclude=part.partition)
        share = self._shares.get(part.partition)
        if not part.window:
            if share is not None:
                self._close(share, out)
            self._finish(Emit(part.partition, part.scn, part.offset_last, (part,), True, True), out)
            return out
        if share is not None and share.window_last_offset != part.window_last_offset:
            self._close(share, out)
            share = None
        elif share is not None and part.offset_first <= share.offset_seen:
            self._restart(share, out)
            share = None
        if share is None:
            share = _Share(part.partition, part.scn, part.window_last_offset)
            self._shares[part.partition] = share
        self._add(share, part, now_ms, out)
        return out

    def process_idle(self, now_ms: int) -> list[Output]:
        """No part arrived for a while: close the shares that waited `linger_ms`."""
        return self._expire(now_ms, exclude=None)

    def process_reset(self) -> list[Output]:
        """The transport went away: every unacknowledged part will come again, so the
        open shares are dropped (silently, or an Abort for a streamed window that was
        partly shown) instead of closed by the linger during the outage."""
        out: list[Output] = []
        for share in list(self._shares.values()):
            self._restart(share, out)
        out.extend(self._ready)
        self._ready.clear()
        return out

    def lingered(self, now_ms: int) -> bool:
        """Whether a share has waited `linger_ms` (`process_idle` would close it)."""
        return any(self._waited(share, now_ms) for share in self._shares.values())

    def holding(self) -> bool:
        """Whether any part is held back (the shell then polls with process_idle)."""
        return bool(self._shares) or bool(self._ready)

    # ------------------------------------------------------------ internals

    def _add(self, share: _Share, part: Part, now_ms: int, out: list[Output]) -> None:
        share.parts.append(part)
        share.offset_seen = part.offset_last
        share.size_bytes += part.size_bytes
        share.arrived_ms = now_ms
        if share.size_bytes > self.bytes_max:
            del self._shares[share.partition]
            if self._stream is share:
                self._stream = None
            out.append(Overflow(share.partition, share.scn, share.size_bytes))
            return
        if not self.buffering and (self._stream is None or self._stream is share):
            self._stream = share
            self._show(share, out, closes=share.complete)
        if share.complete:
            self._close(share, out)

    def _show(self, share: _Share, out: list[Output], closes: bool) -> None:
        """Streamed: emit the parts not shown yet."""
        new = tuple(share.parts[share.shown:])
        if new or closes:
            out.append(Emit(share.partition, share.scn, share.window_last_offset, new,
                            share.shown == 0, closes))
        share.shown = len(share.parts)

    def _close(self, share: _Share, out: list[Output]) -> None:
        """Rule 1: the share is complete."""
        del self._shares[share.partition]
        if self._stream is share:
            if share.shown < len(share.parts) or share.shown == 0 or not share.complete:
                self._show(share, out, closes=True)
            self._stream = None
            out.extend(self._ready)
            self._ready.clear()
            return
        self._finish(Emit(share.partition, share.scn, share.window_last_offset,
                          tuple(share.parts), True, True), out)

    def _restart(self, share: _Share, out: list[Output]) -> None:
        """Rule 2: a redelivery; forget what the share held."""
        del self._shares[share.partition]
        if self._stream is share:
            self._stream = None
            if share.shown:
                out.append(Abort(share.partition, share.scn))

    def _finish(self, emit: Emit, out: list[Output]) -> None:
        """A whole share: out now, or after the streamed window closes (rule 3)."""
        if self._stream is None:
            out.append(emit)
        else:
            self._ready.append(emit)

    def _waited(self, share: _Share, now_ms: int) -> bool:
        """Rule 1's linger: no part of the share for `linger_ms`."""
        return now_ms - share.arrived_ms >= self.linger_ms

    def _expire(self, now_ms: int, exclude: int | None) -> list[Output]:
        out: list[Output] = []
        for share in list(self._shares.values()):
            if share.partition != exclude and self._waited(share, now_ms):
                self._close(share, out)
        return out

