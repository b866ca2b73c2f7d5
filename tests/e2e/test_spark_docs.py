"""docs/spark.md's example runs as written.

Goal: a user who copies the aggregation example into a script and runs it
with the project's Python gets the table, not `No module named 'pyarrow'`
from Spark's workers (which start `python3` from the PATH unless told), and
the page links only to documents the project has.
Method: the example's code block as a script (its broker address replaced
by a real broker's), run with PYSPARK_PYTHON unset, on a topic of orders.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sdk import SyncAdmin, SyncProducer
from tests.support.broker_process import REPO, BrokerProcess

DOC = REPO / "docs" / "spark.md"


def example() -> str:
    text = DOC.read_text()
    section = text[text.index("## Example: aggregate per key"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match
    return match[1]


def test_links_point_at_documents_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)", DOC.read_text()):
        assert (DOC.parent / target).exists(), target
    assert "DESIGN" not in DOC.read_text()


@pytest.mark.spark
def test_aggregation_example_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        with SyncAdmin(broker.address) as admin:
            admin.create_topic("orders", 2)
        with SyncProducer.create(broker.address, "orders") as producer:
            for n in range(300):
                producer.send(f"customer-{n % 3}", f"order {n}".encode())
        script = tmp_path / "job.py"
        script.write_text(example().replace("localhost:6650", broker.address))
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=600, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        rows = re.findall(r"\|\s*(customer-\d)\s*\|\s*(\d+)\s*\|", done.stdout)
        assert sorted(rows) == [("customer-0", "100"), ("customer-1", "100"),
                                ("customer-2", "100")], done.stdout
    finally:
        broker.stop()
