"""Pure rendering of subscriptions: tables, JSON dicts and the range bar per consumer.

Laid out for a given width (see render.py): names are never cut, and each
consumer's hash ranges get a bar line of their own under the consumer table.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.text import Text

from keybus.cli.render import bars, fit_table, format_ranges, range_bar
from sdk.core.model import HashRange
from sdk.core.pb import keybus_pb2 as pb

TYPE_NAMES = {pb.EXCLUSIVE: "exclusive", pb.SHARED: "shared", pb.FAILOVER: "failover",
              pb.KEY_SHARED: "key_shared"}
MODE_NAMES = {pb.AUTO_SPLIT: "auto_split", pb.STICKY: "sticky", pb.CONSISTENT: "consistent"}
JSON_BAR_WIDTH = 64


def type_text(info: pb.SubscriptionInfo) -> str:
    if info.type == pb.KEY_SHARED:
        return f"key_shared/{MODE_NAMES[info.key_shared_mode]}"
    return TYPE_NAMES[info.type]


def _ranges(consumer: pb.ConsumerInfo) -> list[HashRange]:
    return [HashRange(r.slot_first, r.slot_last) for r in consumer.ranges]


def subscriptions_table(topic: str, infos: list[pb.SubscriptionInfo], width: int,
                        wide: bool = False) -> RenderableType:
    rows = []
    for info in infos:
        consumers = {c.name for p in info.partitions for c in p.consumers}
        rows.append((info.subscription, type_text(info), str(len(consumers)),
                     f"{sum(p.backlog for p in info.partitions):,}",
                     f"{sum(p.unacked for p in info.partitions):,}",
                     f"{sum(p.dispatch_rate for p in info.partitions):,.0f}",
                     str(sum(p.waiting_slots_total for p in info.partitions))))
    return fit_table(f"subscriptions of {topic}", ("subscription", "type", "consumers",
                                                   "backlog", "unacked", "rate/s", "waiting"),
                     rows, width, wide, numeric_from=2)


def describe(info: pb.SubscriptionInfo, width: int, wide: bool = False) -> list[RenderableType]:
    """Per partition: a cursor line, the consumers, their bars, the waiting slots."""
    out: list[RenderableType] = []
    for p in info.partitions:
        out.append(Text.assemble((f"{info.topic}/{p.partition}", "bold"),
                                 f" · {info.subscription} ({type_text(info)})"))
        out.append(Text(f"mark-delete {p.mark_delete} · end {p.end_offset} · backlog "
                        f"{p.backlog:,} · unacked {p.unacked:,} · {p.dispatch_rate:,.0f}/s"))
        out.append(_consumers(info, p, width, wide))
        if info.type == pb.KEY_SHARED and p.consumers:
            out.extend(bars([(c.name, _ranges(c)) for c in p.consumers], width, wide))
        if p.waiting_slots_total:
            rows = [(str(w.slot), w.reason, w.holder or "-", str(w.events))
                    for w in p.waiting_slots]
            out.append(fit_table(f"{p.waiting_slots_total} waiting slot(s), "
                                 f"{p.waiting_events:,} event(s)",
                                 ("slot", "reason", "holder", "events"), rows, width, wide))
        out.append(Text(""))
    return out


def _consumers(info: pb.SubscriptionInfo, p: pb.SubscriptionPartitionInfo, width: int,
               wide: bool) -> RenderableType:
    """The consumer table; `state` only for Failover, where it says who is active."""
    failover = info.type == pb.FAILOVER
    key_shared = info.type == pb.KEY_SHARED
    headers = ["consumer"] + (["hash ranges"] if key_shared else []) + \
        ["unacked", "permits", "rate/s"] + (["state"] if failover else [])
    rows = []
    for c in p.consumers:
        row = [c.name]
        if key_shared:
            row.append(format_ranges(_ranges(c), wide))
        row += [f"{c.unacked:,}", f"{c.permits:,}", f"{c.dispatch_rate:,.0f}"]
        if failover:
            row.append("active" if c.active else "standby")
        rows.append(row)
    if not rows:
        return Text("  no consumers attached", style="italic")
    return fit_table("", headers, rows, width, wide, numeric_from=2 if key_shared else 1)


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
                "bar": range_bar(_ranges(c), JSON_BAR_WIDTH) if c.ranges else "",
                "unacked": c.unacked, "permits": c.permits, "dispatch_rate": c.dispatch_rate,
                "active": c.active, "priority": c.priority, "delivered": c.delivered}
                for c in p.consumers],
            "waiting_slots_total": p.waiting_slots_total, "waiting_events": p.waiting_events,
            "waiting_slots": [{"slot": w.slot, "reason": w.reason, "holder": w.holder,
                               "events": w.events} for w in p.waiting_slots],
        } for p in info.partitions],
    }
