"""A bootstrap that lost its broker does not read a topic made again meanwhile.

Goal: a following bootstrap Reader (`start="bootstrap"`: the snapshot, the
catch-up, then online) whose broker went away while the topic was deleted and
created again under the same name fails when it reconnects with
TopicRecreated (FAILED_PRECONDITION, `bootstrap_other_incarnation`, naming
both incarnations and where the bootstrap stood), at once and without
retrying. The old code sent no incarnation with a bootstrap's reopen and the
broker named none: the stream resumed ONLINE at offset 3 of the new topic and
handed out its events 3 and 4 as if they followed the old topic's state,
skipping the new topic's 0..2, silently. A bootstrap whose topic stayed
resumes as before and keeps the incarnation the broker named first. A
bootstrap given an incarnation (kept with a saved BootstrapPosition) is
checked at its first open; one given none (an older client) is served as before.

Method: a real broker process (RocksDB) on a temp dir, as
test_reader_topic_recreated.py: the reader bootstraps a topic with a view and
reads three events; the broker is killed with SIGKILL; a second broker process
on the same data directory (another port, which the reader cannot reach)
deletes the topic, creates it again with a view and produces five events, or
adds two to the same topic; it stops and the first starts again on its port.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sdk import Admin, Reader, TopicRecreated
from sdk.bootstrap import ONLINE, BootstrapPosition
from tests.support.away import WITHIN_S, change_while_away, produce, read_values
from tests.support.broker_process import BrokerProcess

TOPIC = "again"


@pytest.mark.parametrize("recreate", [True, False], ids=["recreated", "same-topic"])
def test_a_bootstrap_reconnects_only_to_the_topic_it_read(tmp_path: Path,
                                                          recreate: bool) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()

    async def go() -> None:
        async with Admin(broker.address) as admin:
            created = (await admin.create_topic(TOPIC, 1, view=True)).incarnation
        await produce(broker.address, TOPIC, [b"old-0", b"old-1", b"old-2"])
        said: list[tuple[bool, str]] = []
        reader = Reader(broker.address, TOPIC, 0, start="bootstrap", follow=True,
                        retry_backoff_ms=50, retry_backoff_max_ms=200,
                        on_connection_change=lambda up, text: said.append((up, text)))
        async with reader:
            assert sorted(await read_values(reader, 3)) == [b"old-0", b"old-1", b"old-2"]
            assert reader.incarnation == created  # named by the broker's first message
            await asyncio.to_thread(change_while_away, tmp_path, broker, TOPIC, recreate, view=True)
            async with Admin(broker.address) as admin:
                now = (await admin.describe_topic(TOPIC)).incarnation
            if not recreate:
                assert now == created
                assert await read_values(reader, 2) == [b"old-3", b"old-4"]
                assert reader.reconnects >= 1 and reader.incarnation == created
                return
            assert now != created
            with pytest.raises(TopicRecreated) as raised:
                got = await read_values(reader, 1)
                pytest.fail(f"the bootstrap read the new topic from where it stood: {got}")
            error = raised.value
            assert error.broker_error == "bootstrap_other_incarnation"
            assert repr(created) in error.message and repr(now) in error.message, error.message
            assert f"this bootstrap of {TOPIC!r}/0 (" in error.message, error.message
            assert "deleted and created again" in error.message
            assert reader.reconnects == 1, reader.reconnects  # refused once, not retried
            # the broker answered: told back before the error, not left "lost ... retrying"
            assert [up for up, _ in said] == [False, True], said
        # The new topic is bootstrapped with a new reader, from a new snapshot.
        async with Reader(broker.address, TOPIC, 0, start="bootstrap") as fresh:
            assert sorted(await read_values(fresh, 5)) == [b"new-%d" % i for i in range(5)]
            assert fresh.incarnation == now

    try:
        asyncio.run(asyncio.wait_for(go(), 4 * WITHIN_S))
    finally:
        broker.stop()


def test_an_incarnation_given_to_a_bootstrap_is_checked_at_the_first_open(
        broker: BrokerProcess) -> None:
    """A saved bootstrap position continued with another incarnation than the topic's
    is refused at once, not retried; with the topic's own it goes on; a bootstrap
    that gives none, as an older client, is served as before."""
    async def go() -> None:
        async with Admin(broker.address) as admin:
            created = (await admin.create_topic(TOPIC, 1, view=True)).incarnation
        await produce(broker.address, TOPIC, [b"a", b"b"])
        saved = BootstrapPosition(ONLINE, 0, next_offset=1, target_offset=1)
        stale = Reader(broker.address, TOPIC, 0, start=saved, follow=True,
                       incarnation="0123456789abcdef")
        with pytest.raises(TopicRecreated, match=r"this bootstrap of 'again'/0 \(online at "
                           "offset 1\\) is of incarnation '0123456789abcdef' of the topic.*"
                           f"now incarnation {created!r}"):
            await read_values(stale, 1)
        assert stale.reconnects == 0
        await stale.close()
        async with Reader(broker.address, TOPIC, 0, start=saved, follow=True, stop_offset=2,
                          incarnation=created) as given:
            assert await read_values(given, 1) == [b"b"]
        async with Reader(broker.address, TOPIC, 0, start="bootstrap") as plain:
            assert sorted(await read_values(plain, 2)) == [b"a", b"b"]
            assert plain.incarnation == created

    asyncio.run(asyncio.wait_for(go(), 2 * WITHIN_S))
