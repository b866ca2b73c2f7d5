"""An unknown keyword setting is named with the allowed ones, by every client.

Goal: SyncReader, SyncAdmin and TopicReader (hence SyncTopicReader) answer a
misspelt setting as SyncProducer does (ProducerConfig): a ValueError naming it
and the settings that exist, at construction, before any thread or channel.
Before, SyncReader and SyncAdmin raised Python's own TypeError about
`Reader.__init__()`/`AdminClient.__init__()`, and TopicReader took it silently
and failed only once reading began. No broker: construction connects nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sdk import SyncAdmin, SyncProducer, SyncReader, SyncTopicReader, TopicReader
from sdk.options import check_settings, keyword_settings
from sdk.reader import Reader

NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize(("make", "what", "some_allowed"), [
    (lambda **o: SyncReader(NOWHERE, "t", 0, **o), "reader", "follow, stop_offset"),
    (lambda **o: SyncAdmin(NOWHERE, **o), "admin", "request_timeout_ms, channel"),
    (lambda **o: TopicReader(NOWHERE, "t", **o), "topic reader", "hash_ranges, key_filter"),
    (lambda **o: SyncTopicReader(NOWHERE, "t", **o), "topic reader", "partitions, start"),
    (lambda **o: SyncProducer(NOWHERE, "t", **o), "producer", "linger_ms"),
])
def test_an_unknown_setting_is_named_with_the_allowed_ones(
        make: Callable[..., Any], what: str, some_allowed: str) -> None:
    with pytest.raises(ValueError) as caught:
        make(folow=True, zeta=1)
    text = str(caught.value)
    assert text.startswith(f"unknown {what} setting(s) folow, zeta; allowed: ")
    assert some_allowed in text


def test_known_settings_are_taken() -> None:
    SyncReader(NOWHERE, "t", 0, follow=True, events_max=3).close()
    SyncAdmin(NOWHERE, request_timeout_ms=1_000).close()
    TopicReader(NOWHERE, "t", follow=True, hash_ranges="0-100", sources=["a"])


def test_allowed_lists_the_callees_keywords_but_those_left_out() -> None:
    allowed = keyword_settings(Reader, ("broker", "topic", "partition"))
    assert allowed[:2] == ["start", "hash_ranges"] and "partition" not in allowed
    assert "self" not in keyword_settings(Reader)


def test_check_settings_is_silent_for_known_ones() -> None:
    check_settings("reader", {"follow": True}, ["follow", "start"])
    with pytest.raises(ValueError, match=r"^unknown reader setting\(s\) x; allowed: follow$"):
        check_settings("reader", {"x": 1}, ["follow"])
