"""The name rules the broker and the SDK share, so a client refuses a bad
name before it reaches the broker, with the broker's own wording.

Rules:
1. A name (topic, subscription, consumer group) is 1..bytes_max characters
   of [A-Za-z0-9._-]: safe in a RocksDB key, a file name, a metric label.
2. Free text (an event processor's namespace or owner id) is printable
   UTF-8 of at most bytes_max bytes; empty only where the caller allows.

Pure: no I/O. The byte limits are the caller's (the broker's are settings).
"""

from __future__ import annotations

import re

NAME = re.compile(r"[A-Za-z0-9._-]+")
NAME_CHARACTERS = "[A-Za-z0-9._-]"
# The broker's default processor_name_bytes_max: what the SDK checks before sending
# (a broker configured lower still refuses a longer name, in its own words).
PROCESSOR_NAME_BYTES_MAX = 255


def is_name(value: object, bytes_max: int) -> bool:
    """Rule 1: 1..bytes_max characters of [A-Za-z0-9._-]."""
    # ASCII only once it matches, so characters are bytes (and encode() cannot fail).
    return isinstance(value, str) and NAME.fullmatch(value) is not None \
        and len(value) <= bytes_max


def is_text(value: object, bytes_max: int, empty_ok: bool) -> bool:
    """Rule 2: printable UTF-8 of at most bytes_max bytes (empty if empty_ok)."""
    if not isinstance(value, str) or not value.isprintable():
        return False
    size = len(value.encode())
    return size <= bytes_max and (size > 0 or empty_ok)
