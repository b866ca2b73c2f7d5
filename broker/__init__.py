"""The Keybus broker: RocksDB log, partitions, dispatch and the gRPC shell."""

# Imported first: the SDK chooses grpcio's engine before anything imports grpc
# (sdk/core/grpc_engine.py), and every broker module imports grpc after this.
import sdk  # noqa: F401
