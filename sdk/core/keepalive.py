"""HTTP/2 keepalive of the SDK's channels, and gRPC's words for a ping left unanswered.

HTTP/2 keepalive: a broker that stops answering (frozen, hung, a dead link
that sends no reset) is a lost broker within KEEPALIVE_TIME_MS +
KEEPALIVE_TIMEOUT_MS (~15 s), reported by each client's reconnect rules.
10 s of silence before a ping costs a broker one small frame per connection
every 10 s, and a connection with frames flowing sends none. gRPC's core
acks pings on its own threads, not on the broker's Python event loop, so a
busy loop does not delay the ack; 5 s covers a loaded machine while keeping
the report within seconds. The broker's server accepts pings this often
(broker/keepalive.py, KEEPALIVE_SERVER_OPTIONS); a gRPC server with the default
policy (a ping per 5 minutes on an idle stream) would answer with GOAWAY
too_many_pings.

The lowest layer: the channel (sdk/channel.py) sets the options, the broker's
server accepts them (broker/keepalive.py), and both the reconnect rules
(sdk/reconnect.py) and the errors of single calls (sdk/errors.py) name an
unanswered ping the same way.
"""

from __future__ import annotations

KEEPALIVE_TIME_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 5_000

# gRPC's texts for a connection it closed because the broker did not ack a ping:
# the TCP connection was open, the broker silent.
_UNANSWERED_PING = ("ping timeout", "keepalive watchdog timeout")


def unanswered_ping(details: str) -> str | None:
    """The reason in a user's words when gRPC's `details` say a keepalive ping went
    unanswered, else None."""
    lowered = details.lower()
    if any(text in lowered for text in _UNANSWERED_PING):
        return (f"no answer to a keepalive ping within {KEEPALIVE_TIMEOUT_MS / 1000:g} s: "
                "the broker is frozen, overloaded or cut off")
    return None
