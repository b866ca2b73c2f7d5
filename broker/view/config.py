"""A topic's view settings: checked at creation, shown by describe. Pure.

Rules:
1. `view` VIEW_DEFAULT takes the broker's `view_default`; ON/OFF are kept.
2. `compacted` needs the view (compaction asks it which event is the latest
   of its key): compacted with VIEW_OFF is refused; compacted with
   VIEW_DEFAULT turns the view on whatever the broker default.
3. `delete_retention_ms` 0 takes the broker's default; negative is refused.
"""

from __future__ import annotations

import dataclasses

from broker.config import Settings
from broker.errors import BrokerError
from broker.partition import TopicMeta
from sdk.core.pb import keybus_pb2 as pb


def check_view_config(meta: TopicMeta, config: pb.TopicConfig, settings: Settings) -> TopicMeta:
    """`meta` with the view settings of a CreateTopic config.

    Raises:
        BrokerError: compacted without a view, or a negative delete retention.
    """
    if config.view not in (pb.VIEW_DEFAULT, pb.VIEW_ON, pb.VIEW_OFF):
        raise BrokerError("view_config_invalid",
                          detail=f"config.view={config.view} is unknown; allowed VIEW_DEFAULT, "
                                 "VIEW_ON, VIEW_OFF")
    if config.compacted and config.view == pb.VIEW_OFF:
        raise BrokerError("view_config_invalid",
                          detail="config.compacted=true needs the compacted view, but "
                                 "config.view=VIEW_OFF; leave view unset or VIEW_ON")
    if config.delete_retention_ms < 0:
        raise BrokerError("retention_invalid", field="delete_retention_ms",
                          value=config.delete_retention_ms,
                          allowed=f"0 (the broker's default, {settings.delete_retention_ms:,} "
                                  "ms) or a positive number")
    view = config.view == pb.VIEW_ON or config.compacted or (
        config.view == pb.VIEW_DEFAULT and settings.view_default)
    return dataclasses.replace(meta, view=view, compacted=config.compacted,
                               delete_retention_ms=config.delete_retention_ms)


def describe_view_config(meta: TopicMeta, config: pb.TopicConfig, settings: Settings) -> None:
    """Fill a described topic's view settings (resolved: never VIEW_DEFAULT)."""
    config.view = pb.VIEW_ON if meta.view else pb.VIEW_OFF
    config.compacted = meta.compacted
    if meta.view:
        config.delete_retention_ms = meta.delete_retention_ms or settings.delete_retention_ms
