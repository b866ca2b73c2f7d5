"""`keybus subscriptions list|describe|seek|delete` and `keybus consume`.

Registered on the root group by main.py. Rendering of subscriptions (tables
and the 0..65535 range bar per consumer) is pure and lives in
`render_subscriptions.py`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console

from keybus.cli import render_subscriptions as render
from keybus.cli.common import broker_option, json_option, print_json, run
from keybus.cli.read import event_line, parse_start
from sdk.consumer import Consumer, ConsumerConfig, Message
from sdk.core.filters import KeyFilterSpec
from sdk.core.model import HashRange
from sdk.subscription_admin import SubscriptionAdmin

console = Console()


@click.group()
def subscriptions() -> None:
    """List, describe, seek and delete subscriptions."""


async def _admin(broker: str, method: str, *args: Any) -> Any:
    async with SubscriptionAdmin(broker) as admin:
        return await getattr(admin, method)(*args)


@subscriptions.command("list")
@click.argument("topic")
@broker_option
@json_option
def subscriptions_list(topic: str, broker: str, as_json: bool) -> None:
    """List the subscriptions of TOPIC with backlog and consumers."""
    infos = run(_admin(broker, "list_subscriptions", topic))
    if as_json:
        print_json([render.subscription_dict(i) for i in infos])
    else:
        console.print(render.subscriptions_table(topic, infos))


@subscriptions.command("describe")
@click.argument("topic")
@click.argument("subscription")
@broker_option
@json_option
def subscriptions_describe(topic: str, subscription: str, broker: str, as_json: bool) -> None:
    """Each consumer of SUBSCRIPTION with its hash ranges (a bar over 0..65535),
    backlog, unacked, dispatch rate, and the slots that wait and why."""
    info = run(_admin(broker, "describe_subscription", topic, subscription))
    if as_json:
        print_json(render.subscription_dict(info))
    else:
        for renderable in render.describe(info):
            console.print(renderable)


@subscriptions.command("seek")
@click.argument("topic")
@click.argument("subscription")
@click.option("--to", "position", required=True, help="earliest, latest, an offset, or scn:N.")
@click.option("--partition", "partitions", multiple=True, type=click.IntRange(0, None),
              help="Only this partition (repeatable; default all).")
@broker_option
@json_option
def subscriptions_seek(topic: str, subscription: str, position: str, partitions: tuple[int, ...],
                       broker: str, as_json: bool) -> None:
    """Move SUBSCRIPTION's cursor; events from there on are delivered again."""
    info = run(_admin(broker, "seek", topic, subscription, parse_start(position), partitions))
    if as_json:
        print_json(render.subscription_dict(info))
    else:
        marks = ", ".join(f"{p.partition}:{p.mark_delete}" for p in info.partitions)
        click.echo(f"subscription {subscription} on {topic} now at {marks}")


@subscriptions.command("delete")
@click.argument("topic")
@click.argument("subscription")
@click.option("--force", is_flag=True, help="Also while consumers are attached.")
@broker_option
def subscriptions_delete(topic: str, subscription: str, force: bool, broker: str) -> None:
    """Delete SUBSCRIPTION and its cursors."""
    run(_admin(broker, "delete_subscription", topic, subscription, force))
    click.echo(f"deleted subscription {subscription} of {topic}")


@click.command()
@click.argument("topic")
@click.option("--subscription", "-s", required=True, help="Subscription name (created if new).")
@click.option("--type", "sub_type", default="exclusive", show_default=True,
              type=click.Choice(["exclusive", "shared", "failover", "key_shared"]))
@click.option("--mode", default="auto_split", show_default=True,
              type=click.Choice(["auto_split", "sticky", "consistent"]), help="Key_Shared mode.")
@click.option("--ranges", help="Sticky mode: hash ranges to serve, e.g. 0-32767.")
@click.option("--from", "start", default="latest", show_default=True,
              help="Where a new subscription starts: earliest, latest, an offset, or scn:N.")
@click.option("--filter", "filter_text", help="Broker-side key filter: range:SIZE:[ids] or mod:N:[buckets].")
@click.option("--name", "consumer_name", default="", help="Consumer name (default random).")
@click.option("--max", "events_max", type=click.IntRange(1, None), help="Stop after this many events.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, None),
              help="Stop when no event arrives for this many seconds.")
@click.option("--no-ack", is_flag=True, help="Do not acknowledge (events are redelivered later).")
@broker_option
@json_option
def consume(topic: str, subscription: str, sub_type: str, mode: str, ranges: str | None,
            start: str, filter_text: str | None, consumer_name: str, events_max: int | None,
            timeout_s: float | None, no_ack: bool, broker: str, as_json: bool) -> None:
    """Consume TOPIC through a subscription, acknowledging each event printed."""
    config = ConsumerConfig(
        type=sub_type, mode=mode, ranges=ranges, initial_position=parse_start(start),
        key_filter=KeyFilterSpec.parse_cli(filter_text) if filter_text else None,
        consumer_name=consumer_name)
    printed = run(_consume(broker, topic, subscription, config, events_max, timeout_s,
                           not no_ack, as_json))
    if not as_json:
        click.echo(f"{printed} event(s)", err=True)


async def _consume(broker: str, topic: str, subscription: str, config: ConsumerConfig,
                   events_max: int | None, timeout_s: float | None, ack: bool,
                   as_json: bool) -> int:
    def ranges_changed(partition: int, ranges: list[HashRange]) -> None:
        text = ",".join(str(r) for r in ranges) or "-"
        if as_json:
            print_json({"range_change": {"partition": partition, "ranges": text}})
        else:
            click.echo(f"# partition {partition}: now serving hash ranges {text}", err=True)

    def active_changed(partition: int, active: bool) -> None:
        if as_json:
            print_json({"active_change": {"partition": partition, "active": active}})
        else:
            state = "active" if active else "standing by"
            click.echo(f"# partition {partition}: {state}", err=True)

    printed = 0
    async with await Consumer.subscribe(broker, topic, subscription, config=config,
                                        on_range_change=ranges_changed,
                                        on_active_change=active_changed) as consumer:
        while events_max is None or printed < events_max:
            try:
                message = await consumer.receive(timeout_s)
            except TimeoutError:
                break
            click.echo(json.dumps(_message_dict(message)) if as_json else
                       _message_line(message))
            sys.stdout.flush()
            if ack:
                consumer.ack(message)
            printed += 1
    return printed


def _message_dict(message: Message) -> dict[str, Any]:
    return {**message.event.to_dict(), "redelivery_count": message.redelivery_count,
            "window_last_offset": message.window_last_offset}


def _message_line(message: Message) -> str:
    line = event_line(message.event)
    return line + (f" (redelivery {message.redelivery_count})" if message.redelivery_count else "")


def register(cli: click.Group) -> None:
    cli.add_command(subscriptions)
    cli.add_command(consume)
