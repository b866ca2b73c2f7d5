"""A Databus checkpoint of another incarnation of its topic is not resumed in silence.

Goal: a registration's checkpoint records the incarnation of the topic it is
of; on start, one of another incarnation than DescribeTopic's (the topic was
deleted and created again; a file store keeps checkpoints across that) is
treated as a checkpoint retention passed: with bootstrap=True the partition
bootstraps the new topic, saying so in one WARNING naming both incarnations;
without it the registration fails with CheckpointOtherIncarnation (an
OffsetOutOfRange) naming both and what to do. A checkpoint without an
incarnation, or of the same one, resumes after its SCN as before. The
readers and bootstraps are asked of the topic's incarnation, so the broker
refuses a topic made again after the start too. The old code resumed every
checkpoint at `{"scn": scn + 1}`, wrote none with an incarnation and made its
readers without one.
Method: `LogWindows._start_of` with a file checkpoint store in a temp dir and
the incarnation DescribeTopic would have given set by hand; `Reader` replaced
by a fake that records its arguments; no broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sdk import errors
from sdk.bootstrap import SNAPSHOT, BootstrapPosition
from sdk.databus import log_windows
from sdk.databus.checkpoint_values import is_other_incarnation, other_incarnation_problem
from sdk.databus.config import DatabusConfig
from sdk.databus.errors import CheckpointOtherIncarnation
from sdk.databus.log_bootstrap import BootstrapStart
from sdk.databus.log_windows import LogWindows
from sdk.stores import FileCheckpointStore
from sdk.stores.records import Checkpoint

OLD, NEW = "5f0c9a1e2b3d4c6a", "0a1b2c3d4e5f6789"


def _checkpoint(incarnation: str, bootstrap: str = "") -> Checkpoint:
    return Checkpoint("", "t", "billing", 0, 4, 5, bootstrap=bootstrap, incarnation=incarnation)


def _source(tmp_path: Path, checkpoint: Checkpoint | None, bootstrap: bool) -> LogWindows:
    store = FileCheckpointStore(tmp_path)
    if checkpoint is not None:
        asyncio.run(store.update_checkpoint(checkpoint))
    source = LogWindows("127.0.0.1:1", "t", name="billing", config=DatabusConfig(),
                        need_slots=False, partitions=None, start="earliest", key_filter=None,
                        checkpoints=store, namespace="", bootstrap=bootstrap)
    source.incarnation = NEW  # as open() takes it from DescribeTopic
    return source


def _start(source: LogWindows, log_end: int = 10) -> object:
    return asyncio.run(source._start_of(0, 0, log_end))


def test_only_two_known_different_incarnations_are_another() -> None:
    assert is_other_incarnation(_checkpoint(OLD), NEW)
    assert not is_other_incarnation(_checkpoint(NEW), NEW)
    assert not is_other_incarnation(_checkpoint(""), NEW)  # written before they were kept
    assert not is_other_incarnation(_checkpoint(OLD), "")  # a broker that names none


def test_the_problem_names_both_incarnations_and_what_would_be_skipped() -> None:
    words = other_incarnation_problem(_checkpoint(OLD), NEW, 0, 10)
    assert OLD in words and NEW in words and "\n" not in words, words
    assert "deleted and created again" in words and "offsets 0..9" in words, words
    assert "up to scn 5 unseen" in words, words
    assert "empty, its next offset 0" in other_incarnation_problem(_checkpoint(OLD), NEW, 0, 0)


def test_without_bootstrap_a_checkpoint_of_another_incarnation_fails(tmp_path: Path) -> None:
    source = _source(tmp_path, _checkpoint(OLD), bootstrap=False)
    with pytest.raises(CheckpointOtherIncarnation) as raised:
        _start(source)  # the old code: {"scn": 6}, the new topic's windows 0..5 skipped
    message = str(raised.value)
    assert isinstance(raised.value, errors.OffsetOutOfRange)
    assert OLD in message and NEW in message and "billing" in message, message
    assert "bootstrap=True" in message and "remove that checkpoint" in message, message


def test_with_bootstrap_it_bootstraps_the_new_topic_with_one_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = _source(tmp_path, _checkpoint(OLD), bootstrap=True)
    with caplog.at_level(logging.INFO, logger="keybus.databus"):
        start = _start(source, log_end=3)  # also when the new log is shorter
    assert start == BootstrapStart(incarnation=NEW)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and OLD in said[0] and NEW in said[0], said
    assert "bootstrapping incarnation" in said[0], said


def test_a_saved_bootstrap_of_another_incarnation_starts_a_new_one(tmp_path: Path) -> None:
    position = BootstrapPosition(SNAPSHOT, 5, "s", 3).to_dict()
    source = _source(tmp_path, _checkpoint(OLD, json.dumps(position)), bootstrap=True)
    assert _start(source) == BootstrapStart(incarnation=NEW)  # not the old snapshot's position


@pytest.mark.parametrize("incarnation", ["", NEW])
def test_a_checkpoint_without_one_or_of_this_one_resumes_after_its_scn(
        tmp_path: Path, incarnation: str) -> None:
    assert _start(_source(tmp_path, _checkpoint(incarnation), bootstrap=False)) == {"scn": 6}


def test_readers_and_bootstraps_are_asked_of_the_topics_incarnation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(log_windows, "Reader", lambda *args, **kwargs: made.append(kwargs))
    source = _source(tmp_path, _checkpoint(NEW), bootstrap=True)
    source._reader(0, _start(source))  # type: ignore[arg-type]
    assert made[0]["incarnation"] == NEW and made[0]["start"] == {"scn": 6}
    source.start = "bootstrap"
    assert asyncio.run(source._start_of(1, 0, 10)) == BootstrapStart(incarnation=NEW)


def test_a_checkpoint_records_the_topics_incarnation(tmp_path: Path) -> None:
    source = _source(tmp_path, None, bootstrap=False)
    asyncio.run(source.persist(0, 7, 8))
    stored = asyncio.run(FileCheckpointStore(tmp_path).get_checkpoint("", "t", "billing", 0))
    assert stored is not None and (stored.offset, stored.incarnation) == (7, NEW)
