"""DatabusClient: register callback consumers for sources of a topic and run them.

    client = DatabusClient("127.0.0.1:6650", checkpoint_store=FileCheckpointStore(dir))
    client.register([Worker(), Worker(), Worker()], topic="orders",
                    sources=["orders", "order_lines"], name="billing")
    async with client:
        await client.wait()

Each registration receives its own full stream: `register` reads the
topic's partitions from the log (following, from the registration's
checkpoint, with its server-side filter); `register_shared` consumes a
Key_Shared subscription instead, so that several processes share the stream
(see docs/databus.md for what holds within a process and across processes).
A list of consumers registered together is a consumer group: one stream,
split among its members by key, with barriers at window and source
boundaries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

from sdk.channel import parse_broker
from sdk.consumer import ConsumerConfig
from sdk.databus.bootstrap_callbacks import cannot_bootstrap
from sdk.databus.callbacks import missing_callbacks
from sdk.databus.config import DatabusConfig
from sdk.databus.log_windows import LogWindows
from sdk.databus.registration import DatabusRegistration
from sdk.databus.share_windows import ShareWindows
from sdk.databus.window import MEMBERS_MAX
from sdk.event_checks import check_sources
from sdk.reader import Start, filter_to_proto, start_to_proto
from sdk.reconnect import ConnectionCallback
from sdk.security import ClientSecurity
from sdk.stores.protocols import CheckpointStore


class DatabusClient:
    """Runs Databus-style callback consumers against one broker.

    Args:
        broker: "host:port" of the broker.
        checkpoint_store: where `register` keeps whole-window checkpoints
            (any `CheckpointStore`; None = no checkpoints: a restart starts at
            the registration's start position again).
        namespace: the checkpoints' namespace ("" default).
        config: default settings of every registration (DatabusConfig).
        security: TLS and credentials (sdk.security.ClientSecurity) for every
            channel its registrations open; None = the ambient default, else
            plain text. A broker-held checkpoint store is made by the caller
            (`BrokerCheckpointStore(broker, security=...)`).
        on_connection_change: on_connection_change(connected, message), as
            the SDK's other clients: called (False, message) once when a
            registration loses the broker (its streams and its channel see
            one outage) and (True, message) once when it is back; may be a
            coroutine function. None (default): the `keybus.databus` log says
            them (WARNING, INFO), the repeats at DEBUG. Consumers' on_error
            still gets the outage notice after unavailable_report_ms.
    Raises:
        TypeError, ValueError: an argument of the wrong type or a broker
            address that does not parse (named, with what is allowed).
    """

    def __init__(self, broker: str = "localhost:6650", *,
                 checkpoint_store: CheckpointStore | None = None, namespace: str = "",
                 config: DatabusConfig | None = None,
                 security: ClientSecurity | None = None,
                 on_connection_change: ConnectionCallback | None = None) -> None:
        if not isinstance(broker, str):
            raise TypeError(f"broker={broker!r} is not a str ({type(broker).__name__}); give "
                            "the address as HOST:PORT, e.g. localhost:6650")
        parse_broker(broker)  # raises ValueError naming what is allowed
        if checkpoint_store is not None and not isinstance(checkpoint_store, CheckpointStore):
            raise TypeError(f"checkpoint_store={checkpoint_store!r} is not a CheckpointStore; "
                            "give e.g. FileCheckpointStore(directory), or None")
        if not isinstance(namespace, str):
            raise TypeError(f"namespace={namespace!r} is not a str; give a name, or '' "
                            "(the default)")
        if on_connection_change is not None and not callable(on_connection_change):
            raise TypeError(f"on_connection_change={on_connection_change!r} is not callable; "
                            "give a function (connected, message), or None (the log)")
        self.broker = broker
        self.security = security
        self.checkpoint_store = checkpoint_store
        self.namespace = namespace
        self.config = _config(config) or DatabusConfig()
        self.registrations: list[DatabusRegistration] = []
        self.on_connection_change = on_connection_change
        self._started = False

    def register(self, consumer: object | Sequence[object], *, topic: str,
                 sources: Sequence[str] | None = None, filter: Any = None, name: str = "",
                 partitions: Sequence[int] | None = None, start: Start = "earliest",
                 config: DatabusConfig | None = None,
                 bootstrap: bool = False) -> DatabusRegistration:
        """Register a consumer, or a group (a list of consumers), for `sources` of `topic`.

        Args:
            consumer: an object with the callbacks (see DatabusConsumerBase),
                or a list of them: a consumer group splitting the events by key.
            topic: the topic to read (every partition unless `partitions`).
            sources: the sources to present, in this order within a window
                (None: every source, in order of first appearance).
            filter: a server-side key filter ("mod:4:[0,1]", "range:1000:[2]",
                a KeyFilter), applied in the broker.
            partitions: the partitions to read (a non-empty list of ints >= 0,
                each checked against the topic at start); None: every one.
            name: the registration's name, also its checkpoints' consumer
                group (required with a checkpoint store; unique per client).
            start: where to begin without a checkpoint: "earliest" (default),
                "latest", an offset, {"scn": n}, or "bootstrap" (the compacted
                view first; needs bootstrap=True). "latest" is each partition's
                log end when its read opens, before on_start_consumption.
            config: settings for this registration (default: the client's).
            bootstrap: allow bootstrap (Databus's bootstrap client): a
                partition whose checkpoint is older than what the log holds
                bootstraps from the topic's compacted view through the
                bootstrap callbacks, then goes on online (see
                DatabusCombinedConsumerBase, docs/bootstrap.md). Without it
                such a checkpoint stops consumption with OffsetOutOfRange, and
                one saved during a bootstrap with FailedPrecondition.
        Returns:
            The registration (started with the client).
        Raises:
            TypeError: a consumer lacks callbacks (named), or an argument of
            the wrong type. ValueError: a bad topic, source list, filter,
            start, partition list or name.
        """
        members = self._members(consumer)
        config = _config(config) or self.config
        name = self._name(name, topic, needs_name=self.checkpoint_store is not None)
        checked_sources = check_sources(sources)
        checked_partitions = _partitions(partitions)
        if type(bootstrap) is not bool:
            raise TypeError(f"bootstrap={bootstrap!r} is not a bool; give True or False")
        if bootstrap or start == "bootstrap":
            _check_bootstrap(members, bootstrap)
        if start != "bootstrap":
            start_to_proto(start)  # raises ValueError naming what is allowed
        source = LogWindows(self.broker, topic, name=name, config=config,
                            need_slots=len(members) > 1, partitions=checked_partitions,
                            start=start, key_filter=filter_to_proto(filter),
                            checkpoints=self.checkpoint_store, namespace=self.namespace,
                            bootstrap=bootstrap, sources=checked_sources,
                            security=self.security,
                            on_connection_change=self.on_connection_change)
        return self._add(DatabusRegistration(name, topic, members, checked_sources, config,
                                             source))

    def register_shared(self, consumer: object | Sequence[object], *, topic: str,
                        subscription: str, sources: Sequence[str] | None = None,
                        filter: Any = None, name: str = "",
                        consumer_config: ConsumerConfig | None = None,
                        config: DatabusConfig | None = None) -> DatabusRegistration:
        """Register a consumer or group on a Key_Shared subscription (across processes).

        Every process that registers on the same subscription gets a share of
        the keys; within it, windows, sources, groups, rollback and
        checkpoints work as with `register`. Checkpoints are the
        subscription's acknowledgements (no checkpoint store is used).

        Args:
            subscription: the subscription's name (created by the first
                consumer, from consumer_config.start).
            consumer_config: the SDK consumer's settings (default: Key_Shared,
                auto-split, from the earliest event, config.connect_timeout_ms);
                type may also be "exclusive" or "failover", not "shared". Its
                connect_timeout_ms bounds the wait for a broker at start.
            filter, sources, name, config: as `register`.
        Raises:
            TypeError, ValueError: as `register`, or a bad consumer setting.
        """
        members = self._members(consumer)
        config = _config(config) or self.config
        name = self._name(name or subscription, topic, needs_name=False)
        consumer_settings = consumer_config or ConsumerConfig(
            type="key_shared", start="earliest", connect_timeout_ms=config.connect_timeout_ms)
        if filter is not None:
            consumer_settings = replace(consumer_settings, key_filter=filter_to_proto(filter))
        if not subscription:
            raise ValueError("subscription is empty; give the Key_Shared subscription's name")
        source = ShareWindows(self.broker, topic, subscription, name=name, config=config,
                              need_slots=len(members) > 1, consumer_config=consumer_settings,
                              security=self.security,
                              on_connection_change=self.on_connection_change)
        return self._add(DatabusRegistration(name, topic, members, check_sources(sources), config,
                                             source))

    # ------------------------------------------------------------ running

    async def start(self) -> None:
        """Start every registration in the background; returns at once. Each opens
        its reads, then calls on_start_consumption: a "latest" start is fixed by
        then (wait for that callback, not for this, before producing)."""
        if not self.registrations:
            raise ValueError("nothing is registered; call register() first")
        self._started = True
        for registration in self.registrations:
            if not registration.running and registration.error is None:
                registration.start()

    async def wait(self) -> None:
        """Until every registration has ended. Raises the first error that ended one
        (the others keep running: stop() them)."""
        tasks = [asyncio.ensure_future(r.wait()) for r in self.registrations]
        try:
            for done in asyncio.as_completed(tasks):
                await done
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        """Stop every registration: finish the current window, checkpoint, call
        on_stop_consumption. Never raises a registration's error."""
        for registration in self.registrations:  # at once: no window starts after this
            registration.request_stop()
        await asyncio.gather(*(r.stop() for r in self.registrations))

    async def run(self) -> None:
        """start(), then wait(); on cancellation or error, stop() the rest."""
        await self.start()
        try:
            await self.wait()
        finally:
            await asyncio.shield(self.stop())

    async def __aenter__(self) -> DatabusClient:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # ------------------------------------------------------------ checks

    def _add(self, registration: DatabusRegistration) -> DatabusRegistration:
        if self._started:
            registration.start()
        self.registrations.append(registration)
        return registration

    @staticmethod
    def _members(consumer: object | Sequence[object]) -> list[object]:
        members = list(consumer) if isinstance(consumer, list | tuple) else [consumer]
        if not 1 <= len(members) <= MEMBERS_MAX:
            raise ValueError(f"a group has {len(members)} consumers; allowed 1..{MEMBERS_MAX}")
        for i, member in enumerate(members):
            missing = missing_callbacks(member)
            if missing:
                raise TypeError(f"consumer {i} ({type(member).__name__}) lacks {missing}; "
                                "derive it from DatabusConsumerBase to get SUCCESS defaults")
        return members

    def _name(self, name: str, topic: str, needs_name: bool) -> str:
        if not topic:
            raise ValueError("topic is empty; give the name of an existing topic")
        if needs_name and not name:
            raise ValueError("name is empty: with a checkpoint store a registration needs a "
                             "name (its checkpoints' consumer group)")
        name = name or f"{topic}-{len(self.registrations)}"
        if any(r.name == name for r in self.registrations):
            raise ValueError(f"a registration named {name!r} exists already; names are unique")
        return name


def _check_bootstrap(members: Sequence[object], allowed: bool) -> None:
    if not allowed:
        raise ValueError("start='bootstrap' needs bootstrap=True (and combined consumers)")
    for i, member in enumerate(members):
        why = cannot_bootstrap(member)
        if why is not None:
            raise TypeError(f"bootstrap=True: consumer {i} ({type(member).__name__}) {why}; "
                            "derive it from DatabusCombinedConsumerBase")


def _config(config: DatabusConfig | None) -> DatabusConfig | None:
    if config is not None and not isinstance(config, DatabusConfig):
        raise TypeError(f"config={config!r} is not a DatabusConfig ({type(config).__name__}); "
                        "give DatabusConfig(...), or None for the default")
    return config


def _partitions(partitions: Sequence[int] | None) -> list[int] | None:
    """The partitions to read, checked here (the topic's count is checked at start)."""
    if partitions is None:
        return None
    if isinstance(partitions, str | bytes) or not isinstance(partitions, Sequence | set):
        raise TypeError(f"partitions={partitions!r} is not a list; give a list of partition "
                        "numbers such as [0, 2], or None for every partition")
    checked = list(partitions)
    wrong = [p for p in checked if type(p) is not int or p < 0]
    if wrong or not checked:
        raise ValueError(f"partitions={checked!r} is invalid: need a non-empty list of ints "
                         ">= 0 (or None for every partition)")
    return checked

