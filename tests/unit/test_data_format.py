"""The data directory's format number: written on first open, a newer one refused.

Why: a broker that opens a directory a newer Keybus wrote would misread it or
write the old layout into it, silently (broker/log/data_format.py).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import rocksdict

from broker.config import Settings
from broker.log.data_format import DATA_FORMAT, refusal, unknown_families
from broker.log.rocks_store import RocksStore
from broker.server import StartError, open_store


def test_this_format_and_older_are_read() -> None:
    assert refusal(DATA_FORMAT, "d") is None
    assert refusal(0, "d") is None


def test_a_newer_format_is_refused_in_words() -> None:
    assert refusal(DATA_FORMAT + 1, "/data") == (
        f"data directory /data was written by a newer Keybus (data format {DATA_FORMAT + 1}); "
        f"this broker reads data format {DATA_FORMAT} and older: run a broker of the version "
        "that wrote it, or newer")


def test_rocksdbs_unknown_families_are_named() -> None:
    said = unknown_families("Invalid argument: Column families not opened: future, other", "/d")
    assert said is not None and "(future, other)" in said and "newer Keybus" in said
    assert unknown_families("IO error: No space left on device", "/d") is None


def test_a_new_directory_gets_this_format(tmp_path: Path) -> None:
    store = open_store(Settings(data_dir=str(tmp_path), fsync=False))
    try:
        assert store.data_format() == DATA_FORMAT
    finally:
        store.close()


def test_a_directory_from_before_the_number_is_this_format(tmp_path: Path) -> None:
    path = tmp_path / "log.rocksdb"  # as open_store names it
    RocksStore(str(path), fsync=False).close()  # opened, as before the number, without one
    gc.collect()  # RocksDB's lock goes with the store, which is in a reference cycle
    store = open_store(Settings(data_dir=str(tmp_path), fsync=False))
    try:
        assert store.data_format() == DATA_FORMAT
    finally:
        store.close()


def test_a_directory_of_the_first_format_is_brought_to_this_one(tmp_path: Path) -> None:
    """Format 2 stores each topic's incarnation in its JSON, which a broker of
    format 1 cannot load: once a broker of this format opened a directory, an
    older one must refuse it in one line rather than stop with a traceback."""
    assert DATA_FORMAT == 2
    store = open_store(Settings(data_dir=str(tmp_path), fsync=False))
    store.write_data_format(1)
    store.close()
    del store
    gc.collect()
    store = open_store(Settings(data_dir=str(tmp_path), fsync=False))
    try:
        assert store.data_format() == 2
    finally:
        store.close()
    assert refusal(2, "/d") is None and refusal(2, "/d") == refusal(1, "/d")


def test_a_newer_directory_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    def written_by_a_newer_broker() -> None:
        store = open_store(Settings(data_dir=str(tmp_path), fsync=False))
        store.write_data_format(DATA_FORMAT + 1)
        store.close()

    written_by_a_newer_broker()
    gc.collect()  # the store's last reference went with the function
    with pytest.raises(StartError, match=f"data format {DATA_FORMAT + 1}") as refused:
        open_store(Settings(data_dir=str(tmp_path), fsync=False))
    del refused  # its traceback holds the store open_store closed
    gc.collect()
    store = RocksStore(str(tmp_path / "log.rocksdb"), fsync=False)
    try:
        assert store.data_format() == DATA_FORMAT + 1
    finally:
        store.close()


def test_a_directory_with_a_family_this_broker_does_not_know_is_refused(tmp_path: Path) -> None:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    rocksdict.Rdict(str(tmp_path / "log.rocksdb"), options=options,
                    column_families={"future": rocksdict.Options(raw_mode=True)}).close()
    with pytest.raises(StartError, match=r"column families this broker does not know \(future\)"):
        open_store(Settings(data_dir=str(tmp_path), fsync=False))
