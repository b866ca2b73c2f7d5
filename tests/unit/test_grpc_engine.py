"""sdk/core/grpc_engine.py: grpcio runs its polling engine unless the user chose.

Goal: every way into Keybus (the SDK, the broker, the `keybus` command) sets
GRPC_EXPERIMENTS before grpc is imported, a user's own value (even empty)
wins, and a process that imported grpc first is left alone. Method: the pure
choice on sample environments, and child interpreters that import Keybus as
programs do and report the variable.
"""

from __future__ import annotations

import os
import subprocess
import sys

from sdk.core.grpc_engine import POLLING_ENGINE, VARIABLE, prefer_polling_engine
from tests.support.broker_process import REPO


def test_sets_the_polling_engine_when_nobody_chose() -> None:
    environ: dict[str, str] = {}
    assert prefer_polling_engine(environ, imported=set())
    assert environ == {VARIABLE: POLLING_ENGINE}


def test_a_users_choice_wins_even_when_empty() -> None:
    for chosen in ("", "-event_engine_dns"):
        environ = {VARIABLE: chosen}
        assert not prefer_polling_engine(environ, imported=set())
        assert environ == {VARIABLE: chosen}


def test_too_late_once_grpc_is_imported() -> None:
    environ: dict[str, str] = {}
    assert not prefer_polling_engine(environ, imported={"grpc"})
    assert environ == {}


def _variable_in_child(code: str, environ: dict[str, str] | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != VARIABLE} | (environ or {})
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_every_way_in_sets_it_before_grpc_is_imported() -> None:
    report = "import os; print(os.environ.get('GRPC_EXPERIMENTS', 'unset'))"
    ways_in = {
        "sdk": "import sdk",
        "broker": "import broker.main",
        "the keybus command": "import sys; sys.argv = ['keybus', 'topics']; import keybus",
        "the keybus package": "import keybus",
    }
    for way_in, code in ways_in.items():
        assert _variable_in_child(f"{code}; {report}") == POLLING_ENGINE, way_in
    assert _variable_in_child(f"import grpc, sdk; {report}") == "unset"
    assert _variable_in_child(f"import sdk; {report}", {VARIABLE: ""}) == ""
