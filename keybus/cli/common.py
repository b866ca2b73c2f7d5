"""What every CLI command shares: the --broker/--json options, running a
coroutine, one-line failures and JSON output."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

T = TypeVar("T")

broker_option = click.option(
    "--broker", envvar="KEYBUS_BROKER", default="localhost:6650", show_default=True,
    help="Broker address HOST:PORT (env KEYBUS_BROKER).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def fail(message: str) -> None:
    """Print one line on stderr and exit 1."""
    click.echo(f"keybus: error: {message}", err=True)
    sys.exit(1)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine (failures are turned into one line by the root group)."""
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        sys.exit(130)


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, default=str))
