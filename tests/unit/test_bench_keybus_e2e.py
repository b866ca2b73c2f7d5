"""The extension point for Keybus's end-to-end subscription benchmarks.

Goal: a module with prepare() and consume() becomes a consume client; a
missing module, one without those functions, or one that fails to import
becomes a pending row with the reason, and the comparison still runs.
Method: small modules put in sys.modules under made-up names.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from benchmarks.keybus_e2e import load


@pytest.fixture
def fake_modules() -> Iterator[dict[str, types.ModuleType]]:
    added: dict[str, types.ModuleType] = {}
    yield added
    for name in added:
        sys.modules.pop(name, None)


def _add(added: dict[str, types.ModuleType], name: str, **functions: object) -> None:
    module = types.ModuleType(name)
    for attribute, value in functions.items():
        setattr(module, attribute, value)
    sys.modules[name] = added[name] = module


def test_a_module_with_prepare_and_consume_is_a_client(
        fake_modules: dict[str, types.ModuleType]) -> None:
    def prepare(address: str, topic: str, workload: object) -> None:
        return None

    def consume(task: object, link: object) -> dict[str, object]:
        return {}

    _add(fake_modules, "bench_fake_ready", prepare=prepare, consume=consume)
    loaded = load((("Keybus Fake", "bench_fake_ready"),))
    assert [c.label for c in loaded.clients] == ["Keybus Fake"] and loaded.pending == ()
    assert loaded.clients[0].prepare is prepare and loaded.clients[0].consume is consume


def test_missing_or_incomplete_modules_are_pending(
        fake_modules: dict[str, types.ModuleType]) -> None:
    _add(fake_modules, "bench_fake_half", prepare=lambda *a: None)
    loaded = load((("A", "bench_fake_absent_module"), ("B", "bench_fake_half")))
    assert loaded.clients == ()
    assert loaded.pending[0] == ("A", "bench_fake_absent_module is not there yet")
    assert loaded.pending[1][0] == "B" and "no prepare() and consume()" in loaded.pending[1][1]


def test_a_module_that_fails_to_import_is_pending_with_the_error(tmp_path: object,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    directory = str(tmp_path)
    with open(f"{directory}/bench_fake_broken.py", "w") as f:
        f.write("import bench_fake_dependency_that_is_not_there\n")
    monkeypatch.syspath_prepend(directory)
    loaded = load((("C", "bench_fake_broken"),))
    assert loaded.clients == ()
    assert "importing bench_fake_broken failed" in loaded.pending[0][1]
    assert "bench_fake_dependency_that_is_not_there" in loaded.pending[0][1]
    sys.modules.pop("bench_fake_broken", None)
