"""Runs in: unit tests. The planner's fetch sessions (KIP-227) and closest-replica handling (KIP-392):
what full and incremental requests carry, when the session starts over, and what a preferred read replica or
a follower's error asks the toppar to do. Responses go through the real Fetch codec (v12)."""

from __future__ import annotations

from support.clock import FakeClock

from kqactors.core.consumer.planner import REVERTED, FetchPlanner
from kqactors.core.consumer.settings import FetchSettings
from kqactors.errors import KafkaError
from kqactors.protocol.generated.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from kqactors.records import build_batch

V = 12


def batch(base: int, count: int) -> bytes:
    return bytes(build_batch([(1, None, b"x", None)] * count, base_offset=base))


def respond(parts: dict[tuple[str, int], dict], session_id: int = 0, error_code: int = 0) -> FetchResponse:
    topics: dict[str, FetchableTopicResponse] = {}
    for (topic, partition), fields in parts.items():
        topics.setdefault(topic, FetchableTopicResponse(topic=topic, partitions=[])).partitions.append(
            PartitionData(partition_index=partition, **fields))
    response = FetchResponse(error_code=error_code, session_id=session_id, responses=list(topics.values()))
    return FetchResponse.decode(response.encode(V), V)


def listed(request: FetchRequest) -> dict[tuple[str, int], int]:
    return {(t.topic, p.partition): p.fetch_offset for t in request.topics for p in t.partitions}


def forgotten(request: FetchRequest) -> set[tuple[str, int]]:
    return {(t.topic, p) for t in request.forgotten_topics_data for p in t.partitions}


def wire(request: FetchRequest) -> FetchRequest:
    """The request as the broker reads it."""
    return FetchRequest.decode(request.encode(V), V)


def make(**settings) -> FetchPlanner:
    planner = FetchPlanner(FetchSettings(**settings), clock=FakeClock())
    for p in range(3):
        planner.start("t", p, 0, version=1)
    return planner


def test_a_full_request_opens_the_session_and_incremental_ones_list_only_what_changed() -> None:
    planner = make()
    plan = planner.build(sessions=True)
    req = wire(plan.request)
    assert (req.session_id, req.session_epoch) == (0, 0)
    assert listed(req) == {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    planner.handle_response(plan, respond({("t", 0): {"high_watermark": 5, "records": batch(0, 5)},
                                           ("t", 1): {"high_watermark": 0}, ("t", 2): {"high_watermark": 0}},
                                          session_id=77))
    plan = planner.build(sessions=True)
    req = wire(plan.request)
    assert (req.session_id, req.session_epoch) == (77, 1)
    assert listed(req) == {("t", 0): 5} and forgotten(req) == set()  # only the partition that moved on
    assert set(plan.partitions) == {("t", 0), ("t", 1), ("t", 2)}  # the broker may answer for any of them
    # an incremental answer names only partitions with news; data for an unlisted one is delivered too
    outcome = planner.handle_response(plan, respond({("t", 2): {"high_watermark": 3, "records": batch(0, 3)}},
                                                    session_id=77))
    assert [(sl.partition, sl.next_offset) for sl in outcome.slices] == [(2, 3)]
    req = wire(planner.build(sessions=True).request)
    assert (req.session_id, req.session_epoch) == (77, 2)
    assert listed(req) == {("t", 2): 3}


def test_partitions_not_fetched_now_are_forgotten_and_come_back_when_fetchable() -> None:
    planner = make()
    plan = planner.build(sessions=True)
    planner.handle_response(plan, respond({}, session_id=9))
    planner.set_flow("t", 1, False)
    planner.stop("t", 2)
    plan = planner.build(sessions=True)
    req = wire(plan.request)
    assert listed(req) == {} and forgotten(req) == {("t", 1), ("t", 2)}
    assert set(plan.partitions) == {("t", 0)}
    planner.handle_response(plan, respond({}, session_id=9))
    planner.set_flow("t", 1, True)
    req = wire(planner.build(sessions=True).request)
    assert (req.session_epoch, listed(req), forgotten(req)) == (2, {("t", 1): 0}, set())


def test_session_errors_start_over_with_a_full_request_at_once() -> None:
    for code in (KafkaError.FETCH_SESSION_ID_NOT_FOUND, KafkaError.INVALID_FETCH_SESSION_EPOCH):
        planner = make()
        planner.handle_response(planner.build(sessions=True), respond({}, session_id=5))
        plan = planner.build(sessions=True)
        assert plan.request.session_id == 5
        outcome = planner.handle_response(plan, respond({}, session_id=0, error_code=code))
        assert not outcome.errors  # nothing for the application
        plan = planner.build(sessions=True)  # no backoff: the partitions are fetchable right away
        req = wire(plan.request)
        assert (req.session_id, req.session_epoch) == (0, 0)
        assert set(listed(req)) == {("t", 0), ("t", 1), ("t", 2)}
        assert planner.session.resets == 1


def test_a_failed_request_forgets_the_session() -> None:
    planner = make(fetch_error_backoff_ms=0)
    planner.handle_response(planner.build(sessions=True), respond({}, session_id=5))
    planner.handle_failure(planner.build(sessions=True), KafkaError._TRANSPORT)
    req = wire(planner.build(sessions=True).request)
    assert (req.session_id, req.session_epoch, len(listed(req))) == (0, 0, 3)


def test_a_broker_without_sessions_gets_full_requests_and_old_versions_are_sessionless() -> None:
    planner = make()
    for _ in range(3):
        plan = planner.build(sessions=True)
        assert (plan.request.session_id, plan.request.session_epoch, len(listed(plan.request))) == (0, 0, 3)
        planner.handle_response(plan, respond({}, session_id=0))
    planner.handle_response(planner.build(sessions=True), respond({}, session_id=3))
    planner.set_flow("t", 2, False)  # would be forgotten in an incremental request
    plan = planner.build(sessions=False)  # e.g. reconnected to a broker offering only Fetch v4-v6
    assert (plan.request.session_id, plan.request.session_epoch, len(listed(plan.request))) == (0, -1, 2)
    old = FetchRequest.decode(plan.request.encode(4), 4)  # no session fields to encode there
    assert len(listed(old)) == 2


def test_rack_id_and_the_preferred_read_replica() -> None:
    planner = make(client_rack="eu-1a")
    plan = planner.build(sessions=True)
    assert wire(plan.request).rack_id == "eu-1a"
    outcome = planner.handle_response(plan, respond({("t", 0): {"high_watermark": 9, "preferred_read_replica": 2},
                                                     ("t", 1): {"high_watermark": 0}}))
    assert [(m.topic, m.partition, m.version, m.broker_id) for m in outcome.preferred] == [("t", 0, 1, 2)]
    assert not outcome.slices and planner.target("t", 0).state == REVERTED
    assert ("t", 0) not in planner.build().partitions  # not fetched here until the toppar moves it


def test_a_follower_that_cannot_serve_sends_the_partition_back_to_the_leader() -> None:
    planner = FetchPlanner(FetchSettings(auto_offset_reset="earliest"), clock=FakeClock())
    planner.start("t", 0, 50, version=1, follower=True)
    planner.start("t", 1, 0, version=1, follower=True)
    planner.start("t", 2, 50, version=1)  # from the leader: an out-of-range offset is reset as usual
    outcome = planner.handle_response(planner.build(), respond({
        ("t", 0): {"error_code": KafkaError.OFFSET_OUT_OF_RANGE, "high_watermark": 40},
        ("t", 1): {"error_code": KafkaError.NOT_LEADER_FOR_PARTITION, "high_watermark": -1},
        ("t", 2): {"error_code": KafkaError.OFFSET_OUT_OF_RANGE, "high_watermark": 40}}))
    assert sorted((t, p, code) for t, p, _v, code in outcome.reverts) == [
        ("t", 0, KafkaError.OFFSET_OUT_OF_RANGE), ("t", 1, KafkaError.NOT_LEADER_FOR_PARTITION)]
    assert [(r.partition, r.policy) for r in outcome.resets] == [(2, "earliest")]
    assert not outcome.errors


def _reference(planner: FetchPlanner, now: float) -> tuple[dict, set, set]:
    """What a request built from scratch would hold: every fetchable partition's (version, offset, max_bytes),
    the ones an incremental request must list, and the ones it must forget."""
    ready = {t.key: t for t in planner.targets()
             if t.state == "active" and t.flow_open and not t.paused and t.backoff_until <= now}
    planned = {k: (t.version, t.offset, t.max_bytes) for k, t in ready.items()}
    session = planner.session
    if not session.established:
        return planned, set(ready), set()
    params = {k: (t.offset, t.max_bytes, t.current_leader_epoch) for k, t in ready.items()}
    listed_keys = {k for k in ready if session.partitions.get(k) != params[k]}
    return planned, listed_keys, set(session.partitions) - set(ready)


def test_incremental_requests_match_a_request_built_from_scratch_under_random_changes() -> None:
    """The incremental build looks only at what changed since the last request; after any mix of starts,
    stops, seeks, flow and pause changes, backoffs, answers (data, errors, preferred replicas) and failed
    requests, what it lists and forgets must be what a walk over every partition gives."""
    import random

    rng = random.Random(7)
    clock = FakeClock()
    planner = FetchPlanner(FetchSettings(fetch_error_backoff_ms=50, auto_offset_reset="earliest"), clock=clock)
    keys = [("t", p) for p in range(12)] + [("u", p) for p in range(4)]
    version = 1
    ends: dict[tuple[str, int], int] = {}
    session_id = 0
    checked = 0
    for _step in range(3000):
        op = rng.random()
        key = rng.choice(keys)
        if op < 0.10:
            version += 1
            planner.start(*key, rng.randrange(0, 50), version, leader_epoch=rng.choice((-1, 3)))
        elif op < 0.14:
            planner.stop(*key)
        elif op < 0.20:
            target = planner.target(*key)
            if target is not None:
                version += 1
                planner.seek(*key, rng.randrange(0, 50), version)
        elif op < 0.30:
            planner.set_flow(*key, rng.random() < 0.6)
        elif op < 0.35:
            planner.set_paused(*key, rng.random() < 0.3)
        elif op < 0.38:
            planner.set_leader_epoch(*key, rng.choice((-1, 3, 4)))
        elif op < 0.45:
            clock.advance(0.03)
        plan = planner.in_flight
        if plan is None:
            now = clock()
            expected, must_list, must_forget = _reference(planner, now)
            plan = planner.build(now, sessions=True)
            if plan is None:
                assert expected == {}
                continue
            assert plan.partitions == expected
            req = plan.request
            assert set(listed(req)) == must_list
            assert forgotten(req) == must_forget
            checked += 1
        # the broker answers: sometimes a failure, a session error or a top-level error, else per partition
        roll = rng.random()
        if roll < 0.05:
            planner.handle_failure(plan, KafkaError._TRANSPORT)
            continue
        if roll < 0.08:
            planner.handle_response(plan, respond({}, error_code=KafkaError.INVALID_FETCH_SESSION_EPOCH))
            continue
        if plan.request.session_id == 0 and plan.request.session_epoch == 0 and rng.random() < 0.8:
            session_id += 1
        answer = {}
        for (topic, partition), (_v, offset, _m) in plan.partitions.items():
            pick = rng.random()
            end = ends.setdefault((topic, partition), 60)
            if pick < 0.3 and offset < end:
                count = min(3, end - offset)
                answer[(topic, partition)] = {"high_watermark": end, "records": batch(offset, count)}
            elif pick < 0.33:
                answer[(topic, partition)] = {"high_watermark": end, "error_code": KafkaError.NOT_LEADER_FOR_PARTITION}
            elif pick < 0.35:
                answer[(topic, partition)] = {"high_watermark": end, "error_code": KafkaError.OFFSET_OUT_OF_RANGE}
            elif pick < 0.36:
                answer[(topic, partition)] = {"high_watermark": end, "preferred_read_replica": 2}
        granted = session_id if plan.request.session_epoch >= 0 else 0
        planner.handle_response(plan, respond(answer, session_id=granted))
    assert checked > 1000 and planner.session.incremental_requests > 300


def test_a_partition_seeked_to_its_end_gets_its_eof_though_the_incremental_answer_leaves_it_out() -> None:
    planner = FetchPlanner(FetchSettings(enable_partition_eof=True), clock=FakeClock())
    planner.start("t", 0, 0, version=1)
    planner.start("t", 1, 0, version=1)
    plan = planner.build(sessions=True)
    outcome = planner.handle_response(plan, respond({("t", 0): {"high_watermark": 5, "records": batch(0, 5)},
                                                     ("t", 1): {"high_watermark": 9, "records": batch(0, 4)}},
                                                    session_id=3))
    assert [(sl.partition, sl.eof_offset) for sl in outcome.slices] == [(0, 5), (1, -1)]
    planner.seek("t", 1, 9, version=2)  # to the end: listed again, but nothing there is new for the broker
    plan = planner.build(sessions=True)
    assert listed(wire(plan.request)) == {("t", 1): 9, ("t", 0): 5}
    outcome = planner.handle_response(plan, respond({}, session_id=3))
    # partition 0 (listed for its new position, left out too) had its EOF at 5 already
    assert [(sl.partition, sl.version, sl.eof_offset) for sl in outcome.slices] == [(1, 2, 9)]
    plan = planner.build(sessions=True)
    assert planner.handle_response(plan, respond({}, session_id=3)).slices == []  # once per reaching


def test_a_partition_restarted_where_it_was_gets_its_eof_again_under_a_session() -> None:
    planner = FetchPlanner(FetchSettings(enable_partition_eof=True), clock=FakeClock())
    planner.start("t", 0, 0, version=1)
    plan = planner.build(sessions=True)
    outcome = planner.handle_response(plan, respond({("t", 0): {"high_watermark": 5, "records": batch(0, 5)}},
                                                    session_id=3))
    assert [sl.eof_offset for sl in outcome.slices] == [5]
    planner.handle_response(planner.build(sessions=True), respond({}, session_id=3))
    planner.seek("t", 0, 5, version=2)  # where it is: nothing to list, nothing for the broker to answer
    plan = planner.build(sessions=True)
    assert listed(wire(plan.request)) == {}
    outcome = planner.handle_response(plan, respond({}, session_id=3))
    assert [(sl.version, sl.eof_offset) for sl in outcome.slices] == [(2, 5)]
