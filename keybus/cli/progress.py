"""Progress of long CLI work: rich's bar when stdout is a terminal, nothing otherwise.

Produce from a file, a large read and deleting a big topic take long enough
that a silent terminal looks stuck; a pipe or a file gets only the output.
Lines printed while the bar shows go above it (rich redirects stdout).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from keybus.cli.common import is_terminal

# Below this many events the work is over before a bar would help.
EVENTS_MIN = 10_000
# Short of the line: a bar line as wide as the terminal leaves the cursor in the
# last column, and a terminal then keeps bits of it in the scrollback.
BAR_CELLS = 24


@contextlib.contextmanager
def progress(description: str, total: int | None,
             enabled: bool | None = None) -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`; draw a bar when stdout is a terminal and the work is large.

    Args:
        total: events to do; None for work of unknown size (a spinner).
        enabled: force on or off (default: a terminal, and total >= EVENTS_MIN
            or unknown).
    """
    if enabled is None:
        enabled = is_terminal() and (total is None or total >= EVENTS_MIN)
    if not enabled:
        yield _ignore
        return
    columns = ([SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()]
               if total is None else
               [TextColumn("{task.description}"), BarColumn(bar_width=BAR_CELLS),
                MofNCompleteColumn(), TimeRemainingColumn()])
    with Progress(*columns, console=Console(), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def _ignore(n: int) -> None:
    """advance() when no bar is drawn."""
