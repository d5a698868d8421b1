"""PartitionProducer.recover: a restarted toppar resends its predecessor's batches with the same sequences."""

from __future__ import annotations

from kqactors.core.producer.partition import PartitionProducer
from kqactors.core.producer.settings import ProducerSettings
from kqactors.errors import KafkaError


def make() -> PartitionProducer:
    core = PartitionProducer("t", 0, ProducerSettings(idempotence=True, linger_ms=0, batch_num_messages=3))
    core.set_leader(1)
    return core


def messages(n: int) -> list:
    return [(0, None, b"v%d" % i, None) for i in range(n)]


def test_recovered_batches_keep_bounds_and_sequences_then_numbering_goes_on() -> None:
    core = make()
    assert core.recover(7, 2, 12, [[4, 2, 7], [6, 3, 9]])
    core.set_pid(7, 2)  # main's LEADER with the same identity changes nothing
    core.enqueue(4, messages(8), 0.0)
    sent = []
    while (batch := core.next_batch(1.0)) is not None:
        sent.append((batch.first_msgid, batch.count, batch.producer_id, batch.epoch, batch.base_seq))
        core.on_result(batch.batch_id, 0, 100)
    assert sent == [(4, 2, 7, 2, 7), (6, 3, 7, 2, 9), (9, 3, 7, 2, 12)]


def test_recovery_under_a_lost_identity_fails_what_may_be_in_the_log() -> None:
    core = make()
    assert core.recover(7, 2, 9, [[4, 2, 7]])
    core.set_pid(8, 0)  # main restarted: another producer id
    core.enqueue(4, messages(4), 0.0)
    batch = core.next_batch(1.0)
    assert (batch.first_msgid, batch.count, batch.producer_id, batch.base_seq) == (6, 2, 8, 0)
    assert core.take_effects().reports == [(4, 2, KafkaError._FAIL, -1, -1)]
