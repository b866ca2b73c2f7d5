"""ReadLimit: the readable end is the log end held back to the high watermark (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.read_limit import ENDS_KEPT_MAX, ReadLimit


def test_no_high_watermark_shows_the_log_end() -> None:
    limit = ReadLimit(0, 0)
    limit.process_log_end(10, 19)
    assert (limit.readable_end, limit.readable_scn) == (10, 19)


def test_a_high_watermark_holds_readers_back_and_releases_whole_publishes() -> None:
    limit = ReadLimit(0, 0)
    limit.process_high_watermark(0)
    limit.process_log_end(10, 109)
    limit.process_log_end(20, 119)
    assert (limit.readable_end, limit.readable_scn) == (0, 0)
    limit.process_high_watermark(15)  # inside the second publish: the SCN of the first
    assert (limit.readable_end, limit.readable_scn) == (15, 109)
    limit.process_high_watermark(20)
    assert (limit.readable_end, limit.readable_scn) == (20, 119)
    limit.process_high_watermark(None)
    limit.process_log_end(25, 124)
    assert (limit.readable_end, limit.readable_scn) == (25, 124)


def test_the_readable_end_moves_back_only_by_a_truncation() -> None:
    limit = ReadLimit(0, 0)
    limit.process_log_end(20, 19)
    limit.process_high_watermark(5)  # lower than what readers saw: kept
    assert limit.readable_end == 20
    limit.process_high_watermark(None)
    limit.process_log_end(30, 29)
    limit.process_log_end(12, 11)  # a truncation below it
    assert (limit.readable_end, limit.readable_scn) == (12, 11)


def test_a_truncation_forgets_the_publishes_past_it() -> None:
    limit = ReadLimit(0, 0)
    limit.process_high_watermark(0)
    for end in (10, 20, 30):
        limit.process_log_end(end, end + 100)
    limit.process_log_end(15, 114)  # cut inside the second publish
    limit.process_log_end(40, 140)
    limit.process_high_watermark(20)
    assert (limit.readable_end, limit.readable_scn) == (20, 114)


def test_hold_back_starts_at_nothing_readable() -> None:
    limit = ReadLimit(50, 149)
    limit.hold_back(10)
    assert (limit.readable_end, limit.readable_scn) == (10, 0)
    limit.process_high_watermark(50)
    assert (limit.readable_end, limit.readable_scn) == (50, 149)


def test_kept_publishes_are_bounded() -> None:
    limit = ReadLimit(0, 0)
    limit.process_high_watermark(0)
    for end in range(1, 3 * ENDS_KEPT_MAX):
        limit.process_log_end(end, end)
    limit.process_high_watermark(2 * ENDS_KEPT_MAX)
    assert limit.readable_end == 2 * ENDS_KEPT_MAX
    assert limit.readable_scn <= 2 * ENDS_KEPT_MAX


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 100)), max_size=60))
def test_never_past_the_log_end_nor_the_high_watermark(steps: list[tuple[bool, int]]) -> None:
    limit = ReadLimit(0, 0)
    limit.process_high_watermark(0)
    log_end = 0
    for is_log, value in steps:
        seen = limit.readable_end
        if is_log:
            log_end = value
            limit.process_log_end(value, value)
        else:
            limit.process_high_watermark(value)
        assert limit.readable_end <= log_end
        assert limit.readable_end >= min(seen, log_end)  # back only by a truncation
        assert limit.readable_scn <= limit.readable_end
        high = limit.high_watermark
        assert high is None or limit.readable_end <= max(high, min(seen, log_end))
