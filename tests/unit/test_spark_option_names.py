"""A refused option is named as docs/spark.md spells it, with what to use instead.

Spark lower-cases option names before the data source sees them, so a
message that echoes the key says 'endingoffsets' or 'startingoffset'. Users
read the option's documented spelling, and for an option that exists for the
other kind of read (or for a write) they need that, not "not known".
"""

from __future__ import annotations

import pytest

from spark_connector.options import OptionError, Use, parse_read_options, parse_write_options

BASE = {"broker": "127.0.0.1:6650", "topic": "orders"}


@pytest.mark.parametrize("key, use, words", [
    ("endingoffsets", Use.STREAM_READ, ["'endingOffsets'", "batch read only", "streaming read"]),
    ("maxeventspertrigger", Use.BATCH_READ, ["'maxEventsPerTrigger'", "streaming read only"]),
])
def test_an_option_of_the_other_read_is_named_with_where_it_applies(
        key: str, use: Use, words: list[str]) -> None:
    with pytest.raises(OptionError) as caught:
        parse_read_options({**BASE, key: "5"}, use)
    message = str(caught.value)
    for word in words:
        assert word in message
    assert "not known" not in message


def test_a_read_option_given_to_a_write_says_it_is_for_reads() -> None:
    with pytest.raises(OptionError, match="'startingOffsets' applies to a keybus batch read or "
                                          "streaming read only, not to a write"):
        parse_write_options({**BASE, "startingoffsets": "earliest"})


@pytest.mark.parametrize("key, use, meant", [
    ("startingoffset", Use.READ, "startingOffsets"),
    ("failondatalos", Use.READ, "failOnDataLoss"),
    ("writebatchevent", Use.WRITE, "writeBatchEvents"),
])
def test_a_misspelled_option_gets_the_closest_name(key: str, use: Use, meant: str) -> None:
    with pytest.raises(OptionError) as caught:
        if use is Use.WRITE:
            parse_write_options({**BASE, key: "1"})
        else:
            parse_read_options({**BASE, key: "1"}, use)
    assert f"did you mean {meant!r}?" in str(caught.value)
    assert "not known" in str(caught.value)


def test_an_unrelated_name_gets_the_list_without_a_guess() -> None:
    with pytest.raises(OptionError) as caught:
        parse_read_options({**BASE, "bogus": "1"}, Use.READ)
    assert "did you mean" not in str(caught.value)
    assert "; allowed: broker," in str(caught.value)
