"""The Prometheus /metrics endpoint of a broker: started with it, stopped with it.

Why its own handle: `prometheus_client.start_http_server` starts a thread and
binds the port for the life of the process. A broker embedded in an
application (or a test) that is stopped and started again would leave the
first endpoint serving and fail the second start on its port, so the broker
keeps the server and closes it on stop.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

import prometheus_client

JOIN_S = 5.0  # the server's thread ends within one poll (0.5 s) of shutdown


class MetricsEndpoint:
    """A running /metrics HTTP server; `close` stops its thread and frees its port."""

    def __init__(self, host: str, port: int) -> None:
        """Raises OSError when the port cannot be bound (e.g. taken)."""
        server, thread = prometheus_client.start_http_server(port, addr=host)
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread

    def close(self) -> None:
        self._server.shutdown()  # waits for serve_forever to return
        self._server.server_close()
        self._thread.join(JOIN_S)
