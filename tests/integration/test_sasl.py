"""SASL (sasl_plaintext, sasl_ssl) against Tansu behind the SASL gateway of kqactors.testing: confluent-kafka
authenticates through it with every mechanism first (proving the gateway), then kqactors does, produces and
consumes; failures (a bad password, a mechanism the broker does not enable, a refused or missing token) reach
list_topics and error_cb as _AUTHENTICATION with the reason, in well under the socket timeout."""

from __future__ import annotations

import time
import uuid

import pytest
from security_beds import PRINCIPALS, USERS, failure, mechanism_conf, pki, sasl_bed  # noqa: F401
from support.kafka_io import drain

from kqactors import Consumer, Producer, TopicPartition
from kqactors.errors import KafkaError

pytestmark = [pytest.mark.integration]

SCENARIOS = list(PRINCIPALS)


@pytest.fixture(scope="module")
def bed():
    yield from sasl_bed()


def _conf(bed, scenario: str, protocol: str = "SASL_PLAINTEXT", **extra) -> dict:
    return {"bootstrap.servers": bed.bootstrap, "security.protocol": protocol,
            **mechanism_conf(bed, scenario), **extra}


def _ck_conf(conf: dict) -> dict:
    return {k: v for k, v in conf.items() if not k.startswith("kqactors.")}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_confluent_kafka_authenticates_through_the_gateway(bed, scenario):
    import confluent_kafka
    before = len(bed.gateway.authentications)
    producer = confluent_kafka.Producer(_ck_conf(_conf(bed, scenario)))
    producer.poll(0.1)  # oauth_cb is served by poll() in confluent-kafka
    assert producer.list_topics(timeout=10).brokers
    producer.produce(f"ck-sasl-{uuid.uuid4().hex[:6]}", b"x")
    assert producer.flush(10) == 0
    principals = {p for _m, p, _e in bed.gateway.authentications[before:]}
    assert principals == {PRINCIPALS[scenario]}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_kqactors_authenticates_produces_and_consumes(bed, scenario):
    before = len(bed.gateway.authentications)
    conf = {**_conf(bed, scenario), "kqactors.hosts": 0}
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    with Producer(conf) as producer:
        for i in range(20):
            producer.produce(topic, b"v%d" % i, partition=0)
        assert producer.flush(15) == 0
    consumer = Consumer({**conf, "group.id": "g-" + topic})
    try:
        consumer.assign([TopicPartition(topic, 0, -2)])
        assert [m.value() for m in drain(consumer, 20)] == [b"v%d" % i for i in range(20)]
    finally:
        consumer.close()
    seen = bed.gateway.authentications[before:]
    assert seen and {p for _m, p, _e in seen} == {PRINCIPALS[scenario]}
    if scenario == "OAUTHBEARER-unsecured":
        assert all(e == {"traceId": "42"} for _m, _p, e in seen)
    if scenario == "OAUTHBEARER-oidc":
        assert all(e == {"tenant": "blue"} for _m, _p, e in seen)
        assert bed.idp.requests[-1]["scope"] == "kafka"
    if scenario == "OAUTHBEARER-cb":
        assert all(e == {"tenant": "green"} for _m, _p, e in seen)


def test_a_user_name_with_scram_escapes(bed):
    conf = {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT", "kqactors.hosts": 0,
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": USERS["bob"]}
    with Producer(conf) as producer:
        assert producer.list_topics(timeout=10).brokers
    assert bed.gateway.authentications[-1][1] == "bob"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_bad_password_fails_as_authentication_error(bed, mechanism):
    conf = {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": "wrong-password"}
    error, heard, took = failure(Producer, conf)
    assert error.code() == KafkaError._AUTHENTICATION
    assert "Authentication failed" in error.str() and "state AUTH_REQ" in error.str()
    assert heard and heard[0].code() == KafkaError._AUTHENTICATION
    assert took < 5


def test_an_unknown_user_fails_scram(bed):
    conf = {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "mallory", "sasl.password": "x"}
    error, _heard, _took = failure(Producer, conf)
    assert error.code() == KafkaError._AUTHENTICATION


@pytest.fixture(scope="module")
def plain_only():
    yield from sasl_bed(mechanisms=("PLAIN",))


def test_a_mechanism_the_broker_does_not_enable_fails_naming_what_it_does(plain_only):
    conf = {"bootstrap.servers": plain_only.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": USERS["alice"]}
    error, heard, took = failure(Producer, conf)
    assert error.code() == KafkaError._AUTHENTICATION
    assert "Unsupported SASL mechanism" in error.str() and "PLAIN" in error.str()
    assert heard and took < 5


def test_a_refused_token_fails(bed):
    def oauth_cb(_config):
        return "not.a-valid.token", time.time() + 600
    conf = {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}
    error, heard, took = failure(Producer, conf)
    assert error.code() == KafkaError._AUTHENTICATION
    assert "invalid_token" in error.str()
    assert heard and took < 5


def test_an_oauth_cb_that_raises_fails_with_its_reason(bed):
    def oauth_cb(_config):
        raise RuntimeError("identity provider unreachable")
    conf = {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}
    error, heard, took = failure(Producer, conf)
    assert error.code() == KafkaError._AUTHENTICATION
    assert "identity provider unreachable" in error.str()
    assert heard and took < 5


def test_oidc_with_a_wrong_client_secret_fails(bed):
    conf = _conf(bed, "OAUTHBEARER-oidc", **{"sasl.oauthbearer.client.secret": "not-the-secret"})
    error, _heard, took = failure(Producer, conf)
    assert error.code() == KafkaError._AUTHENTICATION
    assert "HTTP 401" in error.str() and "not-the-secret" not in error.str()
    assert took < 5


def test_oauth_cb_is_called_again_before_the_token_expires(bed):
    calls = []

    def oauth_cb(config):
        calls.append(config)
        return bed.idp.issue("erin", lifetime_s=4), time.time() + 4, "erin"
    conf = {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT", "kqactors.hosts": 0,
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb, "sasl.oauthbearer.config": "cfg=1"}
    with Producer(conf) as producer:
        assert producer.list_topics(timeout=10).brokers
        deadline = time.monotonic() + 10
        while len(calls) < 2 and time.monotonic() < deadline:
            producer.poll(0.2)
    assert len(calls) >= 2 and calls[0] == "cfg=1"


@pytest.fixture(scope="module")
def sasl_ssl(pki):  # noqa: F811
    from security_beds import require_stunnel
    require_stunnel()
    yield from sasl_bed(tls_cert=pki.server)


@pytest.mark.parametrize("scenario", ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER-oidc"])
def test_sasl_ssl_confluent_kafka_then_kqactors(sasl_ssl, pki, scenario):  # noqa: F811
    import confluent_kafka
    conf = _conf(sasl_ssl, scenario, "SASL_SSL", **{"ssl.ca.location": str(pki.ca.cert_path)})
    producer = confluent_kafka.Producer(conf)
    assert producer.list_topics(timeout=10).brokers
    topic = f"sasl-ssl-{uuid.uuid4().hex[:8]}"
    with Producer({**conf, "kqactors.hosts": 0}) as ours:
        for i in range(10):
            ours.produce(topic, b"v%d" % i, partition=0)
        assert ours.flush(15) == 0
    consumer = Consumer({**conf, "group.id": "g-" + topic, "kqactors.hosts": 0})
    try:
        consumer.assign([TopicPartition(topic, 0, -2)])
        assert len(drain(consumer, 10)) == 10
    finally:
        consumer.close()


def test_sasl_ssl_with_a_bad_password_fails_as_authentication_not_ssl(sasl_ssl, pki):  # noqa: F811
    conf = {"bootstrap.servers": sasl_ssl.bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca.cert_path), "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice", "sasl.password": "wrong"}
    error, _heard, took = failure(Producer, conf)
    assert error.code() == KafkaError._AUTHENTICATION and ": sasl_ssl://" in error.str()  # the reason names the connection
    assert took < 5


@pytest.mark.parametrize("scenario", ["SCRAM-SHA-256", "OAUTHBEARER-cb"])
def test_a_consumer_group_authenticates_its_coordinator_connection(bed, scenario):
    from support.kafka_io import produce_numbered
    topic = f"sasl-group-{uuid.uuid4().hex[:8]}"
    ck_conf = _ck_conf(_conf(bed, scenario))
    produce_numbered(bed.bootstrap, topic, 12, 1, **{k: v for k, v in ck_conf.items() if k != "bootstrap.servers"})
    consumer = Consumer({**_conf(bed, scenario), "group.id": "g-" + topic, "kqactors.hosts": 0,
                         "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        assert len(drain(consumer, 12, timeout=30)) == 12
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
