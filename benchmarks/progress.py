"""A progress bar (tqdm, on stderr) while a scenario runs, or none.

The parent process moves it from the shared event counters; JSON and tables
go to stdout, so the bar never mixes with results.
"""

from __future__ import annotations

import sys
from typing import Protocol


class Progress(Protocol):
    def advance_to(self, events: int) -> None: ...

    def close(self) -> None: ...


class NoProgress:
    """For tests and `--no-progress`."""

    def advance_to(self, events: int) -> None:
        return None

    def close(self) -> None:
        return None


class Bar:
    """One tqdm bar counted in events."""

    def __init__(self, label: str, total: int | None) -> None:
        from tqdm import tqdm  # imported here: only runs that show a bar need tqdm

        self._bar = tqdm(total=total, desc=label, unit="ev", unit_scale=True, file=sys.stderr,
                         mininterval=0.5, dynamic_ncols=True, leave=True)

    def advance_to(self, events: int) -> None:
        if events > self._bar.n:
            self._bar.update(events - self._bar.n)

    def close(self) -> None:
        self._bar.close()


def progress(label: str, total: int | None, enabled: bool) -> Progress:
    return Bar(label, total) if enabled else NoProgress()
