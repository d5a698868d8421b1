"""kqactors.spark.options: Spark's Kafka options parsed, and errors that name the bad option."""

from __future__ import annotations

import pytest

from kqactors.spark.options import (
    KafkaOptionError,
    offsets_from_dict,
    offsets_to_dict,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)

BASE = {"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}


def source(streaming: bool | None = False, **extra: str):
    return parse_source_options({**BASE, **extra}, streaming)


def error_of(streaming: bool | None = False, base: dict | None = None, **extra: str) -> str:
    with pytest.raises(KafkaOptionError) as info:
        parse_source_options({**(BASE if base is None else base), **extra}, streaming)
    return str(info.value)


def test_defaults_follow_sparks_kafka_connector() -> None:
    batch = source(False)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss and not batch.include_headers
    assert batch.client == {"bootstrap.servers": "h:9092"}
    assert batch.group_id == "spark-kafka-relation"
    stream = source(True)
    assert stream.starting.kind == "latest" and stream.ending is None
    assert stream.group_id == "spark-kafka-source" and stream.max_trigger_delay_ms == 15 * 60_000


def test_keys_are_compared_without_case_as_spark_lowers_them() -> None:
    opts = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "a, b,a",
                                 "STARTINGOFFSETS": "Earliest", "includeheaders": "TRUE"}, False)
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting.kind == "earliest" and opts.include_headers


def test_kafka_options_go_to_the_client_without_the_prefix() -> None:
    opts = source(**{"kafka.security.protocol": "SASL_SSL", "kafka.fetch.max.bytes": "1000",
                     "kafka.group.id": "mine"})
    assert opts.client["security.protocol"] == "SASL_SSL" and opts.client["fetch.max.bytes"] == "1000"
    assert opts.group_id == "mine"
    assert source(groupIdPrefix="etl").group_id == "etl"


def test_missing_bootstrap_servers_names_the_option() -> None:
    assert "'kafka.bootstrap.servers'" in error_of(base={"subscribe": "t"})
    assert "'kafka.bootstrap.servers'" in parse_error_sink({"topic": "t"})


def parse_error_sink(options: dict) -> str:
    with pytest.raises(KafkaOptionError) as info:
        parse_sink_options(options)
    return str(info.value)


def test_exactly_one_way_to_say_what_to_read() -> None:
    assert "One of the options 'subscribe', 'subscribePattern' or 'assign'" in error_of(
        base={"kafka.bootstrap.servers": "h:1"})
    message = error_of(subscribePattern="t.*")
    assert "Only one of" in message and "'subscribe'" in message and "'subscribePattern'" in message
    assert "'subscribe' names no topic" in error_of(subscribe=" , ")


def test_assign_json() -> None:
    opts = parse_source_options({"kafka.bootstrap.servers": "h:1", "assign": '{"a":[0,2],"b":[1]}'}, False)
    assert opts.subscription.partitions == (("a", 0), ("a", 2), ("b", 1))
    for bad in ("{a:[0]}", '["a"]', '{"a":0}', '{"a":[-1]}', '{"a":["x"]}', "{}"):
        message = error_of(base={"kafka.bootstrap.servers": "h:1"}, assign=bad)
        assert "'assign'" in message, bad


def test_subscribe_pattern_matches_whole_names_and_skips_internal_topics() -> None:
    sub = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "ev.*"}, False).subscription
    assert sub.matches("events") and not sub.matches("my-events") and not sub.matches("__events")
    assert "not a valid regular expression" in error_of(base={"kafka.bootstrap.servers": "h:1"},
                                                        subscribePattern="(")


def test_starting_and_ending_offsets_json() -> None:
    opts = source(startingOffsets='{"t":{"0":5,"1":-2}}', endingOffsets='{"t":{"0":-1,"1":9}}')
    assert opts.starting.kind == "offsets" and opts.starting.offsets == {("t", 0): 5, ("t", 1): -2}
    assert opts.ending.offsets == {("t", 0): -1, ("t", 1): 9}
    for bad in ('{"t":{"0":"x"}}', '{"t":[0]}', "not json", '{"t":{"p":1}}', '{"t":{"0":-3}}'):
        assert "'startingOffsets'" in error_of(startingOffsets=bad), bad
    assert "names u-0, which the query does not read" in error_of(startingOffsets='{"u":{"0":1}}')


def test_batch_only_and_stream_only_rules() -> None:
    assert "can't be latest for batch" in error_of(startingOffsets="latest")
    assert "can't be earliest for batch" in error_of(endingOffsets="earliest")
    assert "can't start at latest" in error_of(startingOffsets='{"t":{"0":-1}}')
    assert "can't end at earliest" in error_of(endingOffsets='{"t":{"0":-2}}')
    assert "not valid in streaming" in error_of(True, endingOffsets="latest")
    assert "not valid in streaming" in error_of(True, endingTimestamp="5")
    assert "streaming queries only" in error_of(False, maxOffsetsPerTrigger="10")
    # load() cannot tell which it is: only the shared checks
    assert source(None, startingOffsets="latest").starting.kind == "latest"
    assert source(None, endingOffsets="latest").ending.kind == "latest"


def test_timestamps_win_over_offsets() -> None:
    opts = source(startingTimestamp="1000", startingOffsetsByTimestamp='{"t":{"0":5}}',
                  startingOffsets="earliest", endingOffsetsByTimestamp='{"t":{"0":7}}')
    assert opts.starting.kind == "timestamp" and opts.starting.timestamp == 1000
    assert opts.ending.kind == "timestamps" and opts.ending.offsets == {("t", 0): 7}
    assert "'startingTimestamp'" in error_of(startingTimestamp="yesterday")
    assert "must not be negative" in error_of(startingOffsetsByTimestamp='{"t":{"0":-5}}')
    assert "'startingOffsetsByTimestampStrategy'" in error_of(startingOffsetsByTimestampStrategy="maybe")


def test_trigger_options() -> None:
    opts = source(True, maxOffsetsPerTrigger="100", minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (100, 10, 30_000)
    assert opts.admission_control
    assert "'maxOffsetsPerTrigger'" in error_of(True, maxOffsetsPerTrigger="0")
    assert "must not exceed" in error_of(True, maxOffsetsPerTrigger="5", minOffsetsPerTrigger="6")
    assert "'maxTriggerDelay'" in error_of(True, maxTriggerDelay="soon")
    assert "'minPartitions'" in error_of(minPartitions="-1")
    assert "'failOnDataLoss'" in error_of(failOnDataLoss="perhaps")


def test_durations() -> None:
    assert [parse_duration_ms(t, "x") for t in ("15m", "30s", "500ms", "2h", "1d", "250", "1min")] == [
        900_000, 30_000, 500, 7_200_000, 86_400_000, 250, 60_000]


def test_properties_spark_decides_are_refused() -> None:
    for name in ("auto.offset.reset", "enable.auto.commit", "key.deserializer", "value.deserializer"):
        assert f"'kafka.{name}'" in error_of(**{f"kafka.{name}": "x"})
    assert "'kafka.value.serializer'" in parse_error_sink({**BASE, "kafka.value.serializer": "x"})


def test_sink_options() -> None:
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": " out ", "kafka.linger.ms": "20"})
    assert sink.topic == "out" and sink.client == {"bootstrap.servers": "h:1", "linger.ms": "20"}
    assert parse_sink_options({"kafka.bootstrap.servers": "h:1"}).topic is None
    assert "'topic' is empty" in parse_error_sink({"kafka.bootstrap.servers": "h:1", "topic": " "})


def test_offsets_dict_round_trip() -> None:
    offsets = {("b", 1): 4, ("a", 10): 7, ("a", 2): 0}
    as_dict = offsets_to_dict(offsets)
    assert as_dict == {"a": {"2": 0, "10": 7}, "b": {"1": 4}}
    assert offsets_from_dict(as_dict) == offsets
