"""keybus/quiet_grpc.py: which programs count as the `keybus` command.

Goal: gRPC is quieted for the console script and `python -m keybus` only, not
for `keybus broker`, a program importing the package, or a user who set
GRPC_VERBOSITY; the variable never reaches child processes. Method: the pure
argument check on sample command lines, and a child interpreter that imports
`keybus` as the CLI would and reports its environment.
"""

from __future__ import annotations

import os
import subprocess
import sys

from keybus.quiet_grpc import cli_arguments
from tests.support.broker_process import REPO


def test_which_command_lines_are_the_cli() -> None:
    assert cli_arguments(["/venv/bin/keybus", "topics", "list"], []) == ["topics", "list"]
    assert cli_arguments(["/r/keybus/__main__.py"], ["python", "-X", "dev", "-m", "keybus",
                                                     "read", "t"]) == ["read", "t"]
    assert cli_arguments(["/venv/bin/pytest"], ["python", "-m", "pytest"]) is None
    assert cli_arguments(["app.py"], ["python", "app.py"]) is None


def test_the_variable_does_not_leak_to_children() -> None:
    code = ("import sys; sys.argv = ['keybus', 'topics']; import keybus, os, grpc; "
            "print(os.environ.get('GRPC_VERBOSITY', 'unset'))")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env=env, timeout=60)
    assert result.stdout.strip() == "unset", result.stderr
