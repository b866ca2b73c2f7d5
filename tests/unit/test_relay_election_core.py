"""Election core: who leads, and that no acknowledged event is ever lost by an election.

Goal: the rules of `broker/relay/election_core.py` hold: lead only under
one's own session, follow a named leader, publish before deciding, elect
only an eligible set of candidates (no unclean election), pick the most
advanced valid log, and never keep a tail that the elected history lacks.

Method: worked examples per rule; then a model of a one-partition cluster
(hypothesis drives produce, copy, ack, kill, restart and elect steps in any
order) in which every election goes through `plan`, the winner applies its
`TakeOver`, followers truncate as the leader's `EpochEnd` says, and after
every step every acknowledged event must be in the leader's log at its
offset, and every log must agree with the leader's below the acknowledged end.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.relay.election_core import (
    Candidate,
    ElectionState,
    Follow,
    Lead,
    LeaderNode,
    Publish,
    Snapshot,
    TakeOver,
    Wait,
    choose_winner,
    next_state,
    plan,
    resigned_state,
    valid_ends,
)

MEMBERS = frozenset({"a", "b", "c"})


def snapshot(me: str = "a", leader: LeaderNode | None = None,
             state: ElectionState | None = None,
             candidates: dict[str, tuple[int, int]] | None = None) -> Snapshot:
    found = {b: Candidate(b, f"{b}:1", (end,), (epoch,))
             for b, (end, epoch) in (candidates or {}).items()}
    return Snapshot(me, leader, state or ElectionState(), MEMBERS, found, me in found)


def test_a_leader_node_of_this_session_means_lead() -> None:
    assert plan(snapshot(leader=LeaderNode("a", "a:1", 4, mine=True))) == Lead(4)


def test_another_brokers_leader_node_means_follow_it() -> None:
    assert plan(snapshot(leader=LeaderNode("b", "b:1", 4, mine=False))) == Follow("b:1", 4)


def test_a_leader_node_of_this_brokers_old_session_is_waited_out() -> None:
    action = plan(snapshot(leader=LeaderNode("a", "a:1", 4, mine=False)))
    assert isinstance(action, Wait) and "previous session" in action.detail


def test_no_leader_publish_first() -> None:
    assert plan(snapshot(candidates={"b": (5, 1)})) == Publish()


def test_first_election_any_candidate_most_advanced_wins() -> None:
    assert plan(snapshot(candidates={"a": (3, 0), "b": (5, 0)})) == Wait(
        "candidate b has the most advanced log and takes over")
    action = plan(snapshot(me="b", candidates={"a": (3, 0), "b": (5, 0)}))
    assert action == TakeOver(1, {}, {})


def test_ties_go_to_the_lowest_broker_id() -> None:
    assert choose_winner({"c": (5,), "b": (5,), "a": (4,)}) == "b"


def test_acks_two_of_two_followers_one_candidate_is_enough() -> None:
    state = ElectionState(epoch=3, leader="a", copies=2)
    action = plan(snapshot(me="b", state=state, candidates={"b": (10, 3)}))
    assert action == TakeOver(4, {}, {})


def test_acks_one_needs_both_followers_no_unclean_election() -> None:
    state = ElectionState(epoch=3, leader="a", copies=1)
    action = plan(snapshot(me="b", state=state, candidates={"b": (10, 3)}))
    assert isinstance(action, Wait) and "1 of the 2 followers needed" in action.detail
    both = plan(snapshot(me="b", state=state, candidates={"b": (10, 3), "c": (12, 3)}))
    assert isinstance(both, Wait) and "candidate c" in both.detail


def test_acks_leader_waits_for_the_last_leader() -> None:
    state = ElectionState(epoch=3, leader="a", copies=0)
    action = plan(snapshot(me="b", state=state, candidates={"b": (10, 3), "c": (10, 3)}))
    assert isinstance(action, Wait) and "no unclean election" in action.detail
    back = plan(snapshot(me="a", state=state, candidates={"a": (11, 3), "b": (10, 3)}))
    assert back == TakeOver(4, {}, {})


def test_a_clean_resignation_lets_a_follower_holding_everything_lead() -> None:
    state = resigned_state(ElectionState(epoch=3, leader="a", copies=0), (10,))
    assert plan(snapshot(me="b", state=state, candidates={"b": (10, 3)})) == TakeOver(4, {}, {})
    behind = plan(snapshot(me="b", state=state, candidates={"b": (9, 3)}))
    assert isinstance(behind, Wait)


def test_a_tail_of_an_older_epoch_past_the_next_epoch_start_is_invalid() -> None:
    history = ((1, (0,)), (2, (8,)), (3, (12,)))
    stale = Candidate("a", "a:1", (15,), (1,))  # wrote 8..15 in epoch 1, never elected on
    assert valid_ends(stale, history) == (8,)
    current = Candidate("b", "b:1", (14,), (3,))
    assert valid_ends(current, history) == (14,)


def test_the_winner_drops_its_invalid_tail_before_leading() -> None:
    state = ElectionState(epoch=2, leader="b", copies=1, history=((1, (0,)), (2, (8,))))
    # a: ex-leader of epoch 1 with an unacknowledged tail; c followed b in epoch 2.
    action = plan(snapshot(me="c", state=state, candidates={"a": (15, 1), "c": (10, 2)}))
    assert action == TakeOver(3, {}, {})
    other = plan(snapshot(me="a", state=state, candidates={"a": (15, 1), "c": (10, 2)}))
    assert isinstance(other, Wait) and "candidate c" in other.detail


def test_catch_up_from_the_candidate_ahead_on_a_partition() -> None:
    found = {"a": Candidate("a", "a:1", (10, 4), (1, 1)),
             "b": Candidate("b", "b:1", (9, 7), (1, 1))}
    state = ElectionState(epoch=1, leader="c", copies=1)
    # Each leads one partition; b holds more in total, so b wins and copies partition 0 from a.
    assert isinstance(plan(Snapshot("a", None, state, MEMBERS, found, True)), Wait)
    action = plan(Snapshot("b", None, state, MEMBERS, found, True))
    assert action == TakeOver(2, {}, {0: ("a:1", 10)})


def test_next_state_keeps_a_bounded_history() -> None:
    state = ElectionState()
    for _ in range(1005):
        state = next_state(state, "a", 1, (0,))
    assert state.epoch == 1005 and len(state.history) == 1000 and state.history[-1] == (1005, (0,))


# ---------------------------------------------------------------- the model

BROKERS = ("a", "b", "c")
Entry = tuple[int, int]  # (epoch, unique id)


class Cluster:
    """One partition replicated by the rules the broker follows, in memory."""

    def __init__(self, copies: int) -> None:
        self.copies = copies
        self.logs: dict[str, list[Entry]] = {b: [] for b in BROKERS}
        self.live = set(BROKERS)
        self.leader: str | None = None
        self.state = ElectionState()
        self.synced: dict[str, int] = {}  # follower -> epoch it did the handshake for
        self.acked: dict[int, Entry] = {}
        self.next_id = 0

    def produce(self) -> None:
        if self.leader is not None:
            self.next_id += 1
            self.logs[self.leader].append((self.state.epoch, self.next_id))

    def copy(self, follower: str) -> None:
        if self.leader is None or follower == self.leader or follower not in self.live:
            return
        log, source = self.logs[follower], self.logs[self.leader]
        if self.synced.get(follower) != self.state.epoch:  # handshake (EpochEnd)
            last = log[-1][0] if log else 0
            end = next((i for i, e in enumerate(source) if e[0] > last), len(source))
            del log[min(end, len(log)):]
            self.synced[follower] = self.state.epoch
        if len(log) < len(source):
            log.append(source[len(log)])

    def ack(self) -> None:
        if self.leader is None:
            return
        source = self.logs[self.leader]
        for offset, entry in enumerate(source):
            holders = sum(1 for b in BROKERS if b != self.leader and
                          self.synced.get(b) == self.state.epoch and len(self.logs[b]) > offset)
            if holders >= self.copies and self.copies:
                self.acked[offset] = entry

    def kill(self, broker: str) -> None:
        self.live.discard(broker)
        self.synced.pop(broker, None)
        if broker == self.leader:
            self.leader = None

    def restart(self, broker: str) -> None:
        self.live.add(broker)

    def elect(self) -> None:
        if self.leader is not None or not self.live:
            return
        found = {b: Candidate(b, b, (len(self.logs[b]),),
                              (self.logs[b][-1][0] if self.logs[b] else 0,)) for b in self.live}
        winners = []
        for b in sorted(self.live):
            action = plan(Snapshot(b, None, self.state, frozenset(BROKERS), found, True))
            if isinstance(action, TakeOver):
                winners.append((b, action))
        assert len(winners) <= 1, winners
        if not winners:
            return
        winner, action = winners[0]
        assert not action.catch_up  # one partition: the winner is the most advanced
        for _, end in action.truncate_to.items():
            del self.logs[winner][end:]
        self.state = next_state(self.state, winner, self.copies, (len(self.logs[winner]),))
        self.leader = winner
        self.synced = {}

    def check(self) -> None:
        if self.leader is None:
            return
        log = self.logs[self.leader]
        for offset, entry in self.acked.items():
            assert offset < len(log) and log[offset] == entry, (offset, entry, log)


STEP = st.one_of(
    st.just(("produce",)), st.just(("ack",)), st.just(("elect",)),
    st.tuples(st.just("copy"), st.sampled_from(BROKERS)),
    st.tuples(st.just("kill"), st.sampled_from(BROKERS)),
    st.tuples(st.just("restart"), st.sampled_from(BROKERS)),
)


@settings(max_examples=400, deadline=None)
@given(copies=st.integers(1, 2), steps=st.lists(STEP, max_size=80))
def test_no_election_loses_an_acknowledged_event(copies: int, steps: list[tuple[str, ...]]) -> None:
    cluster = Cluster(copies)
    cluster.elect()
    for step in steps:
        getattr(cluster, step[0])(*step[1:])
        cluster.check()
