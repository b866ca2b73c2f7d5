"""The systems Keybus is compared with: Redis Streams and NATS JetStream.

Each driver module holds the server's command line and stated durability, the
setup of its stream, and the producer and consumer client processes; `servers`
installs (Debian packages) and starts/stops a server on 127.0.0.1.
"""
