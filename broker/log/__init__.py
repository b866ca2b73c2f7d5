"""The durable log: byte layout (codec), RocksDB store, retention rules."""
