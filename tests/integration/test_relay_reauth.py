"""A relay follower whose upstream token expires: it copies on with a rotated one, says a stale one once.

Goal: a follower authenticates to a TLS+JWT leader with `relay_token_file`;
the leader ends its streams (Read, ReportReplicaPositions) at each token's
`exp`. With short-lived tokens rotated in the file, the follower reopens at
once with the new token every time: it copies every event, and an `acks = 1`
produce is never held for long (its position reports come back at once, also
after many expiries). With a token that expired and was not replaced, the
follower says so in one ERROR naming the cause and `relay_token_file` (no
WARNING per retry), and copies on within moments of a valid token appearing.
Method: a real leader (TLS, HS256 JWTs, recheck every 300 ms) and a real
follower broker process; the token file is replaced in one step, as a
rotating agent does. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from keybus.dev_cluster import BrokerRunner, free_port
from sdk import Admin, Producer
from tests.support.relay_cluster import events, wait_for
from tests.support.security import SUPERUSER, SecureSetup

WAIT_S = 30.0


def _write_token(path: Path, token: str) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(token)
    os.replace(temporary, path)


class Pair:
    """A secured leader and a follower reaching it with a token file."""

    def __init__(self, root: Path, acks: str) -> None:
        self.setup = SecureSetup.make(root / "tls")
        self.token = root / "relay.jwt"
        _write_token(self.token, self.setup.hs256(SUPERUSER, expires_in_s=600))
        leader_config = root / "leader.toml"
        leader_config.write_text(f'[replication.s]\nacks = {acks}\n')
        self.leader = BrokerRunner(root / "leader", free_port(), leader_config,
                                   *self.setup.broker_args(), "--auth-recheck-interval-ms", "300")
        follower_config = root / "follower.toml"
        follower_config.write_text(f'relay_tls_ca_file = "{self.setup.path("ca.pem")}"\n'
                                   f'relay_token_file = "{self.token}"\n'
                                   f'[replication.s]\nupstream = "{self.leader.address}"\n')
        self.follower = BrokerRunner(root / "follower", free_port(), follower_config)

    def start(self) -> None:
        """The leader, then the follower (its token file as the test wrote it), then
        topic "s" on the leader."""
        self.leader.start()
        self.follower.start()

        async def create() -> None:
            async with Admin(self.leader.address, security=self.setup.security(SUPERUSER)) as a:
                await a.create_topic("s")
        asyncio.run(create())

    def rotate(self, expires_in_s: float) -> None:
        _write_token(self.token, self.setup.hs256(SUPERUSER, expires_in_s=expires_in_s))

    def follower_lines(self, *words: str) -> list[str]:
        return [line for line in self.follower.log_path.read_text().splitlines()
                if all(word in line for word in words)]

    def leader_ended(self, stream: str) -> int:
        ended = f"{stream} stream of principal '{SUPERUSER}' ended: {stream}: token expired"
        return self.leader.log_path.read_text().count(ended)


@pytest.fixture
def pair(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Pair]:
    pair = Pair(tmp_path, request.param)
    try:
        yield pair
    finally:
        pair.follower.stop()
        pair.leader.stop()


async def _produce(pair: Pair, seconds: float, count: int = 0) -> tuple[int, float]:
    """Produce one event at a time for `seconds` (or `count` events), each awaited;
    returns (events, the slowest acknowledgement in seconds)."""
    slowest, sent = 0.0, 0
    deadline = time.monotonic() + seconds
    async with await Producer.create(pair.leader.address, "s",
                                     security=pair.setup.security(SUPERUSER)) as producer:
        while time.monotonic() < deadline and (not count or sent < count):
            began = time.monotonic()
            await asyncio.wait_for(await producer.send(sent, b"%d" % sent), WAIT_S)
            slowest = max(slowest, time.monotonic() - began)
            sent += 1
            await asyncio.sleep(0.05)
    return sent, slowest


@pytest.mark.parametrize("pair", ["1"], indirect=True)
def test_a_follower_with_short_lived_rotated_tokens_copies_on_without_stalls(pair: Pair) -> None:
    stop = threading.Event()

    def rotate() -> None:  # every stream the follower opens carries a token valid <= 3 s
        while not stop.wait(1.0):
            pair.rotate(3)
    pair.rotate(3)
    rotator = threading.Thread(target=rotate, daemon=True)
    rotator.start()
    try:
        pair.start()
        sent, slowest = asyncio.run(_produce(pair, 20))
    finally:
        stop.set()
        rotator.join(5)
    assert pair.leader_ended("Read") >= 4 and pair.leader_ended("ReportReplicaPositions") >= 4
    # acks = 1: each produce waits for the follower's position report. Before the reporter
    # reopened at once, each expiry doubled its wait: 2.6, 3.6, 6.7 s... by the 5th.
    assert slowest < 5.0, f"an acks=1 produce waited {slowest:.1f} s for the follower"
    wait_for(lambda: events(pair.follower.address, "s") == sent, 15, "the follower copied all")
    assert pair.follower_lines("refuses") == [] and pair.follower_lines("token expired") == []


@pytest.mark.parametrize("pair", ['"leader"'], indirect=True)
def test_a_follower_whose_token_expired_says_so_once_and_resumes_on_a_new_one(
        pair: Pair) -> None:
    pair.rotate(15)  # and no new one: it expires while the follower copies
    pair.start()
    stopped = asyncio.run(_produce(pair, WAIT_S, count=20))[0]
    wait_for(lambda: events(pair.follower.address, "s") == stopped, 15, "first copy")
    refused = "refuses this broker's credentials (token expired; get a new one)"
    wait_for(lambda: pair.follower_lines(refused), 20, "the follower said its token expired")
    sent = stopped + asyncio.run(_produce(pair, WAIT_S, count=20))[0]
    time.sleep(5)  # the old follower logged a WARNING per retry, 0.1 .. 3.2 s apart
    said = pair.follower_lines("ERROR", refused, f"relay_token_file ({pair.token})")
    assert len(said) == 1, pair.follower.log_path.read_text()[-3000:]
    assert pair.follower_lines("WARNING", "token expired") == []
    assert events(pair.follower.address, "s") == stopped  # nothing copied meanwhile

    began = time.monotonic()
    pair.rotate(600)
    wait_for(lambda: events(pair.follower.address, "s") == sent, 15, "copied with the new token")
    # not after a doubled backoff of 6.4 s or more (room for a loaded machine)
    assert time.monotonic() - began < 5.0
    assert len(pair.follower_lines("INFO", "accepts this broker's credentials again")) == 1
