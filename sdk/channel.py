"""Broker addresses and gRPC channels, set up once for every SDK client.

Options are passed explicitly (STYLE §5): produce requests and read
responses may carry large batches, so both message limits are 64 MiB; HTTP/2
keepalive pings find a broker that stopped answering with its connection open.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

import grpc
import grpc.aio

from sdk.core.keepalive import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.security import ClientSecurity, resolve

DEFAULT_PORT = 6650
MESSAGE_BYTES_MAX = 64 * 1024 * 1024


CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    # Reconnect to a restarted broker within ~1 s (as Kafka's clients, whose
    # reconnect.backoff.max.ms is 1000), not gRPC's default of up to 120 s: the
    # clients' retries wait for the channel to connect again (`retry_wait`), so
    # this backoff is what a restarted broker's clients wait past its port
    # opening, about half of it on average. Not grpc.min_reconnect_backoff_ms:
    # gRPC also uses it as the connect timeout, and at 100 ms a busy machine
    # fails connections that would succeed.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    # Each channel its own subchannels: a new client is not failed fast by
    # another channel's connection backoff to the same broker.
    ("grpc.use_local_subchannel_pool", 1),
    # A frozen broker (SIGSTOP, hung) keeps its TCP connection open, so without
    # pings a stream waiting for events hears nothing, for ever. An HTTP/2 ping
    # every KEEPALIVE_TIME_MS of silence, unanswered within KEEPALIVE_TIMEOUT_MS,
    # closes the connection: the calls on it fail and the clients' reconnect
    # rules report the lost broker (sdk/reconnect.py, sdk/sender.py).
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # Since gRPC 1.60 the wait for any ping's ack is this one (default 60 s):
    # a ping already in flight when the broker froze (a BDP probe) holds back
    # the keepalive ping, and keepalive_timeout_ms alone does not apply.
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # Also between calls: an idle Producer or Admin learns of it before its
    # next call waits on a dead connection.
    ("grpc.keepalive_permit_without_calls", 1),
    # gRPC stops pinging after 2 pings without data by default: a consumer's
    # stream may carry no data for hours.
    ("grpc.http2.max_pings_without_data", 0),
]


def parse_broker(broker: str) -> tuple[str, int]:
    """Split "host:port" (or "host", "[::1]:port") into host and port.

    Args:
        broker: address; the port defaults to 6650.
    Returns:
        (host, port).
    Raises:
        ValueError: the address is empty or lists several brokers, the port
            is not an integer in 1..65535, or an IPv6 address lacks its brackets.
    """
    text = broker.strip() if isinstance(broker, str) else ""
    if not text:
        raise ValueError(f"broker address {broker!r} is empty; use HOST:PORT, e.g. localhost:6650")
    if "," in text:  # a cluster's list where one broker is asked for (see sdk/cluster.py)
        raise ValueError(f"broker address {broker!r} lists several brokers; this call talks to "
                         "one: give one HOST:PORT (produce, read, consume and the SDK's "
                         "Producer, Reader and Consumer take several)")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"broker address {broker!r} does not parse; use [IPV6]:PORT")
        port_text = rest[1:] if rest else ""
    else:
        if text.count(":") > 1:
            raise ValueError(f"broker address {broker!r}: put an IPv6 host in brackets, "
                             "e.g. [::1]:6650")
        host, _, port_text = text.partition(":")
    if not host:
        raise ValueError(f"broker address {broker!r} has no host; use HOST:PORT")
    return host, _parse_port(broker, port_text)


def _parse_port(broker: str, port_text: str) -> int:
    if not port_text:
        return DEFAULT_PORT
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"broker address {broker!r} has port {port_text!r}; "
                         "the port is an integer in 1..65535")
    return int(port_text)


def target_of(broker: str) -> str:
    """The gRPC target string for a broker address."""
    host, port = parse_broker(broker)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def open_channel(broker: str, security: ClientSecurity | None = None) -> grpc.aio.Channel:
    """A grpc.aio channel to the broker, with the SDK's options.

    Must be called with an asyncio event loop running (grpc.aio binds to it).

    Args:
        security: TLS and credentials (sdk/security.py); None = the ambient
            default, else plain text.
    Raises:
        ValueError: the address does not parse (see parse_broker), or the
            security settings cannot be used (a file, a token in plain text).
    """
    security = resolve(security)
    credentials = security.channel_credentials(parse_broker(broker)[0]) if security else None
    if credentials is None:
        return grpc.aio.insecure_channel(target_of(broker), options=CHANNEL_OPTIONS)
    options = [*CHANNEL_OPTIONS, *security.channel_options()] if security else CHANNEL_OPTIONS
    return grpc.aio.secure_channel(target_of(broker), credentials, options=options)


def renews_channel(security: ClientSecurity | None, now_s: float) -> bool:
    """Whether a client whose open stream the broker ended for its credentials
    (UNAUTHENTICATED, sdk/reconnect.py rule 6) opens a new channel before the
    stream again, rather than reopening it on the channel it has.

    Why: a client certificate is read when a channel opens, and its connection
    keeps it; once its notAfter passed the broker ends the streams opened with it
    and refuses every new call on that connection. A certificate rotated on disk
    is only used by a new channel, as a rotated token file is by the next call.
    Only for a pair usable now (valid, its key matching): with the old certificate
    still on disk the reopen fails with the broker's own "client certificate
    expired", where a new channel would fail its TLS handshake and be retried as a
    lost broker. A client with a certificate and a token also renews when only the
    token expired: one new connection, nothing else.

    Args:
        security: the client's own (None: the ambient default).
        now_s: the time (time.time()) to check the certificate's validity at.
    """
    security = resolve(security)
    return security is not None and security.holds_usable_certificate(now_s)


async def renew_channel(channel: grpc.aio.Channel, broker: str, security: ClientSecurity | None,
                        now_s: float) -> grpc.aio.Channel | None:
    """A new channel in place of `channel` (then closed) when `renews_channel`;
    None: keep `channel` (also when a file went away since it was checked: the
    reopen on it then fails in the broker's words)."""
    if not renews_channel(security, now_s):
        return None
    try:
        renewed = open_channel(broker, security)
    except ValueError:
        return None
    await channel.close()
    return renewed


def stub_of(channel: grpc.aio.Channel) -> pb_grpc.KeybusAsyncStub:
    """The async Keybus stub on a grpc.aio channel (typed as the async flavour)."""
    return cast("pb_grpc.KeybusAsyncStub", pb_grpc.KeybusStub(channel))


async def retry_wait(channel: grpc.aio.Channel | None, delay_ms: int) -> None:
    """Wait out a client's retry delay, or less: until its channel, down when the
    attempt failed, is connected again.

    Why: a broker that restarts opens its port somewhere within the clients'
    backoff, and an attempt after a fixed sleep came up to a whole backoff (1-2 s
    at its cap) after that. gRPC keeps trying to connect meanwhile (paced by its
    reconnect backoff above), and the next attempt starts the moment it succeeds.
    A channel that is connected when the attempt failed (the broker answered: not
    the leader, busy, a stream it ended) waits for its connection to drop and come
    back, or the whole delay, so a broker that refuses is not asked again at once.
    That READY may also be stale: a call fails on a lost connection a moment before
    the channel's state says so, and sleeping the delay then (20 s in a test with
    long backoffs) kept a client away from a broker serving again.

    Args:
        channel: the client's channel; None sleeps the delay.
        delay_ms: the retry delay of the client's backoff.
    """
    delay_s = delay_ms / 1000
    state = None if channel is None else channel.get_state(try_to_connect=True)
    if channel is None or state is grpc.ChannelConnectivity.SHUTDOWN:
        await asyncio.sleep(delay_s)
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay_s):
            if state is grpc.ChannelConnectivity.READY:
                await channel.wait_for_state_change(state)
            await channel.channel_ready()
