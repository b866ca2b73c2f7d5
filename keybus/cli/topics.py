"""`keybus topics create|list|describe|delete`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from keybus.cli import render
from keybus.cli.common import (
    Connection,
    Group,
    checked_name,
    connection_options,
    json_option,
    print_json,
    run,
    stdout_console,
    wide_option,
)
from keybus.cli.progress import progress
from sdk.admin import Admin
from sdk.core.wire_ints import INT64_MAX, UINT32_MAX
from sdk.errors import TopicNotFound

T = TypeVar("T")


def with_admin(conn: Connection, action: Callable[[Admin], Awaitable[T]]) -> T:
    async def go() -> T:
        async with conn.admin() as admin:
            return await action(admin)
    return run(go())


@click.group(cls=Group)
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command("create")
@click.argument("name", callback=checked_name)
@click.option("--partitions", default=1, show_default=True, type=click.IntRange(1, UINT32_MAX),
              help="Partitions of the topic (the broker allows up to its partitions_max).")
@click.option("--retention-ms", default=0, show_default=True, type=click.IntRange(-1, INT64_MAX),
              help="Remove records older than this (0 = the broker's retention_ms, forever "
                   "unless set; -1 = keep forever).")
@click.option("--retention-bytes", default=0, show_default=True,
              type=click.IntRange(-1, INT64_MAX),
              help="Keep at most this many bytes per partition (0 = the broker's "
                   "retention_bytes, no limit unless set; -1 = no limit).")
@click.option("--view/--no-view", default=None,
              help="Keep a compacted view for bootstrap (default: the broker's view_default).")
@click.option("--compacted", is_flag=True,
              help="Retention keeps at least the latest event per key (Kafka cleanup.policy=compact).")
@click.option("--delete-retention-ms", default=0, type=click.IntRange(0, INT64_MAX),
              help="Keep tombstones this long (0 = broker default, 24 h).")
@connection_options
@json_option
def topics_create(name: str, partitions: int, retention_ms: int, retention_bytes: int,
                  view: bool | None, compacted: bool, delete_retention_ms: int,
                  conn: Connection, as_json: bool) -> None:
    """Create topic NAME."""
    info = with_admin(conn, lambda a: a.create_topic(
        name, partitions, retention_ms, retention_bytes, view=view, compacted=compacted,
        delete_retention_ms=delete_retention_ms))
    if as_json:
        print_json(render.topic_dict(info))
    else:
        click.echo(f"created topic {info.topic} with {info.config.partitions} partition(s)")


@topics.command("list")
@connection_options
@json_option
@wide_option
def topics_list(conn: Connection, as_json: bool, wide: bool) -> None:
    """List topics with their events, bytes and retention."""
    infos = with_admin(conn, lambda a: a.list_topics())
    if as_json:
        print_json([render.topic_dict(t) for t in infos])
        return
    console = stdout_console(wide)
    if not infos:
        click.echo("no topics (keybus topics create NAME makes one)")
        return
    console.print(render.topics_table(infos, console.width, wide))


@topics.command("describe")
@click.argument("name", callback=checked_name)
@connection_options
@json_option
@wide_option
def topics_describe(name: str, conn: Connection, as_json: bool, wide: bool) -> None:
    """Show topic NAME's partitions: offsets, last SCN, size, compacted view."""
    info = with_admin(conn, lambda a: a.describe_topic(name))
    if as_json:
        print_json(render.topic_dict(info))
    else:
        console = stdout_console(wide)
        console.print(render.partitions_table(info, console.width, wide))


@topics.command("delete")
@click.argument("name", callback=checked_name)
@connection_options
@json_option
def topics_delete(name: str, conn: Connection, as_json: bool) -> None:
    """Delete topic NAME, its events and its subscriptions."""
    async def go(admin: Admin) -> int:
        try:
            info = await admin.describe_topic(name)
            events = sum(p.end_offset - p.start_offset for p in info.partitions)
        except TopicNotFound:
            events = 0  # the delete below says so, in its own words
        with progress(f"deleting topic {name} ({events:,} events)", None,
                      enabled=None if events >= 100_000 else False):
            await admin.delete_topic(name)
        return events

    events = with_admin(conn, go)
    if as_json:
        print_json({"deleted": name, "events": events})
    else:
        click.echo(f"deleted topic {name} ({events:,} events)")
