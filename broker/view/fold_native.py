"""A pass's fold from its records' bytes: in C when the native module was built.

Job: `ViewStore._fold`'s choice between `_view_fold.c` and parsing the records
for `fold.fold_records`. A view pass folds about a second of the log (10,000
events at 10,000 events/s); parsed by protobuf and folded in Python it holds
the GIL for 30-60 CPU-ms, on the two cores the broker's event loop shares with
its clients, and that is what the view costs the latency benchmark's p99
(benchmarks/RESULTS.md). The C fold walks the bytes and chooses the winners
with the GIL released, and makes only the entries' bytes objects with it.

Rules: those of broker/native.py. The C fold takes the common case only (plain
records keyed by ints, `_view_fold.c` rule 1) and answers None for anything
else; then the records are parsed and folded in Python, whose result it
equals (tests/unit/test_view_fold_native.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker import native
from broker.view import codec
from broker.view.fold import Fold, fold_records
from sdk.core.pb import keybus_pb2 as pb

_VERSION = 2  # FOLD_VERSION in _view_fold.c
_native = native.load("broker.view._view_fold", _VERSION)
NATIVE = _native is not None


def fold_bodies(topic_id: int, partition: int, bodies: Sequence[bytes], offset_next: int,
                scn: int, pause: Callable[[], None] | None = None, pause_every: int = 0) -> Fold:
    """`fold_records` of the serialized Records `bodies` (offset order, from
    `offset_next`); `pause` and `pause_every` as there (the C fold does not pause:
    it gives the GIL away while it walks)."""
    if _native is not None:
        found = _native.fold(bodies, codec.entries_prefix(topic_id, partition),
                             codec.tombstones_prefix(topic_id, partition))
        if found is not None:
            # end and scn_last are 0 when no record had events: the position stays
            keys, values, tombstones, events, end, scn_last = found
            return Fold(entries=dict(zip(keys, values, strict=True)), tombstones=tombstones,
                        offset_next=max(offset_next, end), scn=max(scn, scn_last),
                        events=events)
    return fold_records(topic_id, partition, [pb.Record.FromString(b) for b in bodies],
                        offset_next, scn, pause, pause_every)
