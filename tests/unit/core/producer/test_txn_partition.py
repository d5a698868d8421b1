"""A transactional partition core: nothing is sent until the partition is in the transaction (the toppar lifts
``txn_hold``), data that cannot join is failed, and the idempotence rules inside a transaction (an unknown
producer id fails the transaction with a bump instead of a retry; no gap-less fatality)."""

from __future__ import annotations

from support.clock import FakeClock

from kqactors.core.producer.partition import PartitionProducer
from kqactors.core.producer.settings import ProducerSettings
from kqactors.errors import KafkaError


def make(**overrides):
    clock = FakeClock(50.0)
    settings = ProducerSettings(idempotence=True, transactional=True, linger_ms=0, batch_num_messages=2,
                                **overrides)
    core = PartitionProducer("t", 0, settings, clock=clock, rand=lambda: 0.5)
    core.set_leader(1)
    core.set_pid(7, 0)
    return core, clock


def msgs(n):
    return [(0, None, b"v", None) for _ in range(n)]


def test_settings_from_a_transactional_config():
    settings = ProducerSettings.from_config({"transactional.id": "tx", "linger.ms": 5})
    assert settings.transactional and settings.idempotence and settings.acks == -1
    assert not ProducerSettings.from_config({"transactional.id": ""}).transactional


def test_nothing_is_sent_until_the_partition_is_in_the_transaction():
    core, clock = make()
    assert core.txn_hold and core.idle
    core.enqueue(1, msgs(2), clock())
    assert core.next_batch() is None and not core.idle
    core.txn_hold = False
    batch = core.next_batch()
    assert batch is not None and (batch.producer_id, batch.epoch, batch.base_seq) == (7, 0, 0)
    core.on_result(batch.batch_id, 0, base_offset=10)
    assert core.idle


def test_data_refused_by_the_transaction_fails_without_a_sequence_gap():
    core, clock = make()
    core.enqueue(1, msgs(3), clock())
    core.fail_queued(KafkaError._PURGE_QUEUE)
    effects = core.take_effects()
    assert [(r[1], r[2]) for r in effects.reports] == [(3, KafkaError._PURGE_QUEUE)]
    assert effects.bump_reason is None and core.idle


def test_an_unknown_producer_id_fails_the_transaction_with_a_bump():
    core, clock = make()
    core.txn_hold = False
    core.enqueue(1, msgs(2), clock())
    batch = core.next_batch()
    core.on_result(batch.batch_id, KafkaError.UNKNOWN_PRODUCER_ID)
    effects = core.take_effects()
    assert [(r[1], r[2]) for r in effects.reports] == [(2, KafkaError.UNKNOWN_PRODUCER_ID)]
    assert effects.bump_reason is not None and effects.fatal is None


def test_a_permanent_error_is_the_transactions_even_with_the_gapless_guarantee():
    core, clock = make(gapless=True)
    core.txn_hold = False
    core.enqueue(1, msgs(2), clock())
    batch = core.next_batch()
    core.on_result(batch.batch_id, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    effects = core.take_effects()
    assert effects.fatal is None and effects.bump_reason is not None
