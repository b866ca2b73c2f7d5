"""What every CLI command shares: the options that say how to reach the broker
(address, timeout, TLS and credentials), --json and --wide, parameter types,
running a coroutine, one-line failures.

The options that say how to reach the broker live here only:
`connection_options` gives a command one `Connection` (--broker, --timeout)
plus the TLS/credential options, which the SDK clients it makes pick up
(sdk.security.use); `broker_option` is the address alone, as `broker: str`,
with the same TLS/credential options.

Exit status, the same for every command:
  0    done
  1    a call failed (the broker refused it, or cannot be reached)
  2    usage: an unknown option, a missing argument or a value that does not parse
  130  interrupted (Ctrl-C) before the command was done
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import re
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console

from sdk.admin import Admin
from sdk.channel import parse_broker
from sdk.cluster import split_brokers, topic_broker
from sdk.core.filters import FilterError, KeyFilterSpec
from sdk.core.model import HashRange, RangeError, parse_ranges
from sdk.core.names import NAME, NAME_CHARACTERS
from sdk.core.wire_ints import UINT32_MAX
from sdk.security import ClientSecurity, read_ca_file, read_client_pair, use

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_CODES_HELP = ("Exit status: 0 done; 1 a call failed (refused by the broker, or the broker "
                   "cannot be reached); 2 usage (unknown option, missing argument, a value "
                   "that does not parse); 130 interrupted.")
REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_MS = 5_000  # as the SDK's: a broker never reached fails this fast


class Group(click.Group):
    """A command group whose listing never cuts a command's summary with '...'
    (click cuts it to fit one line; here it wraps). Groups made with
    `group.group()` are of this class too."""

    group_class = type

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, str] = {}

    def add_lazy_command(self, name: str, target: str) -> None:
        """A command whose module (`target`, "module:attribute") is imported only when
        the command runs or is listed: `broker` and `demo` bring the whole broker, about
        half a `keybus` process's start-up, which every other command goes without."""
        self.lazy_commands[name] = target

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_commands.pop(cmd_name, None)
        if target is not None:
            module, attribute = target.split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach the broker, from the shared options.

    Attributes:
        broker: HOST:PORT.
        timeout_s: how long to wait; None = the command's default (a call's
            deadline is 30 s; `consume` and `read --follow` wait for events
            until interrupted).
    """

    broker: str
    timeout_s: float | None = None

    @property
    def request_timeout_ms(self) -> int:
        return int((self.timeout_s or REQUEST_TIMEOUT_S) * 1000)

    @property
    def one_broker(self) -> str:
        """The broker of a command that talks to one: a list (h1:6650,h2:6650) is bad
        usage (exit 2), said before any connection, as for a value that does not parse."""
        try:
            parse_broker(self.broker)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        return self.broker

    def admin(self) -> Admin:
        """An admin client (topics and subscriptions) with the call deadline."""
        return Admin(self.one_broker, request_timeout_ms=self.request_timeout_ms)

    async def topic_admin(self, topic: str) -> Admin:
        """An admin client for `topic`: on the broker, or with several brokers
        (h1:6650,h2:6650) on the topic's leader."""
        address = await topic_broker(self.broker, topic, CONNECT_TIMEOUT_MS)
        return Admin(address, request_timeout_ms=self.request_timeout_ms)


def checked_broker(ctx: click.Context | None, param: click.Parameter | None,
                   value: str | None) -> str | None:
    """A --broker value whose every address parses (HOST:PORT, port 1..65535), else
    bad usage (exit 2) before any connection, as for any value that does not parse."""
    if value is not None:
        try:
            split_brokers(value)
        except ValueError as e:
            from_env = (ctx is not None and param is not None and param.name is not None
                        and ctx.get_parameter_source(param.name)
                        is click.core.ParameterSource.ENVIRONMENT)
            raise click.BadParameter(f"{e} (from KEYBUS_BROKER)" if from_env else str(e),
                                     ctx, param) from None
    return value


_broker_option = click.option(
    "--broker", envvar="KEYBUS_BROKER", default="localhost:6650", show_default=True,
    metavar="HOST:PORT", callback=checked_broker,
    help="The broker to talk to (env KEYBUS_BROKER).")

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
        if values["tls_ca"]:
            try:  # not a certificate: say so now, not as a refused connection later
                read_ca_file(values["tls_ca"], "--tls-ca")
            except ValueError as e:
                raise click.UsageError(str(e)) from None
        if bool(values["tls_cert"]) != bool(values["tls_key"]):
            raise click.UsageError("a client certificate needs its key: give --tls-cert and "
                                   "--tls-key together (env KEYBUS_TLS_CERT, KEYBUS_TLS_KEY)")
        if values["token"] and values["token_file"]:
            raise click.UsageError("give --token or --token-file (env KEYBUS_TOKEN or "
                                   "KEYBUS_TOKEN_FILE), not both")
        try:
            if values["tls_cert"] and values["tls_key"]:  # unusable: say so now, as for the CA
                read_client_pair(values["tls_cert"], values["tls_key"], ("--tls-cert", "--tls-key"))
            security = ClientSecurity(
                ca_file=values["tls_ca"], cert_file=values["tls_cert"],
                key_file=values["tls_key"], server_name=values["tls_server_name"],
                token=values["token"], token_file=values["token_file"])
            token = security.bearer_token()  # a token that cannot travel: say so now
            for address in split_brokers(kwargs["broker"]) if "broker" in kwargs else ():
                security.check_host(parse_broker(address)[0], token)  # bad usage, as the CA
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        use(None if security == ClientSecurity() else security)
        return command(*args, **kwargs)
    for option in reversed(_SECURITY_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def broker_option(command: Callable[..., T]) -> Callable[..., T]:
    """--broker plus the TLS/credential options."""
    return _broker_option(security_options(command))


def connection_options(command: F) -> F:
    """Add --broker and --timeout; the command receives `conn: Connection`.
    (`broker_option` alone gives a command the address as `broker: str`.)"""
    @functools.wraps(command)
    def with_connection(*args: Any, broker: str, timeout_s: float | None, **kwargs: Any) -> Any:
        return command(*args, conn=Connection(broker, timeout_s), **kwargs)

    wrapper: Any = with_connection
    wrapper = click.option(
        "--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), metavar="SECONDS",
        help="How long to wait: a call's deadline (default 30 unless the command says "
             "otherwise above; for produce, the whole "
             "delivery, retries included); consume and read --follow stop when no event "
             "came for this long (default: wait until Ctrl-C).")(wrapper)
    wrapper = broker_option(wrapper)
    return wrapper  # type: ignore[no-any-return]


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON (one object, or one per line for events) for scripts.")
wide_option = click.option("--wide", is_flag=True,
                           help="Lay tables out at their natural width and list every hash "
                                "range, whatever the terminal's width.")


# ---------------------------------------------------------------- parameter types

class StartType(click.ParamType["str | int | Mapping[str, int]", Any]):
    """earliest | latest | OFFSET | scn:N -> the SDK's start value."""

    name = "START"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> str | int | Mapping[str, int]:
        if not isinstance(value, str):
            return value  # type: ignore[no-any-return]
        if value in ("earliest", "latest"):
            return value
        if value.startswith("scn:") and value[4:].isdigit():
            return {"scn": int(value[4:])}
        if value.isdigit():
            return int(value)
        self.fail(f"{value!r} is not a position; allowed: earliest, latest, an offset (e.g. 42) "
                  "or scn:N", param, ctx)


class RangesType(click.ParamType["list[HashRange]", Any]):
    """0-16383,40000-65535 -> [HashRange]."""

    name = "RANGES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> list[HashRange]:
        if not isinstance(value, str):
            return value  # type: ignore[no-any-return]
        try:
            return parse_ranges(value)
        except (RangeError, ValueError) as e:
            self.fail(str(e), param, ctx)


class FilterType(click.ParamType[KeyFilterSpec, Any]):
    """range:SIZE:[ids] | mod:N:[buckets] -> KeyFilterSpec."""

    name = "FILTER"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> KeyFilterSpec:
        if not isinstance(value, str):
            return value  # type: ignore[no-any-return]
        try:
            return KeyFilterSpec.parse_cli(value)
        except (FilterError, ValueError) as e:
            self.fail(str(e), param, ctx)


def checked_name(ctx: click.Context | None, param: click.Parameter | None,
                 value: str | None) -> str | None:
    """A topic or subscription name by the broker's rule (sdk/core/names.py), else bad
    usage (exit 2) before any connection, as for any value that does not parse. The
    length is left to the broker: its limit is a setting (topic_name_bytes_max)."""
    if value is not None and NAME.fullmatch(value) is None:
        raise click.BadParameter(f"{value!r} is not a name: allowed one or more characters "
                                 f"from {NAME_CHARACTERS}", ctx, param)
    return value


START = StartType()
RANGES = RangesType()
FILTER = FilterType()
PARTITION = click.IntRange(0, UINT32_MAX)  # past the wire's uint32: the option is named


# ---------------------------------------------------------------- output and running

def one_line(message: str) -> str:
    """A message on one line: click lists a choice's values one per line ("Choose
    from:\n\tproduce,\n\t..."), and an error is one line whatever says it."""
    return re.sub(r"\s*\n\s*", " ", message.strip())


def fail(message: str) -> NoReturn:
    """Print one line on stderr and exit 1 (a failed call)."""
    click.echo(f"keybus: error: {one_line(message)}", err=True)
    sys.exit(EXIT_FAILED)


def note(message: str) -> None:
    """One line on stderr that is not output (progress of a long-running command)."""
    click.echo(f"keybus: {message}", err=True)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine (failures are turned into one line by the root group)."""
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)


def emit(line: str) -> None:
    """One line of output through sys.stdout, so that while a progress bar is
    drawn (rich redirects sys.stdout) the line goes above it. click.echo may
    write to the stream's buffer underneath and leave bits of the bar behind."""
    sys.stdout.write(line + "\n")


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, default=str))


def stdout_console(wide: bool = False) -> Console:
    """A rich console on stdout: the terminal's width, else 80 (COLUMNS
    overrides); with wide, no limit (lines as long as their content)."""
    return Console(width=100_000) if wide else Console()


def is_terminal() -> bool:
    return sys.stdout.isatty()
