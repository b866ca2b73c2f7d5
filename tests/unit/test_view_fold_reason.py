"""When a marked view stops waiting for an upstream (broker/relay/view_load.py).

Goal: `fold_reason` folds a marked view from the log exactly when no upstream
will load it (no replication entry for the topic: restarted with another
config; or this broker leads it), and leaves it waiting while one may come
(it follows the topic, its copy reconnecting; or it is a candidate waiting
for an election or a retried role change). An unmarked view is never touched.
Method: the pure function over every role and kind of replication entry.
"""

from __future__ import annotations

import pytest

from broker.relay.settings import TopicReplication
from broker.relay.view_load import fold_reason

FOLLOWS = TopicReplication("static", "127.0.0.1:7070")
LEADS = TopicReplication("none")
ELECTS = TopicReplication("zookeeper")


@pytest.mark.parametrize("replication", [FOLLOWS, LEADS, ELECTS])
@pytest.mark.parametrize("role", ["follower", "candidate"])
def test_a_view_an_upstream_may_still_load_keeps_waiting(
        replication: TopicReplication, role: str) -> None:
    assert fold_reason(240, replication, role) == ""


@pytest.mark.parametrize("replication", [FOLLOWS, LEADS, ELECTS])
def test_a_leader_folds_its_marked_view(replication: TopicReplication) -> None:
    assert fold_reason(240, replication, "leader") == "this broker now leads the topic"


@pytest.mark.parametrize("role", ["", "candidate", "follower", "leader"])
def test_a_broker_with_no_replication_entry_folds_its_marked_view(role: str) -> None:
    assert "neither follows nor leads the topic" in fold_reason(240, None, role)


@pytest.mark.parametrize("replication", [None, FOLLOWS, LEADS, ELECTS])
@pytest.mark.parametrize("role", ["", "candidate", "follower", "leader"])
def test_an_unmarked_view_is_left_alone(replication: TopicReplication | None,
                                        role: str) -> None:
    assert fold_reason(0, replication, role) == ""
