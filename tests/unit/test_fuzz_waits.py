"""Which fuzzed calls the fuzzer lets wait (benchmarks/fuzz.py).

Goal: a call that waits by design -- a follow Read, a follow Bootstrap (its
ONLINE phase follows the log), an open Subscribe -- is given a short deadline
instead of being reported as a hang; every other call must end by itself.
Found by `python -m benchmarks fuzz --examples 20000 --seed 4242`, which
reported a valid follow Bootstrap as hung.
"""

from __future__ import annotations

from benchmarks.fuzz import _waits_by_design
from sdk.core.pb import keybus_pb2 as pb


def test_follow_reads_and_bootstraps_and_subscriptions_wait() -> None:
    follow_read = pb.ReadRequest(topic="t", follow=True).SerializeToString()
    follow_bootstrap = pb.BootstrapRequest(topic="t", follow=True).SerializeToString()
    assert _waits_by_design("Read", follow_read)
    assert _waits_by_design("Bootstrap", follow_bootstrap)
    assert _waits_by_design("Subscribe", b"")


def test_other_calls_must_end_by_themselves() -> None:
    assert not _waits_by_design("Read", pb.ReadRequest(topic="t").SerializeToString())
    assert not _waits_by_design("Bootstrap", pb.BootstrapRequest(topic="t").SerializeToString())
    assert not _waits_by_design("Bootstrap", b"\xff\xff")  # not a message: must be refused
    assert not _waits_by_design("ListTopics", b"")
