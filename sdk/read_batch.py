"""ReadBatch: one stored record as a reader hands it out, columns first.

The columns stay protobuf (no copy); row views are built only when
`events()` is called. Reader (reader.py), TopicReader and the bootstrap read
yield these. `PassedPosition`: where a filtered follow read (or the online
phase of a filtered bootstrap) passed records its filter dropped whole
(`Reader.items()`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sdk.bootstrap import Item, PhaseMarker
from sdk.core.columns import (
    Event,
    keys_of,
    record_events,
    record_next_offset,
    record_offsets,
    record_scns,
)
from sdk.core.pb import keybus_pb2 as pb


class ReadBatch:
    """The events of one stored record that passed the read's ranges and filter.

    A bootstrap read (start="bootstrap") also says its `phase` ("snapshot",
    "catchup", "online"); a batch with `marker` set has no events and opens
    a phase.
    """

    __slots__ = ("_offsets", "marker", "phase", "record")

    def __init__(self, record: pb.Record, phase: str | None = None,
                 marker: PhaseMarker | None = None) -> None:
        self.record = record
        self.phase = phase
        self.marker = marker
        self._offsets: list[int] | None = None

    @property
    def count(self) -> int:
        return self.record.batch.count

    @property
    def partition(self) -> int:
        return self.record.partition

    @property
    def offsets(self) -> list[int]:
        """The offset of every event (dense unless the read filtered some out)."""
        if self._offsets is None:
            self._offsets = record_offsets(self.record)
        return self._offsets

    @property
    def next_offset(self) -> int:
        """The offset after this batch's last event."""
        return record_next_offset(self.record)

    @property
    def values(self) -> Sequence[bytes]:
        """The value column (a protobuf repeated field: no copy)."""
        return self.record.batch.values

    def keys(self) -> list[int | str]:
        """The primary key of every event."""
        return keys_of(self.record.batch)

    def scns(self) -> list[int]:
        """The SCN of every event (one per window)."""
        return record_scns(self.record)

    def events(self) -> list[Event]:
        """Row views (a Python object per event: prefer the columns when hot)."""
        return record_events(self.record)

    def __repr__(self) -> str:
        r = self.record
        return (f"ReadBatch(partition={r.partition}, base_offset={r.base_offset}, "
                f"count={self.count}, scn_first={r.scn_first}, window={r.window})")


@dataclass(frozen=True, slots=True)
class PassedPosition:
    """A filtered follow read passed stored records its filter (or hash ranges)
    dropped whole, up to here: `scn` is the last one's last SCN (every window
    up to it is over and had nothing for this read), `offset` its last offset.
    The broker says it now and then (Databus's end-of-period event); it carries
    no event. `Reader.items()` yields it; iterating a Reader does not.
    """

    partition: int
    scn: int
    offset: int


def bootstrap_output(item: Item, topic: str, partition: int) -> ReadBatch | PassedPosition:
    """A bootstrap stream's item as the Reader hands it out: a batch (a marker
    batch has no events) or, online, a passed position."""
    if item.passed is not None:
        return PassedPosition(partition, *item.passed)
    return ReadBatch(item.record or pb.Record(topic=topic, partition=partition), item.phase,
                     item.marker)
