"""Goal: `python -m benchmarks stages-ab` runs both versions for real and compares them:
a revision from a temporary git worktree beside this working tree, each through the real
traced broker, and the worktree is gone afterwards; a revision that does not exist is
refused with one line.

Method: this commit against itself, one short pair at 200 events/s.
"""

from __future__ import annotations

import subprocess

import pytest

from benchmarks import stages_ab


def _worktrees() -> str:
    return subprocess.run(["git", "worktree", "list"], cwd=stages_ab.REPO, capture_output=True,
                          text=True, check=True).stdout


def test_a_pair_against_this_commit(capsys: pytest.CaptureFixture[str]) -> None:
    assert stages_ab.main(["--base", "HEAD", "--pairs", "1", "--rate", "200",
                           "--duration-s", "1"]) == 0
    out = capsys.readouterr().out
    assert "| base 1 |" in out and "| head 1 |" in out
    assert "| loop |" in out and "| supervise:dispatcher |" in out
    assert "keybus-ab-" not in _worktrees()


def test_an_unknown_revision_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert stages_ab.main(["--base", "no-such-revision-here"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stages-ab: cannot check out 'no-such-revision-here'")
    assert len(err.strip().splitlines()) == 1
