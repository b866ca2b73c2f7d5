"""`keybus consume`: receive TOPIC's events through a subscription, acknowledging each.

Every partition unless `--partition` narrows it. Range changes (Key_Shared)
and active changes (Failover) are told on stderr as they happen (in the
stream with --json), and so is a lost broker while the consumer retries.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from keybus.cli.common import (
    FILTER,
    PARTITION,
    RANGES,
    START,
    Connection,
    checked_name,
    connection_options,
    json_option,
    note,
    print_json,
    run,
)
from keybus.cli.read import chosen_start, event_line, start_old_option
from sdk.consumer import Consumer, ConsumerConfig, Message
from sdk.core.filters import KeyFilterSpec
from sdk.core.model import HashRange
from sdk.reader import Start


@click.command(short_help="Consume a topic through a subscription.")
@click.argument("topic", callback=checked_name)
@click.option("--subscription", "-s", required=True, callback=checked_name,
              help="Subscription name (created by its first consumer).")
@click.option("--type", "sub_type", default="exclusive", show_default=True,
              type=click.Choice(["exclusive", "shared", "failover", "key_shared"]),
              help="Subscription type (fixed when the subscription is created).")
@click.option("--mode", default=None,
              type=click.Choice(["consistent", "auto_split", "sticky"]),
              help="Key_Shared mode: how hash ranges are given to consumers (default: the "
                   "subscription's; a new one gets the broker's key_shared_default_mode, "
                   "consistent).")
@click.option("--ranges", type=RANGES, help="Sticky mode: the hash ranges this consumer "
                                            "serves, e.g. 0-32767.")
@click.option("--start", type=START, metavar="START",
              help="Where a new subscription starts: latest (default), earliest, an offset "
                   "or scn:N. An existing subscription continues from its cursor.")
@start_old_option
@click.option("--partition", "partitions", multiple=True, type=PARTITION,
              help="Consume only this partition (repeatable; default: every partition).")
@click.option("--filter", "key_filter", type=FILTER,
              help="Broker-side key filter: range:SIZE:[ids] or mod:N:[buckets].")
@click.option("--name", "consumer_name", default="",
              help="Consumer name, unique in the subscription (default: random).")
@click.option("--max", "events_max", type=click.IntRange(1, None),
              help="Stop after this many events.")
@click.option("--no-ack", is_flag=True, help="Do not acknowledge (events are redelivered "
                                             "to the next consumer).")
@click.option("--retry-timeout", "retry_timeout_s", type=click.FloatRange(0, None),
              metavar="SECONDS", help="How long to retry a lost broker before failing "
                                      "(default 0 = until it is back).")
@connection_options
@json_option
def consume(topic: str, subscription: str, sub_type: str, mode: str | None,
            ranges: list[HashRange] | None, start: Start | None, start_old: Start | None,
            partitions: tuple[int, ...], key_filter: KeyFilterSpec | None, consumer_name: str,
            events_max: int | None, no_ack: bool, retry_timeout_s: float | None,
            conn: Connection, as_json: bool) -> None:
    """Consume TOPIC through a subscription, acknowledging each event printed
    (each line names the partition and offset). Ctrl-C, --max or --timeout stops."""
    chosen = chosen_start(start, start_old, "latest", partitions)
    try:
        config = ConsumerConfig(
            type=sub_type, mode=mode, ranges=ranges, start=chosen,
            key_filter=key_filter, consumer_name=consumer_name, partitions=partitions,
            retry_timeout_ms=int((retry_timeout_s or 0) * 1000))
        config.open_request(topic, subscription, consumer_name or "check")
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    printed = [0]
    try:
        run(_consume(conn, topic, subscription, config, events_max, not no_ack, as_json, printed))
    except SystemExit:  # Ctrl-C (exit 130): tell the total, as Kafka's console consumer does
        if not as_json:
            click.echo(f"{printed[0]} event(s)", err=True)
        raise
    if not as_json:
        click.echo(f"{printed[0]} event(s)", err=True)


async def _consume(conn: Connection, topic: str, subscription: str, config: ConsumerConfig,
                   events_max: int | None, ack: bool, as_json: bool, printed: list[int]) -> None:
    def ranges_changed(partition: int, ranges: list[HashRange]) -> None:
        text = ",".join(str(r) for r in ranges) or "-"
        if as_json:
            print_json({"range_change": {"partition": partition, "ranges": text}})
        else:
            note(f"partition {partition}: now serving hash ranges {text}")

    def active_changed(partition: int, active: bool) -> None:
        if as_json:
            print_json({"active_change": {"partition": partition, "active": active}})
        else:
            note(f"partition {partition}: {'active' if active else 'standing by'}")

    async with await Consumer.subscribe(
            conn.broker, topic, subscription, config=config, on_range_change=ranges_changed,
            on_active_change=active_changed,
            on_connection_change=lambda connected, message: note(message)) as consumer:
        while events_max is None or printed[0] < events_max:
            try:
                message = await consumer.receive(conn.timeout_s)
            except TimeoutError:
                break
            click.echo(json.dumps(_message_dict(message)) if as_json else
                       _message_line(topic, message))
            sys.stdout.flush()
            if ack:
                consumer.ack(message)
            printed[0] += 1


def _message_dict(message: Message) -> dict[str, Any]:
    return {**message.event.to_dict(), "redelivery_count": message.redelivery_count,
            "window_last_offset": message.window_last_offset}


def _message_line(topic: str, message: Message) -> str:
    line = event_line(topic, message.event)
    return line + (f" (redelivery {message.redelivery_count})" if message.redelivery_count else "")
