"""SDK pieces of following a leader: addresses, the NotLeader error, redirects in the send queue.

Method: worked examples; the send queue is driven with responses as a
broker would send them (no network).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable

import pytest

from sdk import errors
from sdk.channel import parse_broker
from sdk.cluster import is_cluster, split_brokers, topic_broker
from sdk.core.pb import keybus_pb2 as pb
from sdk.sender import ProducerBatch, SendQueue

NOT_LEADER = ("broker 127.0.0.1:7001 is not the leader of topic 't'; the leader is "
              "127.0.0.1:7000. Produce there, or give the SDK every broker")


def test_split_brokers() -> None:
    assert split_brokers("h1:1, h2:2,h3") == ["h1:1", "h2:2", "h3"]
    assert is_cluster("a:1,b:2") and not is_cluster("a:1")
    with pytest.raises(ValueError, match="empty"):
        split_brokers("a:1,,b:2")


def test_one_broker_calls_name_a_list_of_several() -> None:
    with pytest.raises(ValueError, match="lists several brokers; this call talks to one"):
        parse_broker("h1:1,h2:2")


def test_topic_broker_of_one_address_is_itself() -> None:
    assert asyncio.run(topic_broker("h1:1", "t")) == "h1:1"  # no network: one address is it


def test_not_leader_names_the_leader() -> None:
    error = errors.from_code(errors.FAILED_PRECONDITION, NOT_LEADER)
    assert isinstance(error, errors.NotLeader) and error.leader == "127.0.0.1:7000"


def batch() -> ProducerBatch:
    request = pb.ProduceRequest(topic="t", batch=pb.EventBatch(count=1, key_ints=[1], values=[b"x"]))
    return ProducerBatch(request, 1, concurrent.futures.Future(), 10_000, 1)


def answer(queue: SendQueue, sent: ProducerBatch) -> list:  # type: ignore[type-arg]
    return queue.process_response(pb.ProduceResponse(
        request_id=sent.request.request_id, error_code=errors.FAILED_PRECONDITION,
        error_message=NOT_LEADER))


def test_not_leader_fails_a_batch_with_one_broker() -> None:
    queue = SendQueue("t", 1, idempotent=True)
    queue.add(batch())
    sent = queue.next_to_write(16)
    assert sent is not None
    outcomes = answer(queue, sent)
    assert len(outcomes) == 1 and isinstance(outcomes[0][1], errors.NotLeader)


def test_not_leader_is_retried_with_several_brokers() -> None:
    queue = SendQueue("t", 1, idempotent=True, redirects=True)
    queue.add(batch())
    sent = queue.next_to_write(16)
    assert sent is not None
    assert answer(queue, sent) == [] and queue.reconnect_requested
    queue.process_stream_broken()
    again = queue.next_to_write(16)
    assert again is sent and again.sequence == 0  # the same sequence: idempotent re-send


Probe = Callable[[str, str, object], Awaitable[tuple[str, object]]]


def _probes(answers: dict[str, object]) -> Probe:
    """`cluster._probe` answering from a table (what each broker says)."""
    async def probe(address: str, topic: str, security: object) -> tuple[str, object]:
        return address, answers[address]
    return probe


def test_find_leader_gives_up_early_only_when_no_broker_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster that is down fails within `unreachable_ms`; one that answers without a
    leader (a failover under way) is searched until `timeout_ms`."""
    import time

    from sdk import cluster

    down = errors.Unavailable("cannot reach broker at 127.0.0.1:1: connection refused")
    monkeypatch.setattr(cluster, "_probe", _probes({"a:1": down, "b:2": down}))
    began = time.monotonic()
    with pytest.raises(errors.Unavailable, match="no broker of a:1,b:2 could be reached "
                                                 "within 300 ms"):
        asyncio.run(cluster.find_leader(["a:1", "b:2"], "t", timeout_ms=30_000,
                                        unreachable_ms=300))
    assert time.monotonic() - began < 5
    follower = pb.TopicRoleInfo(topic="t", role="follower", writable=False)
    monkeypatch.setattr(cluster, "_probe", _probes({"a:1": down, "b:2": follower}))
    began = time.monotonic()
    with pytest.raises(errors.Unavailable, match="no leader of topic 't' within 1500 ms"):
        asyncio.run(cluster.find_leader(["a:1", "b:2"], "t", timeout_ms=1_500,
                                        unreachable_ms=300))
    assert time.monotonic() - began >= 1.5


def test_a_producer_given_brokers_none_of_which_runs_says_so_within_seconds() -> None:
    import time

    from sdk import Producer
    from tests.support.broker_process import free_port

    brokers = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"  # closed ports
    began = time.monotonic()
    with pytest.raises(errors.Unavailable, match="could be reached within 1000 ms"):
        asyncio.run(Producer.create(brokers, "t", connect_timeout_ms=1_000))
    assert time.monotonic() - began < 10
