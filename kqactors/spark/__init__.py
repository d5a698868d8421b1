"""kqactors.spark: Kafka for PySpark pipelines through Spark's Python Data Source API, no JVM connector.

Runs in: the Spark driver's Python process (``register``); the source itself runs in the Python workers Spark
starts (see kqactors.spark.source). Needs ``pip install 'kqactors[spark]'`` (pyspark >= 4.0 and pyarrow)::

    import kqactors.spark
    kqactors.spark.register(spark)                       # format "kqactors"
    df = (spark.read.format("kqactors").option("kafka.bootstrap.servers", "host:9092")
          .option("subscribe", "events").load())          # key, value, topic, partition, offset, timestamp, ...
    df.selectExpr("key", "upper(value) AS value").write.format("kqactors") \\
        .option("kafka.bootstrap.servers", "host:9092").option("topic", "out").mode("append").save()

Options and schema are those of Spark's Kafka connector ("Structured Streaming + Kafka Integration Guide");
``kafka.*`` options go to the kqactors clients as librdkafka properties. Writes need ``.mode("append")``:
PySpark refuses Python data-source writes in its default ErrorIfExists mode.

Module map: options (option parsing), ranges (offset-range arithmetic), planner (driver-side offset look-ups
with the AdminClient), partition_reader / partition_writer (a task's consumer or producer), pool (clients kept
idle in a Python worker between tasks), source (the pyspark classes; the only module that imports pyspark).
"""

from __future__ import annotations

from typing import Any

__all__ = ["register", "SHORT_NAME"]

SHORT_NAME = "kqactors"


def register(spark: Any) -> None:
    """Register the kqactors source and sink with ``spark`` (a SparkSession) under the name "kqactors"."""
    from kqactors.spark.source import KqactorsDataSource

    spark.dataSource.register(KqactorsDataSource)
