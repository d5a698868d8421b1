"""The security properties' rules: protocols, SASL mechanisms and what each needs, properties Python's ssl
module cannot apply (refused with the reason), TLS files checked when the client is created, secrets kept out
of repr, and the security settings shipped to broker actors."""

from __future__ import annotations

import pytest

from kqactors.actors.main import broker_connection_config
from kqactors.config import Config
from kqactors.errors import KafkaError, KafkaException

SASL = {"security.protocol": "SASL_PLAINTEXT"}


def _error(conf) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        Config(conf)
    return info.value.args[0]


@pytest.mark.parametrize("conf,text", [
    ({**SASL}, "GSSAPI (Kerberos) is not supported"),
    ({**SASL, "sasl.mechanism": "GSSAPI"}, "GSSAPI (Kerberos) is not supported"),
    ({**SASL, "sasl.mechanism": "BOGUS"}, "Unsupported SASL mechanism: BOGUS"),
    ({**SASL, "sasl.mechanism": "PLAIN"}, "sasl.username and sasl.password must be set"),
    ({**SASL, "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u"}, "sasl.username and sasl.password"),
    ({**SASL, "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER needs a token source"),
    ({**SASL, "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"},
     "`sasl.oauthbearer.token.endpoint.url` is mandatory"),
    ({**SASL, "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
      "oauth_cb": print}, "mutually exclusive"),
    ({**SASL, "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
      "sasl.oauthbearer.config": "scope=x"}, "principal=<value> is required"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent"}, "ssl.ca.location failed"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/x.p12"}, "ssl.keystore.location failed"),
    ({"security.protocol": "SSL", "ssl.engine.location": "/x.so"}, "OpenSSL engines cannot be loaded"),
    ({"security.protocol": "SASL_SSL", "ssl.providers": "legacy"}, "providers"),
    ({"security.protocol": "SSL", "ssl.sigalgs.list": "RSA+SHA256"}, "signature algorithms"),
])
def test_invalid_security_settings_fail_with_the_reason(conf, text):
    error = _error(conf)
    assert error.code() == KafkaError._INVALID_ARG and text in error.str()


def test_valid_settings_and_aliases():
    conf = Config({**SASL, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p"})
    assert conf["sasl.mechanisms"] == "SCRAM-SHA-512"
    oidc = Config({**SASL, "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                   "sasl.oauthbearer.client.credentials.client.id": "id",
                   "sasl.oauthbearer.client.credentials.client.secret": "s",
                   "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/token"})
    assert oidc["sasl.oauthbearer.client.id"] == "id"
    assert Config({**SASL, "sasl.mechanism": "OAUTHBEARER", "oauth_cb": print}).callbacks()["oauth_cb"] is print
    assert Config({"security.protocol": "ssl"})["ssl.endpoint.identification.algorithm"] == "https"


def test_secrets_are_redacted_in_repr():
    conf = Config({**SASL, "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "hunter2",
                   "ssl.key.password": "k3y", "sasl.oauthbearer.client.secret": "c1ient"})
    text = repr(conf)
    assert "alice" in text and "[REDACTED]" in text
    assert not any(secret in text for secret in ("hunter2", "k3y", "c1ient"))


def test_broker_actors_get_the_security_settings():
    shipped = Config({**SASL, "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
                      "bootstrap.servers": "h:1"}).to_dict()
    picked = broker_connection_config(shipped)
    assert picked["security.protocol"] == "sasl_plaintext" and picked["sasl.mechanisms"] == "PLAIN"
    assert picked["sasl.password"] == "p" and "oauth_cb" not in picked
