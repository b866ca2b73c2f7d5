"""A Spark task tells OUT_OF_RANGE causes apart by the broker's error name, and by
its words only when a broker sends no name (sdk/core/error_names.py)."""

from __future__ import annotations

from sdk import errors
from spark_connector._client import Failure, failure_of


def _out_of_range(message: str, name: str) -> errors.KeybusError:
    error = errors.from_code(errors.OUT_OF_RANGE, message)
    error.broker_error = name
    return error


def test_the_name_decides_whatever_the_words() -> None:
    reworded = "offsets 0..9 of t/0 are gone"
    assert failure_of(_out_of_range(reworded, "offset_before_start")) == Failure.RETENTION
    assert failure_of(_out_of_range(reworded, "bootstrap_snapshot_gone")) == Failure.RETENTION
    assert failure_of(_out_of_range(reworded, "offset_past_end")) == Failure.PAST_END
    assert failure_of(_out_of_range(reworded, "log_truncated")) == Failure.TRUNCATED
    assert failure_of(_out_of_range("removed by retention", "something_new")) == Failure.OTHER


def test_without_a_name_the_words_decide() -> None:
    assert failure_of(_out_of_range("offset 3 of t/0 was removed by retention", "")) == \
        Failure.RETENTION
    assert failure_of(_out_of_range("start offset 100 of t/0 is past the end: 50", "")) == \
        Failure.PAST_END
