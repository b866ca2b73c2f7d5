"""Load a follower's compacted view from its upstream's (the snapshot of a Bootstrap).

Why: a follower folds its view from its own log. When its copy restarted at
the upstream's start offset (the upstream's retention removed offsets before
they were copied: `replica_log.restart_at`), or its empty log took a first
record past its start, the log has a gap the view cannot be folded across:
keys only in the removed offsets would be missing, and a Bootstrap from the
follower would serve a snapshot without them, silently. The upstream's view
has every key (retention there never outruns its view), so the follower
takes it at one point and folds its own log on from exactly there.

Rules:
1. The view is marked first (`ViewStore.mark_for_load`: cleared, `load_from`
   set), before the log restarts, by whoever opens the gap (the relay
   follower). A marked view folds nothing and Bootstrap refuses it with
   UNAVAILABLE (`view_loading`) naming why and what to do.
2. A load clears what an earlier, cut load wrote, then writes the entries of
   one upstream snapshot (tombstones included, no filter), chunk by chunk; the
   stored state stays marked throughout, so a crash (kill -9) mid-load leaves
   a marked view that is loaded again from the start, never a half view
   served as complete.
3. The snapshot holds every event below its offset V. The follower's log must
   hold V on: V below its start (an upstream view behind its own retention
   start, e.g. just rebuilt) fails the load, which is retried.
4. The final state (offset_next = V, the snapshot's SCN, the counts, no mark)
   is written once the follower's log reaches V, so the view never claims
   offsets the log lacks and its next pass folds from V: no event twice
   (entries below V are the snapshot's), none skipped.
5. An upstream view that lacks keys (its marker's `keys_missing_below`: it took
   its topic over while its own view waited to be loaded) is loaded, with its
   gap: this view lacks the same keys, and its Bootstrap says so as the
   upstream's does (bootstrap.check_complete).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, replace

from broker.partition import Partition
from broker.view.codec import ViewState
from broker.view.store import ViewStore
from sdk.core.pb import keybus_pb2 as pb

Run = Callable[[Callable[[], ViewState]], Awaitable[ViewState]]  # on the views' worker


class LoadError(Exception):
    """A load that cannot finish now (the upstream's answer, or rule 3); retried."""


@dataclass(frozen=True, slots=True)
class ViewSource:
    """Where a marked view is loaded from: a follower's upstream (the relay sets it)."""

    name: str  # e.g. "upstream 127.0.0.1:7070", for messages
    # A Bootstrap of the partition (with tombstones, unfiltered); closing the
    # iterator ends the call. Errors are raised as LoadError.
    open: Callable[[], AsyncGenerator[pb.BootstrapResponse, None]]


async def load_view(store: ViewStore, run: Run, partition: Partition, source: ViewSource,
                    load_from: int) -> ViewState:
    """Load the view of `partition`, marked at `load_from`, from `source` (rules 2-4);
    returns its final state."""
    topic_id, index = partition.meta.topic_id, partition.index
    await run(functools.partial(store.mark_for_load, topic_id, index, load_from))  # rule 2
    counted = ViewState()
    offset = scn = -1
    gap = 0
    stream = source.open()
    async with contextlib.aclosing(stream):
        async for response in stream:
            if response.HasField("marker") and response.marker.phase == pb.SNAPSHOT:
                offset, scn = response.marker.snapshot_offset, response.marker.snapshot_scn
                gap = response.marker.keys_missing_below  # rule 5
            if response.phase != pb.SNAPSHOT:
                break  # the snapshot is over (its catch-up is this log's to fold)
            if response.records:
                counted = await run(functools.partial(
                    store.load_entries, topic_id, index, list(response.records), counted))
        else:
            raise LoadError(f"{source.name} ended the bootstrap before its snapshot's end")
    if offset < 0:
        raise LoadError(f"{source.name} sent no snapshot marker")
    _check_covered(partition, source, offset)
    if offset:
        await partition.wait_for_data(offset - 1)  # rule 4: the log reaches V
    _check_covered(partition, source, offset)
    final = replace(counted, offset_next=offset, scn=scn, pass_end=0, load_from=0)
    return await run(functools.partial(store.finish_load, topic_id, index, final, gap))


def _check_covered(partition: Partition, source: ViewSource, offset: int) -> None:
    """Rule 3: this log holds the snapshot's offset on."""
    start = max(partition.start_offset, partition.removing_below)
    if offset < start:
        raise LoadError(f"the view of {source.name} holds offsets below {offset} only, and this "
                        f"broker's log of {partition.meta.name}/{partition.index} starts at "
                        f"{start}: the offsets between are in neither")
