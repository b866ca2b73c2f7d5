"""A git revision checked out beside this working tree, for the A/B commands.

`stages-ab` and `core-path --base` run a revision's code next to this one; both
check it out in a temporary git worktree and remove it afterwards, whatever
happens in between.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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
            yield worktree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO,
                           capture_output=True)
