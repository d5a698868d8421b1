"""set_sasl_credentials() (rd_kafka_sasl_set_credentials) on the SASL gateway: a client started with a wrong
password fails with _AUTHENTICATION, is given the right credentials and then works — confluent-kafka first
(proving the bed and librdkafka's behaviour), then kqactors' Producer, AdminClient and a group Consumer (whose
coordinator connections are the cgrp actor's own). A running connection keeps its session and uses the new
credentials at its next KIP-368 re-authentication. Neither password shows in any log line or error text."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from security_beds import USERS, sasl_bed
from support.kafka_io import drain

from kqactors import Consumer, Producer
from kqactors.admin import AdminClient
from kqactors.errors import KafkaError

pytestmark = [pytest.mark.integration]

WRONG = "not-alices-password"
LIFETIME_MS = 1500


@pytest.fixture(scope="module")
def bed():
    yield from sasl_bed(session_lifetime_ms=LIFETIME_MS)


def _conf(bed, password: str, heard: list, mechanism: str = "SCRAM-SHA-256") -> dict:
    # a short reconnect backoff: the attempt after set_sasl_credentials comes within a second, as librdkafka's
    return {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": "alice", "sasl.password": password, "reconnect.backoff.max.ms": 500,
            "error_cb": heard.append}


def _wait_for(client, what, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not what() and time.monotonic() < deadline:
        client.poll(0.1)
    assert what()


def _authentication_failed(heard: list) -> bool:
    return any(e.code() == KafkaError._AUTHENTICATION for e in heard)


def _works(client) -> bool:
    try:
        return bool(client.list_topics(timeout=10).brokers)
    except Exception:  # noqa: BLE001 - the first answers may still be failures of the old attempt
        return False


def test_confluent_kafka_recovers_after_set_sasl_credentials(bed):
    import confluent_kafka
    heard: list = []
    producer = confluent_kafka.Producer(_conf(bed, WRONG, heard))
    _wait_for(producer, lambda: _authentication_failed(heard))
    producer.set_sasl_credentials("alice", USERS["alice"])
    assert _works(producer)
    producer.produce(f"creds-ck-{uuid.uuid4().hex[:6]}", b"x")
    assert producer.flush(10) == 0
    with pytest.raises(TypeError):
        producer.set_sasl_credentials(1, "p")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_producer_recovers_after_set_sasl_credentials(bed, mechanism, caplog):
    caplog.set_level(logging.DEBUG)
    heard: list = []
    reports: list = []
    conf = {**_conf(bed, WRONG, heard, mechanism), "kqactors.hosts": 0, "debug": "security,broker",
            "on_delivery": lambda err, msg: reports.append(err)}
    with Producer(conf) as producer:
        _wait_for(producer, lambda: _authentication_failed(heard))
        before = len(bed.gateway.authentications)
        producer.set_sasl_credentials("alice", USERS["alice"])
        assert _works(producer)
        for i in range(10):
            producer.produce(f"creds-{uuid.uuid4().hex[:6]}", b"v%d" % i)
        assert producer.flush(15) == 0
    assert reports == [None] * 10
    assert {p for _m, p, _e in bed.gateway.authentications[before:]} == {"alice"}
    said = "\n".join([r.getMessage() for r in caplog.records] + [str(e) for e in heard])
    assert USERS["alice"] not in said and WRONG not in said


def test_admin_client_recovers_after_set_sasl_credentials(bed):
    heard: list = []
    admin = AdminClient(_conf(bed, WRONG, heard))
    try:
        _wait_for(admin, lambda: _authentication_failed(heard))
        admin.set_sasl_credentials("alice", USERS["alice"])
        assert _works(admin)
        with pytest.raises(TypeError):
            admin.set_sasl_credentials("alice", None)
    finally:
        admin._close()  # confluent-kafka's AdminClient has no close(): released when collected


def test_group_consumer_recovers_after_set_sasl_credentials(bed):
    topic = f"creds-group-{uuid.uuid4().hex[:8]}"
    good = _conf(bed, USERS["alice"], [])
    with Producer({**good, "kqactors.hosts": 0}) as producer:
        for i in range(5):
            producer.produce(topic, b"v%d" % i, partition=0)
        assert producer.flush(15) == 0
    heard: list = []
    consumer = Consumer({**_conf(bed, WRONG, heard), "kqactors.hosts": 0, "group.id": "g-" + topic,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        _wait_for(consumer, lambda: _authentication_failed(heard))
        consumer.set_sasl_credentials("alice", USERS["alice"])
        assert sorted(m.value() for m in drain(consumer, 5, timeout=30)) == [b"v%d" % i for i in range(5)]
        consumer.commit(asynchronous=False)  # through the cgrp actor's coordinator connection
    finally:
        consumer.close()


def test_a_connection_up_keeps_its_session_and_reauthenticates_with_the_new_credentials(bed):
    """librdkafka: the credentials are read at each (re)authentication, nothing is disconnected. (The gateway,
    unlike a Kafka broker, lets a re-authentication change the principal: here it shows which credentials
    were used.)"""
    heard: list = []
    with Producer({**_conf(bed, USERS["alice"], heard), "kqactors.hosts": 0}) as producer:
        assert _works(producer)
        reauth_before = len(bed.gateway.reauthentications)
        producer.set_sasl_credentials("bob", USERS["bob"])
        deadline = time.monotonic() + 3 * LIFETIME_MS / 1000
        while time.monotonic() < deadline:
            producer.produce(f"creds-reauth-{uuid.uuid4().hex[:4]}", b"x")
            producer.poll(0.1)
        assert producer.flush(15) == 0
    principals = [p for _m, p, _e in bed.gateway.reauthentications[reauth_before:]]
    assert "bob" in principals  # a re-authentication on a connection that stayed up, with the new ones
    assert not _authentication_failed(heard)
