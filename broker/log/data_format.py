"""Which layout of the data directory a broker reads: one number, stored in it.

Why: a broker that opens a data directory a newer Keybus wrote (a changed key
or record layout) would misread it, or write into it in the old layout, and
nothing would say so until data came out wrong. Kafka keeps a version in each
log directory's meta.properties for the same reason. The number is written
when a broker first opens a directory (a directory from before the number
existed has the first layout, which is this one), and a broker refuses, in
one line, a directory whose number is above what it reads.

RocksDB refuses before that when the newer layout added a column family
(every family must be opened), so `unknown_families` words that case too.
"""

from __future__ import annotations

DATA_FORMAT = 1  # the layout in docs/architecture.md, "Storage"
KEY = b"data_format"  # in the meta family


def refusal(stored: int, data_dir: str) -> str | None:
    """Why a broker that reads DATA_FORMAT cannot use a directory of format `stored`
    (None: it can)."""
    if stored <= DATA_FORMAT:
        return None
    return (f"data directory {data_dir} was written by a newer Keybus (data format {stored}); "
            f"this broker reads data format {DATA_FORMAT} and older: run a broker of the "
            f"version that wrote it, or newer")


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


__all__ = ["DATA_FORMAT", "KEY", "refusal", "unknown_families"]
