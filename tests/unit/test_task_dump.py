"""The SIGUSR1 task dump names, for each task, the coroutines it waits in down to
the innermost and what that one awaits: what a hang with every thread idle needs."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from broker import task_dump


async def innermost(event: asyncio.Event) -> None:
    await event.wait()


async def outermost(event: asyncio.Event) -> None:
    await innermost(event)


async def awaits_task(task: asyncio.Task[None]) -> None:
    await task


def test_each_task_shows_its_chain_of_awaits_and_what_it_waits_on() -> None:
    async def run() -> str:
        event = asyncio.Event()
        waiting = asyncio.create_task(outermost(event), name="waiting")
        joining = asyncio.create_task(awaits_task(waiting), name="joining")
        await asyncio.sleep(0)
        text = task_dump.describe_tasks({waiting, joining})
        event.set()
        await joining
        return text

    text = asyncio.run(run())
    joining, waiting = text.split("--- ")[1:]
    assert joining.startswith("joining\n") and "in awaits_task" in joining
    assert "awaits <Task pending name='waiting'" in joining
    lines = waiting.splitlines()
    assert lines[0] == "waiting"
    assert [line.rsplit(" in ", 1)[1] for line in lines[1:4]] == \
        ["outermost", "innermost", "wait"]  # Event.wait, then the future it awaits
    assert lines[4].startswith("    awaits <Future pending")


def test_sigusr1_logs_the_tasks_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        task_dump.install(asyncio.get_running_loop())
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(100):  # the handler runs on the loop, bounded
                await asyncio.sleep(0.01)
                if caplog.records:
                    break
        finally:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)

    with caplog.at_level(logging.WARNING, logger="keybus.broker.tasks"):
        asyncio.run(run())
    assert "asyncio tasks (SIGUSR1)" in caplog.records[0].getMessage()
    assert "in run" in caplog.records[0].getMessage()
