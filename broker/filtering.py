"""Broker-side key filters: compile a KeyFilter into a batch selector."""

from __future__ import annotations

from broker.errors import BrokerError
from broker.read_path import EventSelector
from sdk.core.pb import keybus_pb2 as pb


def compile_selector(key_filter: pb.KeyFilter) -> EventSelector | None:
    if key_filter.type == pb.KeyFilter.NONE:
        return None
    raise BrokerError("filter_invalid", detail="filter: key filters are being wired in")
