"""A private tmux server: a real terminal of a chosen size for CLI tests.

The test types into a shell in a tmux pane and reads the screen back, so the
CLI sees a terminal (isatty, its width) exactly as a user's. The server runs
on its own socket in the test's temp dir and is killed at the end; nothing
touches another tmux.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import time
from pathlib import Path


class Tmux:
    """One tmux session of `width` x `height` running bash, driven by send/wait."""

    def __init__(self, tmp: Path, env: dict[str, str], width: int = 80, height: int = 50) -> None:
        self.socket = str(tmp / "tmux.sock")
        self.env = env
        self.width = width
        self.height = height
        self._markers = itertools.count()

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=30, env=self.env,
                              check=True)
        return done.stdout

    def start(self) -> None:
        self._tmux("new-session", "-d", "-s", "t", "-x", str(self.width), "-y", str(self.height),
                   "bash --norc --noprofile")
        self._tmux("set-option", "-t", "t", "history-limit", "50000")
        self.send("export PS1='$ '")
        self.clear()

    def send(self, text: str, enter: bool = True) -> None:
        self._tmux("send-keys", "-t", "t", "-l", text)
        if enter:
            self._tmux("send-keys", "-t", "t", "Enter")

    def keys(self, *names: str) -> None:
        """Send named keys, e.g. C-c."""
        self._tmux("send-keys", "-t", "t", *names)

    def screen(self, joined: bool = True) -> str:
        """The pane with its history; joined: a wrapped line as one line."""
        return self._tmux("capture-pane", "-p", "-t", "t", "-S", "-50000",
                          *(["-J"] if joined else []))

    def clear(self) -> None:
        """An empty screen and history, the prompt on the first row."""
        marker = f"@@{next(self._markers)}"
        self.send(f"clear; echo {marker}")
        self.wait_for(marker)
        self._tmux("clear-history", "-t", "t")

    def wait_for(self, text: str | re.Pattern[str], timeout_s: float = 60) -> str:
        """The screen once it holds `text` (a pattern: once it matches)."""
        deadline = time.monotonic() + timeout_s
        while True:
            screen = self.screen()
            if text.search(screen) if isinstance(text, re.Pattern) else text in screen:
                return screen
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} not on screen within {timeout_s}s:\n{screen[-3000:]}")
            time.sleep(0.1)

    def run(self, command: str, timeout_s: float = 60) -> tuple[int, list[str]]:
        """Type a command on a cleared screen and wait for it to end.

        Returns:
            (exit status, the lines it printed as the terminal shows them,
            a wrapped line joined).
        """
        self.clear()
        marker = f"@@{next(self._markers)}"
        self.send(f"{command}; echo {marker} rc=$?")
        # The typed line holds "rc=$?", the answer "rc=" and digits. A typed line that
        # fills the row exactly is joined with the answer's row by capture-pane -J.
        status = re.compile(rf"{marker} rc=(\d+)$", re.MULTILINE)
        rows = self.wait_for(status, timeout_s).splitlines()
        first = next(i for i, row in enumerate(rows) if row.startswith("$ ") and marker in row)
        last, found = next((i, m) for i in range(first, len(rows))
                           if (m := status.search(rows[i])) is not None)
        return int(found.group(1)), rows[first + 1:last]

    def record(self, path: Path) -> None:
        """Copy every byte the pane is sent to `path` (a live bar included, which
        a screen capture can miss when the work is quick) until stop_recording()."""
        self._tmux("pipe-pane", "-t", "t", f"cat >> {shlex.quote(str(path))}")

    def stop_recording(self) -> None:
        self._tmux("pipe-pane", "-t", "t")

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True,
                       timeout=30, env=self.env, check=False)
