"""The kqactors data source for PySpark: Kafka as a batch and streaming source and sink, in Python.

Runs in: every Python process Spark starts for a Python data source. ``KqactorsDataSource.schema`` runs in
the worker that resolves ``load()``; ``reader().partitions()`` and ``writer()`` in planner workers; a
stream reader's ``initialOffset`` / ``latestOffset`` / ``partitions`` / ``commit`` in one long-lived runner
process per query (so its AdminClient lives as long as the query); ``read`` and ``write`` in executor Python
workers, one call per task. Readers and writers are pickled from the planner to the executors, so they hold
options and offset ranges, never a client.

Owns the pyspark side: the source's fixed schema, option checks at plan time (errors name the option), the
batch reader (driver: offset ranges from the admin API; tasks: read_range), the micro-batch stream reader
(offsets as Spark checkpoints them, ``{"topic": {"partition": offset}}``; admission control by
``maxOffsetsPerTrigger`` / ``minOffsetsPerTrigger`` + ``maxTriggerDelay``; Trigger.AvailableNow), and the
batch and streaming writers.

Delivery guarantees. Reading is exactly-once with a checkpoint: Spark writes a micro-batch's end offsets to
its offset log before running it, and a restarted query re-plans an unfinished batch from the same start and
end, which read_range reads to the record; with an idempotent sink (Spark's file sink) nothing is lost or
repeated. Writing is at-least-once, as with Spark's JVM connector: a task's records are acknowledged before it
reports success, but a task retried after a failure, or a micro-batch re-run after a crash before Spark
logged its commit, produces its records again. Exactly-once writes would need one Kafka transaction across
every task of a micro-batch, committed by the driver after Spark's commit; Kafka transactions belong to one
producer (one task), and a driver cannot commit another producer's open transaction through the client API,
so a stream that needs exactly-once output must deduplicate downstream (e.g. on key + batch id).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kqactors.spark.options import (
    KafkaOptionError,
    SourceOptions,
    offsets_from_dict,
    offsets_to_dict,
    parse_sink_options,
    parse_source_options,
)
from kqactors.spark.planner import OffsetLookup
from kqactors.spark.ranges import OffsetRange, split_ranges, stream_ranges

try:  # pyspark >= 4.0 (Arrow batches into write()); the Row writers otherwise
    from pyspark.sql.datasource import DataSourceArrowWriter as _BatchWriterBase
except ImportError:  # pragma: no cover - depends on the installed pyspark
    _BatchWriterBase = DataSourceWriter  # type: ignore[misc,assignment]
try:  # pyspark >= 4.1
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment]
try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    _ADMISSION_CONTROL = True
except ImportError:  # pragma: no cover
    _ADMISSION_CONTROL = False

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: this pyspark has no Trigger.AvailableNow for Python sources."""

__all__ = ["KqactorsDataSource", "SHORT_NAME", "SCHEMA", "SCHEMA_WITH_HEADERS"]

SHORT_NAME = "kqactors"
SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
    StructField("partition", IntegerType()), StructField("offset", LongType()),
    StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType()),
])
HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
SCHEMA_WITH_HEADERS = StructType([*SCHEMA.fields, StructField("headers", HEADERS_TYPE)])

_log = logging.getLogger("kqactors.spark")


class KafkaInputPartition(InputPartition):
    """One task's offset range."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(None)
        self.range = offset_range


class KafkaCommitMessage(WriterCommitMessage):
    """What a write task reports: how many records it wrote (all acknowledged)."""

    def __init__(self, records: int) -> None:
        self.records = records


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    """A task's records, read with a consumer from the worker's pool (kqactors.spark.pool); when the task stops
    early (Spark closes the generator) or fails, the consumer is closed."""
    if not isinstance(partition, KafkaInputPartition):
        return  # Spark's placeholder partition when there is nothing to read
    from kqactors import Consumer
    from kqactors.spark.partition_reader import consumer_config, read_range
    from kqactors.spark.pool import CONSUMERS, config_key

    conf = consumer_config(options.client, options.group_id)
    key = config_key("consumer", conf)
    consumer = CONSUMERS.take(key)
    if consumer is None:
        consumer = Consumer(conf)
    clean = False
    try:
        yield from read_range(consumer, partition.range, include_headers=options.include_headers,
                              fail_on_data_loss=options.fail_on_data_loss,
                              poll_timeout_s=options.poll_timeout_ms / 1000)
        clean = True
    finally:
        _release_consumer(key, consumer, clean)


def _release_consumer(key: Any, consumer: Any, clean: bool) -> None:
    """Back to the worker's pool after a clean read; closed after an error or an early stop."""
    from kqactors.spark.pool import CONSUMERS

    if clean:
        try:
            consumer.unassign()
            CONSUMERS.give(key, consumer)
            return
        except Exception:
            pass
    consumer.close()


def _check_client_config(conf: dict[str, Any], kind: str) -> None:
    """The kqactors client's own validation of the ``kafka.*`` options, at plan time rather than in the tasks
    (no client is started)."""
    from kqactors import KafkaException
    from kqactors.config import Config

    try:
        Config(conf, kind=kind)
    except KafkaException as exc:
        raise KafkaOptionError(f"A 'kafka.*' option is not valid for the kqactors {kind}: {exc.args[0].str()}") from None


def _partitions(options: SourceOptions, ranges: list[OffsetRange]) -> list[InputPartition]:
    return [KafkaInputPartition(r) for r in split_ranges(ranges, options.min_partitions,
                                                           options.max_records_per_partition)]


def _check_read_schema(options: SourceOptions, schema: StructType) -> None:
    expected = SCHEMA_WITH_HEADERS if options.include_headers else SCHEMA
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in expected.fields]:
        raise KafkaOptionError(f"The kqactors source has a fixed schema and cannot be read with a custom one "
                               f"({schema.simpleString()}); it is {expected.simpleString()} (headers only with "
                               f"includeHeaders=true)")


class KafkaBatchReader(DataSourceReader):
    """spark.read: offset ranges planned once, from startingOffsets to endingOffsets."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        lookup = OffsetLookup(options)
        answered = False  # an AdminClient that failed a request is closed, not kept for the next plan
        try:
            tps = lookup.partitions()
            if not tps:
                answered = True
                return []
            earliest, latest = lookup.earliest(tps), lookup.latest(tps)
            answered = True
            start = lookup.resolve(options.starting, tps, True, earliest, latest)
            assert options.ending is not None
            end = lookup.resolve(options.ending, tps, False, earliest, latest)
        finally:
            lookup.close(keep=answered)
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise KafkaOptionError(
                    f"The starting offset {start[tp]} of {tp[0]}-{tp[1]} ({options.starting.describe()}) is after "
                    f"its ending offset {end[tp]} ({options.ending.describe()})")
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        return _partitions(options, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: micro-batches between offsets Spark checkpoints."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._lookup: OffsetLookup | None = None
        self._latest: dict[tuple[str, int], int] | None = None
        self._target: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow's end
        self._last_trigger_s: float | None = None  # when the last micro-batch was let through (min offsets)

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_lookup": None, "_latest": None, "_target": None,
                "_last_trigger_s": None}

    @property
    def lookup(self) -> OffsetLookup:
        if self._lookup is None:
            self._lookup = OffsetLookup(self.options)
        return self._lookup

    def initialOffset(self) -> dict:
        tps = self.lookup.partitions()
        return offsets_to_dict(self.lookup.resolve(self.options.starting, tps, True))

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.lookup.latest(self.lookup.partitions())

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """The end of the next micro-batch. pyspark < 4.2 calls this without ``start`` and ``limit``: all that is
        available then (admission control needs 4.2)."""
        lookup = self.lookup
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = lookup.latest(lookup.partitions())
        self._latest = latest
        if start is None:
            return offsets_to_dict(latest)
        begin = offsets_from_dict(start)
        all_available = not _ADMISSION_CONTROL or limit is None or isinstance(limit, ReadAllAvailable)
        if all_available or not self.options.admission_control:
            return offsets_to_dict(latest)
        new = [tp for tp in latest if tp not in begin]
        if new:
            begin.update(lookup.earliest(new))
        options = self.options
        if options.min_offsets_per_trigger is not None and self._target is None:
            # (Trigger.AvailableNow ignores it: its last batch may be smaller and must still run.)
            now = time.monotonic()
            last = self._last_trigger_s
            if last is not None and now - last < options.max_trigger_delay_ms / 1000:
                backlog = sum(max(latest[tp] - begin.get(tp, 0), 0) for tp in latest)
                if backlog < options.min_offsets_per_trigger:
                    return start
            self._last_trigger_s = now
        if options.max_offsets_per_trigger is not None:
            from kqactors.spark.ranges import rate_limit

            return offsets_to_dict(rate_limit(options.max_offsets_per_trigger, begin, latest))
        return offsets_to_dict(latest)

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_dict(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = stream_ranges(offsets_from_dict(start), offsets_from_dict(end), self.lookup.earliest,
                               self.options.fail_on_data_loss, _log.warning)
        return _partitions(self.options, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the query's offsets live in Spark's checkpoint, not in a Kafka group."""

    def stop(self) -> None:
        if self._lookup is not None:
            self._lookup.close(keep=False)
            self._lookup = None


# ---- writing ------------------------------------------------------------------------------------------------
def _check_write_schema(schema: StructType, topic_option: str | None) -> None:
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    text_or_binary = (StringType, BinaryType)
    if "value" not in fields:
        raise KafkaOptionError(f"A kqactors write needs a 'value' column (string or binary); the data has "
                               f"{schema.simpleString()}")
    if not isinstance(fields["value"], text_or_binary):
        raise KafkaOptionError(f"Column 'value' must be string or binary, not {fields['value'].simpleString()}")
    if "key" in fields and not isinstance(fields["key"], text_or_binary):
        raise KafkaOptionError(f"Column 'key' must be string or binary, not {fields['key'].simpleString()}")
    if topic_option is None:
        if "topic" not in fields:
            raise KafkaOptionError("Set the 'topic' option, or give the data a 'topic' column: the write names no "
                                   "topic")
        if not isinstance(fields["topic"], StringType):
            raise KafkaOptionError(f"Column 'topic' must be string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise KafkaOptionError(f"Column 'partition' must be int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        headers = fields["headers"]
        element = headers.elementType if isinstance(headers, ArrayType) else None
        ok = (isinstance(element, StructType) and [f.name for f in element.fields] == ["key", "value"]
              and isinstance(element["key"].dataType, StringType)
              and isinstance(element["value"].dataType, BinaryType))
        if not ok:
            raise KafkaOptionError(f"Column 'headers' must be array<struct<key:string,value:binary>>, not "
                                   f"{headers.simpleString()}")
    renamed = [f.name for f in schema.fields if f.name.lower() in ("value", "key", "topic", "partition", "headers")
               and f.name != f.name.lower()]
    if renamed:
        raise KafkaOptionError(f"Columns are matched by their lower-case names: rename {renamed}")


def _check_sink_config(sink: Any) -> None:
    from kqactors.spark.partition_writer import producer_config

    _check_client_config(producer_config(sink.client), "producer")


def _write(sink: Any, iterator: Iterator[Any], arrow: bool) -> KafkaCommitMessage:
    from kqactors.spark.partition_writer import write_batches, write_rows

    if arrow:
        return KafkaCommitMessage(write_batches(sink.client, sink.topic, iterator))
    return KafkaCommitMessage(write_rows(sink.client, sink.topic, iterator))


class KafkaBatchWriter(_BatchWriterBase):  # type: ignore[misc,valid-type]
    """df.write: each task produces its rows and returns once all are acknowledged."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        return _write(self.sink, iterator, _BatchWriterBase is not DataSourceWriter)

    def commit(self, messages: list[Any]) -> None:
        """Nothing to commit: the records were acknowledged by Kafka in the tasks."""

    def abort(self, messages: list[Any]) -> None:
        """Records already acknowledged stay in Kafka (at-least-once); nothing can take them back."""


class KafkaStreamWriter(_StreamWriterBase):  # type: ignore[misc,valid-type]
    """df.writeStream: the same per micro-batch (at-least-once, see the module's docstring)."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        return _write(self.sink, iterator, _StreamWriterBase is not DataSourceStreamWriter)

    def commit(self, messages: list[Any], batchId: int) -> None:
        """Nothing to commit: the micro-batch's records were acknowledged in its tasks."""

    def abort(self, messages: list[Any], batchId: int) -> None:
        """A failed micro-batch's acknowledged records stay in Kafka; Spark runs the batch again."""


# ---- the data source ------------------------------------------------------------------------------------------
class KqactorsDataSource(DataSource):
    """Kafka through kqactors, registered as format "kqactors" (``kqactors.spark.register(spark)``)."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def _source_options(self, streaming: bool) -> SourceOptions:
        from kqactors.spark.partition_reader import consumer_config

        options = parse_source_options(self.options, streaming)
        _check_client_config(consumer_config(options.client, options.group_id), "consumer")
        if not _ADMISSION_CONTROL:
            for name, value in (("maxOffsetsPerTrigger", options.max_offsets_per_trigger),
                                ("minOffsetsPerTrigger", options.min_offsets_per_trigger)):
                if value is not None:
                    raise KafkaOptionError(f"Option '{name}' needs pyspark 4.2 or later (admission control for "
                                           f"Python streaming sources)")
        return options

    def schema(self) -> StructType:
        # The checks every read shares (bootstrap servers, what to read, offsets JSON) fail here, at load();
        # the batch- or stream-only ones when Spark asks for the reader.
        options = parse_source_options(self.options, streaming=None)
        return SCHEMA_WITH_HEADERS if options.include_headers else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self._source_options(streaming=False)
        _check_read_schema(options, schema)
        return KafkaBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._source_options(streaming=True)
        _check_read_schema(options, schema)
        return KafkaStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise KafkaOptionError("Save mode 'overwrite' is not allowed for Kafka: records can only be appended; "
                                   "use .mode(\"append\")")
        sink = parse_sink_options(self.options)
        _check_write_schema(schema, sink.topic)
        _check_sink_config(sink)
        return KafkaBatchWriter(sink)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        sink = parse_sink_options(self.options)
        _check_write_schema(schema, sink.topic)
        _check_sink_config(sink)
        return KafkaStreamWriter(sink)

