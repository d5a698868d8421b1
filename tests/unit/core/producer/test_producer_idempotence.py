"""Idempotent producer rules on the partition core: sequences, in-flight cap, strict-order retries,
KIP-360 drain + epoch bump, fatal desynchronisation, duplicate sequences, implicit acks."""

from __future__ import annotations

from support.clock import FakeClock

from kqactors.core.producer.batch import wrap_seq
from kqactors.core.producer.partition import PartitionProducer
from kqactors.core.producer.settings import ProducerSettings
from kqactors.errors import KafkaError


def make(**overrides):
    clock = FakeClock(50.0)
    settings = ProducerSettings(idempotence=True, linger_ms=0, batch_num_messages=2, **overrides)
    core = PartitionProducer("t", 0, settings, clock=clock, rand=lambda: 0.5)
    core.set_leader(1)
    return core, clock


def msgs(n):
    return [(0, None, b"v", None) for _ in range(n)]


def send_all(core):
    out = []
    while (batch := core.next_batch()) is not None:
        out.append(batch)
    return out


def test_nothing_is_sent_before_a_producer_id_arrives():
    core, clock = make()
    core.enqueue(1, msgs(2), clock())
    assert core.next_batch() is None
    core.set_pid(1000, 0)
    batch = core.next_batch()
    assert (batch.producer_id, batch.epoch, batch.base_seq) == (1000, 0, 0)


def test_sequences_follow_batches_and_at_most_five_in_flight():
    core, clock = make()
    core.set_pid(7, 3)
    core.enqueue(1, msgs(20), clock())
    batches = send_all(core)
    assert len(batches) == 5
    assert [b.base_seq for b in batches] == [0, 2, 4, 6, 8]
    core.on_result(batches[0].batch_id, 0, base_offset=0)
    more = send_all(core)
    assert [b.base_seq for b in more] == [10]


def test_timed_out_unsent_messages_leave_no_sequence_gap():
    core, clock = make(message_timeout_ms=1000)
    core.set_pid(7, 0)
    core.set_leader(-1)
    core.enqueue(1, msgs(2), clock())
    clock.now += 1.5
    core.expire()
    assert core.take_effects().reports == [(1, 2, KafkaError._MSG_TIMED_OUT, -1, -1)]
    core.set_leader(1)
    core.enqueue(3, msgs(2), clock())
    assert core.next_batch().base_seq == 0
    assert core.take_effects().bump_reason is None


def test_retriable_error_drains_then_resends_in_order_with_same_sequences():
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(6), clock())
    b1, b2, b3 = send_all(core)
    core.on_result(b1.batch_id, KafkaError.NOT_ENOUGH_REPLICAS)
    clock.now += 5
    core.enqueue(7, msgs(2), clock())
    assert core.next_batch() is None  # draining: b2, b3 still in flight
    core.on_result(b2.batch_id, KafkaError.NOT_ENOUGH_REPLICAS)
    core.on_result(b3.batch_id, KafkaError.NOT_ENOUGH_REPLICAS)
    clock.now += 5
    resent = send_all(core)
    assert [(b.first_msgid, b.base_seq) for b in resent] == [(1, 0), (3, 2), (5, 4), (7, 6)]
    assert all(not b.needs_restamp for b in resent)
    assert core.take_effects().bump_reason is None


def test_out_of_order_behind_a_failed_batch_triggers_bump_and_renumbering():
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(6), clock())
    b1, b2, b3 = send_all(core)
    for batch in (b1, b2, b3):
        batch.payload = b"encoded"  # the actor encoded them
    core.on_result(b1.batch_id, KafkaError.MSG_SIZE_TOO_LARGE)  # permanent: gap at seq 0..1
    effects = core.take_effects()
    assert effects.reports == [(1, 2, KafkaError.MSG_SIZE_TOO_LARGE, -1, -1)]
    assert effects.bump_reason == "message sequence gap"
    core.on_result(b2.batch_id, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER)
    core.on_result(b3.batch_id, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER)
    effects = core.take_effects()
    assert effects.reports == [] and effects.fatal is None
    assert core.in_flight_count == 0
    clock.now += 5
    assert core.next_batch() is None  # waiting for the bumped epoch
    core.set_pid(-1, -1)  # main's drain signal changes nothing here
    core.set_pid(7, 1)
    resent = send_all(core)
    assert [(b.first_msgid, b.epoch, b.base_seq) for b in resent] == [(3, 1, 0), (5, 1, 2)]
    assert all(b.needs_restamp for b in resent)
    assert all(b.retries == 0 for b in resent)  # OUT_OF_ORDER behind a failure does not use up retries


def test_head_of_line_out_of_order_is_fatal_and_purges_the_queue():
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(2), clock())
    b1 = core.next_batch()
    core.set_leader(-1)
    core.enqueue(3, msgs(1), clock())
    core.on_result(b1.batch_id, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER)
    effects = core.take_effects()
    assert effects.fatal is not None and effects.fatal[0] == KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert effects.reports == [(1, 2, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, -1),
                               (3, 1, KafkaError._PURGE_QUEUE, -1, -1)]
    core.set_leader(1)
    core.enqueue(4, msgs(1), clock())
    assert core.next_batch() is None
    assert core.take_effects().reports == [(4, 1, KafkaError._FATAL, -1, -1)]


def test_unknown_producer_id_on_first_batch_bumps_epoch_and_retries():
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(2), clock())
    b1 = core.next_batch()
    core.on_result(b1.batch_id, KafkaError.UNKNOWN_PRODUCER_ID)
    effects = core.take_effects()
    assert effects.bump_reason == "unknown producer id" and effects.reports == []
    core.set_pid(7, 1)
    clock.now += 5
    again = core.next_batch()
    assert (again.first_msgid, again.epoch, again.base_seq, again.retries) == (1, 1, 0, 0)


def test_unknown_producer_id_on_a_retried_batch_is_fatal():
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(2), clock())
    b1 = core.next_batch()
    core.on_result(b1.batch_id, KafkaError.REQUEST_TIMED_OUT)
    clock.now += 5
    again = core.next_batch()
    assert again is b1 and again.retries == 1
    core.on_result(again.batch_id, KafkaError.UNKNOWN_PRODUCER_ID)
    effects = core.take_effects()
    assert effects.fatal is not None and effects.fatal[0] == KafkaError.UNKNOWN_PRODUCER_ID


def test_duplicate_sequence_counts_as_delivered_without_offset():
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(2), clock())
    b1 = core.next_batch()
    core.on_result(b1.batch_id, KafkaError.DUPLICATE_SEQUENCE_NUMBER)
    effects = core.take_effects()
    assert effects.reports == [(1, 2, 0, -1, -1)] and effects.fatal is None


def test_later_success_implicitly_acks_an_earlier_batch_that_got_no_answer():
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(4), clock())
    b1, b2 = send_all(core)
    core.on_result(b1.batch_id, KafkaError._TIMED_OUT)  # no answer: may have been written
    core.on_result(b2.batch_id, 0, base_offset=10)     # broker accepted seq 2..3, so 0..1 is in
    effects = core.take_effects()
    assert sorted(effects.reports) == [(1, 2, 0, -1, -1), (3, 2, 0, 10, -1)]
    assert core.pending_count == 0 and effects.fatal is None
    core.enqueue(5, msgs(2), clock())
    b3 = core.next_batch()
    assert b3.base_seq == 4  # the ack sequence followed the implicit ack
    core.on_result(b3.batch_id, 0, base_offset=12)
    assert core.take_effects().fatal is None


def test_transport_failure_then_later_success_implicitly_acks():
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(6), clock())
    b1, b2, b3 = send_all(core)
    core.on_result(b1.batch_id, KafkaError._TRANSPORT)  # the connection went after the request was written
    core.on_result(b2.batch_id, 0, base_offset=2)
    effects = core.take_effects()
    assert sorted(effects.reports) == [(1, 2, 0, -1, -1), (3, 2, 0, 2, -1)] and effects.fatal is None
    core.on_result(b3.batch_id, 0, base_offset=4)
    effects = core.take_effects()
    assert effects.reports == [(5, 2, 0, 4, -1)] and effects.fatal is None and core.idle


def _error_response_then_later_successes(error):
    """b1 gets an error response while b2, b3 are in flight; a lenient broker (the mock cluster) accepts b2 and
    b3 anyway. b1 was not written: it must be resent with its own sequences, never acknowledged implicitly."""
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(6), clock())
    b1, b2, b3 = send_all(core)
    core.on_result(b1.batch_id, error)
    core.on_result(b2.batch_id, 0, base_offset=0)
    core.on_result(b3.batch_id, 0, base_offset=2)
    effects = core.take_effects()
    assert effects.fatal is None, effects.fatal
    assert effects.bump_reason is None
    assert sorted(effects.reports) == [(3, 2, 0, 0, -1), (5, 2, 0, 2, -1)]  # nothing said about b1 yet
    assert core.pending_count == 2
    clock.now += 5
    again = core.next_batch()
    assert (again.first_msgid, again.base_seq, again.epoch) == (1, 0, 0) and not again.needs_restamp
    core.on_result(again.batch_id, 0, base_offset=4)
    effects = core.take_effects()
    assert effects.reports == [(1, 2, 0, 4, -1)] and effects.fatal is None
    # the late success did not move the ack sequence back: the next batch goes on from 6
    core.enqueue(7, msgs(2), clock())
    b4 = core.next_batch()
    assert b4.base_seq == 6
    core.on_result(b4.batch_id, 0, base_offset=6)
    effects = core.take_effects()
    assert effects.reports == [(7, 2, 0, 6, -1)] and effects.fatal is None and core.idle
    return core


def test_error_response_then_later_success_is_resent_not_implicitly_acked():
    for error in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT,
                  KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.LEADER_NOT_AVAILABLE):
        _error_response_then_later_successes(error)


def test_error_response_whose_batch_was_written_is_deduplicated_on_resend():
    """A real broker that wrote b1 despite REQUEST_TIMED_OUT accepts b2, then answers b1's resend as a duplicate."""
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(4), clock())
    b1, b2 = send_all(core)
    core.on_result(b1.batch_id, KafkaError.REQUEST_TIMED_OUT)
    core.on_result(b2.batch_id, 0, base_offset=2)
    clock.now += 5
    again = core.next_batch()
    assert again is b1 and again.base_seq == 0
    core.on_result(again.batch_id, KafkaError.DUPLICATE_SEQUENCE_NUMBER)
    effects = core.take_effects()
    assert sorted(effects.reports) == [(1, 2, 0, -1, -1), (3, 2, 0, 2, -1)] and effects.fatal is None
    assert core.idle


def test_error_response_then_out_of_order_on_a_strict_broker_bumps_the_epoch():
    """A real broker did not write b1 (error response) and refuses b2: skipped sequence numbers, not fatal."""
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(4), clock())
    b1, b2 = send_all(core)
    core.on_result(b1.batch_id, KafkaError.REQUEST_TIMED_OUT)
    core.on_result(b2.batch_id, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER)
    effects = core.take_effects()
    assert effects.fatal is None and effects.bump_reason == "skipped sequence numbers"
    core.set_pid(7, 1)
    clock.now += 5
    resent = send_all(core)
    assert [(b.first_msgid, b.epoch, b.base_seq) for b in resent] == [(1, 1, 0), (3, 1, 2)]


def test_success_after_a_failed_batch_is_not_fatal():
    """b1 failed for good (a gap, an epoch bump asked for); b2, already in flight, succeeds on a broker that
    accepted it: librdkafka's gap rule, no 'succeeded while an error was expected'."""
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(4), clock())
    b1, b2 = send_all(core)
    core.on_result(b1.batch_id, KafkaError.MSG_SIZE_TOO_LARGE)
    core.on_result(b2.batch_id, 0, base_offset=0)
    effects = core.take_effects()
    assert effects.fatal is None and effects.bump_reason == "message sequence gap"
    assert effects.reports == [(1, 2, KafkaError.MSG_SIZE_TOO_LARGE, -1, -1), (3, 2, 0, 0, -1)]


def test_success_where_an_error_was_expected_without_a_gap_is_fatal():
    """The guard stays: every earlier message acknowledged, yet a batch succeeds at the sequence an error was
    expected at (the state and the broker disagree)."""
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(4), clock())
    b1, b2 = send_all(core)
    core.idemp.next_err_seq = 2  # as if an error had been noted at 0..1 though b1 succeeds
    core.on_result(b1.batch_id, 0, base_offset=0)
    core.idemp.next_ack_seq, core.idemp.next_err_seq = 0, 2
    core.on_result(b2.batch_id, 0, base_offset=2)
    effects = core.take_effects()
    assert effects.fatal is not None and effects.fatal[0] == KafkaError._INCONSISTENT


def test_leader_change_waits_for_old_leader_in_flight():
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(2), clock())
    b1 = core.next_batch()
    core.set_leader(2)
    core.enqueue(3, msgs(2), clock())
    assert core.next_batch() is None
    core.on_result(b1.batch_id, 0, base_offset=0)
    b2 = core.next_batch()
    assert b2.broker_id == 2 and b2.base_seq == 2


def test_gapless_permanent_error_is_fatal():
    core, clock = make(gapless=True)
    core.set_pid(7, 0)
    core.enqueue(1, msgs(2), clock())
    b1 = core.next_batch()
    core.on_result(b1.batch_id, KafkaError.MSG_SIZE_TOO_LARGE)
    effects = core.take_effects()
    assert effects.fatal is not None and effects.fatal[0] == KafkaError._GAPLESS_GUARANTEE


def test_sequence_wraps_at_int32():
    assert wrap_seq(2**31 - 1 + 1) == 0
    assert wrap_seq(-1) == 2**31 - 1
    core, clock = make()
    core.set_pid(7, 0)
    core.idemp.next_seq = 2**31 - 1
    core.enqueue(1, msgs(2), clock())
    b1 = core.next_batch()
    assert b1.base_seq == 2**31 - 1 and b1.next_seq == 1
    assert core.idemp.next_seq == 1


def test_epoch_bump_fails_a_batch_a_later_success_was_accepted_behind_instead_of_renumbering_it():
    """b1 got an error response, b2 then succeeded: b1 is in the log on a strict broker, not on a lenient one.
    Resent under its own sequences either is fine; renumbered under a new epoch it could be written twice, so a
    bump before its resend fails it with its error (possibly persisted), and renumbers only the others."""
    core, clock = make()
    core.set_pid(7, 0)
    core.enqueue(1, msgs(6), clock())
    b1, b2, b3 = send_all(core)
    core.on_result(b1.batch_id, KafkaError.REQUEST_TIMED_OUT)
    core.on_result(b2.batch_id, 0, base_offset=0)
    core.on_result(b3.batch_id, KafkaError.MSG_SIZE_TOO_LARGE)  # a gap: the epoch must be bumped
    effects = core.take_effects()
    assert effects.bump_reason == "message sequence gap" and effects.fatal is None
    assert effects.reports == [(3, 2, 0, 0, -1), (5, 2, KafkaError.MSG_SIZE_TOO_LARGE, -1, -1)]
    core.enqueue(7, msgs(2), clock())
    core.set_pid(7, 1)
    assert core.take_effects().reports == [(1, 2, KafkaError.REQUEST_TIMED_OUT, -1, -1)]
    clock.now += 5
    resent = send_all(core)
    assert [(b.first_msgid, b.epoch, b.base_seq) for b in resent] == [(7, 1, 0)]


def test_a_batch_once_unanswered_stays_possibly_persisted_across_its_retries():
    """b1's first request got no answer (maybe written); its resend never left the client. b2, sent behind it,
    succeeds: b1's first attempt is the one the broker has, so b1 is acknowledged implicitly, not sent again."""
    core, clock = make(max_in_flight=5)
    core.set_pid(7, 0)
    core.enqueue(1, msgs(2), clock())
    b1 = core.next_batch()
    core.on_result(b1.batch_id, KafkaError._TIMED_OUT)
    clock.now += 5
    assert core.next_batch() is b1
    core.enqueue(3, msgs(2), clock())
    core.on_result(b1.batch_id, KafkaError._TRANSPORT, request_sent=False)
    core.take_effects()
    clock.now += 5
    again = core.next_batch()
    assert again is b1
    b2 = core.next_batch()
    assert b2 is not None and b2.first_msgid == 3
    core.on_result(b1.batch_id, KafkaError._TRANSPORT, request_sent=False)  # the connection went again
    core.on_result(b2.batch_id, 0, base_offset=2)
    effects = core.take_effects()
    assert sorted(effects.reports) == [(1, 2, 0, -1, -1), (3, 2, 0, 2, -1)] and effects.fatal is None
    assert core.idle
