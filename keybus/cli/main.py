"""`keybus`: the command line. Arguments here; rendering in render.py.

Every command takes `--broker HOST:PORT` (env KEYBUS_BROKER, default
localhost:6650). Errors print one line, `keybus: error: ...`, and exit 1
(usage errors exit 2); never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
import grpc
from rich.console import Console

from keybus.cli import acl, bootstrap, certs, cluster, databus, processors, render, subscriptions
from keybus.cli.common import broker_option, fail, json_option, print_json, run
from sdk.admin import Admin
from sdk.core.filters import FilterError, KeyFilterSpec, explain
from sdk.core.model import RangeError, parse_ranges
from sdk.errors import KeybusError, from_rpc_error

T = TypeVar("T")
console = Console()


class KeybusGroup(click.Group):
    """The root group: every expected failure becomes one line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeybusError as e:
            fail(str(e))
        except grpc.aio.AioRpcError as e:
            fail(str(from_rpc_error(e)))
        except (ValueError, FilterError, RangeError) as e:
            fail(str(e))


def with_admin(broker: str, action: Callable[[Admin], Awaitable[T]]) -> T:
    async def go() -> T:
        async with Admin(broker) as admin:
            return await action(admin)
    return run(go())


@click.group(cls=KeybusGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="keybus")
def cli() -> None:
    """Keybus: a durable, key-ordered event broker."""


# ---------------------------------------------------------------- broker

@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                               "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def broker(args: tuple[str, ...]) -> None:
    """Run a broker (data in ./keybus-data, port 6650; --help for every setting)."""
    from broker.main import main as broker_main

    sys.exit(broker_main(list(args)))


@cli.command()
@click.option("--data-dir", default="./keybus-data", show_default=True)
@click.option("--port", default=6650, show_default=True, type=int)
@click.option("--exit", "exit_after", is_flag=True, help="Stop the broker after the demo.")
def demo(data_dir: str, port: int, exit_after: bool) -> None:
    """Start the embedded broker and show Key_Shared-style hash ranges at work."""
    from keybus.cli.demo import run_demo

    sys.exit(run_demo(data_dir, port, exit_after))


# ---------------------------------------------------------------- topics

@cli.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", default=1, show_default=True, type=click.IntRange(1, None))
@click.option("--retention-ms", default=0, show_default=True, type=click.IntRange(0, None),
              help="Remove records older than this (0 = forever).")
@click.option("--retention-bytes", default=0, show_default=True, type=click.IntRange(0, None),
              help="Per partition (0 = no limit).")
@click.option("--view/--no-view", default=None,
              help="Keep a compacted view for bootstrap (default: the broker's view_default).")
@click.option("--compacted", is_flag=True,
              help="Retention keeps at least the latest event per key (Kafka cleanup.policy=compact).")
@click.option("--delete-retention-ms", default=0, type=click.IntRange(0, None),
              help="Keep tombstones this long (0 = broker default, 24 h).")
@broker_option
@json_option
def topics_create(name: str, partitions: int, retention_ms: int, retention_bytes: int,
                  view: bool | None, compacted: bool, delete_retention_ms: int,
                  broker: str, as_json: bool) -> None:
    """Create topic NAME."""
    info = with_admin(broker, lambda a: a.create_topic(
        name, partitions, retention_ms, retention_bytes, view=view, compacted=compacted,
        delete_retention_ms=delete_retention_ms))
    if as_json:
        print_json(render.topic_dict(info))
    else:
        click.echo(f"created topic {info.topic} with {info.config.partitions} partition(s)")


@topics.command("list")
@broker_option
@json_option
def topics_list(broker: str, as_json: bool) -> None:
    """List topics."""
    infos = with_admin(broker, lambda a: a.list_topics())
    if as_json:
        print_json([render.topic_dict(t) for t in infos])
    else:
        console.print(render.topics_table(infos))


@topics.command("describe")
@click.argument("name")
@broker_option
@json_option
def topics_describe(name: str, broker: str, as_json: bool) -> None:
    """Show a topic's partitions: offsets, last SCN, size, compacted view."""
    info = with_admin(broker, lambda a: a.describe_topic(name))
    if as_json:
        print_json(render.topic_dict(info))
    else:
        console.print(render.partitions_table(info))


@topics.command("delete")
@click.argument("name")
@broker_option
def topics_delete(name: str, broker: str) -> None:
    """Delete topic NAME and all its events."""
    with_admin(broker, lambda a: a.delete_topic(name))
    click.echo(f"deleted topic {name}")


# ---------------------------------------------------------------- produce / read

@cli.command()
@click.argument("topic")
@click.option("--key", help="Produce one event with this key (int or string) instead of stdin.")
@click.option("--value", help="Value of the one event (UTF-8).")
@click.option("--partition", type=click.IntRange(0, None), help="Explicit partition.")
@click.option("--ordering-key", help="Ordering key of the one event.")
@click.option("--source", default="", help="Source of the one event.")
@click.option("--window", is_flag=True, help="Send all stdin lines as one consistency window.")
@click.option("--scn", type=click.IntRange(1, None), help="SCN of the window (with --window).")
@broker_option
@json_option
def produce(topic: str, key: str | None, value: str | None, partition: int | None,
            ordering_key: str | None, source: str, window: bool, scn: int | None, broker: str,
            as_json: bool) -> None:
    """Produce events: JSON lines on stdin ({"key": ..., "value": ...}) or --key/--value."""
    from keybus.cli.produce import events_from_lines, one_event, produce_events

    if key is not None or value is not None:
        if key is None or value is None:
            fail("--key and --value go together")
        events = [one_event(key or "", value or "", ordering_key, source)]
    else:
        events = events_from_lines(sys.stdin)
    if scn is not None and not window:
        fail("--scn needs --window")
    results = run(produce_events(broker, topic, events, partition, window, scn))
    for line in results:
        click.echo(json.dumps(line) if as_json else
                   f"{topic}/{line['partition']} offset {line['offset']} scn {line['scn']}")


@cli.command()
@click.argument("topic")
@click.option("--partition", default=0, show_default=True, type=click.IntRange(0, None))
@click.option("--from", "start", default="earliest", show_default=True,
              help="earliest, latest, an offset, or scn:N.")
@click.option("--follow", is_flag=True, help="Wait for new events at the end.")
@click.option("--ranges", help="Only these hash ranges, e.g. 0-16383,40000-65535.")
@click.option("--filter", "filter_text", help="Broker-side key filter: range:SIZE:[ids] or mod:N:[buckets].")
@click.option("--max", "events_max", type=click.IntRange(1, None), help="Stop after this many events.")
@broker_option
@json_option
def read(topic: str, partition: int, start: str, follow: bool, ranges: str | None,
         filter_text: str | None, events_max: int | None, broker: str, as_json: bool) -> None:
    """Read a partition from an offset or SCN."""
    from keybus.cli.read import parse_start, read_events

    hash_ranges = parse_ranges(ranges) if ranges else None
    key_filter = KeyFilterSpec.parse_cli(filter_text) if filter_text else None
    run(read_events(broker, topic, partition, parse_start(start), follow, hash_ranges,
                    key_filter, events_max, as_json))


# ---------------------------------------------------------------- filters

@cli.group()
def filters() -> None:
    """Server-side range/mod key filters (Databus)."""


@filters.command("explain")
@click.argument("expression")
def filters_explain(expression: str) -> None:
    """Say in words which keys EXPRESSION passes, e.g. 'range:5000000:[1,3-6]'."""
    click.echo(explain(KeyFilterSpec.parse_cli(expression)))


def main() -> None:
    cli(prog_name="keybus")



subscriptions.register(cli)
cluster.register(cli)
bootstrap.register(cli)
acl.register(cli)
certs.register(cli)
processors.register(cli)
databus.register(cli)
