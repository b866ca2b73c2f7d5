"""The follower's rule for its upstream's topic incarnation (broker/relay/incarnation.py)."""

from __future__ import annotations

import pytest

from broker.relay.incarnation import judge


@pytest.mark.parametrize("ours, theirs", [("a", "a"), ("a", ""), ("", "")])
def test_the_same_or_an_upstream_that_does_not_say_changes_nothing(ours: str, theirs: str) -> None:
    assert judge(ours, theirs, records_agree=False, holds_nothing=False) == "same"


def test_a_copy_without_one_takes_the_upstreams() -> None:
    assert judge("", "b", records_agree=False, holds_nothing=False) == "adopt"


def test_one_made_up_apart_for_the_same_log_or_an_empty_copy_is_taken() -> None:
    assert judge("a", "b", records_agree=True, holds_nothing=False) == "adopt"
    assert judge("a", "b", records_agree=False, holds_nothing=True) == "adopt"


def test_another_incarnation_with_nothing_to_show_the_logs_are_one_is_another_topic() -> None:
    assert judge("a", "b", records_agree=False, holds_nothing=False) == "another"
