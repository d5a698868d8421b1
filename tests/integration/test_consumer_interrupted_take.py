"""Runs in: the test process (the consumer's hosts and the librdkafka mock cluster are child processes / threads).

Ctrl+C inside consume()/poll() after messages were taken from the fetch queue, or in the middle of taking them:
the messages were never returned, so the next call returns them (none skipped, none repeated) and the position
is not past them meanwhile. The KeyboardInterrupt is raised at the two places a real one can land (a wait after
a partial take; right after a batch's take returned), so the test is exact where a signal would be a race;
tests/integration/test_interrupt_and_exit.py sends real SIGINTs.
"""

from __future__ import annotations

import pytest
from support.kafka_io import produce_numbered

from kqactors import Consumer
from kqactors.core.consumer.packing import MessageBatch
from kqactors.message import TopicPartition

pytestmark = pytest.mark.integration

COUNT = 300


def _consumer(bootstrap: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False,
                         "kqactors.hosts": 0})
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def _values(messages) -> list[bytes]:
    return [m.value() for m in messages if m.error() is None]


def test_an_interrupt_while_consume_waits_for_more_gives_the_taken_messages_back(mock_cluster, unique_topic,
                                                                                 monkeypatch):
    mock_cluster.create_topic(unique_topic, 1)
    produce_numbered(mock_cluster.bootstrap, unique_topic, COUNT, 1)
    with _consumer(mock_cluster.bootstrap, unique_topic) as consumer:
        first = consumer.consume(10, 30)  # the fetch has arrived; 290 stay queued
        assert _values(first) == [b"v%d" % i for i in range(10)]
        serve = consumer._serve_ops

        def interrupted_wait(wait: float) -> None:
            serve(wait)
            if wait > 0:
                raise KeyboardInterrupt

        monkeypatch.setattr(consumer, "_serve_ops", interrupted_wait)
        with pytest.raises(KeyboardInterrupt):
            consumer.consume(COUNT + 100, 30)  # takes the 290, then waits for more: Ctrl+C there
        monkeypatch.undo()
        assert consumer.position([TopicPartition(unique_topic, 0)])[0].offset == 10  # not past what was lost
        again = consumer.consume(5, 30)
        assert _values(again) == [b"v%d" % i for i in range(10, 15)]  # given back in order, a part at a time
        rest = consumer.consume(COUNT, 5)
        assert _values(rest) == [b"v%d" % i for i in range(15, COUNT)]
        assert consumer.position([TopicPartition(unique_topic, 0)])[0].offset == COUNT


def test_an_interrupt_right_after_a_batch_was_taken_loses_none_of_it(mock_cluster, unique_topic, monkeypatch):
    mock_cluster.create_topic(unique_topic, 1)
    produce_numbered(mock_cluster.bootstrap, unique_topic, COUNT, 1)
    with _consumer(mock_cluster.bootstrap, unique_topic) as consumer:
        assert _values(consumer.consume(1, 30)) == [b"v0"]
        take = MessageBatch.take
        calls = []

        def take_then_interrupt(self, max_count=None):
            taken = take(self, max_count)
            calls.append(len(taken[0]))
            raise KeyboardInterrupt  # as if the signal landed as take() returned

        monkeypatch.setattr(MessageBatch, "take", take_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            consumer.consume(50, 30)
        monkeypatch.undo()
        assert calls and calls[0] > 0  # the batch had handed out Messages when the interrupt came
        got = []
        while len(got) < COUNT - 1:
            batch = consumer.consume(100, 5)
            assert batch, f"stopped after {len(got)}"
            got.extend(_values(batch))
        assert got == [b"v%d" % i for i in range(1, COUNT)]
