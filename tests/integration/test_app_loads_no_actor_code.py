"""Runs in: pytest, which starts a fresh interpreter as the app. The app process loads no actor code: after a
Producer (produce + flush, list_topics) and a subscribed Consumer (poll a message, watermarks, commit) ran
against the librdkafka mock cluster, no ``kqactors.actors`` module is in the app's ``sys.modules``. Actors
run in the hosts, which the app names by "module:Factory" strings only; what the app needs of them (op
types, payload shapes) lives in ``kqactors.ops``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

_APP = textwrap.dedent("""
    import json, sys, time

    from kqactors import Consumer, Producer, TopicPartition

    bootstrap, topic = sys.argv[1], sys.argv[2]
    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, "kqactors.hosts": 1, "linger.ms": 5,
                         "statistics.interval.ms": 100, "stats_cb": lambda stats: None})
    for i in range(10):
        producer.produce(topic, b"v%d" % i, key=b"k", on_delivery=lambda err, msg: reports.append(err))
    left = producer.flush(30)
    producer.list_topics(topic, timeout=10)
    producer.close()

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + topic, "kqactors.hosts": 1,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 300, "statistics.interval.ms": 100,
                         "stats_cb": lambda stats: None})
    consumer.subscribe([topic])
    message, deadline = None, time.monotonic() + 40
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            break
    consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.commit(asynchronous=False)
    consumer.close()

    print(json.dumps({
        "left": left,
        "errors": [str(err) for err in reports if err is not None],
        "reports": len(reports),
        "consumed": None if message is None or message.error() is not None else message.value().decode(),
        "actor_modules": sorted(name for name in sys.modules if name.startswith("kqactors.actors")),
    }))
""")


def test_producer_and_subscribed_consumer_load_no_actor_module(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", _APP, mock_cluster.bootstrap, unique_topic], env=env,
                          capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["left"] == 0 and result["reports"] == 10 and not result["errors"], result
    assert result["consumed"] is not None, "the subscribed consumer got no message"
    assert result["actor_modules"] == [], f"the app loaded actor code: {result['actor_modules']}"
