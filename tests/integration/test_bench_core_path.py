"""Goal: `python -m benchmarks core-path --base REV` measures REV's broker code from a
temporary git worktree beside this working tree, and removes the worktree; a revision
that does not exist is refused with one line.

Method: this commit against itself, one short pair.
"""

from __future__ import annotations

import subprocess

import pytest

from benchmarks import core_path, worktree


def test_a_pair_against_this_commit(capsys: pytest.CaptureFixture[str]) -> None:
    assert core_path.main(["--base", "HEAD", "--pairs", "1", "--commits", "100",
                           "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| base |" in out and "| head |" in out and "Best against best:" in out
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=worktree.REPO,
                               capture_output=True, text=True, check=True).stdout
    assert "keybus-core-path-" not in worktrees


def test_an_unknown_revision_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert core_path.main(["--base", "no-such-revision-here"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("core-path: cannot check out 'no-such-revision-here'")
    assert len(err.strip().splitlines()) == 1
