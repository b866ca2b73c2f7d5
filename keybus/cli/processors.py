"""`keybus processors ownership|checkpoints TOPIC GROUP`: what event
processors keep in their two stores.

Registered on the root group by main.py. Reads the broker's stores, or with
`--redis URL` a Redis ownership store; rendering is in render_processors.py.
"""

from __future__ import annotations

import time
from typing import Any

import click

from keybus.cli import render_processors as render
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
from sdk.core.names import PROCESSOR_NAME_BYTES_MAX, is_text
from sdk.stores.broker_stores import BrokerCheckpointStore, BrokerOwnershipStore
from sdk.stores.redis_url import check_redis_url, redact


def _namespace(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """The processors' rule for a namespace (sdk/processor/arguments.py), as bad usage."""
    if not is_text(value, PROCESSOR_NAME_BYTES_MAX, empty_ok=True):
        raise click.BadParameter(f"{value!r} is not a namespace: allowed 0.."
                                 f"{PROCESSOR_NAME_BYTES_MAX} bytes of printable UTF-8 text",
                                 ctx, param)
    return value


namespace_option = click.option("--namespace", default="", show_default=True,
                                callback=_namespace, help="The processors' namespace.")


@click.group(cls=Group)
def processors() -> None:
    """Ownership and checkpoints of event processor groups."""


async def _ownership(conn: Connection, redis: str | None, namespace: str, topic: str,
                     group: str) -> tuple[Any, list[Any]]:
    async with conn.admin() as admin:
        info = await admin.describe_topic(topic)
    if redis is None:
        async with BrokerOwnershipStore(conn.broker,
                                        request_timeout_ms=conn.request_timeout_ms) as store:
            return info, await store.list_ownership(namespace, topic, group)
    from sdk.stores.redis_ownership import RedisOwnershipStore

    redis_store = RedisOwnershipStore(redis)
    try:
        return info, await redis_store.list_ownership(namespace, topic, group)
    finally:
        await redis_store.close()


def _redis_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A URL redis-py would misread is bad usage (exit 2), its password hidden."""
    if value is not None:
        try:
            check_redis_url(value)
        except ValueError as e:
            raise click.BadParameter(str(e), ctx, param) from None
    return value


@processors.command("ownership")
@click.argument("topic", callback=checked_name)
@click.argument("group", callback=checked_name)
@click.option("--redis", metavar="URL", callback=_redis_url,
              help="Read a Redis ownership store, e.g. redis://127.0.0.1:6379/0 or "
              "redis://:PASSWORD@HOST:PORT/DB (default: the broker's).")
@click.option("--expiration-ms", default=60_000, show_default=True, type=click.IntRange(1, None),
              help="The processors' ownership expiration (for 'expires in').")
@namespace_option
@connection_options
@wide_option
@json_option
def processors_ownership(topic: str, group: str, redis: str | None, expiration_ms: int,
                         namespace: str, conn: Connection, wide: bool, as_json: bool) -> None:
    """Who owns each partition of TOPIC for GROUP: owner, age, expires in, epoch."""
    info, ownership = run(_ownership(conn, redis, namespace, topic, group))
    rows = render.ownership_rows(info, ownership, time.time_ns() // 1_000_000, expiration_ms)
    if as_json:
        print_json(rows)
    else:
        store = f"redis {redact(redis)}" if redis else "the broker"
        console = stdout_console(wide)
        console.print(render.ownership_table(f"ownership of {topic} for {group} ({store})", rows,
                                             console.width, wide))


async def _checkpoints(conn: Connection, namespace: str, topic: str, group: str
                       ) -> tuple[Any, list[Any]]:
    async with conn.admin() as admin:
        info = await admin.describe_topic(topic)
    async with BrokerCheckpointStore(conn.broker,
                                     request_timeout_ms=conn.request_timeout_ms) as store:
        return info, await store.list_checkpoints(namespace, topic, group)


@processors.command("checkpoints")
@click.argument("topic", callback=checked_name)
@click.argument("group", callback=checked_name)
@namespace_option
@connection_options
@wide_option
@json_option
def processors_checkpoints(topic: str, group: str, namespace: str, conn: Connection, wide: bool,
                           as_json: bool) -> None:
    """GROUP's checkpoint of each partition of TOPIC: offset, scn, epoch, lag to the end."""
    info, checkpoints = run(_checkpoints(conn, namespace, topic, group))
    rows = render.checkpoint_rows(info, checkpoints)
    if as_json:
        print_json(rows)
    else:
        console = stdout_console(wide)
        console.print(render.checkpoints_table(f"checkpoints of {topic} for {group}", rows,
                                               console.width, wide))


def register(cli: click.Group) -> None:
    cli.add_command(processors)
