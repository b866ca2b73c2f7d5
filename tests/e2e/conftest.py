"""End-to-end fixtures: one local[2] SparkSession and one broker for the whole session.

Spark takes seconds to start, so every Spark test shares one session (UI
off, few shuffle partitions, Python filter pushdown on). Its Python workers
run the interpreter running the tests and import this repository, as an
installed connector would be imported on a cluster. Tests use distinct topic
names on the shared broker.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import REPO, BrokerProcess


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    import spark_connector

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    os.environ["PYTHONPATH"] = python_path
    conf = SparkConf().setMaster("local[2]").setAppName("keybus-e2e").setAll([
        ("spark.ui.enabled", "false"),
        ("spark.ui.showConsoleProgress", "false"),
        ("spark.sql.shuffle.partitions", "2"),
        ("spark.default.parallelism", "2"),
        ("spark.sql.python.filterPushdown.enabled", "true"),
        ("spark.executorEnv.PYTHONPATH", python_path),
        ("spark.sql.session.timeZone", "UTC"),
    ])
    gateway = _launch_jvm(conf, tmp_path_factory.mktemp("spark-jvm"))
    session = SparkSession(SparkContext(conf=conf, gateway=gateway))
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    yield session
    session.stop()


def _launch_jvm(conf: Any, logs: Path) -> Any:
    """Spark's JVM gateway, its output in a file, started again if it dies at start.

    In a full run the first start of a worker's JVM died at once in 2 of 5 runs
    ("Java gateway process exited before sending its port number"), after that
    worker's earlier tests had run gRPC clients, and every Spark test of the
    worker then failed; alone it never did. PySpark starts the JVM's launcher
    with a `preexec_fn` (to ignore SIGINT), so Python code runs in the child
    between fork and exec, in a process whose gRPC threads may hold locks at the
    fork (gRPC logged "Other threads are currently calling into gRPC, skipping
    fork() handlers" just before). `_popen_in_own_session` starts it without
    Python in the child: a session of its own keeps a Ctrl-C at the terminal
    from it as well. The JVM's own words, which it prints to the file here, say
    why if it dies again.
    """
    from unittest import mock

    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    said = []
    for attempt in range(3):
        path = logs / f"jvm-{attempt}.log"
        with open(path, "wb") as output, \
                mock.patch("pyspark.java_gateway.Popen", _popen_in_own_session):
            try:
                return launch_gateway(conf, popen_kwargs={"stdout": output, "stderr": output})
            except PySparkRuntimeError as e:
                said.append(f"attempt {attempt + 1}: {e}; its output: {path.read_text()!r}")
                print(said[-1], file=sys.stderr)
    raise RuntimeError("Spark's JVM did not start:\n" + "\n".join(said))


def _popen_in_own_session(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """PySpark's Popen of the JVM launcher without its `preexec_fn` (see above)."""
    kwargs.pop("preexec_fn", None)
    return subprocess.Popen(command, start_new_session=True, **kwargs)


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for every Spark test (distinct topics per test)."""
    process = BrokerProcess(Path(tmp_path_factory.mktemp("spark-broker")) / "data")
    process.start()
    yield process
    process.stop()


ROW_COLUMNS = ("topic", "partition", "offset", "key_long", "key_string", "ordering_key", "source",
               "opcode", "value", "scn", "slot", "publish_ms", "event_ms")


class Topics:
    """Create topics, produce over the wire, and compare what Spark reads with the log."""

    def __init__(self, spark: Any, broker: BrokerProcess) -> None:
        from tests.support import wire

        self.spark = spark
        self.broker = broker
        self.address = broker.address
        self.stub = wire.stub(broker.address)
        self._wire = wire

    def make(self, name: str, partitions: int = 1) -> str:
        self._wire.create_topic(self.stub, name, partitions)
        return name

    def produce(self, name: str, partition: int, batch: Any, *, window: bool = False,
                scn: int = 0) -> Any:
        from sdk.core.pb import keybus_pb2 as pb

        request = pb.ProduceRequest(topic=name, partition=partition, batch=batch, window=window,
                                    scn=scn)
        (response,) = self._wire.produce(self.stub, [request])
        assert response.error_code == 0, response.error_message
        return response

    def produce_ints(self, name: str, partition: int, keys: list[int]) -> None:
        self.produce(name, partition, self._wire.int_batch(keys))

    def expected(self, name: str, partitions: int = 1) -> list[tuple[Any, ...]]:
        """Every event of the topic as a row tuple (ROW_COLUMNS), sorted."""
        from sdk.core.columns import record_events
        from sdk.core.pb import keybus_pb2 as pb

        rows = []
        for p in range(partitions):
            for record in self._wire.read_all(self.stub, name, p):
                for e in record_events(record):
                    rows.append((
                        name, p, e.offset,
                        e.key if isinstance(e.key, int) else None,
                        e.key if isinstance(e.key, str) else None,
                        e.ordering_key or None, e.source or None, pb.Opcode.Name(e.opcode),
                        e.value, e.scn, e.slot, e.publish_time_ms, e.event_time_ms or None,
                    ))
        return sorted(rows)

    def reader(self, name: str, **options: str) -> Any:
        reader = self.spark.read.format("keybus").option("broker", self.address)
        return reader.option("topic", name).options(**options)

    def rows(self, df: Any) -> list[tuple[Any, ...]]:
        """The DataFrame's rows as ROW_COLUMNS tuples, sorted."""
        from pyspark.sql import functions as F

        selected = df.select(
            "topic", "partition", "offset", "key_long", "key_string", "ordering_key", "source",
            "opcode", "value", "scn", "slot", F.unix_millis("publish_time").alias("publish_ms"),
            F.unix_millis("event_time").alias("event_ms"))
        return sorted(tuple(bytes(v) if isinstance(v, bytearray) else v for v in row)
                      for row in selected.collect())


@pytest.fixture(scope="session")
def topics(spark: Any, spark_broker: BrokerProcess) -> Topics:
    return Topics(spark, spark_broker)
