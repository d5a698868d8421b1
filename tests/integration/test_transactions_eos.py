"""Exactly once, consume-transform-produce: an app reads topic A in a consumer group and, per batch, produces to B
and sends its consumer positions in the same transaction. It is killed with SIGKILL in the middle of a
transaction (its data flushed to B, not committed) and started again with the same transactional.id and group:
B's committed data then holds each input of A exactly once.

On Tansu: it stores transactional offsets at commit (the mock cluster's TxnOffsetCommit stores nothing, so a
restarted app would read A again from the start there). The app is a script run as a subprocess from a temp
dir; B is checked in the log itself (test_transactions_log).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from integration_helpers import make_topic
from test_transactions_log import COMMIT, values_by_outcome

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(180)]

ck = pytest.importorskip("confluent_kafka")

INPUTS = 300
APP = textwrap.dedent('''
    """consume A, produce to B, offsets in the transaction; prints "mid <n>" and "committed <n>" lines."""
    import sys, time
    from kqactors import Consumer, Producer
    bootstrap, source, sink, txn_id, group, total, pause = sys.argv[1:8]
    total, pause = int(total), float(pause)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "kqactors.hosts": 0})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                         "kqactors.hosts": 1})
    producer.init_transactions(60)
    consumer.subscribe([source])
    n = 0
    while True:
        batch = [m for m in consumer.consume(50, 1.0) if m.error() is None]
        if not batch:
            assignment = consumer.assignment()
            if assignment and sum(max(tp.offset, 0) for tp in consumer.position(assignment)) >= total:
                break
            continue
        n += 1
        producer.begin_transaction()
        for m in batch:
            producer.produce(sink, m.value(), key=m.key())
        assert producer.flush(30) == 0
        print("mid", n, flush=True)
        time.sleep(pause)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        print("committed", n, flush=True)
    print("done", n, flush=True)
    producer.close()
    consumer.close()
''')


def _start(tmp_path, args: list[str]) -> subprocess.Popen:
    script = tmp_path / "eos_app.py"
    script.write_text(APP)
    env = dict(os.environ)
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)


def _read_until(proc: subprocess.Popen, prefix: str, deadline: float, seen: list[str]) -> str:
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip())
        if line.startswith(prefix):
            return line
    pytest.fail(f"the app never printed {prefix!r}; it printed: {seen[-20:]}")


def test_killed_mid_transaction_and_restarted_outputs_each_input_exactly_once(tansu, unique_topic, tmp_path):
    source, sink = f"{unique_topic}-a", f"{unique_topic}-b"
    make_topic(tansu, source, 2)
    make_topic(tansu, sink, 2)
    feeder = ck.Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5})
    inputs = [b"in-%d" % i for i in range(INPUTS)]
    for i, value in enumerate(inputs):
        feeder.produce(source, value, key=b"k%d" % i, partition=i % 2)
    assert feeder.flush(30) == 0
    txn_id, group = f"eos-{uuid.uuid4().hex[:8]}", f"eos-g-{uuid.uuid4().hex[:8]}"
    args = [tansu.bootstrap, source, sink, txn_id, group, str(INPUTS)]
    seen: list[str] = []

    first = _start(tmp_path, args + ["0.5"])
    try:
        deadline = time.monotonic() + 90
        _read_until(first, "committed 2", deadline, seen)
        _read_until(first, "mid 3", deadline, seen)  # transaction 3's data is in B, not committed
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
    killed_midway = values_by_outcome(tansu.bootstrap, sink)
    assert killed_midway[COMMIT] and len(killed_midway[COMMIT]) < INPUTS

    second = _start(tmp_path, args + ["0"])
    try:
        _read_until(second, "done", time.monotonic() + 120, seen)
        assert second.wait(30) == 0
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    got = values_by_outcome(tansu.bootstrap, sink)
    assert sorted(got[COMMIT]) == sorted(inputs)  # each input exactly once among committed data
    uncommitted = got["abort"] + got["open"]
    assert uncommitted, "the killed transaction's flushed data should be in B's log, not committed"
