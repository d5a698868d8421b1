"""Unit tests for the metadata cache, leader routing and refresh scheduling (kqactors.core.metadata)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.metadata import (
    BrokerInfo,
    LeaderChange,
    MetadataCache,
    MetadataSnapshot,
    PartitionInfo,
    RefreshScheduler,
    TopicInfo,
)
from kqactors.errors import KafkaError

B1, B2, B3 = BrokerInfo(1, "127.0.0.1", 9001), BrokerInfo(2, "127.0.0.1", 9002), BrokerInfo(3, "127.0.0.1", 9003)


def topic(name: str, leaders: list[int], epoch: int = 0, error: int = 0, part_errors=None) -> TopicInfo:
    part_errors = part_errors or {}
    return TopicInfo(name, error, {p: PartitionInfo(p, leader, epoch, [leader], [leader], part_errors.get(p, 0))
                                   for p, leader in enumerate(leaders)})


def test_first_response_adds_brokers_and_leaders():
    cache = MetadataCache()
    delta = cache.apply(MetadataSnapshot([B1, B2], [topic("t", [1, 2, 1])], 1, "c"), ["t"], 0.0)
    assert delta.brokers_added == [B1, B2]
    assert delta.leader_changes == [LeaderChange("t", 0, -1, 1, 0), LeaderChange("t", 1, -1, 2, 0),
                                    LeaderChange("t", 2, -1, 1, 0)]
    assert delta.partition_counts == {"t": (0, 3)}
    assert cache.leader("t", 1) == 2 and cache.partition_count("t") == 3
    assert cache.partitions_led_by(1) == [("t", 0), ("t", 2)]
    assert cache.cluster_id == "c" and cache.controller_id == 1
    assert not delta.unresolved_topics


def test_leader_move_is_reported_once_and_same_response_is_a_no_op():
    cache = MetadataCache()
    cache.apply(MetadataSnapshot([B1, B2], [topic("t", [1, 2])]), ["t"], 0.0)
    moved = cache.apply(MetadataSnapshot([B1, B2], [topic("t", [2, 2], epoch=1)]), ["t"], 1.0)
    assert moved.leader_changes == [LeaderChange("t", 0, 1, 2, 1)]
    again = cache.apply(MetadataSnapshot([B1, B2], [topic("t", [2, 2], epoch=1)]), ["t"], 2.0)
    assert again.empty


def test_stale_leader_epoch_is_ignored():
    cache = MetadataCache()
    cache.apply(MetadataSnapshot([B1, B2], [topic("t", [2], epoch=5)]), ["t"], 0.0)
    stale = cache.apply(MetadataSnapshot([B1, B2], [topic("t", [1], epoch=4)]), ["t"], 1.0)
    assert stale.leader_changes == [] and cache.leader("t", 0) == 2


def test_broker_added_removed_and_moved():
    cache = MetadataCache()
    cache.apply(MetadataSnapshot([B1, B2], []), None, 0.0)
    b2_moved = BrokerInfo(2, "127.0.0.1", 9999)
    delta = cache.apply(MetadataSnapshot([b2_moved, B3], []), None, 1.0)
    assert delta.brokers_added == [B3] and delta.brokers_removed == [B1] and delta.brokers_moved == [b2_moved]
    assert set(cache.brokers) == {2, 3}


def test_leader_errors_mark_topic_unresolved_and_route_nowhere():
    cache = MetadataCache()
    delta = cache.apply(MetadataSnapshot([B1], [topic("t", [1, 1], part_errors={1: KafkaError.LEADER_NOT_AVAILABLE})]),
                        ["t"], 0.0)
    assert cache.leader("t", 1) == -1 and cache.leader("t", 0) == 1
    assert delta.unresolved_topics == {"t"}


def test_topic_being_created_then_existing():
    cache = MetadataCache()
    delta = cache.apply(MetadataSnapshot([B1], [TopicInfo("new", KafkaError.LEADER_NOT_AVAILABLE)]), ["new"], 0.0)
    assert delta.topic_errors == {"new": KafkaError.LEADER_NOT_AVAILABLE} and delta.unresolved_topics == {"new"}
    assert cache.partition_count("new") == 0
    delta = cache.apply(MetadataSnapshot([B1], [topic("new", [1])]), ["new"], 1.0)
    assert delta.topic_errors == {"new": 0} and delta.partition_counts == {"new": (0, 1)}


def test_deleted_topic_drops_partitions_and_leaders():
    cache = MetadataCache()
    cache.apply(MetadataSnapshot([B1], [topic("t", [1, 1])]), ["t"], 0.0)
    delta = cache.apply(MetadataSnapshot([B1], [TopicInfo("t", KafkaError.UNKNOWN_TOPIC_OR_PART)]), ["t"], 1.0)
    assert delta.topics_removed == ["t"] and delta.partition_counts == {"t": (2, 0)}
    assert {c.new_leader for c in delta.leader_changes} == {-1}
    assert cache.topic_error("t") == KafkaError.UNKNOWN_TOPIC_OR_PART and cache.leader("t", 0) == -1


def test_full_refresh_forgets_absent_topics_but_sparse_does_not():
    cache = MetadataCache()
    cache.apply(MetadataSnapshot([B1], [topic("a", [1]), topic("b", [1])]), None, 0.0)
    sparse = cache.apply(MetadataSnapshot([B1], [topic("a", [1])]), ["a"], 1.0)
    assert sparse.empty and "b" in cache.topics
    full = cache.apply(MetadataSnapshot([B1], [topic("a", [1])]), None, 2.0)
    assert full.topics_removed == ["b"]


def test_partition_count_growth():
    cache = MetadataCache()
    cache.apply(MetadataSnapshot([B1], [topic("t", [1])]), ["t"], 0.0)
    delta = cache.apply(MetadataSnapshot([B1], [topic("t", [1, 1, 1])]), ["t"], 1.0)
    assert delta.partition_counts == {"t": (1, 3)} and len(delta.leader_changes) == 2


def test_mark_leader_unknown():
    cache = MetadataCache()
    cache.apply(MetadataSnapshot([B1], [topic("t", [1])]), ["t"], 0.0)
    assert cache.mark_leader_unknown("t", 0) == LeaderChange("t", 0, 1, -1, 0)
    assert cache.mark_leader_unknown("t", 0) is None and cache.leader("t", 0) == -1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from([-1, 1, 2, 3]), min_size=1, max_size=4), min_size=1, max_size=6))
def test_leader_changes_replay_to_cache_state(responses):
    """Applying the reported changes to a routing table must reproduce the cache's leaders exactly."""
    cache = MetadataCache()
    routing: dict[tuple[str, int], int] = {}
    for step, leaders in enumerate(responses):
        delta = cache.apply(MetadataSnapshot([B1, B2, B3], [topic("t", leaders, epoch=step)]), ["t"], step)
        for change in delta.leader_changes:
            assert routing.get((change.topic, change.partition), -1) == change.old_leader
            routing[(change.topic, change.partition)] = change.new_leader
        current = {(name, p): info.leader for name, t in cache.topics.items() for p, info in t.partitions.items()}
        assert {k: v for k, v in routing.items() if k in current} == current


def test_scheduler_bootstrap_then_periodic():
    sched = RefreshScheduler(interval_ms=1000, fast_ms=100, fast_max_ms=400)
    sched.start(0.0)
    assert sched.due(0.0, []) is None  # full (bootstrap) request
    assert sched.due(0.01, []) is False  # one outstanding at a time
    sched.on_response([], 0.05)
    assert sched.next_wakeup() == 1.0
    assert sched.due(0.5, ["t"]) is False
    assert sched.due(1.0, ["t"]) == ["t"]
    sched.on_response([], 1.1)
    assert sched.next_wakeup() == 2.0


def test_scheduler_fast_refresh_backs_off_until_resolved():
    sched = RefreshScheduler(interval_ms=-1, fast_ms=100, fast_max_ms=400)
    sched.request(["t"], 5.0)
    assert sched.due(5.0, []) == ["t"]
    waits = []
    now = 5.0
    for _ in range(4):
        sched.on_response(["t"], now)
        wake = sched.next_wakeup()
        waits.append(round(wake - now, 3))
        assert sched.due(wake - 0.001, []) is False
        now = wake
        assert sched.due(now, []) == ["t"]
    assert waits == [0.1, 0.2, 0.4, 0.4]
    sched.on_response([], now)
    assert sched.next_wakeup() is None
    # a new problem starts from the fast interval again
    sched.request(["u"], now)
    assert sched.due(now, []) == ["u"]
    sched.on_response(["u"], now)
    assert round(sched.next_wakeup() - now, 3) == 0.1


def test_scheduler_failed_request_is_retried_and_lost_request_times_out():
    sched = RefreshScheduler(interval_ms=-1, fast_ms=100, fast_max_ms=1000, request_timeout_ms=2000)
    sched.request(["a", "b"], 0.0)
    assert sched.due(0.0, []) == ["a", "b"]
    sched.on_response([], 0.5, failed=True)
    assert sched.due(0.6, []) == ["a", "b"]
    # no answer at all: after request_timeout_ms the scheduler lets a new request go
    sched.request(["c"], 0.7)
    assert sched.due(1.0, []) is False
    assert sched.due(2.6, []) == ["c"]


def test_scheduler_requests_during_outstanding_go_right_after():
    sched = RefreshScheduler(interval_ms=-1)
    sched.request(["a"], 0.0)
    assert sched.due(0.0, []) == ["a"]
    sched.request(["b"], 0.1)
    assert sched.due(0.1, []) is False
    sched.on_response([], 0.2)
    assert sched.due(0.2, []) == ["b"]
