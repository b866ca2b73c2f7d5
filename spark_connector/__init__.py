"""Keybus for PySpark: spark.read / readStream / write / writeStream .format("keybus").

One documented call registers the source with a session::

    import spark_connector
    spark_connector.register(spark)
    df = spark.read.format("keybus").option("broker", "localhost:6650") \\
        .option("topic", "orders").option("ranges", "8").load()

`load(spark, ...)` gives the same DataFrame with filter pushdown that is
safe to reuse across queries (see docs/spark.md, "Filter pushdown").
"""

from __future__ import annotations

from typing import Any

from spark_connector.source import KeybusDataSource

__all__ = ["KeybusDataSource", "load", "register"]


def register(spark: Any) -> None:
    """Make format("keybus") known to this SparkSession (idempotent)."""
    spark.dataSource.register(KeybusDataSource)


def load(spark: Any, **options: str) -> Any:
    """A batch DataFrame of a keybus read with guarded filter pushdown.

    Equals spark.read.format("keybus").options(**options).load(), plus the
    option pushdown=guarded and the always-true condition `offset >= 0`.
    Every query on the result then pushes its own conditions, so key, slot,
    partition and offset conditions narrow what the broker sends, and no
    later query can be served by an earlier query's narrowed reader
    (PySpark 4.3 reuses a DataFrame's last pushed-down reader otherwise).

    Pushdown needs spark.sql.python.filterPushdown.enabled=true; without it
    the result reads like spark.read.format("keybus") and Spark filters alone.

    Args:
        spark: the SparkSession (register() is called on it).
        options: read options as strings, e.g. broker="localhost:6650",
            topic="orders", ranges="8".
    """
    from pyspark.sql import functions

    register(spark)
    reader = spark.read.format("keybus").options(**options)
    enabled = spark.conf.get("spark.sql.python.filterPushdown.enabled", "false")
    if str(enabled).lower() == "true":
        reader = reader.option("pushdown", "guarded")
    return reader.load().where(functions.col("offset") >= 0)
