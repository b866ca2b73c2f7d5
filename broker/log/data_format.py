"""Which layout of the data directory a broker reads: one number, stored in it.

Why: a broker that opens a data directory a newer Keybus wrote (a changed key
or record layout) would misread it, or write into it in the old layout, and
nothing would say so until data came out wrong. Kafka keeps a version in each
log directory's meta.properties for the same reason. The number is written
when a broker first opens a directory (a directory from before the number
existed has the first layout, which is this one), and a broker refuses, in
one line, a directory whose number is above what it reads. A broker that
opens a directory of a lower number brings it to this one (`upgrade_needed`):
its own load then writes what the newer layout adds.

Formats: 1, the first layout; 2, every topic's JSON in the meta family holds
its incarnation (broker/topics.py), a key an older broker's TopicMeta does not
take (it would stop with a traceback at load, not with a line).

RocksDB refuses before that when the newer layout added a column family
(every family must be opened), so `unknown_families` words that case too.
"""

from __future__ import annotations

DATA_FORMAT = 2  # the layout in docs/architecture.md, "Storage"
KEY = b"data_format"  # in the meta family


def refusal(stored: int, data_dir: str) -> str | None:
    """Why a broker that reads DATA_FORMAT cannot use a directory of format `stored`
    (None: it can)."""
    if stored <= DATA_FORMAT:
        return None
    return (f"data directory {data_dir} was written by a newer Keybus (data format {stored}); "
            f"this broker reads data format {DATA_FORMAT} and older: run a broker of the "
            f"version that wrote it, or newer")


def upgrade_needed(stored: int | None) -> bool:
    """A directory this broker reads but must first mark as its own format: one
    from before the number (None) or of a lower one. Marked before the topics
    are loaded: a crash after it finds topics without an incarnation, which the
    load gives one again (never an older broker reading a half-upgraded one)."""
    return stored is None or stored < DATA_FORMAT


def unknown_families(rocksdb_error: str, data_dir: str) -> str | None:
    """RocksDB's refusal to open a database with families the broker did not name, in
    words (None: the error is another one)."""
    marker = "Column families not opened:"
    if marker not in rocksdb_error:
        return None
    names = rocksdb_error.split(marker, 1)[1].strip()
    return (f"data directory {data_dir} has column families this broker does not know "
            f"({names}): it was written by a newer Keybus; run a broker of that version or "
            f"newer")


__all__ = ["DATA_FORMAT", "KEY", "refusal", "unknown_families", "upgrade_needed"]
