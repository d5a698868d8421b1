"""kqactors.spark.planner: partitions and offsets resolved against a fake AdminClient."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from kqactors.admin import OffsetSpec
from kqactors.admin._listoffsets import EarliestSpec, LatestSpec, TimestampSpec
from kqactors.spark.options import KafkaOptionError, parse_source_options
from kqactors.spark.planner import OffsetLookup
from kqactors.spark.ranges import DataLossError


class FakeAdmin:
    """Topics {name: [(earliest, latest, {timestamp: offset})...]} per partition."""

    def __init__(self, topics: dict) -> None:
        self.topics = topics
        self.levels: list = []

    def list_topics(self, timeout: float = -1):
        return SimpleNamespace(topics={name: SimpleNamespace(partitions=dict.fromkeys(range(len(parts))), error=None)
                                       for name, parts in self.topics.items()})

    def list_offsets(self, request, isolation_level=None, request_timeout=None):
        self.levels.append(isolation_level)
        out = {}
        for tp, spec in request.items():
            first, last, stamps = self.topics[tp.topic][tp.partition]
            if isinstance(spec, EarliestSpec):
                offset = first
            elif isinstance(spec, LatestSpec):
                offset = last
            else:
                assert isinstance(spec, TimestampSpec)
                offset = min((o for ts, o in stamps.items() if ts >= spec.timestamp), default=-1)
            future: Future = Future()
            future.set_result(SimpleNamespace(offset=offset))
            out[tp] = future
        return out


TOPICS = {"t": [(0, 10, {100: 2, 200: 8}), (5, 20, {100: 5, 200: 15})], "u": [(0, 3, {})]}


def lookup(streaming: bool = False, topics: dict = TOPICS, **options: str) -> tuple[OffsetLookup, list[str]]:
    warnings: list[str] = []
    opts = parse_source_options({"kafka.bootstrap.servers": "h:1", **options}, streaming)
    return OffsetLookup(opts, admin=FakeAdmin(topics), warn=warnings.append), warnings


def test_partitions_by_subscribe_pattern_and_assign() -> None:
    assert lookup(subscribe="t,u")[0].partitions() == [("t", 0), ("t", 1), ("u", 0)]
    assert lookup(subscribePattern="[tu]")[0].partitions() == [("t", 0), ("t", 1), ("u", 0)]
    assert lookup(subscribePattern="x.*")[0].partitions() == []
    assert lookup(assign='{"t":[1]}')[0].partitions() == [("t", 1)]


def test_unknown_topics_fail_unless_data_loss_is_accepted() -> None:
    with pytest.raises(KafkaOptionError, match=r"'subscribe' names topic 'nope'.*failOnDataLoss"):
        lookup(subscribe="t,nope")[0].partitions()
    with pytest.raises(KafkaOptionError, match=r"partition t-7 \(the topic has 2\)"):
        lookup(assign='{"t":[7]}')[0].partitions()
    planner, warnings = lookup(subscribe="t,nope", failOnDataLoss="false")
    assert planner.partitions() == [("t", 0), ("t", 1)]
    assert "topic 'nope'" in warnings[0]


def test_earliest_latest_and_specific_offsets() -> None:
    planner, _ = lookup(subscribe="t")
    tps = planner.partitions()
    opts = planner.options
    assert planner.resolve(opts.starting, tps, True) == {("t", 0): 0, ("t", 1): 5}
    assert planner.resolve(opts.ending, tps, False) == {("t", 0): 10, ("t", 1): 20}
    planner, _ = lookup(subscribe="t", startingOffsets='{"t":{"0":4,"1":-2}}', endingOffsets='{"t":{"0":-1,"1":30}}')
    assert planner.resolve(planner.options.starting, tps, True) == {("t", 0): 4, ("t", 1): 5}
    # an end past latest is taken as given: the tasks wait for it, or report the loss
    assert planner.resolve(planner.options.ending, tps, False) == {("t", 0): 10, ("t", 1): 30}


def test_specific_offsets_must_cover_every_partition() -> None:
    planner, _ = lookup(subscribe="t", startingOffsets='{"t":{"0":4}}')
    with pytest.raises(KafkaOptionError, match=r"'startingOffsets' must give every partition.*missing t-1"):
        planner.resolve(planner.options.starting, planner.partitions(), True)


def test_starting_offsets_out_of_range_are_data_loss() -> None:
    planner, _ = lookup(subscribe="t", startingOffsets='{"t":{"0":4,"1":2}}')
    with pytest.raises(DataLossError, match=r"offset 2 for t-1, before the earliest available offset 5"):
        planner.resolve(planner.options.starting, planner.partitions(), True)
    planner, warnings = lookup(subscribe="t", startingOffsets='{"t":{"0":40,"1":2}}', failOnDataLoss="false")
    assert planner.resolve(planner.options.starting, planner.partitions(), True) == {("t", 0): 10, ("t", 1): 5}
    assert len(warnings) == 2 and "after the latest offset 10" in warnings[0]


def test_timestamps() -> None:
    planner, _ = lookup(subscribe="t", startingTimestamp="100", endingOffsetsByTimestamp='{"t":{"0":200,"1":300}}')
    tps = planner.partitions()
    assert planner.resolve(planner.options.starting, tps, True) == {("t", 0): 2, ("t", 1): 5}
    assert planner.resolve(planner.options.ending, tps, False) == {("t", 0): 8, ("t", 1): 20}  # none → latest
    planner, _ = lookup(subscribe="t", startingTimestamp="150")
    assert planner.resolve(planner.options.starting, tps, True) == {("t", 0): 8, ("t", 1): 15}
    planner, _ = lookup(subscribe="t", startingTimestamp="250")
    with pytest.raises(KafkaOptionError, match=r"no offset of t-0 has a timestamp at or after 250"):
        planner.resolve(planner.options.starting, tps, True)
    planner, _ = lookup(subscribe="t", startingTimestamp="250", startingOffsetsByTimestampStrategy="latest")
    assert planner.resolve(planner.options.starting, tps, True) == {("t", 0): 10, ("t", 1): 20}


def test_offsets_are_listed_at_the_consumers_isolation_level() -> None:
    from kqactors import IsolationLevel

    planner, _ = lookup(subscribe="t")
    planner.latest([("t", 0)])
    planner2, _ = lookup(subscribe="t", **{"kafka.isolation.level": "read_uncommitted"})
    planner2.latest([("t", 0)])
    assert planner._admin.levels == [IsolationLevel.READ_COMMITTED]
    assert planner2._admin.levels == [IsolationLevel.READ_UNCOMMITTED]
    assert OffsetSpec.earliest() is OffsetSpec.earliest()


def test_the_admin_client_goes_back_to_the_pool_and_is_taken_again(monkeypatch) -> None:
    """A kqactors AdminClient with nothing pending is falsy (len 0): the pool must still hand it out."""
    import kqactors.admin
    from kqactors.spark.pool import ADMINS

    made: list = []

    class FalsyAdmin(FakeAdmin):
        def __init__(self, conf) -> None:
            super().__init__(TOPICS)
            made.append(self)

        def __len__(self) -> int:
            return 0

        def __exit__(self, *exc) -> None:
            pass

    monkeypatch.setattr(kqactors.admin, "AdminClient", FalsyAdmin)
    ADMINS.close_all()
    opts = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, False)
    for _ in range(3):
        planner = OffsetLookup(opts)
        assert planner.partitions() == [("t", 0), ("t", 1)]
        planner.close()
    assert len(made) == 1
    ADMINS.close_all()
