"""Goal: the shared benchmark loops touch the cross-process Link (locked counters, the
stop signal) at most every LINK_EVERY_S, yet every count reaches the Link whenever a
loop idles or ends, so "every produced event is consumed" is never missed.

Method: `_LinkView` against a small fake Link, with the time passed in.
"""

from __future__ import annotations

from benchmarks.client_loops import LINK_EVERY_S, _LinkView


class FakeLink:
    def __init__(self) -> None:
        self.added: list[int] = []
        self.stop = False
        self.stop_reads = 0

    def add(self, n: int) -> None:
        self.added.append(n)

    def stopped(self) -> bool:
        self.stop_reads += 1
        return self.stop


def test_counts_gather_between_intervals_and_reach_the_link_on_publish() -> None:
    link = FakeLink()
    view = _LinkView(link, link.add)  # type: ignore[arg-type]
    view.add(3, now_s=100.0)  # the first add publishes (no interval has started)
    for i in range(50):
        view.add(2, now_s=100.0 + i * LINK_EVERY_S / 100)
    assert link.added == [3]  # one locked add for 51 sends so far
    view.add(1, now_s=100.0 + LINK_EVERY_S)
    assert sum(link.added) == 3 + 100 + 1 and len(link.added) == 2
    view.add(5, now_s=100.0 + LINK_EVERY_S * 1.5)
    view.publish()  # idle or done: nothing stays behind
    assert sum(link.added) == 109
    view.publish()
    assert sum(link.added) == 109 and len(link.added) == 3


def test_the_stop_signal_is_read_once_per_interval_and_seen_within_it() -> None:
    link = FakeLink()
    view = _LinkView(link, link.add)  # type: ignore[arg-type]
    assert not view.stopped(now_s=10.0)
    link.stop = True
    assert not view.stopped(now_s=10.0 + LINK_EVERY_S / 2)  # cached within the interval
    assert link.stop_reads == 1
    assert view.stopped(now_s=10.0 + LINK_EVERY_S)
    assert link.stop_reads == 2
