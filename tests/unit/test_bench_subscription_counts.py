"""Per-subscription consumer counts in the comparison, and the spark-read scenario's dispatch.

Goal: a subscription module's CONSUMERS (Exclusive: 1) becomes its client's
consumer count and the workload its scenarios run; clients without one run the
workload's count; the tables' headings say which rows run another count; every
Keybus subscription type is listed; `python -m benchmarks spark-read` reaches
benchmarks/spark_read.py's main with its options.
Method: fake modules in sys.modules, hand-built rows, a stubbed spark_read.main.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.compare_report import other_consumer_counts
from benchmarks.keybus_e2e import SUBSCRIPTIONS, load
from benchmarks.measurement import CompareWorkload
from benchmarks.peer_scenarios import client_workload
from benchmarks.systems import Client


def _prepare(address: str, topic: str, workload: object) -> None:
    return None


def _consume(task: object, link: object) -> dict[str, object]:
    return {}


@pytest.fixture
def fake_modules() -> Iterator[list[str]]:
    added: list[str] = []
    yield added
    for name in added:
        sys.modules.pop(name, None)


def _add(added: list[str], name: str, **attributes: object) -> None:
    module = types.ModuleType(name)
    for attribute, value in attributes.items():
        setattr(module, attribute, value)
    sys.modules[name] = module
    added.append(name)


def test_a_module_consumer_count_reaches_its_client(fake_modules: list[str]) -> None:
    _add(fake_modules, "bench_fake_one", prepare=_prepare, consume=_consume, CONSUMERS=1)
    _add(fake_modules, "bench_fake_many", prepare=_prepare, consume=_consume)
    loaded = load((("One", "bench_fake_one"), ("Many", "bench_fake_many")))
    assert [(c.label, c.consumers) for c in loaded.clients] == [("One", 1), ("Many", None)]


def test_the_client_count_replaces_the_workload_count_only_when_set() -> None:
    workload = CompareWorkload(consumers=4)
    assert client_workload(workload, None) is workload
    assert client_workload(workload, Client("many", _prepare, _consume)) is workload
    one = client_workload(workload, Client("one", _prepare, _consume, consumers=1))
    assert one.consumers == 1 and one.events == workload.events
    assert workload.consumers == 4  # the plan's workload is left alone


def test_every_subscription_type_is_a_client_and_exclusive_runs_one() -> None:
    labels = [label for label, _ in SUBSCRIPTIONS]
    assert labels[:2] == ["Keybus Key_Shared", "Keybus Shared"]  # the ratios' reference first
    loaded = load()
    assert loaded.pending == ()
    counts = {c.label: c.consumers for c in loaded.clients}
    assert counts["Keybus Exclusive (1 consumer)"] == 1
    assert counts["Keybus Failover (1 active, others standby)"] is None
    assert counts["Keybus Key_Shared"] is None and counts["Keybus Shared"] is None


def test_headings_name_rows_with_another_consumer_count() -> None:
    rows: list[dict[str, Any]] = [{"system": "Keybus Key_Shared", "events_per_s": 1, "consumers": 4},
            {"system": "Keybus Exclusive (1 consumer)", "events_per_s": 1, "consumers": 1},
            {"system": "Redis consumer group", "events_per_s": 1, "consumers": 2},
            {"system": "Keybus Failover", "note": "failed: x"}]
    assert other_consumer_counts(rows, 4) == (
        "; Keybus Exclusive (1 consumer) runs 1 consumer process"
        "; Redis consumer group runs 2 consumer processes")
    assert other_consumer_counts(rows[:1], 4) == ""


def test_spark_read_dispatches_with_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    fake = types.ModuleType("benchmarks.spark_read")
    fake.main = lambda argv=None: seen.append(argv)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "benchmarks.spark_read", fake)
    import benchmarks

    monkeypatch.setattr(benchmarks, "spark_read", fake, raising=False)
    from benchmarks.__main__ import main

    assert main(["spark-read", "--events", "1000", "--repeats", "1"]) == 0
    assert seen == [["--events", "1000", "--repeats", "1"]]


def test_the_other_scenarios_still_parse() -> None:
    from benchmarks.__main__ import parse_args

    assert parse_args(["filtered-read", "--events", "10"]).scenario == "filtered-read"
    with pytest.raises(SystemExit):
        parse_args(["spark"])


def test_spark_read_parses_the_options_it_is_given() -> None:
    pytest.importorskip("pyspark")
    from benchmarks.spark_read import parse_args

    options = parse_args(["--events", "1000", "--repeats", "1"])
    assert (options.events, options.repeats, options.value_bytes) == (1000, 1, 64)
