"""Goal: the soak run's checks (benchmarks/soak_ledger.py, `soak.verdict`) name what
failed: an acknowledged produce never delivered, one retention removed before
delivery, a key's offsets going back within a consumer session, a backlog that never
drained, descriptors (RocksDB's table files apart) or threads above their warm-up
level; and growth slopes are per minute.

Method: the pure ledger and verdict on hand-made deliveries and samples.
"""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks import soak
from benchmarks.soak_clients import KEY_SHARED, SHARED, Tally
from benchmarks.soak_ledger import Ledger, Sample, SessionOrder, slope_per_minute


def sample(at_s: float, fds: int = 40, threads: int = 20, sst: int = 0) -> Sample:
    return Sample(at_s, 100.0, fds, sst, threads, 0, 0, 0, 0, 0.0)


def test_missing_separates_loss_from_what_retention_removed() -> None:
    ledger = Ledger(2)
    ledger.produced(0, 0, 10)
    ledger.produced(1, 0, 4)
    ledger.received(KEY_SHARED, 0, [0, 1, 2, 5, 6, 7, 8, 9])
    ledger.received(KEY_SHARED, 1, [0, 1, 2, 3])
    # offsets 3 and 4 of partition 0 were never delivered; retention cut below 4
    assert ledger.missing(KEY_SHARED, [4, 0]) == (1, 1, "0/4")
    assert ledger.missing(SHARED, [0, 0]) == (14, 0, "0/0, 0/1, 0/2, 0/3, 0/4")


def test_a_key_going_back_within_a_session_is_a_violation() -> None:
    order = SessionOrder("ks-1")
    order.saw(["a", "b", "a"], [1, 2, 3])
    assert order.violation == ""
    order.saw(["b", "a"], [5, 3])
    assert order.violation == "consumer ks-1 got key 'a' at offset 3 after offset 3"


def test_slope_is_per_minute() -> None:
    assert slope_per_minute([(0, 10.0), (30, 11.0), (60, 12.0)]) == 2.0
    assert slope_per_minute([(5, 1.0)]) == 0.0


def fake(samples: list[Sample], drained_s: float | None = 1.0,
         start_offsets: tuple[int, ...] = (3,)) -> SimpleNamespace:
    ledger = Ledger(1)
    ledger.produced(0, 0, 5)
    for subscription in (KEY_SHARED, SHARED):
        ledger.received(subscription, 0, range(5))
    plan = SimpleNamespace(seconds=60.0, drain_s=30.0)
    return SimpleNamespace(plan=plan, clients=SimpleNamespace(tally=Tally()), samples=samples,
                           ledger=ledger, start_offsets=list(start_offsets), drained_s=drained_s)


def test_verdict_passes_a_clean_run_and_names_each_failure() -> None:
    steady = [sample(0), sample(20), sample(40), sample(70)]
    assert soak.verdict(fake(steady)) == []  # type: ignore[arg-type]
    flushed = [sample(0), sample(20), sample(40), sample(70, fds=60, sst=16)]  # table files
    assert soak.verdict(fake(flushed)) == []  # type: ignore[arg-type]
    leaking = [sample(0), sample(20), sample(40, fds=45), sample(70, fds=60, threads=30)]
    assert soak.verdict(fake(leaking)) == [  # type: ignore[arg-type]
        "broker file descriptors (besides .sst) grew: 60 after the drain, 40 during warm-up "
        "(slack 8)",
        "broker threads grew: 30 after the drain, 20 during warm-up (slack 4)"]
    stuck = soak.verdict(fake(steady, drained_s=None))  # type: ignore[arg-type]
    assert stuck[0].startswith("backlog not drained within 30 s")
    assert soak.verdict(fake(steady, start_offsets=(0,))) == [  # type: ignore[arg-type]
        "retention removed nothing: lower --retention-bytes or raise --rate"]
