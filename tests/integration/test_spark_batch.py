"""kqactors.spark, batch: spark.read / df.write with format "kqactors" on local[2] Spark.

Broker: the librdkafka mock cluster (``mock_cluster``) throughout: batch reads end at "latest" by default,
and Tansu 0.6 answers ListOffsets(latest) below the log end.
One SparkSession (local[2]) serves every Spark test of the run (``spark`` fixture, getOrCreate).
"""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("pyarrow")
pyspark = pytest.importorskip("pyspark")

from integration_helpers import make_topic  # noqa: E402
from support.kafka_io import produce_numbered  # noqa: E402

import kqactors  # noqa: E402
import kqactors.spark  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="session", name="spark")
def spark_session():
    """One local[2] SparkSession for the whole run (every test_spark* module asks for the same one)."""
    import shutil

    if shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime (java not on PATH)")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("kqactors-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    kqactors.spark.register(session)
    yield session
    session.stop()


def reader(spark, bootstrap: str, **options: str):
    r = spark.read.format("kqactors").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        r = r.option(key, value)
    return r


def analysis_error(action) -> str:
    with pytest.raises(Exception) as info:  # AnalysisException / PythonException, from the planner worker
        action()
    return str(info.value)


def test_batch_read_gives_every_record_in_sparks_kafka_schema(spark, mock_cluster, unique_topic) -> None:
    """mock: 3 partitions, keys and headers; every column of every record."""
    make_topic(mock_cluster, unique_topic, 3)
    before_ms = int(time.time() * 1000)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 150, 3, keys_and_headers=True)
    df = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic, includeHeaders="true").load()
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    rows = df.collect()
    assert len(rows) == 150
    by_value = {bytes(r.value): r for r in rows}
    assert set(by_value) == {b"v%d" % i for i in range(150)}
    row = by_value[b"v7"]
    assert bytes(row.key) == b"k7" and row.topic == unique_topic and row.partition == 7 % 3
    assert row.offset == 7 // 3 and row.timestampType == 0
    assert abs(row.timestamp.timestamp() * 1000 - before_ms) < 120_000
    assert [(h.key, None if h.value is None else bytes(h.value)) for h in row.headers] == [("i", b"7"), ("none", None)]
    # without includeHeaders there is no headers column
    plain = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic).load()
    assert "headers" not in plain.columns and plain.count() == 150


def test_offsets_json_min_partitions_pattern_and_assign(spark, mock_cluster, unique_topic) -> None:
    """mock: per-partition startingOffsets/endingOffsets, minPartitions splits, subscribePattern, assign."""
    other = unique_topic + "-b"
    make_topic(mock_cluster, unique_topic, 2)
    make_topic(mock_cluster, other, 1)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 40, 2)  # 20 per partition
    produce_numbered(mock_cluster.bootstrap, other, 5, 1)
    df = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic,
                startingOffsets=json.dumps({unique_topic: {"0": 5, "1": -2}}),
                endingOffsets=json.dumps({unique_topic: {"0": 15, "1": -1}}), minPartitions="6").load()
    assert df.rdd.getNumPartitions() >= 6
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, 15)] + [(1, o) for o in range(20)]
    pattern = reader(spark, mock_cluster.bootstrap, subscribePattern=unique_topic.replace(".", r"\.") + ".*").load()
    assert pattern.count() == 45
    assigned = reader(spark, mock_cluster.bootstrap, assign=json.dumps({unique_topic: [1], other: [0]})).load()
    assert sorted((r.topic, r.partition) for r in assigned.select("topic", "partition").distinct().collect()) == [
        (unique_topic, 1), (other, 0)]
    assert assigned.count() == 25


def test_batch_write_then_read_back_with_kafkas_partitioner(spark, mock_cluster, unique_topic) -> None:
    """mock: keys land on murmur2(key) % partitions, as a JVM producer puts them; headers, partition and
    topic columns; a null key is spread."""
    make_topic(mock_cluster, unique_topic, 4)
    data = [(f"key-{i}", f"value-{i}", [("n", str(i).encode())]) for i in range(60)]
    df = spark.createDataFrame(data, "key string, value string, headers array<struct<key:string,value:binary>>")
    (df.write.format("kqactors").option("kafka.bootstrap.servers", mock_cluster.bootstrap)
     .option("topic", unique_topic).mode("append").save())
    rows = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic, includeHeaders="true").load().collect()
    assert len(rows) == 60
    for r in rows:
        key = bytes(r.key)
        assert r.partition == kqactors.murmur2(key, 4), key
        i = int(key.decode().split("-")[1])
        assert bytes(r.value) == f"value-{i}".encode() and bytes(r.headers[0].value) == str(i).encode()
    # explicit partition and per-row topic columns
    other = unique_topic + "-x"
    make_topic(mock_cluster, other, 2)
    rows = spark.createDataFrame([(other, 1, b"a"), (other, 1, b"b"), (other, None, None)],
                                 "topic string, partition int, value binary")
    rows.write.format("kqactors").option("kafka.bootstrap.servers", mock_cluster.bootstrap).mode("append").save()
    back = reader(spark, mock_cluster.bootstrap, subscribe=other).load().collect()
    assert sorted((r.partition, r.value) for r in back if r.value is not None) == [(1, b"a"), (1, b"b")]
    assert len(back) == 3


def test_timestamp_options_reach_the_broker(spark, mock_cluster, unique_topic) -> None:
    """mock. Neither test broker looks offsets up by timestamp (the mock answers -1, "none"; Tansu 0.6 answers
    0 for every timestamp), so this checks the wiring and the no-match rules; the matching itself is
    unit-tested (tests/unit/spark/test_planner.py). No match: an end is latest, a start an error unless
    startingOffsetsByTimestampStrategy=latest."""
    make_topic(mock_cluster, unique_topic, 2)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 10, 2)
    base = 1_700_000_000_000
    to_end = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic,
                    endingOffsetsByTimestamp=json.dumps({unique_topic: {"0": base, "1": base}})).load()
    assert to_end.count() == 10
    from_ts = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingTimestamp=str(base),
                     endingTimestamp=str(base)).load()
    assert f"no offset of {unique_topic}-0 has a timestamp at or after {base}" in analysis_error(from_ts.collect)
    at_latest = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingTimestamp=str(base),
                       startingOffsetsByTimestampStrategy="latest").load()
    assert at_latest.count() == 0


def test_bad_options_fail_at_plan_time_naming_the_option(spark, mock_cluster, unique_topic) -> None:
    """mock: errors come from load() or from planning, before any task runs."""
    make_topic(mock_cluster, unique_topic, 1)
    fmt = spark.read.format("kqactors")
    assert "'kafka.bootstrap.servers'" in analysis_error(lambda: fmt.option("subscribe", unique_topic).load())
    both = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic, assign='{"x":[0]}')
    assert "Only one of" in analysis_error(both.load)
    assert "'startingOffsets' is not valid JSON" in analysis_error(
        reader(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingOffsets="{oops").load)
    assert "can't be latest for batch" in analysis_error(
        reader(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingOffsets="latest").load().collect)
    missing = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic + "-missing").load()
    assert "does not exist" in analysis_error(missing.collect)
    relaxed = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic + "-missing", failOnDataLoss="false")
    assert relaxed.load().count() == 0
    assert "fixed schema" in analysis_error(
        lambda: reader(spark, mock_cluster.bootstrap, subscribe=unique_topic).schema("value string").load().collect())
    df = spark.createDataFrame([("a",)], "value string")

    def writer():  # a DataFrameWriter keeps what it was given: a fresh one per case
        return df.write.format("kqactors").option("kafka.bootstrap.servers", mock_cluster.bootstrap)

    assert "'topic'" in analysis_error(lambda: writer().mode("append").save())
    assert "append" in analysis_error(lambda: writer().option("topic", unique_topic).mode("overwrite").save())
    # PySpark itself refuses the default ErrorIfExists mode for Python data sources: .mode("append") is needed
    assert "ErrorIfExists" in analysis_error(lambda: writer().option("topic", unique_topic).save())
    assert "No such configuration property" in analysis_error(
        lambda: writer().option("topic", unique_topic).option("kafka.no.such.thing", "1").mode("append").save())
    no_value = spark.createDataFrame([("a",)], "key string").write.format("kqactors")
    assert "'value' column" in analysis_error(
        lambda: no_value.option("kafka.bootstrap.servers", mock_cluster.bootstrap).option("topic", unique_topic)
        .mode("append").save())


def test_data_loss_on_starting_offsets(spark, mock_cluster, unique_topic) -> None:
    """mock: a starting offset past the log is data loss: an error naming partition and offsets, or, with
    failOnDataLoss=false, a warning and the read starts where the log is."""
    make_topic(mock_cluster, unique_topic, 2)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 10, 2)
    start = json.dumps({unique_topic: {"0": 50, "1": 0}})
    failing = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingOffsets=start).load()
    message = analysis_error(failing.collect)
    assert f"offset 50 for {unique_topic}-0, after the latest offset 5" in message and "failOnDataLoss" in message
    relaxed = reader(spark, mock_cluster.bootstrap, subscribe=unique_topic, startingOffsets=start,
                     failOnDataLoss="false").load()
    assert sorted((r.partition, r.offset) for r in relaxed.collect()) == [(1, o) for o in range(5)]
