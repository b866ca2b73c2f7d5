"""Build and run the broker: store, topics, gRPC server, health, reflection.

Nothing else lives here: no decisions, only wiring and the lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from broker import gc_pauses, task_dump
from broker.config import PORT_UNBOUND, Settings
from broker.keepalive import server_options as keepalive_options
from broker.log import data_format
from broker.log.rocks_options import StoreLimits
from broker.log.rocks_store import RocksStore
from broker.log.store_failure import is_store_failure
from broker.metrics_endpoint import MetricsEndpoint
from broker.processor_stores.service import ProcessorStores
from broker.relay.dead_letter_forward import DeadLetterForwarder
from broker.relay.node import RelayNode
from broker.relay.servicer import RelayServicer, relay_handler
from broker.relay.settings import relay_settings
from broker.rpc.acl_servicer import AclServicer
from broker.rpc.admin_servicer import AdminServicer
from broker.rpc.auth import AuthInterceptor
from broker.rpc.bootstrap_servicer import BootstrapServicer, bootstrap_handler
from broker.rpc.guard import GuardInterceptor
from broker.rpc.processor_servicer import ProcessorStoreServicer, processor_handler
from broker.rpc.produce_servicer import ProduceServicer
from broker.rpc.read_servicer import ReadServicer
from broker.rpc.service import SERVICE, generic_handler
from broker.rpc.stream_writes import StreamWriteInterceptor
from broker.rpc.subscribe_servicer import SubscribeServicer
from broker.rpc.subscription_admin_servicer import SubscriptionAdminServicer
from broker.security import setup as security
from broker.security.acl_store import AclStore, load_acl_file, load_acl_restrictions
from broker.security.permissions import AccessTable
from broker.subscription.manager import SubscriptionManager
from broker.supervision import describe_cause
from broker.topics import TopicRegistry
from sdk.core.filters import from_config
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.broker")
MESSAGE_BYTES_MAX_SLACK = 1 << 20
# gRPC's receive limit is this many times request_bytes_max: a request between
# the two gets a clean RESOURCE_EXHAUSTED answer (broker/rpc/guard.py) and the
# Produce stream stays open; only past it does gRPC itself end the call.
RECEIVE_LIMIT_FACTOR = 2
# How long a stop after a store failure may take before the process exits anyway.
STOP_AFTER_FAILURE_S = 10.0


class StartError(Exception):
    """The broker cannot start: the message says why and what to do, in one line."""


class PortInUse(StartError):
    """Another process listens on the port (another broker, or Pulsar on 6650)."""


class DataDirInUse(StartError):
    """Another broker process holds the data directory's RocksDB lock."""


class StoreUnusable(StartError):
    """The data directory's disk refused RocksDB's writes while it opened (a full disk)."""


class StoreFailedStop(Exception):
    """The broker stopped because its store failed (broker/log/store_failure.py);
    the message is RocksDB's status."""


@dataclass
class Broker:
    """A running broker; `stop()` shuts it down cleanly."""

    settings: Settings
    store: RocksStore
    registry: TopicRegistry
    subscriptions: SubscriptionManager
    server: grpc.aio.Server
    port: int
    relay: RelayNode | None = None
    _retention: asyncio.Task[None] | None = None
    processor_stores: ProcessorStores | None = None
    metrics: MetricsEndpoint | None = None

    async def stop(self, grace_s: float = 2.0) -> None:
        """Hand leadership over, refuse new calls, end the streams, then close
        partitions and the store.

        Relay first, while the server still serves: followers read the tail
        and report their positions for the handover. Then the server stops
        taking calls before the subscriptions close: a consumer whose stream
        ends reconnects at once, and had it reached the subscriptions being
        closed it would have reopened its subscription (rewriting its cursor)
        and left a dispatcher running past the partitions it reads.
        """
        if self._retention is not None:
            self._retention.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention
        if self.relay is not None:  # hand leadership over while followers can still report
            await self.relay.stop()
        stopping = asyncio.ensure_future(self.server.stop(grace_s))
        await asyncio.sleep(0)  # the server refuses new calls from here on
        await self.subscriptions.close()
        await stopping
        if self.processor_stores is not None:
            await self.processor_stores.close()
        await self.registry.close()
        self.store.close()  # releases RocksDB's LOCK: a broker may start on the directory again
        if self.metrics is not None:
            self.metrics.close()

    async def retention_loop(self) -> None:
        interval_s = self.settings.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.registry.enforce_retention()
            except Exception:
                log.exception("retention pass failed; will retry")


async def start_broker(settings: Settings, store: RocksStore | None = None) -> Broker:
    """Open the store (or use `store`, e.g. a test's fault-injecting one),
    recover every partition, and start serving. A store that fails on its disk
    refuses every write from then on: `serve` stops the broker on it, and an
    application embedding this should too (`store.disk_failures.listen`).

    A start that fails closes what it opened, the store included (its LOCK
    released), so the application may start a broker on the directory again.

    Raises:
        StartError: the port is taken, the data directory is in use by another
            broker or cannot be opened; the message says what to do.
    """
    check_port(settings.host, settings.port)
    if store is None:
        store = open_store(settings)
    async with contextlib.AsyncExitStack() as undo:  # on a failure: close what opened
        undo.callback(_quietly, "closing the store", store.close)
        broker = await _start_on(settings, store, undo)
        undo.pop_all()
    return broker


async def _start_on(settings: Settings, store: RocksStore,
                    undo: contextlib.AsyncExitStack) -> Broker:
    """`start_broker` on an open store; every part started pushes its stop on `undo`."""
    registry = TopicRegistry(store, settings)
    undo.push_async_callback(_quietly_async, "closing the topics", registry.close)
    await registry.open()
    config_filters = from_config(settings.serversidefilter)
    subscriptions = SubscriptionManager(registry, store, settings, config_filters)
    undo.push_async_callback(_quietly_async, "closing the subscriptions", subscriptions.close)
    await subscriptions.open()
    registry.delete_listeners.append(subscriptions.drop_topic)
    access = AccessTable(security.superusers(settings))
    acls = AclStore(store, access)
    if settings.acl_file:
        acls.open(load_acl_file(settings.acl_file), load_acl_restrictions(settings.acl_file))
    else:
        acls.open()
    message_max = settings.request_bytes_max + MESSAGE_BYTES_MAX_SLACK
    server = grpc.aio.server(interceptors=interceptors(settings, access), options=[
        ("grpc.max_receive_message_length", settings.request_bytes_max * RECEIVE_LIMIT_FACTOR),
        ("grpc.max_send_message_length", message_max),
        ("grpc.so_reuseport", 0),
        *keepalive_options(settings),
    ])
    relay = RelayNode(registry, subscriptions, relay_settings(settings, settings.port or PORT_UNBOUND))
    subscriptions.dead_letter_forwarder = DeadLetterForwarder(relay)
    server.add_generic_rpc_handlers((generic_handler(
        ProduceServicer(registry, store, settings.produce_in_flight_max, relay),
        ReadServicer(registry, settings, config_filters),
        AdminServicer(registry),
        SubscribeServicer(subscriptions),
        SubscriptionAdminServicer(subscriptions),
        AclServicer(acls, security.auth_enabled(settings))), relay_handler(RelayServicer(relay))))
    server.add_generic_rpc_handlers((bootstrap_handler(
        BootstrapServicer(registry, settings, config_filters)),))
    processor_stores = ProcessorStores(store, registry, settings)
    undo.push_async_callback(_quietly_async, "closing the processor stores",
                             processor_stores.close)
    processor_stores.start()
    registry.delete_listeners.append(processor_stores.topic_deleted)
    server.add_generic_rpc_handlers((processor_handler(ProcessorStoreServicer(processor_stores)),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server, pool=pb.DESCRIPTOR.pool)
    metrics = None
    if settings.metrics_port:
        metrics = MetricsEndpoint(security.metrics_address(settings), settings.metrics_port)
        undo.callback(_quietly, "stopping the metrics endpoint", metrics.close)
    port = _bind(server, settings)
    if port == 0:  # taken since check_port: gRPC's own bind failed
        raise PortInUse(port_in_use(settings.host, settings.port))
    relay.attach(relay_settings(settings, port))  # the advertised address needs the bound port
    undo.push_async_callback(_quietly_async, "stopping the server", server.stop, None)
    await server.start()
    await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    undo.push_async_callback(_quietly_async, "stopping the relay", relay.stop)
    await relay.start()
    broker = Broker(settings, store, registry, subscriptions, server, port, relay,
                    processor_stores=processor_stores, metrics=metrics)
    broker._retention = asyncio.get_running_loop().create_task(broker.retention_loop())
    return broker


def _quietly(what: str, stop: Callable[[], object]) -> None:
    """Undo one part of a failed start; a failure here is logged, never raised over
    the start's own error."""
    try:
        stop()
    except Exception as e:
        log.warning("start failed; %s failed too: %s", what, describe_cause(e))


async def _quietly_async(what: str, stop: Callable[..., Awaitable[object]], *args: object) -> None:
    try:
        await stop(*args)
    except Exception as e:
        log.warning("start failed; %s failed too: %s", what, describe_cause(e))


def _bind(server: grpc.aio.Server, settings: Settings) -> int:
    """The bound port (TLS when configured), or 0 when gRPC could not bind (it
    raises RuntimeError for that)."""
    credentials = security.server_credentials(settings)
    address = f"{settings.host}:{settings.port}"
    try:
        return int(server.add_insecure_port(address) if credentials is None
                   else server.add_secure_port(address, credentials))
    except RuntimeError:
        return 0


def port_in_use(host: str, port: int) -> str:
    return (f"cannot listen on {host}:{port}: the port is in use (another Keybus broker? "
            f"Pulsar's default port is 6650 too); choose another with --port N or "
            f"KEYBUS_PORT=N")


def check_port(host: str, port: int) -> None:
    """Bind the port once before opening the log, so a taken port is one clear
    line (gRPC's own bind failure is a RuntimeError and a C++ log line).

    Raises:
        StartError: the port is taken, not ours to use, or the host unknown.
    """
    if port == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise StartError(f"cannot listen on {host}:{port}: unknown host ({e.strerror})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does
        try:
            probe.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise PortInUse(port_in_use(host, port)) from None
            if e.errno == errno.EACCES:
                raise StartError(f"cannot listen on {host}:{port}: permission denied (ports "
                                 "below 1024 need root); choose another with --port N") from None
            raise StartError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def open_store(settings: Settings) -> RocksStore:
    """The broker's RocksDB log, or one line saying why it cannot be opened.

    Raises:
        StartError: the directory cannot be made, or another broker holds it.
    """
    path = os.path.join(settings.data_dir, "log.rocksdb")
    try:
        os.makedirs(settings.data_dir, exist_ok=True)
    except OSError as e:
        raise StartError(f"cannot use data directory {settings.data_dir}: {e.strerror}") from None
    try:
        store = RocksStore(path, fsync=settings.fsync,
                           limits=StoreLimits(settings.wal_bytes_max, settings.wal_recycle_files))
    except Exception as e:  # rocksdict raises a bare Exception with RocksDB's status text
        text = str(e)
        if (newer := data_format.unknown_families(text, settings.data_dir)) is not None:
            raise StartError(newer) from None
        if "lock" in text.lower():
            raise DataDirInUse(f"data directory {settings.data_dir} is in use by another broker "
                             f"(RocksDB's lock on {os.path.join(path, 'LOCK')} is held); stop "
                             "that broker or choose another --data-dir") from None
        if is_store_failure(e):  # the disk refused RocksDB's own writes (a new WAL, the manifest)
            raise StoreUnusable(f"cannot open the log in {path}: {text}; fix the cause (free "
                                "space on the disk when it is full) and start it again") from None
        raise StartError(f"cannot open the log in {path}: {text}") from None
    try:
        stored = store.data_format()
        if (newer := data_format.refusal(stored or 0, settings.data_dir)) is not None:
            raise StartError(newer)
        if data_format.upgrade_needed(stored):  # new, from before the number, or older
            store.write_data_format(data_format.DATA_FORMAT)
    except Exception as e:
        with contextlib.suppress(Exception):
            store.close()
        if isinstance(e, StartError):
            raise
        raise StoreUnusable(f"cannot write the data format to the log in {path}: {e}; fix the "
                            "cause (free space on the disk when it is full) and start it "
                            "again") from None
    return store


def interceptors(settings: Settings, access: AccessTable) -> list[grpc.aio.ServerInterceptor]:
    """Outermost first: streamed responses written so that a client gone ends
    its call quietly (always), authentication (when on), the request guard (always)."""
    guard = GuardInterceptor(settings.request_bytes_max)
    if not security.auth_enabled(settings):
        return [StreamWriteInterceptor(), guard]
    return [StreamWriteInterceptor(), AuthInterceptor(security.authenticator(settings), access,
                                                       settings.auth_recheck_interval_ms),
            guard]


async def serve(settings: Settings, ready_file: str | None = None) -> None:
    """Run until SIGINT/SIGTERM. Writes the bound port to ready_file when serving."""
    # The process's, not start_broker's: an embedding application keeps its own.
    sys.setswitchinterval(settings.gil_switch_interval_us / 1_000_000)
    broker = await start_broker(settings)
    if settings.gc_freeze:
        gc_pauses.freeze_startup_objects()
    gc_pauses.PauseTimer().install()
    log.info("keybus broker serving on %s:%d, data in %s, fsync=%s, tls=%s, authentication=%s",
             settings.host, broker.port, settings.data_dir, settings.fsync,
             bool(settings.tls_cert_file), security.auth_enabled(settings))
    security.warn_if_open(settings)
    if ready_file:
        with open(ready_file + ".tmp", "w") as f:
            f.write(str(broker.port))
        os.replace(ready_file + ".tmp", ready_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    task_dump.install(loop)

    def store_failed(_: str) -> None:  # on the failing thread: the WAL syncer's, or the loop
        loop.call_soon_threadsafe(stop.set)

    broker.store.disk_failures.listen(store_failed)
    await stop.wait()
    failure = broker.store.disk_failures.first
    log.info("shutting down")
    if failure is None:
        await broker.stop()
        log.info("stopped")
        return
    await stop_after_store_failure(broker)
    raise StoreFailedStop(failure)


async def stop_after_store_failure(broker: Broker) -> None:
    """Stop as on SIGTERM, within a bound: writes the stop makes (cursors, the
    view's last pass) are refused with the store's failure, which is already
    logged, so they are noted as one line each and the stop goes on."""
    try:
        async with asyncio.timeout(STOP_AFTER_FAILURE_S):
            await broker.stop()
    except Exception as e:  # TimeoutError included: the process exits all the same
        log.warning("stopping after the store failed: %s", describe_cause(e))
    log.info("stopped: the store failed")
