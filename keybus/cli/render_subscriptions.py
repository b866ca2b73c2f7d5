"""Pure rendering of subscriptions: tables, JSON dicts and the range bar per consumer."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.table import Table

from keybus.cli.render import format_ranges, range_bar
from sdk.core.model import HashRange
from sdk.core.pb import keybus_pb2 as pb

TYPE_NAMES = {pb.EXCLUSIVE: "exclusive", pb.SHARED: "shared", pb.FAILOVER: "failover",
              pb.KEY_SHARED: "key_shared"}
MODE_NAMES = {pb.AUTO_SPLIT: "auto_split", pb.STICKY: "sticky", pb.CONSISTENT: "consistent"}


def type_text(info: pb.SubscriptionInfo) -> str:
    if info.type == pb.KEY_SHARED:
        return f"key_shared/{MODE_NAMES[info.key_shared_mode]}"
    return TYPE_NAMES[info.type]


def _ranges(consumer: pb.ConsumerInfo) -> list[HashRange]:
    return [HashRange(r.slot_first, r.slot_last) for r in consumer.ranges]


def subscriptions_table(topic: str, infos: list[pb.SubscriptionInfo]) -> Table:
    table = Table("subscription", "type", "consumers", "backlog", "unacked", "rate/s",
                  "waiting slots", title=f"subscriptions of {topic}")
    for info in infos:
        consumers = {c.name for p in info.partitions for c in p.consumers}
        table.add_row(info.subscription, type_text(info), str(len(consumers)),
                      f"{sum(p.backlog for p in info.partitions):,}",
                      f"{sum(p.unacked for p in info.partitions):,}",
                      f"{sum(p.dispatch_rate for p in info.partitions):,.0f}",
                      str(sum(p.waiting_slots_total for p in info.partitions)))
    return table


def describe(info: pb.SubscriptionInfo) -> list[RenderableType]:
    """One table per partition: cursor line, consumers with bars, waiting slots."""
    out: list[RenderableType] = []
    for p in info.partitions:
        title = (f"{info.topic}/{p.partition} · {info.subscription} ({type_text(info)}) · "
                 f"mark-delete {p.mark_delete} · end {p.end_offset} · backlog {p.backlog:,} · "
                 f"unacked {p.unacked:,} · {p.dispatch_rate:,.0f}/s")
        table = Table("consumer", "hash ranges 0 ─ 65535", "ranges", "unacked", "permits",
                      "rate/s", "state", title=title)
        for c in p.consumers:
            ranges = _ranges(c)
            bar = range_bar(ranges) if info.type == pb.KEY_SHARED else ""
            state = ("active" if c.active else "standby") if info.type == pb.FAILOVER else ""
            table.add_row(c.name, bar, format_ranges(ranges) if ranges else "-",
                          f"{c.unacked:,}", f"{c.permits:,}", f"{c.dispatch_rate:,.0f}", state)
        out.append(table)
        if p.waiting_slots_total:
            waiting = Table("slot", "reason", "holder", "events",
                            title=f"{p.waiting_slots_total} waiting slot(s), "
                                  f"{p.waiting_events:,} event(s)")
            for w in p.waiting_slots:
                waiting.add_row(str(w.slot), w.reason, w.holder or "-", str(w.events))
            out.append(waiting)
    return out


def subscription_dict(info: pb.SubscriptionInfo) -> dict[str, Any]:
    return {
        "topic": info.topic, "subscription": info.subscription, "type": type_text(info),
        "dead_letter_topic": info.dead_letter_topic, "max_redeliveries": info.max_redeliveries,
        "backlog": sum(p.backlog for p in info.partitions),
        "partitions": [{
            "partition": p.partition, "mark_delete": p.mark_delete,
            "persisted_mark_delete": p.persisted_mark_delete, "end_offset": p.end_offset,
            "backlog": p.backlog, "unacked": p.unacked, "dispatch_rate": p.dispatch_rate,
            "read_offset": p.read_offset,
            "consumers": [{
                "name": c.name, "ranges": format_ranges(_ranges(c)) if c.ranges else "",
                "bar": range_bar(_ranges(c)) if c.ranges else "", "unacked": c.unacked,
                "permits": c.permits, "dispatch_rate": c.dispatch_rate, "active": c.active,
                "priority": c.priority, "delivered": c.delivered} for c in p.consumers],
            "waiting_slots_total": p.waiting_slots_total, "waiting_events": p.waiting_events,
            "waiting_slots": [{"slot": w.slot, "reason": w.reason, "holder": w.holder,
                               "events": w.events} for w in p.waiting_slots],
        } for p in info.partitions],
    }
