"""Which native modules the broker uses (broker/native.py), and the Key_Shared plan in C.

Goal: a module built from another version of its C source, or any module
while `KEYBUS_PURE_PYTHON=1`, is not used; the C plan
(broker/subscription/_keyed_plan.c) is the Python plans' array for array, for
few candidates and many, and refuses tables it cannot read rather than
reading past them.

Method: a stand-in module of another version; child interpreters with the
switch set; hypothesis over random owner tables, flags, permits and
candidates against both Python plans (`_plan_keyed_small`, the numpy one).
The plan's tests skip only where the module was not built (an install
without a C compiler); CI builds it.
"""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import native
from broker.subscription import dispatch
from broker.subscription.dispatch import BLOCKING, DELAYED, DRAINING, FLOORED
from sdk.core.hashing import SLOT_COUNT

built = pytest.mark.skipif(dispatch._native is None, reason="the native plan was not built")


def test_a_module_of_another_version_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    stale = types.ModuleType("broker.subscription._stale")
    stale.VERSION = 1  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "broker.subscription._stale", stale)
    assert native.load("broker.subscription._stale", 1) is stale
    assert native.load("broker.subscription._stale", 2) is None
    assert native.load("broker.subscription._never_built", 1) is None


def test_pure_python_turns_every_module_off() -> None:
    code = ("from broker.subscription import dispatch, record_cut, record_scan; "
            "from broker.view import fold_native; "
            "print(record_cut.NATIVE, record_scan.NATIVE, dispatch._native is not None, "
            "fold_native.NATIVE)")
    for value, expected in (("1", "False False False False"), ("0", "True True True True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={"KEYBUS_PURE_PYTHON": value, "PATH": ""}, timeout=60,
                             check=True)
        if value == "0" and dispatch._native is None:
            continue  # not built here: nothing to turn on
        assert out.stdout.strip() == expected


def tables(owner_of: list[int], flagged: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    owners = np.zeros(SLOT_COUNT, np.uint32)
    owners[:len(owner_of)] = owner_of
    flags = np.zeros(SLOT_COUNT, np.uint8)
    for slot, flag in flagged.items():
        flags[slot] = flag
    return owners, flags


@built
@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 15), max_size=120),
       st.lists(st.integers(0, 5), min_size=16, max_size=16),
       st.lists(st.integers(-2, 40), min_size=6, max_size=6),
       st.dictionaries(st.integers(0, 15), st.sampled_from([DRAINING, DELAYED, FLOORED,
                                                              DRAINING | FLOORED]), max_size=5))
def test_the_c_plan_is_the_python_plans(slots: list[int], owner_of: list[int],
                                        permits: list[int], flagged: dict[int, int]) -> None:
    owners, flags = tables(owner_of, flagged)
    args = (np.array(slots, np.int32), owners, flags, np.array([0, *permits[1:]], np.int64))
    made = dispatch.plan_keyed(*args)
    vectorized = dispatch._plan_keyed_vectorized(*args)
    references = [vectorized]
    if len(slots) <= dispatch.SMALL_PLAN_EVENTS:
        references.append(dispatch._plan_keyed_small(*args))
    for reference in references:
        for a, b in ((made.positions, reference.positions), (made.owners, reference.owners),
                     (made.bounds, reference.bounds)):
            assert a.tolist() == b.tolist() and a.dtype == b.dtype
    assert BLOCKING & FLOORED == 0


@built
def test_the_c_plan_refuses_tables_it_cannot_read() -> None:
    owners, flags = tables([0, 1, 2], {})
    permits = np.array([0, 3], np.int64)  # no entry for owner 2
    with pytest.raises(ValueError, match="outside the 2 permits"):
        dispatch._native.plan(np.array([2], np.int32), owners, flags, permits, BLOCKING)
    with pytest.raises(ValueError, match="outside the owner table"):
        dispatch._native.plan(np.array([SLOT_COUNT], np.int32), owners, flags, permits,
                              BLOCKING)
    with pytest.raises(TypeError):
        dispatch._native.plan([1], owners, flags, permits, BLOCKING)
    with pytest.raises(ValueError, match="flags"):
        dispatch._native.plan(np.array([1], np.int32), owners, flags[:10], permits, BLOCKING)


def test_arrays_of_other_types_or_strided_are_planned_too() -> None:
    owners, flags = tables([0, 1, 2], {})
    permits = np.array([0, 1, 5], np.int64)
    strided = np.array([1, 9, 2, 9, 1], np.int32)[::2]
    for slots in (np.array([1, 2, 1], np.int64), strided):
        plan = dispatch.plan_keyed(slots, owners, flags, permits)
        assert plan.positions.tolist() == [0, 1] and plan.owners.tolist() == [1, 2]
        assert plan.bounds.tolist() == [0, 1, 2]
    strided_permits = np.array([0, 0, 9, 0, 9, 0, 0, 0], np.int64)[::2]  # 0, 9, 9, 0
    plan = dispatch.plan_keyed(strided, owners, flags, strided_permits)
    assert plan.positions.tolist() == [0, 2, 1] and plan.owners.tolist() == [1, 2]
