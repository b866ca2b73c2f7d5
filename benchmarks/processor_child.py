"""One event processor in a process of its own, for `python -m benchmarks processors`.

Counts the events it processes, checkpoints each partition every
--checkpoint-every events (update_checkpoint of the batch that crosses the
mark) and writes its running total to --count-file every 100 ms (atomic
replace). Runs until SIGTERM (a clean stop) or SIGKILL (a crash).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from pathlib import Path

from sdk.processor import EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from sdk.stores import RedisOwnershipStore


class Counting:
    def __init__(self, checkpoint_every: int) -> None:
        self.checkpoint_every = checkpoint_every
        self.total = 0
        self.since: dict[int, int] = {}

    async def on_event(self, context: PartitionContext, batch: ReadBatch) -> None:
        self.total += batch.count
        since = self.since.get(context.partition, 0) + batch.count
        if since >= self.checkpoint_every:
            await context.update_checkpoint(batch)
            since = 0
        self.since[context.partition] = since


async def report(counting: Counting, path: Path, stop: asyncio.Event) -> None:
    temporary = path.with_suffix(".tmp")
    while not stop.is_set():
        temporary.write_text(str(counting.total))
        os.replace(temporary, path)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


async def run(options: argparse.Namespace) -> None:
    counting = Counting(options.checkpoint_every)
    ownership = RedisOwnershipStore(options.redis, ttl_ms=options.expiration_ms) \
        if options.redis else None
    processor = EventProcessor(options.broker, options.topic, options.group,
                               owner_id=options.owner, on_event=counting.on_event,
                               ownership_store=ownership, strategy=options.strategy,
                               load_balancing_interval_ms=options.interval_ms,
                               ownership_expiration_ms=options.expiration_ms)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await processor.start()
    await report(counting, Path(options.count_file), stop)
    await processor.stop()
    if ownership is not None:
        await ownership.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.processor_child")
    for name in ("--broker", "--topic", "--group", "--owner", "--count-file"):
        parser.add_argument(name, required=True)
    parser.add_argument("--redis")
    parser.add_argument("--strategy", default="greedy")
    parser.add_argument("--interval-ms", type=int, default=10_000)
    parser.add_argument("--expiration-ms", type=int, default=60_000)
    parser.add_argument("--checkpoint-every", type=int, default=1_000)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
