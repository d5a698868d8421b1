"""Re-authentication (KIP-368): the gateway grants a short session lifetime and, as a Kafka broker, closes a
connection whose session expired; a client that keeps producing over several lifetimes must re-authenticate
on its connections in time. confluent-kafka proves the bed first."""

from __future__ import annotations

import time
import uuid

import pytest
from security_beds import mechanism_conf, sasl_bed

from kqactors import Producer

pytestmark = [pytest.mark.integration]

LIFETIME_MS = 1500


@pytest.fixture(scope="module")
def bed():
    yield from sasl_bed(session_lifetime_ms=LIFETIME_MS)


def _produce_for(producer, seconds: float, errors: list) -> int:
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.produce(topic, b"v%d" % sent, partition=0)
        sent += 1
        producer.poll(0.1)
    assert producer.flush(15) == 0
    return sent


def test_confluent_kafka_reauthenticates_through_the_gateway(bed):
    import confluent_kafka
    before = len(bed.gateway.reauthentications)
    producer = confluent_kafka.Producer({"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                                         **mechanism_conf(bed, "SCRAM-SHA-256")})
    _produce_for(producer, 4 * LIFETIME_MS / 1000, [])
    assert len(bed.gateway.reauthentications) > before


@pytest.mark.parametrize("scenario", ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER-unsecured"])
def test_kqactors_reauthenticates_before_the_session_expires(bed, scenario):
    before = len(bed.gateway.reauthentications)
    failures_before = list(bed.gateway.failures)
    reports: list = []
    errors: list = []
    conf = {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT", "kqactors.hosts": 0,
            "on_delivery": lambda err, msg: reports.append(err), "error_cb": errors.append,
            **mechanism_conf(bed, scenario)}
    with Producer(conf) as producer:
        sent = _produce_for(producer, 4 * LIFETIME_MS / 1000, errors)
    assert len(reports) == sent and not any(reports)
    assert len(bed.gateway.reauthentications) - before >= 2
    assert bed.gateway.failures == failures_before  # no session ran out, no refusal
    assert not errors
