"""What every CLI command shares: the --broker/--json options (with TLS and
credentials), running a coroutine, one-line failures and JSON output."""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from sdk.security import ClientSecurity, use

T = TypeVar("T")

_broker_option = click.option(
    "--broker", envvar="KEYBUS_BROKER", default="localhost:6650", show_default=True,
    help="Broker address HOST:PORT (env KEYBUS_BROKER).")

# TLS and credentials, shared by every command that talks to a broker.
_SECURITY_OPTIONS = (
    click.option("--tls-ca", envvar="KEYBUS_TLS_CA", default="", metavar="PEM",
                 help="CA bundle to verify the broker with; turns TLS on (env KEYBUS_TLS_CA)."),
    click.option("--tls-cert", envvar="KEYBUS_TLS_CERT", default="", metavar="PEM",
                 help="Client certificate for mTLS (env KEYBUS_TLS_CERT)."),
    click.option("--tls-key", envvar="KEYBUS_TLS_KEY", default="", metavar="PEM",
                 help="Key of the client certificate (env KEYBUS_TLS_KEY)."),
    click.option("--tls-server-name", envvar="KEYBUS_TLS_SERVER_NAME", default="",
                 help="Name to check in the broker's certificate, when not the host."),
    click.option("--token", envvar="KEYBUS_TOKEN", default="",
                 help="Bearer token (static or JWT); prefer the env KEYBUS_TOKEN or --token-file."),
    click.option("--token-file", envvar="KEYBUS_TOKEN_FILE", default="", metavar="PATH",
                 help="File holding the bearer token (env KEYBUS_TOKEN_FILE)."),
)
_SECURITY_NAMES = ("tls_ca", "tls_cert", "tls_key", "tls_server_name", "token", "token_file")


def security_options(command: Callable[..., T]) -> Callable[..., T]:
    """Add the TLS/credential options; the SDK clients the command makes use them
    (sdk.security.use), so no command passes them on by hand."""
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        values = {name: kwargs.pop(name) for name in _SECURITY_NAMES}
        security = ClientSecurity(
            ca_file=values["tls_ca"], cert_file=values["tls_cert"], key_file=values["tls_key"],
            server_name=values["tls_server_name"], token=values["token"],
            token_file=values["token_file"])
        use(None if security == ClientSecurity() else security)
        return command(*args, **kwargs)
    for option in reversed(_SECURITY_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def broker_option(command: Callable[..., T]) -> Callable[..., T]:
    """--broker plus the TLS/credential options."""
    return _broker_option(security_options(command))
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
