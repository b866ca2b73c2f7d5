"""Relay chaining and leader election: brokers that follow brokers (docs/cluster.md)."""
