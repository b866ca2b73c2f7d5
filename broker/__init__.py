"""The Keybus broker: RocksDB log, partitions, dispatch and the gRPC shell."""
