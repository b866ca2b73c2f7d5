"""A follower's compacted views and its log's restarts (broker/view/load.py).

A follower folds each view from its own log. Before its log of a partition
starts past what the view folded (a restart at the upstream's start, or an
empty log's first record past its start), the view is marked to be loaded
from the upstream's (`hold`), so it never folds across the gap; the load
itself is the view maintainer's, from the `ViewSource` attached here: a
Bootstrap on the follower's channel to its upstream, unfiltered, with
tombstones, read up to the end of its snapshot.

A marked view with no upstream to come (`fold_reason`: the broker leads the
topic, or has no relay role for it any more, e.g. restarted with another
replication config) is folded from the broker's own log instead, with one
WARNING, so it never refuses Bootstrap for ever. While a follower is to come
(the broker follows the topic and its copy is reconnecting, or it waits for
an election) the view keeps waiting.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import grpc
import grpc.aio

from broker.errors import BrokerError
from broker.partition import Partition
from broker.relay.settings import TopicReplication
from broker.topics import TopicRegistry
from broker.view.load import LoadError, ViewSource
from broker.view.service import PartitionView
from sdk import errors
from sdk.channel import stub_of
from sdk.core.pb import keybus_pb2 as pb


def view_of(registry: TopicRegistry, topic: str, index: int) -> PartitionView | None:
    """The partition's view; None when the topic keeps none (nothing to do)."""
    try:
        return registry.views.of(topic, index)
    except BrokerError:
        return None


def fold_reason(load_from: int, replication: TopicReplication | None, role: str) -> str:
    """Why a view marked at `load_from` is folded from this broker's log now, as
    the WARNING words it; "" to leave it as it is (not marked, or an upstream
    may still load it).

    Args:
        replication: the broker's replication entry for the topic (None: none).
        role: its role for the topic now (leader, follower, candidate).
    """
    if not load_from:
        return ""
    if replication is None:
        return "this broker neither follows nor leads the topic (it has no replication entry)"
    if role == "leader":
        return "this broker now leads the topic"
    return ""  # it follows, or waits for its role (an election, a retried change)


def upstream_source(channel: grpc.aio.Channel, upstream: str, topic: str,
                    index: int) -> ViewSource:
    """The upstream's view of one partition, as a `ViewSource`."""
    async def snapshot() -> AsyncGenerator[pb.BootstrapResponse, None]:
        call = stub_of(channel).Bootstrap(pb.BootstrapRequest(
            topic=topic, partition=index, include_tombstones=True, replica=True,
            allow_incomplete_view=True))  # its gap comes with it (load.py rule 5)
        try:
            async for response in call:
                yield response
        except grpc.RpcError as e:
            raise LoadError(f"upstream {upstream} answered the Bootstrap of {topic}/{index} "
                            f"with {errors.from_rpc_error(e)}") from None
        except grpc.aio.UsageError as e:  # the follower stopped and closed its channel
            raise LoadError(f"the channel to upstream {upstream} is closed ({e})") from None
        finally:
            call.cancel()
    return ViewSource(f"upstream {upstream}", snapshot)


async def hold(registry: TopicRegistry, partition: Partition, start: int) -> None:
    """Mark the partition's view to be loaded, before its log goes on from `start`,
    when `start` is past what the view folded (load.py, rule 1)."""
    view = view_of(registry, partition.meta.name, partition.index)
    if view is None or start <= view.state.offset_next:
        return
    await view.mark_for_load(start)


async def fold_without_upstream(registry: TopicRegistry, topic: str,
                                replication: TopicReplication | None, role: str) -> None:
    """Fold every view of `topic` that is marked and that no upstream will load
    (`fold_reason`) from the log; a topic gone or keeping no view has none."""
    try:
        partitions = registry.partitions(topic)
    except BrokerError:
        return
    for partition in partitions:
        view = view_of(registry, topic, partition.index)
        if view is None:
            continue
        why = fold_reason(view.state.load_from, replication, role)
        if why:
            await view.fold_from_log(why)
