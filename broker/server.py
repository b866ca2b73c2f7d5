"""Build and run the broker: store, topics, gRPC server, health, reflection.

Nothing else lives here: no decisions, only wiring and the lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass

import grpc
import prometheus_client
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from broker.config import PORT_UNBOUND, Settings
from broker.log.rocks_store import RocksStore
from broker.processor_stores.service import ProcessorStores
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
from broker.rpc.subscribe_servicer import SubscribeServicer
from broker.rpc.subscription_admin_servicer import SubscriptionAdminServicer
from broker.security import setup as security
from broker.security.acl_store import AclStore, load_acl_file
from broker.security.permissions import AccessTable
from broker.subscription.manager import SubscriptionManager
from broker.topics import TopicRegistry
from sdk.core.filters import from_config
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.broker")
MESSAGE_BYTES_MAX_SLACK = 1 << 20
# gRPC's receive limit is this many times request_bytes_max: a request between
# the two gets a clean RESOURCE_EXHAUSTED answer (broker/rpc/guard.py) and the
# Produce stream stays open; only past it does gRPC itself end the call.
RECEIVE_LIMIT_FACTOR = 2


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

    async def stop(self, grace_s: float = 2.0) -> None:
        if self._retention is not None:
            self._retention.cancel()
        if self.relay is not None:  # hand leadership over while followers can still report
            await self.relay.stop()
        await self.subscriptions.close()
        await self.server.stop(grace_s)
        if self.processor_stores is not None:
            await self.processor_stores.close()
        await self.registry.close()
        self.store.close()

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
    recover every partition, and start serving."""
    os.makedirs(settings.data_dir, exist_ok=True)
    if store is None:
        store = RocksStore(os.path.join(settings.data_dir, "log.rocksdb"), fsync=settings.fsync)
    registry = TopicRegistry(store, settings)
    await registry.open()
    config_filters = from_config(settings.serversidefilter)
    subscriptions = SubscriptionManager(registry, store, settings, config_filters)
    await subscriptions.open()
    registry.delete_listeners.append(subscriptions.drop_topic)
    access = AccessTable(security.superusers(settings))
    acls = AclStore(store, access)
    acls.open(load_acl_file(settings.acl_file) if settings.acl_file else ())
    message_max = settings.request_bytes_max + MESSAGE_BYTES_MAX_SLACK
    server = grpc.aio.server(interceptors=security_interceptors(settings, access), options=[
        ("grpc.max_receive_message_length", settings.request_bytes_max * RECEIVE_LIMIT_FACTOR),
        ("grpc.max_send_message_length", message_max),
        ("grpc.so_reuseport", 0),
    ])
    relay = RelayNode(registry, subscriptions, relay_settings(settings, settings.port or PORT_UNBOUND))
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
    processor_stores.start()
    server.add_generic_rpc_handlers((processor_handler(ProcessorStoreServicer(processor_stores)),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server, pool=pb.DESCRIPTOR.pool)
    if settings.metrics_port:
        prometheus_client.start_http_server(settings.metrics_port, addr=settings.host)
    credentials = security.server_credentials(settings)
    address = f"{settings.host}:{settings.port}"
    port = (server.add_insecure_port(address) if credentials is None
            else server.add_secure_port(address, credentials))
    if port == 0:
        store.close()
        raise OSError(f"cannot listen on {settings.host}:{settings.port}")
    relay.attach(relay_settings(settings, port))  # the advertised address needs the bound port
    await server.start()
    await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await relay.start()
    broker = Broker(settings, store, registry, subscriptions, server, port, relay,
                    processor_stores=processor_stores)
    broker._retention = asyncio.get_running_loop().create_task(broker.retention_loop())
    return broker


def security_interceptors(settings: Settings, access: AccessTable
                          ) -> list[grpc.aio.ServerInterceptor]:
    """Authentication first (when on), then the request guard (always)."""
    guard = GuardInterceptor(settings.request_bytes_max)
    if not security.auth_enabled(settings):
        return [guard]
    return [AuthInterceptor(security.authenticator(settings), access), guard]


async def serve(settings: Settings, ready_file: str | None = None) -> None:
    """Run until SIGINT/SIGTERM. Writes the bound port to ready_file when serving."""
    broker = await start_broker(settings)
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
    await stop.wait()
    log.info("shutting down")
    await broker.stop()
