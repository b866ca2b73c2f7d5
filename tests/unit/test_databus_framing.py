"""Framing a Key_Shared consumer's deliveries into window shares (sdk/databus/framing.py).

Goal: whatever way the broker cuts this consumer's share of each window into
deliveries, interleaves partitions, or redelivers after a reconnect, the
assembler presents each share whole and in order when buffering (a
redelivery restarts a share silently), and one window at a time, part by
part, with an Abort for a redelivery, when streaming.
Method: hypothesis draws windows per partition (size and which events are
ours), cuts each share into parts, interleaves the partitions and may
redeliver a share mid-way; a model reassembles what the assembler emitted.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.databus.framing import Abort, Emit, Overflow, Part, ShareAssembler


def part(partition: int, offsets: list[int], window_last: int, scn: int = 1,
         window: bool = True, size: int = 1) -> Part:
    return Part(partition, scn, offsets[0], offsets[-1], window_last, window, size,
                payload=offsets)


def offsets_of(emit: Emit) -> list[int]:
    return [o for p in emit.parts for o in p.payload]  # type: ignore[attr-defined]


def test_a_share_that_reaches_the_window_end_is_complete_at_once() -> None:
    a = ShareAssembler(True, 100, 1 << 20)
    assert a.process_part(part(0, [0, 2], 5), 0) == []
    out = a.process_part(part(0, [4, 5], 5), 1)
    assert len(out) == 1 and offsets_of(out[0]) == [0, 2, 4, 5]
    assert not a.holding()


def test_a_later_window_or_the_linger_closes_a_share() -> None:
    a = ShareAssembler(True, 100, 1 << 20)
    a.process_part(part(0, [1], 5), 0)
    out = a.process_part(part(0, [7], 9, scn=2), 10)
    assert [offsets_of(e) for e in out] == [[1]]  # type: ignore[arg-type]
    assert a.process_idle(50) == []
    out = a.process_idle(110)
    assert [offsets_of(e) for e in out] == [[7]]  # type: ignore[arg-type]


def test_a_plain_batch_is_one_window_per_event_and_closes_at_once() -> None:
    a = ShareAssembler(True, 100, 1 << 20)
    out = a.process_part(part(0, [3, 4], 9, window=False), 0)
    assert len(out) == 1 and out[0].opens and out[0].closes


def test_a_redelivered_share_restarts_silently_when_buffered() -> None:
    a = ShareAssembler(True, 100, 1 << 20)
    a.process_part(part(0, [0, 1], 5), 0)
    assert a.process_part(part(0, [0], 5), 1) == []  # reconnect: again from its start
    out = a.process_part(part(0, [1, 5], 5), 2)
    assert [offsets_of(e) for e in out] == [[0, 1, 5]]  # type: ignore[arg-type]


def test_streaming_aborts_a_redelivered_window() -> None:
    a = ShareAssembler(False, 100, 1 << 20)
    out = a.process_part(part(0, [0, 1], 5), 0)
    assert len(out) == 1 and out[0].opens and not out[0].closes
    out = a.process_part(part(0, [0], 5), 1)
    assert isinstance(out[0], Abort) and isinstance(out[1], Emit) and out[1].opens


def test_overflow_past_the_byte_limit() -> None:
    a = ShareAssembler(True, 100, 10)
    a.process_part(part(0, [0], 5, size=6), 0)
    out = a.process_part(part(0, [1], 5, size=6), 1)
    assert out == [Overflow(0, 1, 12)]


# ---------------------------------------------------------------- properties

windows_strategy = st.lists(st.tuples(st.integers(1, 8), st.integers(0, 255)), min_size=1,
                            max_size=6)


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[Part], dict[int, list[list[int]]]]:
    """Parts of two partitions' shares, interleaved; shares are what is ours."""
    shares: dict[int, list[list[int]]] = {}
    streams: list[list[Part]] = []
    for partition in (0, 1):
        offset = 0
        parts: list[Part] = []
        shares[partition] = []
        for scn, (size, mask) in enumerate(draw(windows_strategy), start=1):
            last = offset + size - 1
            ours = [offset + i for i in range(size) if mask >> (i % 8) & 1]
            offset += size
            if not ours:
                continue
            shares[partition].append(ours)
            cuts = sorted(draw(st.sets(st.integers(1, max(1, len(ours) - 1)), max_size=3)))
            pieces = [ours[a:b] for a, b in zip([0, *cuts], [*cuts, len(ours)], strict=False)
                      if ours[a:b]]
            if len(pieces) > 1 and draw(st.booleans()):  # a reconnect redelivers the share
                pieces = [pieces[0], list(ours)]
            parts += [part(partition, p, last, scn=scn) for p in pieces]
        streams.append(parts)
    order = draw(st.permutations([0] * len(streams[0]) + [1] * len(streams[1])))
    merged, positions = [], [0, 0]
    for partition in order:
        merged.append(streams[partition][positions[partition]])
        positions[partition] += 1
    return merged, shares


@settings(max_examples=300, deadline=None)
@given(deliveries())
def test_buffered_shares_come_whole_and_in_order(case: tuple[list[Part], dict]) -> None:
    parts, shares = case
    assembler = ShareAssembler(True, 1000, 1 << 20)
    out = []
    for now, p in enumerate(parts):
        out += assembler.process_part(p, now)
    out += assembler.process_idle(10_000)
    assert all(isinstance(e, Emit) and e.opens and e.closes for e in out)
    for partition in (0, 1):
        got = [offsets_of(e) for e in out if e.partition == partition]  # type: ignore[union-attr]
        assert got == shares[partition]


@settings(max_examples=300, deadline=None)
@given(deliveries())
def test_streamed_windows_one_at_a_time_and_whole_after_aborts(
        case: tuple[list[Part], dict]) -> None:
    parts, shares = case
    assembler = ShareAssembler(False, 1000, 1 << 20)
    out = []
    for now, p in enumerate(parts):
        out += assembler.process_part(p, now)
    out += assembler.process_idle(10_000)
    got: dict[int, list[list[int]]] = {0: [], 1: []}
    open_window: tuple[int, int] | None = None
    current: list[int] = []
    for item in out:
        if isinstance(item, Abort):
            assert open_window is not None and open_window[0] == item.partition
            open_window, current = None, []
            continue
        assert isinstance(item, Emit)
        key = (item.partition, item.window_last_offset)
        if item.opens:
            assert open_window is None, "a window opened while another is open"
            open_window, current = key, []
        assert open_window == key
        current += offsets_of(item)
        if item.closes:
            got[item.partition].append(current)
            open_window = None
    assert open_window is None
    assert got == shares
