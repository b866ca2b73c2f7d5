"""What `keybus produce` says on stderr while its broker is away, and when it is back.

The SDK producer tells an outage through its logger (`keybus.producer`): a
WARNING when it loses the broker (or the leader refuses produce), INFO when the
broker answers again, and INFO for a first "no leader found yet"
(several brokers). A command has no
logging set up, so Python's last-resort handler printed the WARNING alone, bare,
and the return never: a produce that lost its leader to a failover said it lost
the broker and never that it was back. Here both are lines like every other
command's (`keybus: ...`, as `consume` and `read --follow` say theirs).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import click

PRODUCER_LOGGER = "keybus.producer"


class _NoteHandler(logging.Handler):
    """Each record as one `keybus: ...` line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(f"keybus: {record.getMessage()}", err=True)
        except Exception:  # a closed stderr (SIGPIPE) must not fail the produce
            self.handleError(record)


@contextlib.contextmanager
def producer_outages_said() -> Iterator[None]:
    """While inside: the producer's outage lines (INFO and above) go to stderr."""
    logger = logging.getLogger(PRODUCER_LOGGER)
    handler = _NoteHandler(logging.INFO)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # said here only, not again by a handler above
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
