"""The RocksDB options the broker's store opens with, and why each bound is there.

- `wal_bytes_max` (`max_total_wal_size`): a log file lives until every column
  family with writes in it has flushed them, and the small families (meta,
  producers, partitions...) fill their memtables rarely, so without a bound
  RocksDB kept every log file up to its own (four times all memtables,
  gigabytes): disk, and what a restart after a crash replays. Past the bound
  it flushes the families that hold the oldest file.
- `wal_recycle_files` (`recycle_log_file_num`): a new log file reuses an
  obsolete one, whose blocks are allocated and within the file's size, so an
  fsync of the log writes data only, not the file's size and extents (RocksDB
  9 allows it with its default point-in-time recovery).
"""

from __future__ import annotations

from dataclasses import dataclass

import rocksdict

from broker.config import WAL_BYTES_MAX, WAL_RECYCLE_FILES


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """The store's bounds (the broker's settings of the same names; 0 = RocksDB's own)."""

    wal_bytes_max: int = WAL_BYTES_MAX
    wal_recycle_files: int = WAL_RECYCLE_FILES


DEFAULT_LIMITS = StoreLimits()


def database_options(limits: StoreLimits) -> rocksdict.Options:
    """The database's options (raw keys and values: the codec encodes them)."""
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_max_total_wal_size(limits.wal_bytes_max)
    options.set_recycle_log_file_num(limits.wal_recycle_files)
    return options


__all__ = ["DEFAULT_LIMITS", "StoreLimits", "database_options"]
