"""The `keybus` command: the top layer (imports sdk and broker; nothing imports it)."""
