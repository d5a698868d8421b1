"""Start-up without waiting for processes, on the librdkafka mock cluster.

Runs in: the pytest process (the clients' hosts and the mock cluster are child processes). Producer() and Consumer()
return before their hosts run: what the app does right away (produce, subscribe, commit) waits for the actors and
is served. A broker down while the client starts, up again later, still gets its partitions' messages (main
re-announces a leader whose broker comes back: metadata without that broker had told the toppar broker -1).
"""

from __future__ import annotations

import threading

import pytest
from support.waiting import wait_until

from kqactors import Consumer, Producer

pytestmark = [pytest.mark.timeout(120), pytest.mark.fresh_cluster(num_brokers=3)]


def test_a_broker_down_at_start_up_gets_its_partitions_messages_once_back(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, partition_cnt=3)
    delivered: dict[int, int] = {0: 0, 1: 0, 2: 0}
    failed: list = []

    def on_delivery(err, msg) -> None:
        if err is None:
            delivered[msg.partition()] += 1
        else:
            failed.append(err)

    fresh_cluster.broker_set_down(1)
    producer = Producer({"bootstrap.servers": fresh_cluster.bootstrap, "on_delivery": on_delivery, "linger.ms": 5,
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                         "topic.metadata.refresh.interval.ms": 1000})
    timer = threading.Timer(1.5, fresh_cluster.broker_set_up, args=(1,))
    timer.start()
    try:
        for i in range(300):
            producer.produce(unique_topic, b"%d" % i, partition=i % 3)
        assert producer.flush(60) == 0
    finally:
        timer.cancel()
        fresh_cluster.broker_set_up(1)
        producer.close(timeout=5)
    assert failed == []
    assert delivered == {0: 100, 1: 100, 2: 100}


def test_a_consumer_used_at_once_is_served_when_its_actors_run(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, partition_cnt=1)
    producer = Producer({"bootstrap.servers": fresh_cluster.bootstrap})
    consumer = Consumer({"bootstrap.servers": fresh_cluster.bootstrap, "group.id": f"g-{unique_topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([unique_topic])  # before its cgrp (or main) runs: the ops wait for them
        producer.produce(unique_topic, b"first")
        assert producer.flush(30) == 0
        message = wait_until(lambda: _message(consumer), 60, "the first message through the group")
        assert message.value() == b"first"
        consumer.commit(message, asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=30)
        assert [tp.offset for tp in committed] == [message.offset() + 1]
    finally:
        consumer.close()
        producer.close(timeout=5)


def _message(consumer: Consumer):
    message = consumer.poll(0.2)
    return message if message is not None and message.error() is None else None


def test_list_topics_while_main_cannot_answer_fails_as_no_broker_was_reached(fresh_cluster):
    """A metadata call whose answer never comes from main (its host still starting on a loaded machine; here
    stopped) fails as librdkafka's does when no broker got the request: _TRANSPORT, not a runtime timeout."""
    import os
    import signal

    from kqactors import KafkaError, KafkaException

    producer = Producer({"bootstrap.servers": fresh_cluster.bootstrap})
    rt = producer._rt
    key = wait_until(lambda: rt.host_of("main"), 30, "main to run")
    pid = rt.host_pid(key)
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(KafkaException) as info:
            producer.list_topics(timeout=0.2)
        assert info.value.args[0].code() == KafkaError._TRANSPORT, info.value
    finally:
        os.kill(pid, signal.SIGCONT)
    assert producer.list_topics(timeout=10).brokers  # answered again once main runs
    producer.close()
