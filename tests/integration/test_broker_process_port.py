"""The tests' broker helper moves a first start to another port when its port
was taken between the check and the bind, and keeps the port of a restart."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support import broker_process
from tests.support.broker_process import BrokerProcess, PortTaken


def test_a_first_start_moves_off_a_taken_port(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        picks = iter([taken_port])
        real_free_port = broker_process.free_port
        monkeypatch.setattr(broker_process, "free_port", lambda: next(picks, None)
                            or real_free_port())
        broker = BrokerProcess(tmp_path / "data")
        assert broker.port == taken_port
        broker.start()
        try:
            assert broker.port != taken_port
        finally:
            broker.stop()


def test_a_restart_keeps_its_port_and_says_it_is_taken(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    broker.kill()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", broker.port))
        taken.listen()
        with pytest.raises(PortTaken, match="the port is in use"):
            broker.start()
