"""The lowest layer: wire contract and shared rules. Imports no other Keybus package."""
