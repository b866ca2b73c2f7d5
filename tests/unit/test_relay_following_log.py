"""The leader's line when a follower stops or begins following (following_log.py).

Method: the pure `change_line` for each case: the level, and that the line
names the topic/partition, the follower and the count against acks.
"""

from __future__ import annotations

import logging

from broker.relay.following_log import change_line


def test_a_follower_stopping_below_acks_is_a_warning_that_produce_is_refused() -> None:
    level, text = change_line("t", 0, "b2", "127.0.0.1:7001", False, 0, 1, 5_000)
    assert level == logging.WARNING
    assert text == ("topic t/0: follower b2 (127.0.0.1:7001) stopped following (its report "
                    "stream closed 5000 ms ago (relay_follower_grace_ms) and it did not come "
                    "back); 0 follow(s) now, acks=1 needs 1: produce to this partition is "
                    "refused (followers_missing) until one is back")


def test_a_follower_stopping_with_enough_left_is_info() -> None:
    level, text = change_line("t", 3, "b2", "", False, 2, 2, 0)
    assert level == logging.INFO
    assert text == ("topic t/3: follower b2 stopped following (its report stream closed); "
                    "2 follow(s) now, acks=2 needs 2")


def test_a_follower_coming_back_is_info_saying_when_enough_follow() -> None:
    assert change_line("t", 0, "b2", "b2", True, 1, 1, 5_000) == (
        logging.INFO, "topic t/0: follower b2 follows; 1 follow(s) now, acks=1 needs 1; "
                      "enough follow: produce is taken")
    assert change_line("t", 0, "b2", "", True, 1, 2, 5_000)[1].endswith("acks=2 needs 2")
