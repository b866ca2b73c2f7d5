"""`keybus subscriptions list|describe|seek|delete`.

Rendering (tables, and the 0..65535 range bar per consumer) is pure and
lives in `render_subscriptions.py`.
"""

from __future__ import annotations

import re
from typing import Any

import click

from keybus.cli import render_subscriptions as render
from keybus.cli.common import (
    PARTITION,
    START,
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
from sdk.errors import OffsetOutOfRange
from sdk.reader import Start

# The broker's offset_past_end, worded for a read's start (broker/errors.py).
_PAST_END = re.compile(r"start offset (\d+) of (\S+) is past the end: (.*)", re.DOTALL)


def seek_past_end(message: str, subscription: str) -> str:
    """The broker's "start offset N of T/P is past the end: ..." in a seek's terms
    (the rest of its message, the stored offsets and what is allowed, kept); any
    other message as it is."""
    match = _PAST_END.fullmatch(message)
    if match is None:
        return message
    offset, partition, rest = match.groups()
    return (f"cannot seek subscription {subscription} to offset {offset}: past the end of "
            f"{partition}; {rest}")


async def _admin(conn: Connection, method: str, *args: Any) -> Any:
    async with conn.admin() as admin:
        return await getattr(admin, method)(*args)


@click.group(cls=Group)
def subscriptions() -> None:
    """List, describe, seek and delete subscriptions."""


@subscriptions.command("list")
@click.argument("topic", callback=checked_name)
@connection_options
@json_option
@wide_option
def subscriptions_list(topic: str, conn: Connection, as_json: bool, wide: bool) -> None:
    """List TOPIC's subscriptions with backlog and consumers."""
    infos = run(_admin(conn, "list_subscriptions", topic))
    if as_json:
        print_json([render.subscription_dict(i) for i in infos])
    elif not infos:
        click.echo(f"no subscriptions on {topic} (keybus consume {topic} -s NAME makes one)")
    else:
        console = stdout_console(wide)
        console.print(render.subscriptions_table(topic, infos, console.width, wide))


@subscriptions.command("describe")
@click.argument("topic", callback=checked_name)
@click.argument("subscription", callback=checked_name)
@connection_options
@json_option
@wide_option
def subscriptions_describe(topic: str, subscription: str, conn: Connection, as_json: bool,
                           wide: bool) -> None:
    """Each consumer of SUBSCRIPTION with its hash ranges (a bar over 0..65535),
    backlog, unacked, dispatch rate, and the slots that wait and why."""
    info = run(_admin(conn, "describe_subscription", topic, subscription))
    if as_json:
        print_json(render.subscription_dict(info))
    else:
        console = stdout_console(wide)
        for renderable in render.describe(info, console.width, wide):
            console.print(renderable)


@subscriptions.command("seek")
@click.argument("topic", callback=checked_name)
@click.argument("subscription", callback=checked_name)
@click.option("--to", "position", required=True, type=START, metavar="START",
              help="earliest, latest, an offset or scn:N.")
@click.option("--partition", "partitions", multiple=True, type=PARTITION,
              help="Only this partition (repeatable; default: every partition).")
@connection_options
@json_option
def subscriptions_seek(topic: str, subscription: str, position: Start,
                       partitions: tuple[int, ...], conn: Connection, as_json: bool) -> None:
    """Move SUBSCRIPTION's cursor; events from there on are delivered again."""
    try:
        info = run(_admin(conn, "seek", topic, subscription, position, partitions))
    except OffsetOutOfRange as e:
        raise OffsetOutOfRange(seek_past_end(e.message, subscription), e.code) from None
    if as_json:
        print_json(render.subscription_dict(info))
    else:
        marks = ", ".join(f"{p.partition}:{p.mark_delete}" for p in info.partitions)
        click.echo(f"subscription {subscription} on {topic} now at {marks}")


@subscriptions.command("delete")
@click.argument("topic", callback=checked_name)
@click.argument("subscription", callback=checked_name)
@click.option("--force", is_flag=True, help="Also while consumers are attached (their "
                                            "streams end).")
@connection_options
@json_option
def subscriptions_delete(topic: str, subscription: str, force: bool, conn: Connection,
                         as_json: bool) -> None:
    """Delete SUBSCRIPTION and its cursors."""
    run(_admin(conn, "delete_subscription", topic, subscription, force))
    if as_json:
        print_json({"deleted": subscription, "topic": topic})
    else:
        click.echo(f"deleted subscription {subscription} of {topic}")
