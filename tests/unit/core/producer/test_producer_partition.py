"""PartitionProducer on a fake clock: batching, linger, flush, retries, timeouts, purge."""

from __future__ import annotations

import pytest
from support.clock import FakeClock

from kqactors.core.producer.partition import INFLIGHT_GRACE_S, PartitionProducer
from kqactors.core.producer.settings import ProducerSettings
from kqactors.errors import KafkaError


def make(**overrides):
    clock = FakeClock(1000.0)
    settings = ProducerSettings(**overrides)
    core = PartitionProducer("t", 0, settings, clock=clock, rand=lambda: 0.5)
    core.set_leader(1)
    return core, clock


def msgs(n, size=10):
    return [(0, None, b"x" * size, None) for _ in range(n)]


def drain_batches(core):
    out = []
    while (batch := core.next_batch()) is not None:
        out.append(batch)
    return out


def test_linger_holds_messages_until_it_expires():
    core, clock = make(linger_ms=50)
    core.enqueue(1, msgs(3), clock())
    assert core.next_batch() is None
    assert core.next_wakeup() == pytest.approx(clock() + 0.05)
    clock.advance(0.049)
    assert core.next_batch() is None
    clock.advance(0.002)
    batch = core.next_batch()
    assert batch is not None and (batch.first_msgid, batch.count) == (1, 3)


def test_batch_num_messages_makes_a_batch_ready_and_limits_it():
    core, clock = make(linger_ms=1000, batch_num_messages=4)
    core.enqueue(1, msgs(10), clock())
    batches = drain_batches(core)
    assert [(b.first_msgid, b.count) for b in batches] == [(1, 4), (5, 4)]
    assert core.queue_count == 2  # the tail still lingers


def test_batch_size_limits_bytes_but_always_takes_one_message():
    core, clock = make(linger_ms=0, batch_size=200)
    core.enqueue(1, msgs(3, size=100) + msgs(1, size=1000), clock())
    batches = drain_batches(core)
    counts = [b.count for b in batches]
    assert sum(counts) == 4
    assert all(b.size <= 200 or b.count == 1 for b in batches)
    assert batches[-1].count == 1 and batches[-1].size > 1000


def test_flush_ignores_linger_only_for_messages_already_queued():
    core, clock = make(linger_ms=10_000)
    core.enqueue(1, msgs(2), clock())
    core.request_flush()
    core.enqueue(3, msgs(2), clock())
    batch = core.next_batch()
    assert batch is not None and batch.first_msgid == 1
    # msgids 3, 4 arrived after the flush request: they wait for linger.
    assert core.next_batch() is None or core.queue_count


def test_no_leader_no_sending_and_success_reports_offsets():
    core, clock = make(linger_ms=0)
    core.set_leader(-1)
    core.enqueue(1, msgs(2), clock())
    assert core.next_batch() is None
    core.set_leader(3)
    batch = core.next_batch()
    assert batch.broker_id == 3
    assert core.on_result(batch.batch_id, 0, base_offset=42, log_append_time=-1)
    assert core.take_effects().reports == [(1, 2, 0, 42, -1)]
    assert core.pending_count == 0
    assert core.on_result(batch.batch_id, 0) is False  # a stale duplicate result is ignored


def test_retriable_error_retries_with_backoff_and_counts():
    core, clock = make(linger_ms=0, retries=2, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    core.enqueue(1, msgs(1), clock())
    batch = core.next_batch()
    core.on_result(batch.batch_id, KafkaError.REQUEST_TIMED_OUT)
    assert core.take_effects().reports == []
    assert core.next_batch() is None  # backing off 100 ms (jitter fixed at 1.0)
    clock.advance(0.101)
    again = core.next_batch()
    assert again is batch and again.retries == 1
    core.on_result(again.batch_id, KafkaError.REQUEST_TIMED_OUT)
    clock.advance(0.199)
    assert core.next_batch() is None  # second backoff doubled to 200 ms
    clock.advance(0.002)
    third = core.next_batch()
    assert third.retries == 2
    core.on_result(third.batch_id, KafkaError.REQUEST_TIMED_OUT)
    assert core.take_effects().reports == [(1, 1, KafkaError.REQUEST_TIMED_OUT, -1, -1)]


def test_retries_zero_fails_on_first_error():
    core, clock = make(linger_ms=0, retries=0)
    core.enqueue(1, msgs(1), clock())
    batch = core.next_batch()
    core.on_result(batch.batch_id, KafkaError.NOT_ENOUGH_REPLICAS)
    assert core.take_effects().reports == [(1, 1, KafkaError.NOT_ENOUGH_REPLICAS, -1, -1)]


def test_refresh_errors_request_metadata_and_do_not_use_up_retries():
    core, clock = make(linger_ms=0, retries=0)
    core.enqueue(1, msgs(1), clock())
    batch = core.next_batch()
    core.on_result(batch.batch_id, KafkaError.NOT_LEADER_FOR_PARTITION)
    effects = core.take_effects()
    assert effects.refresh_reason and effects.reports == []
    clock.advance(1)
    assert core.next_batch() is batch and batch.retries == 0


def test_permanent_error_fails_batch_immediately():
    core, clock = make(linger_ms=0)
    core.enqueue(1, msgs(3), clock())
    batch = core.next_batch()
    core.on_result(batch.batch_id, KafkaError.MSG_SIZE_TOO_LARGE)
    assert core.take_effects().reports == [(1, 3, KafkaError.MSG_SIZE_TOO_LARGE, -1, -1)]
    assert core.pending_count == 0


def test_message_timeout_in_queue_without_leader():
    core, clock = make(linger_ms=0, message_timeout_ms=1000)
    core.set_leader(-1)
    core.enqueue(1, msgs(2), clock())
    clock.advance(0.5)
    core.enqueue(3, msgs(1), clock())
    assert core.next_wakeup() == pytest.approx(clock() + 0.5)
    clock.advance(0.5)
    core.expire()
    assert core.take_effects().reports == [(1, 2, KafkaError._MSG_TIMED_OUT, -1, -1)]
    clock.advance(0.5)
    core.expire()
    assert core.take_effects().reports == [(3, 1, KafkaError._MSG_TIMED_OUT, -1, -1)]


def test_message_times_out_while_retrying():
    core, clock = make(linger_ms=0, message_timeout_ms=300, retry_backoff_ms=100)
    core.enqueue(1, msgs(1), clock())
    batch = core.next_batch()
    for _ in range(2):
        core.on_result(batch.batch_id, KafkaError.NOT_ENOUGH_REPLICAS)
        clock.advance(0.15)
        batch = core.next_batch() or batch
    assert core.take_effects().reports == []
    clock.advance(0.2)
    core.expire()
    core.on_result(batch.batch_id, KafkaError.NOT_ENOUGH_REPLICAS)
    reports = core.take_effects().reports
    assert reports == [(1, 1, KafkaError._MSG_TIMED_OUT, -1, -1)]


def test_retriable_error_after_deadline_becomes_msg_timed_out():
    core, clock = make(linger_ms=0, message_timeout_ms=100)
    core.enqueue(1, msgs(1), clock())
    batch = core.next_batch()
    clock.advance(0.2)
    core.on_result(batch.batch_id, KafkaError._TIMED_OUT)
    assert core.take_effects().reports == [(1, 1, KafkaError._MSG_TIMED_OUT, -1, -1)]


def test_stuck_in_flight_batch_is_failed_locally():
    core, clock = make(linger_ms=0, message_timeout_ms=100)
    core.enqueue(1, msgs(1), clock())
    core.next_batch()
    clock.advance(0.1 + INFLIGHT_GRACE_S)
    core.expire()
    assert core.take_effects().reports == [(1, 1, KafkaError._MSG_TIMED_OUT, -1, -1)]
    assert core.in_flight_count == 0


def test_zero_message_timeout_means_infinite():
    core, clock = make(linger_ms=0, message_timeout_ms=0)
    core.set_leader(-1)
    core.enqueue(1, msgs(1), clock())
    clock.advance(10_000_000)
    core.expire()
    assert core.take_effects().reports == []


def test_purge_queue_and_in_flight():
    core, clock = make(linger_ms=0, batch_num_messages=2)
    core.enqueue(1, msgs(2), clock())
    batch = core.next_batch()
    core.set_leader(-1)
    core.enqueue(3, msgs(3), clock())
    core.purge(in_queue=True, in_flight=False)
    assert core.take_effects().reports == [(3, 3, KafkaError._PURGE_QUEUE, -1, -1)]
    core.purge(in_queue=False, in_flight=True)
    assert core.take_effects().reports == [(1, 2, KafkaError._PURGE_INFLIGHT, -1, -1)]
    assert core.on_result(batch.batch_id, 0) is False


def test_non_idempotent_retry_goes_before_newer_messages():
    core, clock = make(linger_ms=0, batch_num_messages=1)
    core.enqueue(1, msgs(3), clock())
    first, second, third = drain_batches(core)
    core.on_result(second.batch_id, KafkaError.REQUEST_TIMED_OUT)
    core.on_result(first.batch_id, KafkaError.REQUEST_TIMED_OUT)
    core.enqueue(4, msgs(1), clock())
    clock.advance(1)
    order = [b.first_msgid for b in drain_batches(core)]
    assert order == [1, 2, 4]


def test_every_message_gets_exactly_one_report_under_mixed_outcomes():
    core, clock = make(linger_ms=0, batch_num_messages=3, retries=1, message_timeout_ms=5000)
    core.enqueue(1, msgs(30), clock())
    errors = [0, KafkaError.REQUEST_TIMED_OUT, KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.NOT_LEADER_FOR_PARTITION]
    step = 0
    reported: dict[int, int] = {}
    for _ in range(200):
        for batch in drain_batches(core):
            core.on_result(batch.batch_id, errors[step % len(errors)])
            step += 1
        clock.advance(0.5)
        core.expire()
        for first, count, err, _off, _ts in core.take_effects().reports:
            for msgid in range(first, first + count):
                assert msgid not in reported
                reported[msgid] = err
        if core.pending_count == 0:
            break
    assert sorted(reported) == list(range(1, 31))
