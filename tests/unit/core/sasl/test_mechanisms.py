"""The client mechanisms on their own: PLAIN's message, SCRAM against a real server implementation (scramp)
and against servers that lie, OAUTHBEARER's message and error answer, librdkafka's unsecured JWT builder."""

from __future__ import annotations

import base64
import json

import pytest

from kqactors.core.sasl.mechanisms import SaslCredentials, SaslError, make_mechanism
from kqactors.core.sasl.oauthbearer import (
    OAuthBearer,
    OAuthToken,
    UnsecuredJwtError,
    jwt_claims,
    parse_extensions,
    parse_unsecured_config,
    unsecured_token,
)
from kqactors.core.sasl.plain import Plain
from kqactors.core.sasl.scram import Scram, saslname


def test_plain_sends_one_message_without_authzid():
    plain = Plain("alice", "pw")
    assert plain.first() == b"\0alice\0pw" and plain.done
    assert plain.step(b"") is None
    assert "pw" not in repr(plain)


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "b=o,b"])
def test_scram_against_scramp_verifies_the_server(name, user):
    scramp = pytest.importorskip("scramp")
    mechanism = scramp.ScramMechanism(name)
    info = mechanism.make_auth_info("s3cret", iteration_count=4096)
    server = mechanism.make_server(lambda _user: info)
    client = Scram(name, user, "s3cret")
    first = client.first()
    assert first.startswith(b"n,,n=" + saslname(user).encode())
    server.set_client_first(first.decode())
    final = client.step(server.get_server_first().encode())
    server.set_client_final(final.decode())
    assert client.step(server.get_server_final().encode()) is None
    assert client.done
    assert "s3cret" not in repr(client)


def test_scram_wrong_password_is_refused_by_the_server():
    scramp = pytest.importorskip("scramp")
    mechanism = scramp.ScramMechanism("SCRAM-SHA-256")
    info = mechanism.make_auth_info("right", iteration_count=4096)
    server = mechanism.make_server(lambda _user: info)
    client = Scram("SCRAM-SHA-256", "alice", "wrong")
    server.set_client_first(client.first().decode())
    with pytest.raises(scramp.ScramException):
        server.set_client_final(client.step(server.get_server_first().encode()).decode())


def _server_first(client: Scram, iterations: int = 4096, nonce_suffix: str = "srv") -> bytes:
    nonce = client.first().decode().split("r=", 1)[1]
    salt = base64.b64encode(b"salty").decode()
    return f"r={nonce}{nonce_suffix},s={salt},i={iterations}".encode()


def test_scram_rejects_a_forged_server_signature():
    client = Scram("SCRAM-SHA-256", "alice", "pw")
    client.step(_server_first(client))
    with pytest.raises(SaslError, match="server signature does not verify"):
        client.step(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("server_first,match", [
    (lambda c: _server_first(c, nonce_suffix=""), "nonce"),
    (lambda c: b"r=other,s=c2FsdA==,i=4096", "nonce"),
    (lambda c: _server_first(c, iterations=10), "iteration"),
    (lambda c: b"e=unknown-user", "server error"),
    (lambda c: b"garbage", "malformed"),
])
def test_scram_rejects_bad_server_first_messages(server_first, match):
    client = Scram("SCRAM-SHA-512", "alice", "pw")
    message = server_first(client)
    client.first()
    with pytest.raises(SaslError, match=match):
        client.step(message)


def test_oauthbearer_message_and_error_answer():
    token = OAuthToken("tok.en.value", 2e9, "p", (("traceId", "42"),))
    bearer = OAuthBearer(token)
    assert bearer.first() == b"n,,\x01auth=Bearer tok.en.value\x01traceId=42\x01\x01"
    assert "tok.en" not in repr(bearer) and "tok.en" not in repr(token)
    assert bearer.step(json.dumps({"status": "invalid_token"}).encode()) == b"\x01"
    assert bearer.server_error == "invalid_token"
    ok = OAuthBearer(token)
    ok.first()
    assert ok.step(b"") is None and ok.done


@pytest.mark.parametrize("text", ["auth=x", "bad-key=1", "k"])
def test_invalid_extensions_are_refused(text):
    with pytest.raises(SaslError):
        parse_extensions(text)


def test_unsecured_jwt_matches_librdkafkas_builder():
    token = unsecured_token("principal=admin scope=read,write lifeSeconds=60 extension_traceId=7 "
                            "principalClaimName=azp", now=1000.0)
    header, payload, signature = token.value.split(".")
    assert signature == ""
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    claims = jwt_claims(token.value)
    assert claims == {"azp": "admin", "iat": 1000.0, "exp": 1060.0, "scope": ["read", "write"]}
    assert token.expiry == 1060.0 and token.principal == "admin" and token.extensions == (("traceId", "7"),)


@pytest.mark.parametrize("text", ["", "scope=a", "principal=x lifeSeconds=0", "principal=x nope=1", "principal"])
def test_unsecured_config_errors(text):
    with pytest.raises(UnsecuredJwtError):
        parse_unsecured_config(text)


def test_factory_makes_each_mechanism_and_refuses_others():
    assert make_mechanism(SaslCredentials("PLAIN", "u", "p")).name == "PLAIN"
    assert make_mechanism(SaslCredentials("SCRAM-SHA-512", "u", "p")).name == "SCRAM-SHA-512"
    with pytest.raises(SaslError, match="no OAUTHBEARER token"):
        make_mechanism(SaslCredentials("OAUTHBEARER", token=lambda: None))
    with pytest.raises(SaslError, match="unsupported"):
        make_mechanism(SaslCredentials("GSSAPI"))
    assert "p'" not in repr(SaslCredentials("PLAIN", "u", "p"))
