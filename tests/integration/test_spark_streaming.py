"""kqactors.spark, streaming: spark.readStream / df.writeStream with format "kqactors" on local[2] Spark.

Broker: the librdkafka mock cluster (``mock_cluster``) throughout: micro-batches end at the partitions' latest
offsets, which Tansu 0.6 under-reports. The restart tests write to Spark's file sink (parquet), whose
metadata log makes a batch's output appear once: with exactly-once reading, the files then hold each record
exactly once, however the query was stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from integration_helpers import make_topic  # noqa: E402
from support.kafka_io import produce_numbered  # noqa: E402
from support.waiting import wait_until  # noqa: E402
from test_spark_batch import reader, spark_session  # noqa: E402,F401  (the session-wide "spark" fixture)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

from kqactors.spark.source import _ADMISSION_CONTROL  # noqa: E402

needs_admission_control = pytest.mark.skipif(
    not _ADMISSION_CONTROL, reason="maxOffsetsPerTrigger needs pyspark >= 4.2 (admission control for Python sources)")


def stream(spark, bootstrap: str, **options: str):
    r = spark.readStream.format("kqactors").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def to_parquet(df, path: str, checkpoint: str, **trigger):
    return (df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value").writeStream
            .format("parquet").option("path", path).option("checkpointLocation", checkpoint)
            .trigger(**trigger).start())


def written(spark, path: str) -> list[tuple]:
    """What the file sink committed (spark.read.parquet follows its _spark_metadata log)."""
    return [(r.partition, r.offset, r.value) for r in spark.read.parquet(path).collect()]


def assert_exactly_once(rows: list[tuple], per_partition: dict[int, int]) -> None:
    keys = [(p, o) for p, o, _ in rows]
    assert len(keys) == len(set(keys)), "a record was written twice"
    expected = {(p, o) for p, n in per_partition.items() for o in range(n)}
    assert set(keys) == expected, f"missing {sorted(expected - set(keys))[:10]}, extra {sorted(set(keys) - expected)[:10]}"


@needs_admission_control
def test_stopped_and_restarted_query_neither_loses_nor_repeats(spark, mock_cluster, unique_topic, tmp_path) -> None:
    """mock: maxOffsetsPerTrigger paces the first run; it is stopped mid-stream (a batch may be running),
    more records arrive, and a restart from the checkpoint (Trigger.AvailableNow) picks up exactly there."""
    make_topic(mock_cluster, unique_topic, 3)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 300, 3)
    path, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    df = stream(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="40")
    query = to_parquet(df, path, checkpoint, processingTime="100 milliseconds")
    try:
        wait_until(lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 2, 90,
                   "three micro-batches of the first run")
    finally:
        query.stop()
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert max(sizes) <= 40 and sum(sizes) < 300, sizes
    produce_numbered(mock_cluster.bootstrap, unique_topic, 150, 3, start=300)
    query = to_parquet(df, path, checkpoint, availableNow=True)
    query.awaitTermination(120)
    assert query.exception() is None
    rows = written(spark, path)
    assert_exactly_once(rows, {0: 150, 1: 150, 2: 150})
    assert sorted(int(v[1:]) for _, _, v in rows) == list(range(450))


_KILLED_QUERY = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    import kqactors.spark

    bootstrap, topic, path, checkpoint = sys.argv[1:5]
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kqactors.spark.register(spark)
    df = (spark.readStream.format("kqactors").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "30")
          .load().selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value"))
    query = (df.writeStream.format("parquet").option("path", path).option("checkpointLocation", checkpoint)
             .trigger(processingTime="100 milliseconds").start())
    query.awaitTermination()
""")


@pytest.mark.slow
@needs_admission_control
def test_killed_query_restarts_from_its_checkpoint_exactly_once(spark, mock_cluster, unique_topic, tmp_path) -> None:
    """mock: the query runs in its own Spark (a child process group: JVM, Python workers, kqactors hosts), is
    killed with SIGKILL while micro-batches run, and this session restarts it from the checkpoint."""
    make_topic(mock_cluster, unique_topic, 2)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 400, 2)
    path, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    child = subprocess.Popen([sys.executable, "-c", _KILLED_QUERY, mock_cluster.bootstrap, unique_topic, path,
                              checkpoint], start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    commits = os.path.join(checkpoint, "commits")
    try:
        wait_until(lambda: child.poll() is not None or (os.path.isdir(commits) and len(os.listdir(commits)) >= 2),
                   150, "the child query to commit two micro-batches")
        assert child.poll() is None, child.stderr.read().decode()[-3000:]
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    done_before = len([n for n in os.listdir(commits) if n.isdigit()])
    assert done_before < 400 // 30, "the child finished before it was killed: nothing was tested"
    df = stream(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="30")
    query = to_parquet(df, path, checkpoint, availableNow=True)
    query.awaitTermination(120)
    assert query.exception() is None
    assert_exactly_once(written(spark, path), {0: 200, 1: 200})


def _fill_past_retention(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records of 100 B on partition 0 (the mock keeps about 4 MB of a partition's log)."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        producer.produce(topic, b"%099d" % i, partition=0)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def test_offsets_deleted_under_a_stream_are_data_loss(spark, mock_cluster, unique_topic, tmp_path) -> None:
    """mock: a stream stopped at offset 1,000; then the log's start moves past it (the mock's retention) and the
    restarted query's task finds its first offsets gone: the query fails naming the partition and offsets, or,
    with failOnDataLoss=false, skips to the earliest offset and goes on."""
    make_topic(mock_cluster, unique_topic, 1)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 1000, 1)
    path, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    query = to_parquet(stream(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingOffsets="earliest"),
                       path, checkpoint, availableNow=True)
    query.awaitTermination(120)
    assert len(written(spark, path)) == 1000
    _fill_past_retention(mock_cluster.bootstrap, unique_topic, 60_000)
    from kqactors import Consumer, TopicPartition

    with Consumer({"bootstrap.servers": mock_cluster.bootstrap, "group.id": "probe"}) as probe:
        earliest, latest = probe.get_watermark_offsets(TopicPartition(unique_topic, 0), timeout=10)
    assert earliest > 1000 and latest == 61_000
    query = to_parquet(stream(spark, mock_cluster.bootstrap, subscribe=unique_topic), path, checkpoint,
                       availableNow=True)
    with pytest.raises(Exception) as info:
        query.awaitTermination(120)
        raise query.exception() or AssertionError("the query did not fail")
    assert f"Cannot fetch offset 1000 of {unique_topic}-0: its earliest available offset is now {earliest}" in str(
        info.value)
    assert "failOnDataLoss" in str(info.value)
    query = to_parquet(stream(spark, mock_cluster.bootstrap, subscribe=unique_topic, failOnDataLoss="false"), path,
                       checkpoint, availableNow=True)
    query.awaitTermination(120)
    assert query.exception() is None
    offsets = sorted(o for _, o, _ in written(spark, path))
    assert offsets == list(range(1000)) + list(range(earliest, 61_000))


def test_stream_to_the_kafka_sink(spark, mock_cluster, unique_topic, tmp_path) -> None:
    """mock: Kafka → Spark → Kafka with the streaming sink (at-least-once: every record arrives; no task
    failed, so none twice), reading with Trigger.AvailableNow."""
    target = unique_topic + "-out"
    make_topic(mock_cluster, unique_topic, 2)
    make_topic(mock_cluster, target, 3)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 120, 2, keys_and_headers=True)
    df = stream(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingOffsets="earliest",
                includeHeaders="true")
    query = (df.selectExpr("key", "upper(CAST(value AS STRING)) AS value", "headers").writeStream
             .format("kqactors").option("kafka.bootstrap.servers", mock_cluster.bootstrap).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    rows = reader(spark, mock_cluster.bootstrap, subscribe=target, includeHeaders="true").load().collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(b"V%d" % i for i in range(120))
    import kqactors

    assert all(r.partition == kqactors.murmur2(bytes(r.key), 3) for r in rows)
    assert all(r.headers[0].key == "i" for r in rows)


def test_stream_options_are_checked_when_the_query_starts(spark, mock_cluster, unique_topic, tmp_path) -> None:
    """mock: stream-only rules fail at start(), naming the option."""
    make_topic(mock_cluster, unique_topic, 1)
    df = stream(spark, mock_cluster.bootstrap, subscribe=unique_topic, endingOffsets="latest")
    with pytest.raises(Exception, match="not valid in streaming"):
        query = to_parquet(df, str(tmp_path / "o"), str(tmp_path / "c"), availableNow=True)
        query.awaitTermination(60)
        raise query.exception() or AssertionError("the query ran")
    started = time.monotonic()
    df = stream(spark, mock_cluster.bootstrap, subscribe=unique_topic + "-missing")
    with pytest.raises(Exception, match="does not exist"):
        query = to_parquet(df, str(tmp_path / "o2"), str(tmp_path / "c2"), availableNow=True)
        query.awaitTermination(60)
        raise query.exception() or AssertionError("the query ran")
    assert time.monotonic() - started < 60


@needs_admission_control
def test_the_example_pipeline(spark, mock_cluster, tmp_path) -> None:
    """mock: examples/spark_orders_pipeline.py's stages (JSON orders → running totals → Kafka and parquet) give
    the totals that were produced."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "spark_orders_pipeline.py"
    spec = importlib.util.spec_from_file_location("spark_orders_pipeline", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    for topic in (example.ORDERS, example.TOTALS):  # the mock has no CreateTopics
        mock_cluster.create_topic(topic, example.PARTITIONS)
    expected = example.produce_orders(mock_cluster.bootstrap, 1500)
    example.run_pipeline(spark, mock_cluster.bootstrap, tmp_path, per_trigger=1000)
    assert example.check(spark, mock_cluster.bootstrap, tmp_path, expected)
    assert len([n for n in (tmp_path / "checkpoint" / "commits").iterdir() if n.name.isdigit()]) == 2
