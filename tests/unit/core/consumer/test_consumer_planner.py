"""Runs in: unit tests. Broker-side fetch planning: request contents, header-scan position advance, version
stamping (stale answers dropped), error classification, offset reset, backoff, EOF and size growth.

Responses go through the real Fetch codec (encode, then decode) so records arrive as the broker actor sees
them: zero-copy memoryviews of the response buffer."""

from __future__ import annotations

import pytest
from support.clock import FakeClock

from kqactors.core.consumer.classify import classify_fetch_error
from kqactors.core.consumer.decoder import SliceDecoder
from kqactors.core.consumer.planner import (
    ACTIVE,
    AWAITING_RESET,
    HELD_WAIT_MS,
    RESTART_WINDOW_S,
    STOPPED,
    FetchPlanner,
)
from kqactors.core.consumer.settings import FetchSettings
from kqactors.errors import ERROR_CODES, KafkaError
from kqactors.protocol.generated.fetch import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from kqactors.records import build_batch, build_control_batch

TS = 1_700_000_000_000




def batch(base: int, count: int, size: int = 10, **options) -> bytes:
    return bytes(build_batch([(TS, None, b"x" * size, None)] * count, base_offset=base, **options))


def make(**settings) -> tuple[FetchPlanner, FakeClock]:
    clock = FakeClock()
    return FetchPlanner(FetchSettings(**settings), clock=clock), clock


def respond(parts: dict[tuple[str, int], dict], version: int = 11, error_code: int = 0,
            topic_ids: dict[str, bytes] | None = None) -> FetchResponse:
    """Encode + decode a response holding ``parts`` ((topic, partition) → PartitionData fields)."""
    topics: dict[str, FetchableTopicResponse] = {}
    for (topic, partition), fields in parts.items():
        fields = dict(fields)
        aborted = [AbortedTransaction(producer_id=p, first_offset=o) for p, o in fields.pop("aborted", [])]
        entry = topics.setdefault(topic, FetchableTopicResponse(
            topic=topic, topic_id=(topic_ids or {}).get(topic, bytes(16)), partitions=[]))
        entry.partitions.append(PartitionData(partition_index=partition, aborted_transactions=aborted, **fields))
    response = FetchResponse(error_code=error_code, responses=list(topics.values()))
    return FetchResponse.decode(response.encode(version), version)


def test_request_carries_settings_positions_and_groups_by_topic() -> None:
    planner, _ = make(fetch_wait_max_ms=250, fetch_min_bytes=7, fetch_max_bytes=9_000_000,
                      max_partition_fetch_bytes=4096, read_committed=False)
    planner.start("a", 0, 5, version=1, leader_epoch=3)
    planner.start("b", 2, 0, version=2)
    planner.start("a", 1, 9, version=3)
    plan = planner.build()
    assert plan is not None
    req = plan.request
    assert (req.max_wait_ms, req.min_bytes, req.max_bytes, req.isolation_level) == (250, 7, 9_000_000, 0)
    assert (req.replica_id, req.session_id, req.session_epoch) == (-1, 0, -1)
    layout = {t.topic: [(p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
                        for p in t.partitions] for t in req.topics}
    assert layout == {"a": [(0, 5, 4096, 3), (1, 9, 4096, -1)], "b": [(2, 0, 4096, -1)]}
    assert plan.partitions[("a", 1)] == (3, 9, 4096)
    assert plan.timeout_ms == 250 + 60_000
    assert plan.topic_ids_known is False
    for version in (4, 11, 12):  # the request encodes at the versions the broker actor may choose
        assert FetchRequest.decode(req.encode(version), version).topics[0].partitions[0].fetch_offset in (5, 0)


def test_one_fetch_in_flight_and_rotation_between_rounds() -> None:
    planner, _ = make()
    for p in range(3):
        planner.start("t", p, 0, version=1)
    first = planner.build()
    assert first is not None and planner.build() is None
    planner.handle_response(first, respond({}))
    second = planner.build()
    order1 = [p.partition for t in first.request.topics for p in t.partitions]
    order2 = [p.partition for t in second.request.topics for p in t.partitions]
    assert sorted(order1) == sorted(order2) == [0, 1, 2] and order1 != order2


def test_data_advances_the_position_and_cuts_the_truncated_tail() -> None:
    planner, _ = make()
    planner.start("t", 0, 0, version=4)
    plan = planner.build()
    full = batch(0, 3) + batch(3, 2)
    tail = batch(5, 4)[:30]  # the broker stopped mid-batch at the size limit
    outcome = planner.handle_response(plan, respond({("t", 0): {"high_watermark": 9, "records": full + tail}}))
    [sl] = outcome.slices
    assert (sl.topic, sl.partition, sl.version, sl.fetch_offset, sl.next_offset) == ("t", 0, 4, 0, 5)
    assert bytes(sl.records) == full and sl.high_watermark == 9
    assert planner.target("t", 0).offset == 5
    assert planner.build().request.topics[0].partitions[0].fetch_offset == 5


def test_a_huge_answer_beyond_partition_max_bytes_is_scanned_whole() -> None:
    # Tansu ignores partition_max_bytes: a 1 KiB limit still gets several MiB back.
    planner, _ = make(max_partition_fetch_bytes=1024)
    planner.start("t", 0, 0, version=1)
    plan = planner.build()
    records = b"".join(batch(i * 100, 100, size=400) for i in range(60))
    assert len(records) > 2_000_000
    outcome = planner.handle_response(plan, respond({("t", 0): {"high_watermark": 6000, "records": records}}))
    assert outcome.slices[0].next_offset == 6000 and len(outcome.slices[0].records) == len(records)


def test_answers_for_a_partition_seeked_or_stopped_meanwhile_are_dropped() -> None:
    planner, _ = make()
    planner.start("t", 0, 0, version=1)
    planner.start("t", 1, 0, version=1)
    planner.start("t", 2, 0, version=1)
    plan = planner.build()
    assert planner.seek("t", 0, 100, version=2)
    planner.stop("t", 1)
    data = {"high_watermark": 3, "records": batch(0, 3)}
    outcome = planner.handle_response(plan, respond({("t", 0): data, ("t", 1): data, ("t", 2): data}))
    assert [(s.partition, s.version) for s in outcome.slices] == [(2, 1)]
    assert outcome.dropped == 2
    assert planner.target("t", 0).offset == 100  # the stale answer did not move the sought position


def test_seek_with_an_older_version_is_refused() -> None:
    planner, _ = make()
    planner.start("t", 0, 0, version=5)
    assert not planner.seek("t", 0, 10, version=4)
    assert planner.target("t", 0).offset == 0
    assert not planner.seek("t", 9, 10, version=6)  # unknown partition


@pytest.mark.parametrize("bad", [-1, -2, -1000, 1.5, True])
def test_logical_or_invalid_offsets_are_rejected(bad) -> None:
    planner, _ = make()
    with pytest.raises(ValueError, match="absolute offset"):
        planner.start("t", 0, bad, version=1)


def test_topic_ids_map_answers_back_to_names() -> None:
    planner, _ = make()
    tid = bytes(range(16))
    planner.start("t", 0, 0, version=1, topic_id=tid)
    plan = planner.build()
    assert plan.topic_ids_known and plan.request.topics[0].topic_id == tid
    outcome = planner.handle_response(plan, respond({("t", 0): {"high_watermark": 2, "records": batch(0, 2)}},
                                                    version=13, topic_ids={"t": tid}))
    assert [(s.topic, s.next_offset) for s in outcome.slices] == [("t", 2)]


@pytest.mark.parametrize("code", ["NOT_LEADER_FOR_PARTITION", "FENCED_LEADER_EPOCH", "UNKNOWN_TOPIC_OR_PART",
                                  "UNKNOWN_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE"])
def test_leadership_errors_refresh_metadata_and_back_off(code: str) -> None:
    planner, clock = make(fetch_error_backoff_ms=500)
    planner.start("t", 0, 7, version=1)
    planner.start("t", 1, 0, version=1)
    plan = planner.build()
    outcome = planner.handle_response(plan, respond({("t", 0): {"error_code": ERROR_CODES[code]},
                                                     ("t", 1): {"high_watermark": 0}}))
    assert outcome.refresh_topics == {"t"} and outcome.leader_errors == [("t", 0, ERROR_CODES[code])]
    assert outcome.errors == [] and outcome.slices == []
    assert [t.partition for t in planner.fetchable()] == [1]
    assert planner.next_wakeup() == pytest.approx(100.5)
    clock.now = 100.5
    assert sorted(t.partition for t in planner.fetchable()) == [0, 1]
    assert planner.target("t", 0).offset == 7


@pytest.mark.parametrize("policy", ["earliest", "latest"])
def test_offset_out_of_range_asks_for_a_reset_and_waits(policy: str) -> None:
    planner, clock = make(auto_offset_reset=policy)
    planner.start("t", 0, 50, version=3)
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"error_code": KafkaError.OFFSET_OUT_OF_RANGE}}))
    [reset] = outcome.resets
    assert (reset.topic, reset.partition, reset.version, reset.offset, reset.policy) == ("t", 0, 3, 50, policy)
    assert planner.target("t", 0).state == AWAITING_RESET
    clock.now += 10
    assert planner.build() is None
    assert planner.seek("t", 0, 0, version=3)  # the actor resolved the reset with ListOffsets
    assert planner.target("t", 0).state == ACTIVE and planner.build() is not None


def test_offset_out_of_range_with_policy_error_stops_and_reports() -> None:
    planner, clock = make(auto_offset_reset="error")
    planner.start("t", 0, 50, version=3)
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"error_code": KafkaError.OFFSET_OUT_OF_RANGE}}))
    assert outcome.resets == []
    [err] = outcome.errors
    assert (err.code, err.offset, err.version) == (KafkaError._AUTO_OFFSET_RESET, 50, 3)
    assert planner.target("t", 0).state == STOPPED
    clock.now += 100
    assert planner.build() is None


def test_authorization_failure_is_reported_once_while_it_repeats() -> None:
    planner, clock = make()
    planner.start("t", 0, 0, version=1)
    reported = []
    for _ in range(3):
        outcome = planner.handle_response(planner.build(),
                                          respond({("t", 0): {"error_code": KafkaError.TOPIC_AUTHORIZATION_FAILED}}))
        reported += outcome.errors
        clock.now += 1
    assert [e.code for e in reported] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_unknown_errors_are_reported_every_time_with_backoff() -> None:
    planner, clock = make()
    planner.start("t", 0, 0, version=1)
    for _ in range(2):
        outcome = planner.handle_response(planner.build(), respond({("t", 0): {"error_code": KafkaError.INVALID_MSG}}))
        assert [e.code for e in outcome.errors] == [KafkaError.INVALID_MSG]
        assert planner.build() is None
        clock.now += 1


def test_classification_table() -> None:
    assert classify_fetch_error(KafkaError.NOT_LEADER_FOR_PARTITION).refresh
    assert classify_fetch_error(KafkaError.OFFSET_OUT_OF_RANGE).reset
    assert classify_fetch_error(KafkaError.TOPIC_AUTHORIZATION_FAILED).report_once
    assert classify_fetch_error(KafkaError.INVALID_REQUEST).report
    with pytest.raises(ValueError):
        classify_fetch_error(0)


def test_request_failure_backs_off_every_planned_partition() -> None:
    planner, clock = make(fetch_error_backoff_ms=200)
    planner.start("t", 0, 0, version=1)
    plan = planner.build()
    planner.handle_failure(plan, KafkaError._TRANSPORT)
    assert planner.in_flight is None and planner.build() is None
    clock.now += 0.2
    assert planner.build() is not None


def test_top_level_error_applies_to_every_partition() -> None:
    planner, _ = make()
    planner.start("t", 0, 0, version=1)
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"error_code": 0}}, version=11,
                                                              error_code=KafkaError.NOT_LEADER_FOR_PARTITION))
    assert outcome.refresh_topics == {"t"}


def test_flow_and_pause_gate_fetching() -> None:
    planner, _ = make()
    planner.start("t", 0, 0, version=1)
    planner.set_flow("t", 0, False)
    assert planner.build() is None and planner.next_wakeup() is None
    planner.set_flow("t", 0, True)
    planner.set_paused("t", 0, True)
    assert planner.build() is None
    planner.set_paused("t", 0, False)
    assert planner.build() is not None


def test_partition_eof_once_per_end_offset() -> None:
    planner, _ = make(enable_partition_eof=True)
    planner.start("t", 0, 0, version=1)
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"high_watermark": 3,
                                                                           "records": batch(0, 3)}}))
    assert outcome.slices[0].eof_offset == 3  # reached the end with this data: no extra round trip
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"high_watermark": 3}}))
    assert outcome.slices == []  # empty again at the same end: no second EOF, nothing to hand over
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"high_watermark": 5,
                                                                           "records": batch(3, 1)}}))
    assert outcome.slices[0].eof_offset == -1 and outcome.slices[0].next_offset == 4


def test_empty_answer_at_the_end_is_an_eof() -> None:
    planner, _ = make(enable_partition_eof=True)
    planner.start("t", 0, 4, version=1)
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"high_watermark": 4}}))
    assert [(s.eof_offset, len(s.records)) for s in outcome.slices] == [(4, 0)]


@pytest.mark.parametrize("read_committed", [False, True])
def test_empty_answer_below_the_end_is_no_eof(read_committed) -> None:
    """A broker leaves a partition's records empty once the response reached fetch.max.bytes (Kafka, Tansu
    and the mock cluster all do): its position is below the high watermark (the last stable offset under
    read_committed), so it has not reached the end; librdkafka compares only the position with that end."""
    planner, _ = make(enable_partition_eof=True, read_committed=read_committed)
    planner.start("t", 0, 0, version=1)
    planner.start("t", 1, 0, version=1)
    outcome = planner.handle_response(planner.build(), respond({
        ("t", 0): {"high_watermark": 3, "last_stable_offset": 3, "records": batch(0, 3)},
        ("t", 1): {"high_watermark": 9, "last_stable_offset": 9},
    }))
    assert [(s.partition, s.next_offset, s.eof_offset) for s in outcome.slices] == [(0, 3, 3)]
    assert planner.target("t", 1).offset == 0
    outcome = planner.handle_response(planner.build(), respond({
        ("t", 1): {"high_watermark": 9, "last_stable_offset": 9, "records": batch(0, 9)}}))
    assert [(s.partition, s.next_offset, s.eof_offset) for s in outcome.slices] == [(1, 9, 9)]


def test_read_committed_uses_the_last_stable_offset_and_passes_aborted_transactions() -> None:
    planner, _ = make(enable_partition_eof=True)
    planner.start("t", 0, 0, version=1)
    records = (batch(0, 2, producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)
               + bytes(build_control_batch(False, producer_id=8, producer_epoch=0, base_offset=2)))
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {
        "high_watermark": 10, "last_stable_offset": 3, "records": records, "aborted": [(8, 0)]}}))
    [sl] = outcome.slices
    assert sl.aborted == [(8, 0)] and sl.eof_offset == 3
    decoded = SliceDecoder(planner.settings).decode(sl)
    assert decoded.messages == 0 and decoded.skipped_aborted == 2 and decoded.entries == 2  # skip, EOF


def test_no_eof_events_unless_enabled() -> None:
    planner, _ = make()
    planner.start("t", 0, 0, version=1)
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"high_watermark": 0}}))
    assert outcome.slices == []


def test_only_a_truncated_entry_grows_the_partition_fetch_size() -> None:
    planner, _ = make(max_partition_fetch_bytes=100)
    planner.start("t", 0, 0, version=1)
    big = batch(0, 1, size=1000)
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"high_watermark": 1,
                                                                           "records": big[:100]}}))
    assert outcome.slices == [] and outcome.errors == []
    assert planner.build().request.topics[0].partitions[0].partition_max_bytes == len(big)


def test_a_truncated_entry_that_still_does_not_fit_is_reported() -> None:
    planner, _ = make(max_partition_fetch_bytes=100)
    planner.start("t", 0, 0, version=1)
    big = batch(0, 1, size=1000)
    planner.handle_response(planner.build(), respond({("t", 0): {"records": big[:100]}}))
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"records": big[:100]}}))
    assert [e.code for e in outcome.errors] == [KafkaError.MSG_SIZE_TOO_LARGE]


def test_malformed_record_set_is_reported_not_raised() -> None:
    planner, _ = make()
    planner.start("t", 0, 0, version=1)
    garbage = (0).to_bytes(8, "big") + (3).to_bytes(4, "big") + b"\x02" * 20
    outcome = planner.handle_response(planner.build(), respond({("t", 0): {"records": garbage}}))
    assert [e.code for e in outcome.errors] == [KafkaError._BAD_MSG] and planner.target("t", 0).offset == 0


def test_a_partition_stopped_while_fetching_shortens_the_long_poll_until_it_restarts() -> None:
    """A ctoppar moving host stops its partition and starts it again moments later, often before its end (what it
    had fetched but not handed over is fetched again): the others' long-poll at their end must not hold it."""
    planner, clock = make(fetch_wait_max_ms=500)
    planner.start("t", 0, 0, version=1)
    planner.start("t", 1, 0, version=1)
    plan = planner.build()
    planner.handle_response(plan, respond({("t", 0): {"high_watermark": 4, "records": batch(0, 4)},
                                           ("t", 1): {"high_watermark": 0, "records": b""}}))
    assert planner.build().request.max_wait_ms == 500  # both at their end: the broker may hold it
    planner.handle_response(planner.in_flight, respond({}))
    planner.stop("t", 0)  # everything fetched, but its successor starts from what the app was handed
    plan = planner.build()
    assert [p.partition for t in plan.request.topics for p in t.partitions] == [1]
    assert plan.request.max_wait_ms == HELD_WAIT_MS
    planner.handle_response(plan, respond({}))
    planner.start("t", 0, 2, version=2)  # the restart: long-polls are back to normal
    assert planner.build().request.max_wait_ms == 500
    planner.handle_response(planner.in_flight, respond({}))
    # a partition stopped for good stops shortening them after RESTART_WINDOW_S; a paused one never did
    planner.stop("t", 0)
    clock.advance(RESTART_WINDOW_S - 0.01)
    assert planner.build().request.max_wait_ms == HELD_WAIT_MS
    planner.handle_response(planner.in_flight, respond({}))
    clock.advance(0.02)
    assert planner.build().request.max_wait_ms == 500
    planner.handle_response(planner.in_flight, respond({}))
    planner.start("t", 2, 0, version=1)
    planner.set_paused("t", 2, True)
    planner.stop("t", 2)
    assert planner.build().request.max_wait_ms == 500


def test_a_flow_closed_partition_with_data_waiting_shortens_the_long_poll() -> None:
    planner, _ = make(fetch_wait_max_ms=500)
    planner.start("t", 0, 0, version=1)
    planner.start("t", 1, 0, version=1)
    plan = planner.build()
    planner.handle_response(plan, respond({("t", 0): {"high_watermark": 10, "records": batch(0, 4)},
                                           ("t", 1): {"high_watermark": 0, "records": b""}}))
    planner.set_flow("t", 0, False)  # 6 more records wait on the broker, but the toppar is full
    plan = planner.build()
    assert [p.partition for t in plan.request.topics for p in t.partitions] == [1]
    assert plan.request.max_wait_ms == HELD_WAIT_MS  # the flow may open again while this one is held
    planner.handle_response(plan, respond({("t", 1): {"high_watermark": 0, "records": b""}}))
    planner.set_flow("t", 0, True)
    plan = planner.build()
    assert plan.request.max_wait_ms == 500
    planner.handle_response(plan, respond({("t", 0): {"high_watermark": 10, "records": batch(4, 6)},
                                           ("t", 1): {"high_watermark": 0, "records": b""}}))
    planner.set_flow("t", 0, False)  # closed, but nothing waits for it on the broker: a full long-poll
    assert planner.build().request.max_wait_ms == 500
