"""Fuzz every request message of the contract against a real broker (bounded).

Goal: whatever bytes a client sends to any method -- valid, boundary or
damaged messages, raw bytes, with or without credentials -- the broker
answers with a documented status code and a message (never UNKNOWN or
INTERNAL), within 10 s unless the call waits by design; afterwards it
still serves and the data stored before reads back unchanged.
Method: `benchmarks.fuzz` (hypothesis strategies built from the proto
descriptors) over real gRPC to a broker process with tokens on; a bounded
number of examples here, `python -m benchmarks fuzz --examples 100000` for
the long run.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks import fuzz
from tests.support.broker_process import BrokerProcess

EXAMPLES = 1_000


def test_fuzz_every_method(tmp_path: Path) -> None:
    tokens = fuzz.token_file(tmp_path)
    broker = BrokerProcess(tmp_path / "data", *fuzz.BROKER_ARGS, "--auth-token-file", str(tokens))
    broker.start()
    try:
        before = fuzz.prepare(broker.address)
        tally = fuzz.run(broker.address, EXAMPLES)
        fuzz.still_serves(broker.address)
        assert fuzz.reference(broker.address) == before
    finally:
        broker.stop()
    assert tally.failures == []
    assert tally.examples >= EXAMPLES
    assert {"UNKNOWN", "INTERNAL"}.isdisjoint(tally.by_code)
    assert tally.slowest_s < fuzz.HANG_S
    # the run reached past decoding: every kind of answer shows up
    assert {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED",
            "UNAUTHENTICATED"} <= set(tally.by_code)
