"""Keybus client SDK: producer, readers (one partition, or a whole topic),
consumer, admin, each with a blocking Sync twin (and, as they land, the
Databus callback consumer and event processor).

`sdk.core` is the lowest layer of the project: the wire contract (generated
protobuf code) and the rules the broker and clients share (hash slot, hash
ranges, columns, filters). It imports nothing else from Keybus.
"""

# ruff: noqa: E402 (grpc must be imported after prefer_polling_engine runs)
from sdk.core.grpc_engine import prefer_polling_engine

prefer_polling_engine()  # before anything imports grpc: see sdk/core/grpc_engine.py

from sdk.accumulator import WindowEvent
from sdk.admin import Admin
from sdk.bootstrap import BootstrapPosition, PhaseMarker
from sdk.channel import DEFAULT_PORT, open_channel, parse_broker
from sdk.consumer import Consumer, ConsumerConfig, Message, ReceivedBatch
from sdk.core.columns import Event
from sdk.errors import (
    AlreadyExists,
    BufferFull,
    DeliveryTimeout,
    FailedPrecondition,
    InvalidArgument,
    KeybusError,
    NotFound,
    NotLeader,
    OffsetOutOfRange,
    PermissionDenied,
    ProducerClosed,
    ResourceExhausted,
    ScnNotIncreasing,
    SequenceError,
    TopicNotFound,
    TopicRecreated,
    Unauthenticated,
    Unavailable,
    from_rpc_error,
)
from sdk.producer import (
    DELETE,
    UPSERT,
    BatchFuture,
    EventFuture,
    Producer,
    ProducerConfig,
    WindowResult,
)
from sdk.read_batch import PassedPosition
from sdk.reader import ReadBatch, Reader, read_all
from sdk.reconnect import ConnectionCallback
from sdk.security import ClientSecurity
from sdk.sender import BatchResult, ProducedEvent
from sdk.subscription_admin import SubscriptionAdmin
from sdk.sync import SyncAdmin, SyncEventFuture, SyncProducer, SyncReader, SyncTopicReader
from sdk.sync_consumer import SyncConsumer
from sdk.topic_reader import TopicReader

__all__ = [
    "DEFAULT_PORT", "DELETE", "UPSERT", "Admin", "AlreadyExists", "BatchFuture", "BatchResult",
    "BootstrapPosition", "BufferFull", "ClientSecurity", "ConnectionCallback", "Consumer",
    "ConsumerConfig", "DeliveryTimeout", "Event", "EventFuture", "FailedPrecondition",
    "InvalidArgument", "KeybusError", "Message", "NotFound", "NotLeader",
    "OffsetOutOfRange", "PassedPosition", "PermissionDenied", "PhaseMarker", "ProducedEvent",
    "Producer", "ProducerClosed",
    "ProducerConfig", "ReadBatch", "Reader", "ReceivedBatch", "ResourceExhausted",
    "ScnNotIncreasing", "SequenceError", "SubscriptionAdmin", "SyncAdmin", "SyncConsumer",
    "SyncEventFuture", "SyncProducer", "SyncReader", "SyncTopicReader", "TopicNotFound",
    "TopicReader", "TopicRecreated", "Unauthenticated", "Unavailable", "WindowEvent", "WindowResult",
    "from_rpc_error", "open_channel", "parse_broker", "read_all",
]

# The event processor (sdk/processor/) and its stores (sdk/stores/).
from sdk.processor import EventProcessor, SyncEventProcessor

__all__ += ["EventProcessor", "SyncEventProcessor"]
