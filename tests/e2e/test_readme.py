"""The README's examples, copied as written, print what the README says.

Goal: a new user who pastes the README's commands and scripts in order sees
the outputs the README shows (the first example once read nothing).
Method: parse README.md; against a fresh broker process, run every `$ ` line
of each console block with bash (KEYBUS_BROKER points the CLI at the broker,
as a user's default localhost:6650 would) and compare stdout with the lines
below it; run every command of the sh block that ends (not --follow) and
expect exit 0; run each Python block as a script (its "localhost:6650"
replaced by the broker's address) and compare stdout with the text block
that follows it (as sets of lines: partitions interleave).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.broker_process import REPO, BrokerProcess

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced block of README.md's "Using it" section."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Using it"):text.index("## Guarantees")]
    return [(m[1], m[2]) for m in FENCE.finditer(section)]


def keybus_command() -> str:
    installed = Path(sys.executable).parent / "keybus"
    return str(installed) if installed.exists() else f"{sys.executable} -m keybus"


def run_shell(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    line = line.replace(".venv/bin/keybus", keybus_command())
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60,
                          env=env, cwd=REPO)


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def test_readme_examples_print_what_the_readme_says(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address, COLUMNS="80")
    found = blocks()
    assert [lang for lang, _ in found] == ["console", "sh"] + ["python", "text"] * 4, found
    try:
        for command, expected in console_steps(found[0][1]):
            done = run_shell(command, env)
            assert done.returncode == 0, (command, done.stderr)
            assert done.stdout.splitlines() == expected, (command, done.stdout, done.stderr)
        for line in found[1][1].splitlines():
            command = line.split("  #")[0].strip()
            if command and "--follow" not in command:
                done = run_shell(command, env)
                assert done.returncode == 0, (command, done.stderr)
                assert done.stdout.strip() and "…" not in done.stdout, (command, done.stdout)
        for (_, code), (_, printed) in zip(found[2::2], found[3::2], strict=True):
            script = tmp_path / "example.py"
            script.write_text(code.replace("localhost:6650", broker.address))
            done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                                  timeout=60, env=env, cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            # The same lines; partitions and callbacks may come in another order.
            assert sorted(done.stdout.splitlines()) == sorted(printed.splitlines()), \
                (code, done.stdout)
    finally:
        broker.stop()
