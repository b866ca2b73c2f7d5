"""The Keybus broker: RocksDB log, partitions, dispatch and the gRPC shell."""

from sdk.core.grpc_engine import prefer_polling_engine

prefer_polling_engine()  # before anything imports grpc: see sdk/core/grpc_engine.py
