"""The producer's hand-over at linger.ms=0 against the librdkafka mock cluster: a burst goes to the toppars in
batches (the flusher's), while the first message after a quiet period is handed over by produce() itself."""

from __future__ import annotations

import threading
import time

import pytest

from kqactors import Producer
from kqactors.ops import producer as pops

pytestmark = pytest.mark.integration


def _count_handovers(producer):
    """Wrap the runtime's send_many: record (thread name, messages) for every PRODUCE op handed over."""
    seen = []
    send_many = producer._rt.send_many

    def counting(items):
        items = list(items)
        for _name, op in items:
            if op.type == pops.PRODUCE:
                seen.append((threading.current_thread().name, op.payload["count"]))
        return send_many(items)

    producer._rt.send_many = counting
    return seen


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_linger0_burst_is_handed_over_in_batches(mock_cluster, unique_topic, native):
    mock_cluster.create_topic(unique_topic, 3)
    delivered = []
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "linger.ms": 0,
                   "on_delivery": lambda err, msg: delivered.append(err)}) as producer:
        produce = producer.produce if native else producer._produce_py
        produce(unique_topic, b"warm-up")
        assert producer.flush(30) == 0
        seen = _count_handovers(producer)
        time.sleep(0.3)  # the flusher sleeps (idle) when the burst starts: a quiet period ends with it
        burst = 5000
        for _ in range(burst):
            produce(unique_topic, b"x" * 100)
        assert producer.flush(30) == 0
    assert len(delivered) == burst + 1 and not any(delivered)
    assert sum(count for _thread, count in seen) == burst
    # Before the fix produce() handed over every message on its own while the flusher slept (one op each).
    assert len(seen) <= burst // 10, f"{len(seen)} hand-overs for {burst} messages"


def test_linger0_first_message_after_quiet_period_leaves_from_produce(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "linger.ms": 0}) as producer:
        producer.produce(unique_topic, b"warm-up")
        assert producer.flush(30) == 0
        seen = _count_handovers(producer)
        for _ in range(3):
            time.sleep(0.05)
            producer.produce(unique_topic, b"alone")
            assert seen and seen[-1] == (threading.current_thread().name, 1)
        assert producer.flush(30) == 0
