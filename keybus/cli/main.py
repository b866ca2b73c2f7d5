"""`keybus`: the command line. The root group and the registration of each
command group (one line each); the commands live in their own modules.

Every failure is one line on stderr, `keybus: error: ...`, never a
traceback: exit 1 when a call failed, 2 for usage (see common.py).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import grpc

from keybus.cli import acl, bootstrap, cluster, databus, processors
from keybus.cli.common import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Group,
    checked_broker,
    one_line,
)
from keybus.cli.consume import consume
from keybus.cli.filters import filters
from keybus.cli.produce import produce
from keybus.cli.read import read
from keybus.cli.subscriptions import subscriptions
from keybus.cli.topics import topics
from sdk.errors import KeybusError, from_rpc_error


class KeybusGroup(Group):
    """The root group: a failed call is one line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeybusError as e:
            _fail(str(e))
        except grpc.RpcError as e:
            _fail(str(from_rpc_error(e)))
        except BrokenPipeError:
            raise  # the reader of stdout left: main() ends quietly
        except (ValueError, OSError) as e:
            _fail(str(e))


def _fail(message: str) -> None:
    click.echo(f"keybus: error: {one_line(message)}", err=True)
    sys.exit(EXIT_FAILED)


def _broker_for_every_command(ctx: click.Context, param: click.Parameter,
                              value: str | None) -> None:
    """`keybus --broker H:P topics list`, as `pulsar-admin --admin-url` and Kafka's tools
    put the address first: it becomes KEYBUS_BROKER for this call, the default of every
    command's own --broker (which, given too, still wins)."""
    if value is not None:
        os.environ["KEYBUS_BROKER"] = checked_broker(ctx, param, value) or value


@click.group(cls=KeybusGroup, epilog=EXIT_CODES_HELP,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="keybus")
@click.option("--broker", metavar="HOST:PORT", expose_value=False, is_eager=True,
              callback=_broker_for_every_command,
              help="The broker every command talks to (as each command's --broker).")
def cli() -> None:
    """Keybus: a durable, key-ordered event broker.

    Commands that talk to a broker take --broker HOST:PORT (default
    localhost:6650, env KEYBUS_BROKER), before or after the command's name,
    --timeout and --json.
    """


cli.add_lazy_command("broker", "broker.main:command")
cli.add_lazy_command("demo", "keybus.cli.demo:demo")
cli.add_command(topics)
cli.add_command(produce)
cli.add_command(read)
cli.add_command(consume)
cli.add_command(subscriptions)
cli.add_command(filters)
bootstrap.register(cli)
acl.register(cli)
cli.add_lazy_command("certs", "keybus.cli.certs:certs_command")
processors.register(cli)
databus.register(cli)
cluster.register(cli)


def main(args: list[str] | None = None) -> None:
    """The `keybus` entry point: click without its standalone handling, so a
    usage error is one line too (exit 2)."""
    try:
        code = cli.main(args, prog_name="keybus", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:  # `keybus topics`: show what it offers
        click.echo(e.ctx.get_help() if e.ctx is not None else e.format_message(), err=True)
        sys.exit(EXIT_USAGE)
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx is not None else "keybus"
        click.echo(f"keybus: error: {one_line(e.format_message())} (see {where} --help)",
                   err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as e:
        click.echo(f"keybus: error: {one_line(e.format_message())}", err=True)
        sys.exit(e.exit_code)
    except click.Abort:
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:  # `keybus read ... | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_FAILED)
    sys.exit(code if isinstance(code, int) else 0)
