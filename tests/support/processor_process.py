"""An event processor in a process of its own, for tests that SIGKILL or
SIGSTOP one (`python -m tests.support.processor_process ...`).

It appends one line per step to --out (line-buffered: each line reaches
the OS before the next step, so a SIGKILL loses none that happened):

    S <partition> <epoch> <start>          claimed: starts at offset <start> ("-" = the processor's start)
    H <partition> <first> <last>           handling a batch (before the handler's sleep)
    B <partition> <first> <last>           processed a batch (offsets first..last)
    C <partition> <offset> <epoch>         checkpoint stored
    F <partition> <epoch>                  checkpoint refused: ownership lost (fenced)
    X <partition> <reason>                 partition closed
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, TextIO

from sdk.processor import EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from sdk.stores import OwnershipLost, RedisOwnershipStore

REPO = Path(__file__).resolve().parents[2]


class Recorder:
    """The processor's callbacks, writing the lines of the module docstring."""

    def __init__(self, out: TextIO, checkpoint_every: int, handler_sleep_s: float) -> None:
        self.out = out
        self.checkpoint_every = checkpoint_every
        self.handler_sleep_s = handler_sleep_s
        self.since_checkpoint: dict[int, int] = {}

    def line(self, *fields: Any) -> None:
        self.out.write(" ".join(str(f) for f in fields) + "\n")

    async def on_initialize(self, context: PartitionContext) -> None:
        start = context.checkpoint.offset + 1 if context.checkpoint else "-"
        self.line("S", context.partition, context.epoch, start)
        self.since_checkpoint[context.partition] = 0

    async def on_event(self, context: PartitionContext, batch: ReadBatch) -> None:
        first, last = batch.offsets[0], batch.offsets[-1]
        self.line("H", context.partition, first, last)
        if self.handler_sleep_s:
            await asyncio.sleep(self.handler_sleep_s)
        self.line("B", context.partition, first, last)
        count = self.since_checkpoint.get(context.partition, 0) + batch.count
        if count >= self.checkpoint_every:
            try:
                checkpoint = await context.update_checkpoint(batch)
            except OwnershipLost:
                self.line("F", context.partition, context.epoch)
                raise
            self.line("C", context.partition, checkpoint.offset, checkpoint.epoch)
            count = 0
        self.since_checkpoint[context.partition] = count

    async def on_close(self, context: PartitionContext, reason: str) -> None:
        self.line("X", context.partition, reason)


async def run(options: argparse.Namespace) -> None:
    with open(options.out, "a", buffering=1) as out:
        recorder = Recorder(out, options.checkpoint_every, options.handler_sleep_ms / 1000)
        ownership = (RedisOwnershipStore(options.redis, ttl_ms=options.expiration_ms)
                     if options.redis else None)
        processor = EventProcessor(
            options.broker, options.topic, options.group, owner_id=options.owner,
            on_event=recorder.on_event, on_partition_initialize=recorder.on_initialize,
            on_partition_close=recorder.on_close, ownership_store=ownership,
            load_balancing_interval_ms=options.interval_ms,
            ownership_expiration_ms=options.expiration_ms)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await processor.start()
        await stop.wait()
        await processor.stop()
        if ownership is not None:
            await ownership.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--broker", "--topic", "--group", "--owner", "--out"):
        parser.add_argument(name, required=True)
    parser.add_argument("--redis")
    parser.add_argument("--interval-ms", type=int, default=500)
    parser.add_argument("--expiration-ms", type=int, default=2_000)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--handler-sleep-ms", type=int, default=0)
    options = parser.parse_args()
    Path(options.out).touch()
    asyncio.run(run(options))
    sys.exit(0)


if __name__ == "__main__":
    main()


class ProcessorProcess:
    """Runs this module as a child process; reads back its lines."""

    def __init__(self, out: Path, broker: str, topic: str, group: str, owner: str,
                 redis: str | None = None, *extra: str) -> None:
        self.out = out
        self.command = [sys.executable, "-m", "tests.support.processor_process",
                        "--broker", broker, "--topic", topic, "--group", group, "--owner", owner,
                        "--out", str(out), *(["--redis", redis] if redis else []), *extra]
        self.owner = owner
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.out.with_suffix(".log"), "ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, cwd=REPO)

    def signal(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs; its ownership stays until it expires."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self, timeout_s: float = 20) -> None:
        """SIGTERM (a clean stop: partitions closed and released), then SIGKILL."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def lines(self, kind: str | None = None) -> list[list[str]]:
        """Its lines so far (split), only those of one kind when given."""
        rows = [line.split() for line in self.out.read_text().splitlines() if line.strip()]
        return [row for row in rows if kind is None or row[0] == kind]
