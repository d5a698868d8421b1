"""kqactors.spark.source.KafkaStreamReader: micro-batch ends (admission control, Trigger.AvailableNow) and
ranges, against a fake offset lookup."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")
datasource = pytest.importorskip("pyspark.sql.streaming.datasource")
if not hasattr(datasource, "ReadMaxRows"):
    pytest.skip("admission control needs pyspark >= 4.2", allow_module_level=True)

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402

from kqactors.spark import source  # noqa: E402
from kqactors.spark.options import parse_source_options  # noqa: E402
from kqactors.spark.ranges import OffsetRange  # noqa: E402


class FakeLookup:
    def __init__(self, latest: dict, earliest: dict | None = None) -> None:
        self.latest_offsets = latest
        self.earliest_offsets = earliest or {tp: 0 for tp in latest}

    def partitions(self):
        return sorted(self.latest_offsets)

    def latest(self, tps):
        return {tp: self.latest_offsets[tp] for tp in tps}

    def earliest(self, tps):
        return {tp: self.earliest_offsets[tp] for tp in tps}

    def resolve(self, bound, tps, starting):
        return self.earliest(tps) if bound.kind == "earliest" else self.latest(tps)

    def close(self) -> None:
        pass


def make(lookup: FakeLookup, **options: str) -> source.KafkaStreamReader:
    opts = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **options}, True)
    reader = source.KafkaStreamReader(opts)
    reader._lookup = lookup
    return reader


def test_initial_offset_and_all_available() -> None:
    lookup = FakeLookup({("t", 0): 10, ("t", 1): 4})
    reader = make(lookup, startingOffsets="earliest")
    start = reader.initialOffset()
    assert start == {"t": {"0": 0, "1": 0}}
    assert isinstance(reader.getDefaultReadLimit(), ReadAllAvailable)
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 10, "1": 4}}
    assert reader.reportLatestOffset() == {"t": {"0": 10, "1": 4}}
    assert make(lookup).initialOffset() == {"t": {"0": 10, "1": 4}}  # streaming starts at latest by default


def test_max_offsets_per_trigger_and_a_new_partition() -> None:
    lookup = FakeLookup({("t", 0): 100, ("t", 1): 100, ("t", 2): 50}, earliest={("t", 0): 0, ("t", 1): 0,
                                                                                ("t", 2): 40})
    reader = make(lookup, maxOffsetsPerTrigger="30")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(30)
    end = reader.latestOffset({"t": {"0": 0, "1": 90}}, limit)  # t-2 is new: counted from its earliest
    assert end == {"t": {"0": 25, "1": 92, "2": 42}}  # 30 over backlogs of 100, 10, 10
    # Trigger.Once / AvailableNow's ReadAllAvailable ignores the option
    assert reader.latestOffset({"t": {"0": 0, "1": 90}}, ReadAllAvailable())["t"]["0"] == 100


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(monkeypatch) -> None:
    now = [5.0]  # a clock near zero (a young machine): the first trigger still fires at once
    monkeypatch.setattr(source.time, "monotonic", lambda: now[0])
    lookup = FakeLookup({("t", 0): 5})
    reader = make(lookup, minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(10)
    start = {"t": {"0": 0}}
    assert reader.latestOffset(start, limit) == {"t": {"0": 5}}  # the first trigger fires (as Spark's)
    now[0] += 5
    assert reader.latestOffset(start, limit) == start  # 5 < 10 new records: wait
    lookup.latest_offsets[("t", 0)] = 12
    assert reader.latestOffset(start, limit) == {"t": {"0": 12}}
    now[0] += 10
    lookup.latest_offsets[("t", 0)] = 15
    assert reader.latestOffset({"t": {"0": 12}}, limit) == {"t": {"0": 12}}
    now[0] += 31
    assert reader.latestOffset({"t": {"0": 12}}, limit) == {"t": {"0": 15}}  # the delay is over


def test_available_now_does_not_wait_for_min_offsets() -> None:
    lookup = FakeLookup({("t", 0): 3})
    reader = make(lookup, minOffsetsPerTrigger="10")
    reader.prepareForTriggerAvailableNow()
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset({"t": {"0": 0}}, limit) == {"t": {"0": 3}}
    assert reader.latestOffset({"t": {"0": 0}}, limit) == {"t": {"0": 3}}


def test_available_now_stops_at_the_offsets_seen_when_it_began() -> None:
    lookup = FakeLookup({("t", 0): 20})
    reader = make(lookup, maxOffsetsPerTrigger="15")
    reader.prepareForTriggerAvailableNow()
    lookup.latest_offsets[("t", 0)] = 500
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset({"t": {"0": 0}}, limit) == {"t": {"0": 15}}
    assert reader.latestOffset({"t": {"0": 15}}, limit) == {"t": {"0": 20}}
    assert reader.latestOffset({"t": {"0": 20}}, limit) == {"t": {"0": 20}}


def test_partitions_and_pickling() -> None:
    lookup = FakeLookup({("t", 0): 100, ("t", 1): 10})
    reader = make(lookup, minPartitions="4")
    parts = reader.partitions({"t": {"0": 0, "1": 10}}, {"t": {"0": 100, "1": 10}})
    assert [p.range for p in parts] == [OffsetRange("t", 0, 0, 25), OffsetRange("t", 0, 25, 50),
                                        OffsetRange("t", 0, 50, 75), OffsetRange("t", 0, 75, 100)]
    copy = pickle.loads(pickle.dumps(reader))  # executors get the reader without its driver-side client
    assert copy._lookup is None and copy.options == reader.options


def test_client_properties_are_checked_at_plan_time() -> None:
    from kqactors.spark.options import KafkaOptionError

    ds = source.KqactorsDataSource({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.no.such": "1"})
    with pytest.raises(KafkaOptionError, match=r"kqactors consumer: No such configuration property: \"no.such\""):
        ds.reader(source.SCHEMA)
    sink = source.KqactorsDataSource({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.linger.ms": "soon"})
    with pytest.raises(KafkaOptionError, match=r"kqactors producer: Invalid value .*queue.buffering.max.ms"):
        sink.writer(source.StructType.fromJson({"type": "struct", "fields": [
            {"name": "value", "type": "binary", "nullable": True, "metadata": {}}]}), False)
