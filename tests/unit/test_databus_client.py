"""Bad arguments to DatabusClient, register() and DatabusConfig are refused at once.

Goal: each wrong argument raises a TypeError or ValueError when the client
is made or the consumer registered, naming the argument and what is
allowed, instead of being accepted and failing later at start (or never:
window_buffering="no" read as True).
Method: construction and register() only: neither connects to a broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sdk.consumer import ConsumerConfig
from sdk.databus import (
    DatabusClient,
    DatabusCombinedConsumerBase,
    DatabusConfig,
    DatabusConsumerBase,
)

BROKER = "127.0.0.1:6650"


class Plain(DatabusConsumerBase):
    pass


class Combined(DatabusCombinedConsumerBase):
    pass


def register(**arguments: Any) -> Callable[[], object]:
    consumer = arguments.pop("consumer", Plain())
    return lambda: DatabusClient(BROKER).register(consumer, **{"topic": "t", **arguments})


CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("client config", lambda: DatabusClient(BROKER, config="x"),  # type: ignore[arg-type]
     TypeError, "config='x'"),
    ("client broker int", lambda: DatabusClient(123),  # type: ignore[arg-type]
     TypeError, "broker=123 is not a str"),
    ("client broker empty", lambda: DatabusClient(""), ValueError, "HOST:PORT"),
    ("client namespace", lambda: DatabusClient(BROKER, namespace=None),  # type: ignore[arg-type]
     TypeError, "namespace=None"),
    ("client store", lambda: DatabusClient(BROKER, checkpoint_store="dir"),  # type: ignore
     TypeError, "checkpoint_store='dir'"),
    ("client callback", lambda: DatabusClient(BROKER, on_connection_change="print"),  # type: ignore
     TypeError, "on_connection_change='print' is not callable"),
    ("window_buffering", lambda: DatabusConfig(window_buffering="no"),  # type: ignore[arg-type]
     ValueError, "window_buffering='no'"),
    ("connect_timeout_ms", lambda: DatabusConfig(connect_timeout_ms=-1), ValueError,
     "connect_timeout_ms=-1 is invalid"),
    ("partitions int", register(partitions=5), TypeError, "partitions=5"),
    ("partitions str", register(partitions="0"), TypeError, "partitions='0'"),
    ("partitions names", register(partitions=["a"]), ValueError, "partitions=['a']"),
    ("partitions negative", register(partitions=[0, -1]), ValueError, "ints >= 0"),
    ("partitions empty", register(partitions=[]), ValueError, "non-empty"),
    ("register config", register(config="x"), TypeError, "config='x'"),
    ("bootstrap start", register(consumer=Combined(), bootstrap=True, start="nope"),
     ValueError, "start 'nope'"),
    ("bootstrap flag", register(consumer=Combined(), bootstrap="yes"), TypeError,
     "bootstrap='yes'"),
]


@pytest.mark.parametrize(("name", "make", "kind", "says"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_argument_is_refused_at_once(name: str, make: Callable[[], object],
                                           kind: type[Exception], says: str) -> None:
    with pytest.raises(kind) as raised:
        make()
    assert says in str(raised.value), str(raised.value)


def test_good_arguments_still_pass() -> None:
    client = DatabusClient(BROKER, config=DatabusConfig(window_buffering=False), namespace="n")
    registration = client.register(Plain(), topic="t", partitions=(1, 0, 1), start={"scn": 3})
    assert registration.source.partitions == [1, 0, 1]  # type: ignore[attr-defined]
    client.register(Combined(), topic="t", bootstrap=True, start="bootstrap", name="b")
    client.register(Combined(), topic="t", bootstrap=True, start="latest", name="c")


def test_register_shared_waits_for_its_broker_as_the_config_says() -> None:
    """The Consumer behind register_shared connects on its own: without a
    consumer_config, it gets the registration's connect_timeout_ms; a given one keeps
    its own."""
    client = DatabusClient(BROKER, config=DatabusConfig(connect_timeout_ms=0))
    default = client.register_shared(Plain(), topic="t", subscription="s")
    given = client.register_shared(Plain(), topic="t", subscription="s2",
                                   consumer_config=ConsumerConfig(connect_timeout_ms=7))
    assert default.source.consumer_config.connect_timeout_ms == 0  # type: ignore[attr-defined]
    assert given.source.consumer_config.connect_timeout_ms == 7  # type: ignore[attr-defined]
