"""The options of the kqactors Spark source and sink: Spark's Kafka connector options, parsed and checked.

Runs in: whichever Python process Spark asks to plan (the planner workers the JVM starts for schema(),
reader() and writer(), the streaming source's runner); pure parsing, no clients and no pyspark import, so it
is unit-tested on its own. Owns the option names, their defaults and the errors that name a bad option.

Names and meanings follow Spark's "Structured Streaming + Kafka Integration Guide": ``kafka.*`` options go to
the kqactors client with the prefix dropped (librdkafka property names, so ``kafka.bootstrap.servers``,
``kafka.security.protocol``, ...); Spark's own options keep their camelCase names (Spark hands a data source
its options with lower-cased keys, so keys are compared without case). Offsets in JSON use Spark's
convention: -2 is earliest, -1 is latest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KafkaOptionError", "OffsetBound", "Subscription", "SourceOptions", "SinkOptions", "EARLIEST",
           "LATEST", "parse_source_options", "parse_sink_options", "parse_duration_ms"]

EARLIEST = -2
LATEST = -1

TopicPartitionKey = tuple[str, int]

_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[2,4]}'

# Client properties a Spark job may not set: Spark decides them (as its JVM connector does).
_REFUSED_SOURCE_PROPERTIES = {
    "auto.offset.reset": "set the source option 'startingOffsets' to 'earliest' or 'latest' instead: the "
                         "query tracks its offsets itself (in its checkpoint when streaming)",
    "enable.auto.commit": "offsets are tracked by Spark, never committed to Kafka",
    "key.deserializer": "keys are read as binary; decode them with DataFrame operations",
    "value.deserializer": "values are read as binary; decode them with DataFrame operations",
    "interceptor.classes": "consumer interceptors are not supported",
    "enable.partition.eof": "the source reads offset ranges and needs no end-of-partition events",
}
_REFUSED_SINK_PROPERTIES = {
    "key.serializer": "write the key column as string or binary; serialize with DataFrame operations",
    "value.serializer": "write the value column as string or binary; serialize with DataFrame operations",
    "interceptor.classes": "producer interceptors are not supported",
}
_DURATION_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000,
                      "h": 3_600_000, "d": 86_400_000}


class KafkaOptionError(ValueError):
    """A bad source or sink option; the message names the option."""


@dataclass(frozen=True)
class OffsetBound:
    """Where reading starts or ends: ``earliest``, ``latest``, per-partition ``offsets``, per-partition
    ``timestamps`` or one ``timestamp`` for every partition. ``option`` is the option it came from."""

    kind: str
    option: str
    offsets: Mapping[TopicPartitionKey, int] = field(default_factory=dict)
    timestamp: int = -1

    def describe(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp}"
        return f"{self.option}={to_json_offsets(self.offsets)}"


@dataclass(frozen=True)
class Subscription:
    """Which partitions a query reads: ``subscribe`` (topics), ``subscribePattern`` (a regex matched against
    whole topic names) or ``assign`` (explicit partitions)."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TopicPartitionKey, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribePattern":
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        if self.kind == "subscribe":
            return topic in self.topics
        return any(t == topic for t, _ in self.partitions)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return f"assign={json.dumps(_partitions_json(self.partitions))}"


@dataclass(frozen=True)
class SourceOptions:
    """A read's options, checked. ``client`` is the kqactors client configuration (``kafka.*`` without the
    prefix, values as given); ``group_id`` the group id every consumer of the query carries (``kafka.group.id``,
    else ``groupIdPrefix``; the consumers never join the group nor commit: partitions are assigned)."""

    client: Mapping[str, str]
    subscription: Subscription
    starting: OffsetBound
    ending: OffsetBound | None
    streaming: bool
    group_id: str
    fail_on_data_loss: bool = True
    include_headers: bool = False
    starting_timestamp_strategy: str = "error"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    poll_timeout_ms: int = 120_000
    read_committed: bool = False

    @property
    def admission_control(self) -> bool:
        return self.max_offsets_per_trigger is not None or self.min_offsets_per_trigger is not None


@dataclass(frozen=True)
class SinkOptions:
    """A write's options, checked: the kqactors producer configuration and the ``topic`` option (None when
    each row names its topic)."""

    client: Mapping[str, str]
    topic: str | None


# ---- helpers ------------------------------------------------------------------------------------------------
def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in options.items():
        out[str(key).lower()] = "" if value is None else str(value)
    return out


def _client_conf(opts: Mapping[str, str], refused: Mapping[str, str]) -> dict[str, str]:
    conf = {key[len("kafka."):]: value for key, value in opts.items() if key.startswith("kafka.")}
    for name, why in refused.items():
        if name in conf:
            raise KafkaOptionError(f"Option 'kafka.{name}' is not supported: {why}.")
    if not conf.get("bootstrap.servers", "").strip():
        raise KafkaOptionError("Option 'kafka.bootstrap.servers' must be specified: the Kafka brokers to "
                               "connect to, e.g. .option(\"kafka.bootstrap.servers\", \"host1:9092,host2:9092\")")
    return conf


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise KafkaOptionError(f"Option '{name}' must be true or false, got {raw!r}")


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise KafkaOptionError(f"Option '{name}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise KafkaOptionError(f"Option '{name}' must be a positive integer, got {raw!r}")
    return value


def parse_duration_ms(raw: str, name: str) -> int:
    """Spark's time strings: "15m", "30s", "500ms", "2h", "1d", or a bare number of milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if match is None or match.group(2) not in ("", *_DURATION_UNITS_MS):
        raise KafkaOptionError(f"Option '{name}' must be a duration such as 15m, 30s or 500ms, got {raw!r}")
    return int(int(match.group(1)) * _DURATION_UNITS_MS.get(match.group(2) or "ms", 1))


def _json(raw: str, name: str, example: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise KafkaOptionError(f"Option '{name}' is not valid JSON: expected e.g. {example}, got {raw!r}") from None


def _partition_number(text: Any, name: str, raw: str, example: str) -> int:
    try:
        number = int(text)
    except (TypeError, ValueError):
        number = -1
    if isinstance(text, bool) or number < 0 or (isinstance(text, str) and not text.strip().isdigit()):
        raise KafkaOptionError(f"Option '{name}': {text!r} is not a partition number: expected e.g. {example}, "
                               f"got {raw!r}")
    return number


def parse_partition_values(raw: str, name: str, example: str = _OFFSETS_EXAMPLE) -> dict[TopicPartitionKey, int]:
    """``{"topic":{"0":23,"1":-1}}`` → {(topic, 0): 23, (topic, 1): -1}."""
    data = _json(raw, name, example)
    if not isinstance(data, dict) or not data:
        raise KafkaOptionError(f"Option '{name}': expected a JSON object of topics, e.g. {example}, got {raw!r}")
    out: dict[TopicPartitionKey, int] = {}
    for topic, parts in data.items():
        if not topic or not isinstance(parts, dict):
            raise KafkaOptionError(f"Option '{name}': topic {topic!r} must map partitions to numbers, e.g. "
                                   f"{example}, got {raw!r}")
        for part, value in parts.items():
            number = _partition_number(part, name, raw, example)
            if isinstance(value, bool) or not isinstance(value, int):
                raise KafkaOptionError(f"Option '{name}': the value for {topic}-{part} must be an integer, "
                                       f"got {value!r}")
            out[(topic, number)] = value
    return out


def to_json_offsets(offsets: Mapping[TopicPartitionKey, int]) -> str:
    """The inverse of parse_partition_values (partitions in order), for messages and checkpoints."""
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"))


def offsets_to_dict(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, part), value in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = int(value)
    return out


def offsets_from_dict(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartitionKey, int]:
    return {(topic, int(part)): int(value) for topic, parts in data.items() for part, value in parts.items()}


def _partitions_json(partitions: tuple[TopicPartitionKey, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, part in partitions:
        out.setdefault(topic, []).append(part)
    return out


# ---- the subscription -----------------------------------------------------------------------------------------
_STRATEGIES = ("assign", "subscribe", "subscribePattern")


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in _STRATEGIES if name.lower() in opts]
    if not given:
        raise KafkaOptionError("One of the options 'subscribe', 'subscribePattern' or 'assign' must be specified "
                               "to say what to read")
    if len(given) > 1:
        raise KafkaOptionError(f"Only one of the options 'assign', 'subscribe', 'subscribePattern' may be "
                               f"specified, got {' and '.join(repr(n) for n in given)}")
    name = given[0]
    raw = opts[name.lower()]
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise KafkaOptionError(f"Option 'subscribe' names no topic: {raw!r}")
        return Subscription("subscribe", topics=topics)
    if name == "subscribePattern":
        if not raw.strip():
            raise KafkaOptionError(f"Option 'subscribePattern' is empty: {raw!r}")
        try:
            re.compile(raw)
        except re.error as exc:
            raise KafkaOptionError(f"Option 'subscribePattern' is not a valid regular expression: {raw!r} "
                                   f"({exc})") from None
        return Subscription("subscribePattern", pattern=raw)
    data = _json(raw, "assign", _ASSIGN_EXAMPLE)
    if not isinstance(data, dict) or not data:
        raise KafkaOptionError(f"Option 'assign': expected a JSON object of topics to partition lists, e.g. "
                               f"{_ASSIGN_EXAMPLE}, got {raw!r}")
    partitions: list[TopicPartitionKey] = []
    for topic, parts in data.items():
        if not topic or not isinstance(parts, list):
            raise KafkaOptionError(f"Option 'assign': topic {topic!r} must map to a list of partitions, e.g. "
                                   f"{_ASSIGN_EXAMPLE}, got {raw!r}")
        for part in parts:
            if isinstance(part, bool) or not isinstance(part, int) or part < 0:
                raise KafkaOptionError(f"Option 'assign': {part!r} is not a partition number, got {raw!r}")
            partitions.append((topic, part))
    if not partitions:
        raise KafkaOptionError(f"Option 'assign' names no partition: {raw!r}")
    return Subscription("assign", partitions=tuple(dict.fromkeys(partitions)))


# ---- offsets ----------------------------------------------------------------------------------------------------
def _timestamp(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise KafkaOptionError(f"Option '{name}' must be a timestamp in milliseconds since the epoch, got {raw!r}")
    return value


def _bound(opts: Mapping[str, str], which: str, streaming: bool | None) -> OffsetBound | None:
    """``which`` is "starting" or "ending". The timestamp options win over the offset ones, a global
    timestamp over per-partition ones, as in Spark. ``streaming`` None: only the checks both kinds share."""
    ts_name, by_ts_name, offsets_name = f"{which}Timestamp", f"{which}OffsetsByTimestamp", f"{which}Offsets"
    if streaming is True and which == "ending":
        for name in (ts_name, by_ts_name, offsets_name):
            if name.lower() in opts:
                raise KafkaOptionError(f"Option '{name}' is not valid in streaming queries: a stream has no end")
        return None
    global_ts = _timestamp(opts, ts_name)
    if global_ts is not None:
        return OffsetBound("timestamp", ts_name, timestamp=global_ts)
    if by_ts_name.lower() in opts:
        stamps = parse_partition_values(opts[by_ts_name.lower()], by_ts_name, _TIMESTAMPS_EXAMPLE)
        bad = {tp: ts for tp, ts in stamps.items() if ts < 0}
        if bad:
            (topic, part), ts = next(iter(bad.items()))
            raise KafkaOptionError(f"Option '{by_ts_name}': the timestamp for {topic}-{part} must not be negative, "
                                   f"got {ts}")
        return OffsetBound("timestamps", by_ts_name, offsets=stamps)
    raw = opts.get(offsets_name.lower())
    default = "latest" if (streaming or which == "ending") else "earliest"
    text = (raw if raw is not None else default).strip()
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
        if streaming is False and which == "starting" and kind == "latest":
            raise KafkaOptionError("Option 'startingOffsets' can't be latest for batch queries: nothing would be read")
        if streaming is False and which == "ending" and kind == "earliest":
            raise KafkaOptionError("Option 'endingOffsets' can't be earliest for batch queries: nothing would be read")
        return OffsetBound(kind, offsets_name)
    offsets = parse_partition_values(text, offsets_name)
    for (topic, part), offset in offsets.items():
        if offset < EARLIEST:
            raise KafkaOptionError(f"Option '{offsets_name}': offset {offset} for {topic}-{part} is not an offset "
                                   f"(-2 is earliest, -1 latest)")
        if streaming is False and which == "starting" and offset == LATEST:
            raise KafkaOptionError(f"Option 'startingOffsets': {topic}-{part} can't start at latest (-1) for "
                                   f"batch queries")
        if streaming is False and which == "ending" and offset == EARLIEST:
            raise KafkaOptionError(f"Option 'endingOffsets': {topic}-{part} can't end at earliest (-2) for batch "
                                   f"queries")
    return OffsetBound("offsets", offsets_name, offsets=offsets)


def _check_bound_partitions(bound: OffsetBound | None, subscription: Subscription) -> None:
    """Per-partition offsets must stay within what the query reads."""
    if bound is None or bound.kind not in ("offsets", "timestamps"):
        return
    for topic, part in bound.offsets:
        if not subscription.matches(topic) or (subscription.kind == "assign"
                                               and (topic, part) not in subscription.partitions):
            raise KafkaOptionError(f"Option '{bound.option}' names {topic}-{part}, which the query does not read "
                                   f"({subscription.describe()})")


# ---- entry points -----------------------------------------------------------------------------------------------
def parse_source_options(options: Mapping[str, Any], streaming: bool | None) -> SourceOptions:
    """Check a read's options (``spark.read`` when ``streaming`` is false, ``spark.readStream`` when true, None
    for the checks both share: ``load()`` does not say which it is)."""
    opts = _lower(options)
    client = _client_conf(opts, _REFUSED_SOURCE_PROPERTIES)
    subscription = _subscription(opts)
    starting = _bound(opts, "starting", streaming)
    assert starting is not None
    ending = _bound(opts, "ending", streaming)
    _check_bound_partitions(starting, subscription)
    _check_bound_partitions(ending, subscription)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise KafkaOptionError(f"Option 'startingOffsetsByTimestampStrategy' must be error or latest, got "
                               f"{opts['startingoffsetsbytimestampstrategy']!r}")
    max_offsets = _positive_int(opts, "maxOffsetsPerTrigger")
    min_offsets = _positive_int(opts, "minOffsetsPerTrigger")
    if streaming is False:
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if name.lower() in opts:
                raise KafkaOptionError(f"Option '{name}' applies to streaming queries only (spark.readStream)")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise KafkaOptionError(f"Option 'minOffsetsPerTrigger' ({min_offsets}) must not exceed "
                               f"'maxOffsetsPerTrigger' ({max_offsets})")
    delay_raw = opts.get("maxtriggerdelay")
    delay_ms = parse_duration_ms(delay_raw, "maxTriggerDelay") if delay_raw is not None else 15 * 60_000
    poll_raw = opts.get("kafkaconsumer.polltimeoutms")
    poll_ms = 120_000
    if poll_raw is not None:
        parsed = _positive_int(opts, "kafkaConsumer.pollTimeoutMs")
        assert parsed is not None
        poll_ms = parsed
    # librdkafka's default is read_committed (Java's is read_uncommitted): the planner's offset look-ups use
    # whatever the task consumers will, so a range never ends past what they can read.
    isolation = client.get("isolation.level", "read_committed").strip().lower()
    if "group.id" in client and client["group.id"].strip():
        group_id = client["group.id"].strip()
    else:
        prefix = opts.get("groupidprefix", "spark-kafka-source" if streaming else "spark-kafka-relation").strip()
        if not prefix:
            raise KafkaOptionError("Option 'groupIdPrefix' is empty")
        # Spark makes the id unique per query; these consumers never join a group nor commit, so the id only
        # shows in broker logs, and a stable one lets a worker's idle consumers serve the next query too.
        group_id = prefix
    return SourceOptions(
        client=client, subscription=subscription, starting=starting, ending=ending, streaming=bool(streaming),
        group_id=group_id, fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False), starting_timestamp_strategy=strategy,
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        max_offsets_per_trigger=max_offsets, min_offsets_per_trigger=min_offsets, max_trigger_delay_ms=delay_ms,
        poll_timeout_ms=poll_ms, read_committed=isolation == "read_committed")


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """Check a write's options (``df.write`` and ``df.writeStream``)."""
    opts = _lower(options)
    client = _client_conf(opts, _REFUSED_SINK_PROPERTIES)
    topic = opts.get("topic")
    if topic is not None:
        topic = topic.strip()
        if not topic:
            raise KafkaOptionError("Option 'topic' is empty")
    return SinkOptions(client=client, topic=topic)
