"""TLS (security.protocol=ssl) against Tansu behind Debian's stunnel4: confluent-kafka proves the bed first,
then kqactors produces and consumes over it with server authentication, hostname verification, mutual TLS
(certificate files, PEM strings, an encrypted key, a PKCS#12 keystore), and fails clearly — _SSL with the
reason, in error_cb and in list_topics, well within the socket timeout — on a wrong CA, an expired or revoked
certificate, a hostname mismatch and a refused client certificate."""

from __future__ import annotations

import uuid

import pytest
from security_beds import failure, pki, tls_broker  # noqa: F401 - pki is a fixture
from support.kafka_io import drain, produce_numbered

from kqactors import Consumer, Producer, TopicPartition
from kqactors.errors import KafkaError

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def server_auth(pki):  # noqa: F811
    yield from tls_broker(pki.server)


@pytest.fixture(scope="module")
def mutual(pki):  # noqa: F811
    yield from tls_broker(pki.server, client_ca=pki.ca.cert_path)


def _topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def _ssl(bed, pki, **extra):  # noqa: F811
    return {"bootstrap.servers": bed.bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca.cert_path), **extra}


def _round_trip(conf: dict, count: int = 40) -> None:
    """kqactors produces ``count`` messages and reads them back, both over ``conf``'s connection."""
    topic = _topic()
    reports: list = []
    with Producer({**conf, "kqactors.hosts": 0, "on_delivery": lambda err, msg: reports.append(err)}) as producer:
        for i in range(count):
            producer.produce(topic, value=b"v%d" % i + b"x" * (i * 1000), partition=0)
        assert producer.flush(30) == 0
    assert len(reports) == count and not any(reports)
    consumer = Consumer({**conf, "group.id": "g-" + topic, "kqactors.hosts": 0})
    try:
        consumer.assign([TopicPartition(topic, 0, -2)])
        got = drain(consumer, count)
    finally:
        consumer.close()
    assert [m.value()[:4].rstrip(b"x") for m in got] == [b"v%d" % i for i in range(count)]


def test_confluent_kafka_produces_and_consumes_over_the_bed(server_auth, pki):  # noqa: F811
    import confluent_kafka
    conf = _ssl(server_auth, pki)
    topic = _topic()
    produce_numbered(server_auth.bootstrap, topic, 10, 1, **{k: v for k, v in conf.items()
                                                             if k != "bootstrap.servers"})
    consumer = confluent_kafka.Consumer({**conf, "group.id": "ck-" + topic})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    try:
        assert len(drain(consumer, 10)) == 10
    finally:
        consumer.close()


def test_produce_and_consume_with_server_authentication_and_hostname_verification(server_auth, pki):  # noqa: F811
    _round_trip(_ssl(server_auth, pki))


def test_kqactors_reads_what_confluent_kafka_wrote_over_tls(server_auth, pki):  # noqa: F811
    conf = _ssl(server_auth, pki)
    topic = _topic()
    produce_numbered(server_auth.bootstrap, topic, 25, 1, **{k: v for k, v in conf.items()
                                                             if k != "bootstrap.servers"})
    consumer = Consumer({**conf, "group.id": "g-" + topic, "kqactors.hosts": 0})
    try:
        consumer.assign([TopicPartition(topic, 0, -2)])
        assert [m.value() for m in drain(consumer, 25)] == [b"v%d" % i for i in range(25)]
    finally:
        consumer.close()


def test_ca_as_pem_string(server_auth, pki):  # noqa: F811
    conf = _ssl(server_auth, pki)
    del conf["ssl.ca.location"]
    conf["ssl.ca.pem"] = pki.ca.cert_pem
    with Producer({**conf, "kqactors.hosts": 0}) as producer:
        assert producer.list_topics(timeout=10).brokers


def test_wrong_ca_fails_with_ssl_error(server_auth, pki):  # noqa: F811
    error, heard, took = failure(Producer, _ssl(server_auth, pki, **{"ssl.ca.location": str(pki.other_ca.cert_path)}))
    assert error.code() == KafkaError._SSL
    assert "certificate verify failed" in error.str() and "unable to get local issuer certificate" in error.str()
    assert [e.code() for e in heard][:1] == [KafkaError._SSL]
    assert took < 5


def test_verification_off_accepts_an_unknown_ca(server_auth, pki):  # noqa: F811
    conf = _ssl(server_auth, pki, **{"ssl.ca.location": str(pki.other_ca.cert_path),
                                     "enable.ssl.certificate.verification": False})
    with Producer({**conf, "kqactors.hosts": 0}) as producer:
        assert producer.list_topics(timeout=10).brokers


@pytest.fixture(scope="module")
def wrong_host(pki):  # noqa: F811
    yield from tls_broker(pki.wrong_host)


def test_hostname_mismatch_fails_with_ssl_error(wrong_host, pki):  # noqa: F811
    error, heard, took = failure(Producer, _ssl(wrong_host, pki))
    assert error.code() == KafkaError._SSL
    assert "mismatch" in error.str() and "127.0.0.1" in error.str()
    assert heard and heard[0].code() == KafkaError._SSL
    assert took < 5


def test_hostname_verification_off_connects(wrong_host, pki):  # noqa: F811
    _round_trip(_ssl(wrong_host, pki, **{"ssl.endpoint.identification.algorithm": "none"}), count=5)


@pytest.mark.parametrize("which", ["expired", "revoked"])
def test_expired_or_revoked_certificate_fails(pki, which):  # noqa: F811
    cert = pki.expired if which == "expired" else pki.revoked
    for bed in tls_broker(cert):
        extra = {"ssl.crl.location": str(pki.crl)} if which == "revoked" else {}
        error, heard, _took = failure(Producer, _ssl(bed, pki, **extra))
        assert error.code() == KafkaError._SSL
        assert ("certificate has expired" if which == "expired" else "certificate revoked") in error.str()
        assert heard and heard[0].code() == KafkaError._SSL


def test_mutual_tls_with_certificate_files(mutual, pki):  # noqa: F811
    _round_trip(_ssl(mutual, pki, **{"ssl.certificate.location": str(pki.client.cert),
                                     "ssl.key.location": str(pki.client.key)}), count=10)


def test_mutual_tls_with_pem_strings_and_an_encrypted_key(mutual, pki):  # noqa: F811
    password = "key-secret-4711"
    conf = _ssl(mutual, pki, **{"ssl.certificate.pem": pki.client.cert_pem,
                                "ssl.key.location": str(pki.client.encrypted_key(password)),
                                "ssl.key.password": password})
    with Producer({**conf, "kqactors.hosts": 0}) as producer:
        assert producer.list_topics(timeout=10).brokers
    conf = _ssl(mutual, pki, **{"ssl.certificate.pem": pki.client.cert_pem, "ssl.key.pem": pki.client.key_pem})
    with Producer({**conf, "kqactors.hosts": 0}) as producer:
        assert producer.list_topics(timeout=10).brokers


def test_mutual_tls_with_a_pkcs12_keystore(mutual, pki):  # noqa: F811
    keystore = pki.client.pkcs12("store-secret", pki.ca.cert_pem)
    conf = _ssl(mutual, pki, **{"ssl.keystore.location": str(keystore), "ssl.keystore.password": "store-secret"})
    with Producer({**conf, "kqactors.hosts": 0}) as producer:
        assert producer.list_topics(timeout=10).brokers


@pytest.mark.parametrize("client", ["none", "stranger"])
def test_mutual_tls_refuses_a_missing_or_unknown_client_certificate(mutual, pki, client):  # noqa: F811
    extra = {} if client == "none" else {"ssl.certificate.location": str(pki.stranger.cert),
                                         "ssl.key.location": str(pki.stranger.key)}
    error, heard, took = failure(Producer, _ssl(mutual, pki, **extra))
    assert error.code() == KafkaError._SSL, error
    assert took < 5
    assert heard and heard[0].code() == KafkaError._SSL
