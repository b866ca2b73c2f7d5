"""The broker's event processor stores: ownership (CAS) and checkpoints (fenced)."""
