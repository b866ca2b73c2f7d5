"""Rows/s into Spark: counting a keybus topic vs a bare Python data source.

What it measures: `df.count()` over N events (default 1,000,000) on a
local[2] SparkSession, through
* the keybus source (a real broker process on a temp dir, the topic
  produced beforehand; every event crosses gRPC and becomes Arrow), and
* a bare Python data source with the same schema that yields prebuilt
  Arrow batches of the same rows with no broker behind it: the ceiling of
  PySpark's Python data source path on this machine.
Each layout (topic partitions x hash ranges, always 2 tasks for 2 cores) is
timed `--repeats` times after one warm-up run; best and median are reported.

Run:  python -m benchmarks spark-read [--events 1000000] [--repeats 3] [--value-bytes 64]
      (or python -m benchmarks.spark_read with the same options)
Prints one JSON object (rows/s per source and layout, and the ratio).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sdk.core.hashing import slots_of  # noqa: E402
from sdk.core.pb import keybus_pb2 as pb  # noqa: E402
from sdk.core.pb import keybus_pb2_grpc as pb_grpc  # noqa: E402
from spark_connector.schema import arrow_schema, spark_schema  # noqa: E402

BATCH_EVENTS = 5_000
BARE_BATCH_ROWS = 10_000


class BareReader(DataSourceReader):
    """Yields `rows` rows per split as prebuilt Arrow batches of the keybus schema."""

    def __init__(self, rows: int, splits: int, value_bytes: int) -> None:
        self.rows, self.splits, self.value_bytes = rows, splits, value_bytes

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.splits)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        share = self.rows // self.splits
        batch = _bare_batch(partition.value, min(share, BARE_BATCH_ROWS), self.value_bytes)
        sent = 0
        while sent < share:
            n = min(batch.num_rows, share - sent)
            yield batch if n == batch.num_rows else batch.slice(0, n)
            sent += n


def _bare_batch(partition: int, n: int, value_bytes: int) -> pa.RecordBatch:
    schema = arrow_schema(spark_schema(False))
    timestamp = pa.timestamp("us", tz="UTC")
    columns = {
        "key_string": pa.nulls(n, pa.string()), "key_long": pa.array(range(n), pa.int64()),
        "ordering_key": pa.nulls(n, pa.string()), "source": pa.nulls(n, pa.string()),
        "opcode": pa.array(["UPSERT"] * n), "value": pa.array([b"x" * value_bytes] * n),
        "topic": pa.array(["bench"] * n), "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()), "scn": pa.array(range(1, n + 1), pa.int64()),
        "slot": pa.array(slots_of(range(n)), pa.int32()),
        "publish_time": pa.array([1_700_000_000_000_000] * n, timestamp),
        "event_time": pa.nulls(n, timestamp),
    }
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


class BareDataSource(DataSource):
    """format("keybus_bare"): options rows, splits, value_bytes."""

    @classmethod
    def name(cls) -> str:
        return "keybus_bare"

    def schema(self) -> Any:
        return spark_schema(False)

    def reader(self, schema: Any) -> BareReader:
        return BareReader(int(self.options["rows"]), int(self.options["splits"]),
                          int(self.options["value_bytes"]))


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = data_dir.parent / "ready"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "--data-dir", str(data_dir), "--host", "127.0.0.1",
         "--port", "0", "--ready-file", str(ready)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not ready.exists() or not ready.read_text().strip():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the broker did not start")
        time.sleep(0.05)
    return process, f"127.0.0.1:{ready.read_text().strip()}"


def produce(address: str, topic: str, partitions: int, events: int, value_bytes: int) -> float:
    """Create the topic and fill it; returns seconds taken."""
    channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)])
    stub = pb_grpc.KeybusStub(channel)
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic,
                                           config=pb.TopicConfig(partitions=partitions)))
    value = b"x" * value_bytes
    began = time.monotonic()

    def requests() -> Iterator[pb.ProduceRequest]:
        for first in range(0, events, BATCH_EVENTS):
            keys = list(range(first, min(first + BATCH_EVENTS, events)))
            batch = pb.EventBatch(count=len(keys), key_ints=keys, slots=slots_of(keys),
                                  values=[value] * len(keys))
            yield pb.ProduceRequest(topic=topic, partition=(first // BATCH_EVENTS) % partitions,
                                    batch=batch)

    for response in stub.Produce(requests()):
        assert response.error_code == 0, response.error_message
    channel.close()
    return time.monotonic() - began


def time_count(df_factory: Any, expected: int, repeats: int) -> list[float]:
    assert df_factory().count() == expected  # warm-up: Python workers, JIT, connections
    times = []
    for _ in range(repeats):
        df = df_factory()
        began = time.monotonic()
        count = df.count()
        times.append(time.monotonic() - began)
        assert count == expected, count
    return times


def _rates(events: int, times: list[float]) -> dict[str, Any]:
    return {"best_rows_per_s": round(events / min(times)),
            "median_rows_per_s": round(events / statistics.median(times)),
            "runs_s": [round(t, 3) for t in times]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks spark-read",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--value-bytes", type=int, default=64)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """argv: the options (sys.argv[1:] when None)."""
    args = parse_args(argv)

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get(
        "PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    import spark_connector

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    spark.dataSource.register(BareDataSource)

    results: dict[str, Any] = {"events": args.events, "value_bytes": args.value_bytes,
                               "spark": spark.version, "layouts": {}}
    bare = time_count(lambda: spark.read.format("keybus_bare").option("rows", str(args.events))
                      .option("splits", "2").option("value_bytes", str(args.value_bytes)).load(),
                      args.events, args.repeats)
    results["bare"] = _rates(args.events, bare)
    with tempfile.TemporaryDirectory() as tmp:
        process, address = start_broker(Path(tmp) / "data")
        try:
            for partitions, ranges in ((2, 1), (1, 2)):
                topic = f"bench-p{partitions}"
                produce_s = produce(address, topic, partitions, args.events, args.value_bytes)
                times = time_count(lambda t=topic, r=ranges: spark.read.format("keybus")
                                   .option("broker", address).option("topic", t)
                                   .option("ranges", str(r)).load(), args.events, args.repeats)
                rates = _rates(args.events, times)
                rates["ratio_to_bare_median"] = round(
                    rates["median_rows_per_s"] / results["bare"]["median_rows_per_s"], 3)
                rates["produce_events_per_s"] = round(args.events / produce_s)
                results["layouts"][f"{partitions} partitions x {ranges} ranges"] = rates
        finally:
            process.terminate()
            process.wait(10)
    spark.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
