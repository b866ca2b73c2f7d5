"""HTTP/2 keepalive of the broker's server: the pings it accepts and the pings it sends.

Both directions matter. Clients ping the broker (sdk/core/keepalive.py) to
find a frozen broker; the broker must accept those pings. The broker pings
its clients to find a frozen client: a consumer stopped (SIGSTOP), hung, or
on a host gone without a TCP reset keeps its connection open, and the
kernel on its side still acks TCP, so without pings its Subscribe stream and
the events it holds unacknowledged stay with it for gRPC's default 2 hours.
With pings, a client that does not answer within the timeout has its
connection closed by gRPC: its streams end, the session detaches and its
unacknowledged events go to the other consumers (Pulsar's broker does the
same with keepAliveIntervalSeconds = 30).

gRPC clients ack a server's pings on their own threads and enforce no ping
policy on them (only a server counts ping strikes), so the broker may ping
as often as its settings say without a client closing the connection.
A server's pings are not capped by grpc.http2.max_pings_without_data (a
client-side limit since gRPC 1.57), so an idle consumer's connection keeps
being pinged.
"""

from __future__ import annotations

from broker.config import Settings
from sdk.core.keepalive import KEEPALIVE_TIME_MS

# Accept the SDK's keepalive pings (sdk/core/keepalive.py: one per KEEPALIVE_TIME_MS of
# silence, with or without calls). gRPC's default policy counts a ping less than
# 5 minutes after the last (2 hours with no call) as a strike and closes the
# connection with GOAWAY too_many_pings past 2 strikes; that would end every
# idle consumer's stream after its fourth ping. Half the SDK's interval absorbs timer jitter; the strikes
# stay limited, so a client that pings in a loop is still cut off.
# keepalive_permit_without_calls also lets the broker ping a connection without calls.
KEEPALIVE_SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
    ("grpc.http2.max_ping_strikes", 2),
]


def client_ping_options(settings: Settings) -> list[tuple[str, int]]:
    """The server options that make the broker ping its clients
    (`client_keepalive_time_ms`, `client_keepalive_timeout_ms`); none when the
    time is 0, leaving gRPC's default (a ping after 2 hours)."""
    if settings.client_keepalive_time_ms == 0:
        return []
    timeout_ms = settings.client_keepalive_timeout_ms
    return [
        ("grpc.keepalive_time_ms", settings.client_keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", timeout_ms),
        # Since gRPC 1.60 the wait for any ping's ack is this one (default 60 s):
        # with a ping already in flight (a BDP probe) when the client froze,
        # keepalive_timeout_ms alone would not apply.
        ("grpc.http2.ping_timeout_ms", timeout_ms),
    ]


def server_options(settings: Settings) -> list[tuple[str, int]]:
    """Every keepalive option of the broker's gRPC server."""
    return [*KEEPALIVE_SERVER_OPTIONS, *client_ping_options(settings)]
