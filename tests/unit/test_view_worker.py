"""The views' worker thread runs at the configured nice value, the loop's thread does not;
a starved pass sends the next ones to a thread at the broker's priority."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from broker.config import ConfigError, load_settings
from broker.view.worker import CATCH_UP_S, STARVED_WALL_S, ViewWorker, starved


def _own_nice() -> tuple[int, str]:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), threading.current_thread().name


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's nice value is Linux's")
def test_passes_run_on_one_thread_at_the_nice_value_and_the_loop_keeps_its_own() -> None:
    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    wanted = min(19, loop_nice + 7)

    async def main() -> list[tuple[int, str]]:
        worker = ViewWorker(wanted)
        try:
            return [await worker.run(_own_nice) for _ in range(3)]
        finally:
            worker.close()

    seen = asyncio.run(main())
    assert {nice for nice, _ in seen} == {wanted}
    assert len({name for _, name in seen}) == 1 and seen[0][1].startswith("keybus-view")
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == loop_nice


def test_a_nice_value_below_the_process_s_own_leaves_the_thread_at_the_process_s() -> None:
    process_nice = os.getpriority(os.PRIO_PROCESS, 0)

    async def main() -> int:
        worker = ViewWorker(0)
        try:
            nice, _ = await worker.run(_own_nice)
            return nice
        finally:
            worker.close()

    assert asyncio.run(main()) == process_nice


def test_the_setting_takes_0_to_19() -> None:
    assert load_settings(None, env={}).view_thread_nice == 19
    assert load_settings(None, env={"KEYBUS_VIEW_THREAD_NICE": "0"}).view_thread_nice == 0
    with pytest.raises(ConfigError, match="view_thread_nice=20 is above 19; allowed: 0-19"):
        load_settings(None, env={"KEYBUS_VIEW_THREAD_NICE": "20"})
    with pytest.raises(ConfigError, match="view_thread_nice=-1 is negative"):
        load_settings(None, env={"KEYBUS_VIEW_THREAD_NICE": "-1"})


def test_starved_means_a_long_pass_that_mostly_waited_for_a_core() -> None:
    assert starved(wall_s=STARVED_WALL_S, cpu_s=STARVED_WALL_S / 5)
    assert not starved(wall_s=STARVED_WALL_S * 0.9, cpu_s=0.0)  # short: a small lag is fine
    assert not starved(wall_s=STARVED_WALL_S * 2, cpu_s=STARVED_WALL_S)  # it ran (or held the GIL)


def test_after_a_starved_pass_passes_run_at_the_broker_s_priority_for_a_while() -> None:
    now = [100.0]
    worker = ViewWorker(19, clock=lambda: now[0])

    def waited_for_a_core() -> tuple[int, str]:
        now[0] += STARVED_WALL_S * 2  # two seconds pass, next to no CPU time
        return _own_nice()

    async def main() -> list[str]:
        try:
            names = [(await worker.run(waited_for_a_core))[1]]
            names.append((await worker.run(_own_nice))[1])
            now[0] += CATCH_UP_S
            names.append((await worker.run(_own_nice))[1])
            return names
        finally:
            worker.close()

    starved_on, caught_up_on, back_on = asyncio.run(main())
    assert starved_on.startswith("keybus-view_") and back_on.startswith("keybus-view_")
    assert caught_up_on.startswith("keybus-view-catch-up")


def test_a_backlog_runs_at_the_broker_s_priority() -> None:
    async def main() -> tuple[str, str]:
        worker = ViewWorker(19)
        try:
            return ((await worker.run(_own_nice, backlog=True))[1],
                    (await worker.run(_own_nice))[1])
        finally:
            worker.close()

    backlog_on, steady_on = asyncio.run(main())
    assert backlog_on.startswith("keybus-view-catch-up") and steady_on.startswith("keybus-view_")
