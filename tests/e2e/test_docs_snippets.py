"""The code blocks of docs/ a user copies run as written against a real broker.

Goal: the SDK examples of bootstrap.md, databus.md and event-processor.md, and
bootstrap.md's CLI block, keep working as the code changes (README.md's have
tests/e2e/test_readme.py, spark.md's tests/e2e/test_spark_docs.py). Each
example leaves a name or two to the reader (`apply`, `save`, `handle`,
`stop_requested`) and runs until stopped.
Method: one broker process; bootstrap.md's CLI block made the topic, then
windows of two sources are produced. Each Python block runs in a script as
written, indented into `async def main()` (the blocks await at top level), its
"localhost:6650" replaced by the broker's address, after a prelude that defines
the reader's names and prints what they are given; the script stops the block
after a few seconds (a follow read, `client.run()`) and the test compares what
was printed with the events the block's filters let through.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from sdk import SyncProducer
from tests.support.broker_process import REPO, BrokerProcess

PRELUDES = {  # the names each page leaves to the reader, printing what they get
    "bootstrap.md": """\
def apply(event):
    print("apply", event.source, event.key, event.offset)


def save(position):
    print("save", type(position).__name__)
""",
    "databus.md": """\
async def save(changes, scn):
    print("save", int(scn), *sorted(changes))
""",
    "event-processor.md": """\
def handle(event):
    print("handle", event.partition, event.key)
    if event.key == 12:
        stop_requested.set()


stop_requested = asyncio.Event()
""",
}
RUN = """

async def bounded() -> None:
    try:
        await asyncio.wait_for(main(), 10)
    except TimeoutError:
        print("stopped")


asyncio.run(bounded())
"""


def run_block(page: str, broker: BrokerProcess, tmp_path: Path) -> list[str]:
    """The page's one Python block as a script; its stdout lines."""
    [code] = re.findall(r"^```python\n(.*?)^```", (REPO / "docs" / page).read_text(),
                        re.M | re.S)
    body = textwrap.indent(code.replace("localhost:6650", broker.address)
                           .replace("127.0.0.1:6650", broker.address), "    ")
    script = tmp_path / "example.py"
    script.write_text("import asyncio\n\n\n" + PRELUDES[page]
                      + "\n\nasync def main() -> None:\n" + body + RUN)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, (code, done.stderr)
    return done.stdout.splitlines()


def cli_lines() -> list[str]:
    """bootstrap.md's CLI block, a command a line."""
    text = (REPO / "docs" / "bootstrap.md").read_text()
    block = text[text.index("## CLI"):].split("```")[1]
    return [line.split("  #")[0].strip() for line in block.strip().splitlines()]


def run_cli(line: str, broker: BrokerProcess, tmp_path: Path) -> str:
    """One command of the block; a bootstrap that follows gets --timeout to end."""
    command = line.replace("keybus ", f"{sys.executable} -m keybus ", 1)
    if " bootstrap " in command and "--no-follow" not in command:
        command += " --timeout 2"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO),
                                                 KEYBUS_BROKER=broker.address))
    assert done.returncode == 0, (line, done.stderr)
    return done.stdout


def produce_windows(address: str) -> None:
    """Keys 0..19 in windows of four, alternately of source orders and order_lines."""
    with SyncProducer.create(address, "orders") as producer:
        for first in range(0, 20, 4):
            producer.send_window([{"key": k, "value": b"v%d" % k,
                                   "source": "orders" if k % 2 else "order_lines"}
                                  for k in range(first, first + 4)], partition=0)


def test_the_docs_examples_run_as_written(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        create, *others = cli_lines()
        assert run_cli(create, broker, tmp_path) == "created topic orders with 1 partition(s)\n"
        produce_windows(broker.address)
        for line in others:
            assert run_cli(line, broker, tmp_path).strip(), line

        printed = run_block("bootstrap.md", broker, tmp_path)
        # mod:10:[3] of source "orders" (odd keys): 3 and 13, at their original offsets.
        assert [line for line in printed if line.startswith("apply")] == [
            "apply orders 3 3", "apply orders 13 13"]
        assert any("phase='online'" in line for line in printed), printed

        printed = run_block("databus.md", broker, tmp_path)
        kept: dict[int, list[int]] = {}  # scn -> keys the three members saved for it
        for line in printed:
            if line.startswith("save"):
                _, scn, *keys = line.split()
                kept.setdefault(int(scn), []).extend(int(key) for key in keys)
        # mod:4:[0,1] over both sources: keys 0, 1 of the first window, 4, 5 of the next...
        assert sorted(sorted(keys) for keys in kept.values()) == [
            [first, first + 1] for first in range(0, 20, 4)], printed
        assert printed[-1] == "stopped" and (tmp_path / "checkpoints").is_dir()

        printed = run_block("event-processor.md", broker, tmp_path)
        handled = [int(line.split()[2]) for line in printed if line.startswith("handle")]
        assert handled == list(range(len(handled))) and len(handled) >= 13, printed
        assert printed[-1] != "stopped", "the processor did not stop when asked"
    finally:
        broker.stop()
