"""Secrets never show: sasl.password, ssl.key.password, ssl.key.pem, the OIDC client secret and OAUTHBEARER
tokens are absent from every log line (the app's and the hosts', at DEBUG), error_cb texts, exception texts,
statistics and repr()s, over successful and failed connections."""

from __future__ import annotations

import functools
import logging
import time

import pytest
from security_beds import CLIENTS, USERS, pki, sasl_bed, tls_broker  # noqa: F401

from kqactors import Producer
from kqactors.config import Config
from kqactors.errors import KafkaException

pytestmark = [pytest.mark.integration]


@pytest.fixture
def debug_hosts(monkeypatch):
    """Host processes log at DEBUG (to the inherited stderr, which capfd reads)."""
    import kqactors.client.handle.handle as handle_module
    from kqactors.runtime.runtime import Runtime
    monkeypatch.setattr(handle_module, "Runtime", functools.partial(Runtime, log_level="DEBUG"))


@pytest.fixture(scope="module")
def bed():
    yield from sasl_bed()


def _exercise(conf: dict, seen: list[str]) -> None:
    """Run a client on ``conf``: list_topics, a produce, statistics, then close; everything it says goes to
    ``seen``."""
    conf = {**conf, "kqactors.hosts": 0, "statistics.interval.ms": 200, "debug": "all",
            "error_cb": lambda err: seen.append(str(err)), "stats_cb": seen.append}
    seen.append(repr(Config(conf)))
    producer = Producer(conf)
    seen.append(repr(producer))
    try:
        try:
            seen.append(str(producer.list_topics(timeout=5)))
        except KafkaException as exc:
            seen.append(str(exc))
            seen.append(repr(exc))
        producer.produce("secrets-topic", b"x")
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            producer.poll(0.1)
    finally:
        producer.close(2)


def test_sasl_secrets_never_show(bed, debug_hosts, capfd, caplog):
    caplog.set_level(logging.DEBUG)
    tokens: list[str] = []

    def oauth_cb(_config):
        tokens.append(bed.idp.issue("frank", lifetime_s=600))
        return tokens[-1], time.time() + 600
    seen: list[str] = []
    base = {"bootstrap.servers": bed.bootstrap, "security.protocol": "SASL_PLAINTEXT"}
    client, secret = next(iter(CLIENTS.items()))
    for conf in (
        {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": USERS["alice"]},
        {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "wrong-" + USERS["alice"]},
        {"sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb},
        {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": client,
         "sasl.oauthbearer.client.secret": secret, "sasl.oauthbearer.token.endpoint.url": bed.idp.url},
        {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": client,
         "sasl.oauthbearer.client.secret": "bad-" + secret, "sasl.oauthbearer.token.endpoint.url": bed.idp.url},
    ):
        _exercise({**base, **conf}, seen)
    out, err = capfd.readouterr()
    text = "\n".join([*map(str, seen), out, err, caplog.text])
    assert "SASL authentication error" in text and "HTTP 401" in text  # the failures were seen...
    # the hosts did log at DEBUG: their records reach the app's logger (LOG ops served by poll())
    assert "[thrd:127.0.0.1:" in caplog.text and "Broker changed state" in caplog.text
    assert "sasl.password = [REDACTED]" in caplog.text  # the debug=conf dump ran, and masked
    secrets = [USERS["alice"], secret, *tokens]
    assert tokens and len(seen) > 10
    for value in secrets:
        assert value not in text, "a secret was shown"
    for claims in bed.idp.issued:  # every token the identity provider issued stays out of sight
        assert claims["jti"] not in text


def test_tls_key_secrets_never_show(pki, debug_hosts, capfd, caplog):  # noqa: F811
    caplog.set_level(logging.DEBUG)
    password = "tls-key-pass-9931"
    encrypted = pki.client.encrypted_key(password)
    seen: list[str] = []
    for broker in tls_broker(pki.server, client_ca=pki.ca.cert_path):
        base = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca.cert_path)}
        _exercise({**base, "ssl.certificate.location": str(pki.client.cert), "ssl.key.location": str(encrypted),
                   "ssl.key.password": password}, seen)
        _exercise({**base, "ssl.certificate.pem": pki.client.cert_pem, "ssl.key.pem": pki.client.key_pem}, seen)
    with pytest.raises(KafkaException) as info:  # a wrong key password: the error names the property only
        Producer({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL",
                  "ssl.certificate.location": str(pki.client.cert), "ssl.key.location": str(encrypted),
                  "ssl.key.password": "not-" + password})
    seen.append(str(info.value))
    out, err = capfd.readouterr()
    text = "\n".join([*map(str, seen), out, err, caplog.text])
    key_body = "".join(pki.client.key_pem.splitlines()[1:-1])
    assert "ssl.key.location" in seen[-1]
    assert password not in text
    assert key_body[:40] not in text and key_body[-40:] not in text
