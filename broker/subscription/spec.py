"""A subscription's fixed settings, as persisted, and the refusals they imply.

A subscription is created by its first consumer; its type, Key_Shared mode,
key filter and dead-letter policy are fixed then (so its backlog and its
ordering mean one thing). A later consumer that asks for something else is
refused with a message naming the field, the subscription's value and how
to proceed, rather than silently getting what it did not ask for.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from broker.errors import BrokerError
from broker.subscription.selector import SelectorError
from broker.subscription.selector_sticky import RangeConflict
from sdk.core.names import is_name
from sdk.core.pb import keybus_pb2 as pb

TYPE_NAMES: dict[int, str] = {pb.EXCLUSIVE: "exclusive", pb.SHARED: "shared", pb.FAILOVER: "failover",
              pb.KEY_SHARED: "key_shared"}
MODE_NAMES: dict[int, str] = {pb.AUTO_SPLIT: "auto_split", pb.STICKY: "sticky", pb.CONSISTENT: "consistent"}


@dataclass(frozen=True, slots=True)
class SubscriptionSpec:
    topic: str
    name: str
    type: int  # pb.SubscriptionType
    mode: int  # pb.KeySharedMode (Key_Shared only)
    filter_bytes: bytes  # serialized pb.KeyFilter ("" = none)
    max_redeliveries: int  # 0 = never dead-letter
    dead_letter_topic: str
    created_ms: int

    @property
    def type_text(self) -> str:
        if self.type == pb.KEY_SHARED:
            return f"key_shared (mode {MODE_NAMES[self.mode]})"
        return TYPE_NAMES[self.type]

    def key_filter(self) -> pb.KeyFilter:
        return pb.KeyFilter.FromString(self.filter_bytes)

    def refusal(self, error: SelectorError) -> BrokerError:
        """A selector's refusal as a catalogue error: an overlap names the other consumer."""
        where = f"subscription {self.name!r} on topic {self.topic!r}: {error}"
        if isinstance(error, RangeConflict):
            return BrokerError("sticky_range_conflict", detail=where)
        return BrokerError("key_shared_refused", detail=where)

    def check_dead_letter(self, named: bool, name_max: int) -> None:
        """Refuse a dead-letter topic that cannot be written, or that is the
        subscribed topic: an event dead-lettered there comes back to this
        subscription as a new event and is nacked again, so the topic grows
        without end (one poison event made 1,961 in 8 s). `named` = the
        client named it (else it is the default `<topic>-<subscription>-DLQ`,
        which a client cannot shorten but by naming one). A cycle through other
        subscriptions needs the broker's state: see `dead_letter_cycle.py`.

        Raises:
            BrokerError: dead_letter_topic_invalid, dead_letter_topic_is_topic or
                dead_letter_default_too_long.
        """
        topic = self.dead_letter_topic
        if not topic:
            return
        if not named and len(topic) > name_max:
            raise BrokerError("dead_letter_default_too_long", size=len(topic), max=name_max)
        if not is_name(topic, name_max):
            raise BrokerError("dead_letter_topic_invalid", topic=topic, max=name_max)
        if topic == self.topic:
            raise BrokerError("dead_letter_topic_is_topic", topic=topic, subscription=self.name)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "name": self.name, "type": self.type, "mode": self.mode,
                "filter": base64.b64encode(self.filter_bytes).decode(),
                "max_redeliveries": self.max_redeliveries,
                "dead_letter_topic": self.dead_letter_topic, "created_ms": self.created_ms}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SubscriptionSpec:
        return cls(raw["topic"], raw["name"], raw["type"], raw["mode"],
                   base64.b64decode(raw["filter"]), raw["max_redeliveries"],
                   raw["dead_letter_topic"], raw["created_ms"])

    @classmethod
    def of_open(cls, request: pb.SubscribeOpen, created_ms: int,
                default_mode: int = pb.AUTO_SPLIT) -> SubscriptionSpec:
        """What an `open` asks for; a Key_Shared open that names no mode asks for
        `default_mode` (see `mode_named`)."""
        key_filter = request.filter if request.HasField("filter") else pb.KeyFilter()
        filter_bytes = b"" if key_filter.type == pb.KeyFilter.NONE else \
            key_filter.SerializeToString(deterministic=True)
        mode: int = pb.AUTO_SPLIT
        if request.type == pb.KEY_SHARED:
            mode = request.key_shared_mode if mode_named(request) else default_mode
        dead_letter = request.dead_letter_topic
        if request.max_redeliveries and not dead_letter:
            dead_letter = f"{request.topic}-{request.subscription}-DLQ"
        return cls(request.topic, request.subscription, request.type, mode, filter_bytes,
                   request.max_redeliveries, dead_letter, created_ms)

    def check_compatible(self, asked: SubscriptionSpec, consumer: str) -> None:
        """Refuse a consumer whose settings differ from the subscription's.

        Raises:
            BrokerError: subscription_type_mismatch or subscription_setting_mismatch.
        """
        if (asked.type, asked.mode) != (self.type, self.mode):
            raise BrokerError("subscription_type_mismatch", subscription=self.name,
                              topic=self.topic, existing=self.type_text, consumer=consumer,
                              asked=asked.type_text)
        pairs: list[tuple[str, object, object, str, str]] = [("filter", self.filter_bytes, asked.filter_bytes,
                  _filter_text(self.filter_bytes), _filter_text(asked.filter_bytes))]
        if asked.max_redeliveries:
            pairs.append(("max_redeliveries", self.max_redeliveries, asked.max_redeliveries,
                          str(self.max_redeliveries), str(asked.max_redeliveries)))
            pairs.append(("dead_letter_topic", self.dead_letter_topic, asked.dead_letter_topic,
                          repr(self.dead_letter_topic), repr(asked.dead_letter_topic)))
        for field, mine, theirs, mine_text, their_text in pairs:
            if mine != theirs:
                raise BrokerError("subscription_setting_mismatch", subscription=self.name,
                                  topic=self.topic, field=field, existing=mine_text,
                                  consumer=consumer, asked=their_text)


def mode_named(request: pb.SubscribeOpen) -> bool:
    """Whether an open names its Key_Shared mode. One that does not joins an existing
    subscription in whatever mode it has, and creates one in the broker's
    `key_shared_default_mode`."""
    return request.HasField("key_shared_mode")


def _filter_text(filter_bytes: bytes) -> str:
    if not filter_bytes:
        return "none"
    f = pb.KeyFilter.FromString(filter_bytes)
    if f.type == pb.KeyFilter.RANGE:
        text = f"range:{f.range_size}:{f.range_partitions}"
    else:
        text = f"mod:{f.mod_num_buckets}:{f.mod_buckets}"
    return text + (f"@{','.join(f.sources)}" if f.sources else "")
