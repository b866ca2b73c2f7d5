"""Who leads a topic: the ZooKeeper election's decisions, from one snapshot. Pure.

Inputs are what the shell read from ZooKeeper (`Snapshot`): the leader node
(ephemeral, owned by the leader's session), the persistent election state
(epoch, last leader, the copies it acknowledged with, the start offsets of
every epoch), the topic's members (every broker that ever joined) and the
candidates (live brokers that stopped copying and published their log ends).

Rules:
1. A leader node owned by this session: lead. Owned by another broker:
   follow it. Naming this broker under an older session (a restarted
   process): wait until ZooKeeper expires it.
2. No leader: publish candidacy (log end and last epoch per partition)
   first; nothing is decided without it.
3. A candidate's log is valid up to where its history agrees with the
   elected history: the start of the first epoch after its last record's
   epoch (Kafka's leader-epoch rule). Past that is a tail no later leader
   had: never acknowledged.
4. Eligible (no unclean election, Jepsen's Kafka lesson): the last leader
   is a candidate; or it resigned cleanly and a candidate holds all it had;
   or, with acks = n, at least (followers - n + 1) of the other members are
   candidates: every acknowledged event is on n followers, so one of them
   is among the candidates (quorum intersection). With acks = leader only
   the last leader (or a clean resignation) will do: a follower cannot show
   that it holds what the leader acknowledged alone.
5. The winner is the most advanced candidate: the one with the most valid
   data (partitions where it leads, then total), ties to the lowest broker
   id, so every broker computes the same winner. The winner drops its
   invalid tail, copies what other candidates hold beyond it, and claims
   the next epoch in one ZooKeeper transaction (conditional on the state
   version, so two claims never both succeed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

HISTORY_MAX = 1000  # epochs whose start offsets the state keeps


@dataclass(frozen=True, slots=True)
class LeaderNode:
    broker_id: str
    address: str
    epoch: int
    mine: bool  # owned by this broker's current session


@dataclass(frozen=True, slots=True)
class Candidate:
    broker_id: str
    address: str
    ends: tuple[int, ...]  # log end per partition
    epochs: tuple[int, ...]  # leader epoch of the last record per partition


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int = 0
    leader: str = ""  # broker id of the last leader ("" = never elected)
    copies: int = 0  # the acks it acknowledged with
    clean_ends: tuple[int, ...] | None = None  # set when it resigned cleanly
    history: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (epoch, start offset per partition)


@dataclass(frozen=True, slots=True)
class Snapshot:
    me: str
    leader: LeaderNode | None
    state: ElectionState
    members: frozenset[str]
    candidates: Mapping[str, Candidate]  # published for state.epoch
    published: bool  # this broker is among the candidates


@dataclass(frozen=True, slots=True)
class Lead:
    epoch: int


@dataclass(frozen=True, slots=True)
class Follow:
    address: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Publish:
    pass


@dataclass(frozen=True, slots=True)
class Wait:
    detail: str


@dataclass(frozen=True, slots=True)
class TakeOver:
    epoch: int
    truncate_to: Mapping[int, int] = field(default_factory=dict)  # partition -> valid end
    catch_up: Mapping[int, tuple[str, int]] = field(default_factory=dict)  # p -> (address, end)


Action = Lead | Follow | Publish | Wait | TakeOver


def plan(snapshot: Snapshot) -> Action:
    """This broker's next step for one topic (rules 1-5)."""
    leader = snapshot.leader
    if leader is not None:
        if leader.mine:
            return Lead(leader.epoch)
        if leader.broker_id == snapshot.me:
            return Wait("the leader node is this broker's previous session; waiting for "
                        "ZooKeeper to expire it")
        return Follow(leader.address, leader.epoch)
    if not snapshot.published:
        return Publish()
    state = snapshot.state
    valid = {c.broker_id: valid_ends(c, state.history) for c in snapshot.candidates.values()}
    ok, reason = eligible(snapshot, valid)
    if not ok:
        return Wait(reason)
    winner = choose_winner(valid)
    if winner != snapshot.me:
        return Wait(f"candidate {winner} has the most advanced log and takes over")
    return take_over(snapshot, valid)


def valid_ends(candidate: Candidate, history: tuple[tuple[int, tuple[int, ...]], ...]
               ) -> tuple[int, ...]:
    """Per partition, where the candidate's log stops agreeing with the elected history (rule 3)."""
    ends = []
    for index, (end, last_epoch) in enumerate(zip(candidate.ends, candidate.epochs, strict=True)):
        limit = end
        for epoch, starts in history:
            if epoch > last_epoch and index < len(starts):
                limit = min(limit, starts[index])
                break
        ends.append(limit)
    return tuple(ends)


def eligible(snapshot: Snapshot, valid: Mapping[str, tuple[int, ...]]) -> tuple[bool, str]:
    """Whether the candidates together must hold every acknowledged event (rule 4)."""
    state = snapshot.state
    if not state.leader or state.leader in valid:
        return True, ""
    if state.clean_ends is not None and any(
            all(v >= c for v, c in zip(ends, state.clean_ends, strict=False))
            for ends in valid.values()):
        return True, ""
    if state.copies == 0:
        return False, (f"acks=leader: only the last leader {state.leader} is known to hold every "
                       "acknowledged event; waiting for it (no unclean election)")
    followers = snapshot.members - {state.leader}
    needed = len(followers) - state.copies + 1
    present = len(followers & valid.keys())
    if present >= needed:
        return True, ""
    return False, (f"{present} of the {needed} followers needed (members {len(followers)}, acks "
                   f"{state.copies}) are candidates; waiting so that no acknowledged event is lost")


def choose_winner(valid: Mapping[str, tuple[int, ...]]) -> str:
    """The most advanced candidate (rule 5); deterministic."""
    partitions = max((len(ends) for ends in valid.values()), default=0)
    best = [max((ends[i] for ends in valid.values() if i < len(ends)), default=0)
            for i in range(partitions)]

    def rank(broker: str) -> tuple[int, int, str]:
        ends = valid[broker]
        leads = sum(1 for i, end in enumerate(ends) if end == best[i])
        return (-leads, -sum(ends), broker)

    return min(valid, key=rank)


def take_over(snapshot: Snapshot, valid: Mapping[str, tuple[int, ...]]) -> TakeOver:
    """The winner's steps before it claims the next epoch (rule 5)."""
    me = snapshot.candidates[snapshot.me]
    mine = valid[snapshot.me]
    truncate_to = {i: v for i, (v, end) in enumerate(zip(mine, me.ends, strict=True)) if end > v}
    catch_up: dict[int, tuple[str, int]] = {}
    for index, own in enumerate(mine):
        sources = sorted((ends[index], broker) for broker, ends in valid.items()
                         if broker != snapshot.me and index < len(ends) and ends[index] > own)
        if sources:
            end = sources[-1][0]
            broker = min(b for e, b in sources if e == end)
            catch_up[index] = (snapshot.candidates[broker].address, end)
    return TakeOver(snapshot.state.epoch + 1, truncate_to, catch_up)


def next_state(state: ElectionState, me: str, copies: int,
               starts: tuple[int, ...]) -> ElectionState:
    """The state the winner writes: its epoch begins at `starts` (its log ends)."""
    epoch = state.epoch + 1
    history = (*state.history, (epoch, starts))[-HISTORY_MAX:]
    return ElectionState(epoch, me, copies, None, history)


def resigned_state(state: ElectionState, ends: tuple[int, ...]) -> ElectionState:
    """The state a leader that stops cleanly writes: any candidate holding `ends` may lead."""
    return ElectionState(state.epoch, state.leader, state.copies, ends, state.history)


class ElectionLike(Protocol):
    """What the node needs from an election (election.ZkElection)."""

    @property
    def session_state(self) -> str: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def join(self, topic: str) -> None: ...
