"""Where the tests' free ports come from: below the ephemeral range, and within
`KEYBUS_PORT_RANGE` when set (each xdist worker gets a slice of its own)."""

from __future__ import annotations

import os
import socket

import pytest

from keybus.dev_cluster import PORT_FLOOR, free_port, port_range


def test_a_given_range_is_where_ports_are_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYBUS_PORT_RANGE", "23000-23010")
    assert port_range() == (23_000, 23_010)
    assert {free_port() for _ in range(40)} <= set(range(23_000, 23_010))


def test_a_held_port_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setenv("KEYBUS_PORT_RANGE", f"{port}-{port + 2}")
        assert {free_port() for _ in range(20)} <= {port + 1}


@pytest.mark.parametrize("given", ["20000", "a-b", "30000-20000", "80-90", "60000-70000"])
def test_a_bad_range_says_what_is_allowed(monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv("KEYBUS_PORT_RANGE", given)
    with pytest.raises(ValueError, match="LOW-HIGH with 1024 <= LOW < HIGH <= 65536"):
        port_range()


def test_without_a_range_ports_stay_below_the_ephemeral_range(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KEYBUS_PORT_RANGE", raising=False)
    low, high = port_range()
    assert low == PORT_FLOOR and high > low


def test_parallel_workers_have_ranges_of_their_own() -> None:
    """Set by tests/conftest.py for each xdist worker; absent in a serial run."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if count < 2:
        pytest.skip("a serial run: one range for all")
    low, high = (int(x) for x in os.environ["KEYBUS_PORT_RANGE"].split("-"))
    width = high - low
    assert low == PORT_FLOOR + int(worker[2:]) * width and width >= 1_000
