"""A git revision checked out beside this working tree, for the A/B commands.

`stages-ab` and `core-path --base` run a revision's code next to this one; both
check it out in a temporary git worktree and remove it afterwards, whatever
happens in between. A revision with native modules (its `setup.py`) gets them
built in place, as the editable install builds this tree's, so both sides run
the code they would run installed; where they cannot be built (no C compiler),
both sides fall back alike only if this tree's were not built either.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT_S = 300


class WorktreeError(Exception):
    """git could not check the revision out (its message says why)."""


@contextmanager
def checked_out(revision: str, prefix: str) -> Iterator[Path]:
    """`revision` in a temporary worktree of this repository, removed on exit.

    Raises:
        WorktreeError: an unknown revision, or not a git checkout.
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        worktree = Path(tmp) / "base"
        added = subprocess.run(["git", "worktree", "add", "--detach", str(worktree), revision],
                               cwd=REPO, capture_output=True, text=True)
        if added.returncode:
            raise WorktreeError(added.stderr.strip())
        try:
            if (worktree / "setup.py").exists():  # optional extensions: a failure is no error
                subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                               cwd=worktree, capture_output=True, timeout=BUILD_TIMEOUT_S)
            yield worktree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO,
                           capture_output=True)


def run_script_over(tree: Path, script: Path, arguments: list[str], timeout_s: float) -> str:
    """Run `script` with `tree`'s packages first on the path (from `tree`); its stdout.

    run_path, not the file as a script: the script's folder would come first on the
    path, and benchmarks/broker.py would hide the broker package.

    Raises:
        RuntimeError: it exited non-zero (the last line of its stderr says why).
    """
    command = [sys.executable, "-c", "import runpy, sys; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')", str(script), *arguments]
    done = subprocess.run(command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode:
        raise RuntimeError(f"{script.name} over {tree} exited {done.returncode}: "
                           f"{done.stderr.strip().splitlines()[-1:]}")
    return done.stdout
