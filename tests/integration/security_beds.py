"""Test beds of the security tests: a certificate authority with the certificates the scenarios need, Tansu
behind stunnel (TLS, optionally mutual) and helpers to see how a kqactors client fails.

stunnel4 is Debian's package (.ci/run installs it); without it these tests skip with the install hint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kqactors.errors import KafkaError, KafkaException


def require_stunnel() -> None:
    from kqactors.testing.stunnel import StunnelNotFound, find_stunnel
    try:
        find_stunnel()
    except StunnelNotFound as exc:
        pytest.skip(str(exc))


class Pki:
    """The certificates of the TLS scenarios, all made by one fixture."""

    def __init__(self, directory: Path) -> None:
        from kqactors.testing.certs import CertificateAuthority
        self.ca = CertificateAuthority(directory / "ca")
        self.other_ca = CertificateAuthority(directory / "other", "another CA")
        self.server = self.ca.issue("server", hosts=("127.0.0.1", "localhost"))
        self.wrong_host = self.ca.issue("wrong-host", hosts=("broker.invalid",))
        self.expired = self.ca.issue("expired", hosts=("127.0.0.1",), expired=True)
        self.revoked = self.ca.issue("revoked", hosts=("127.0.0.1",))
        self.crl = self.ca.revoke(self.revoked)
        self.client = self.ca.issue("client", hosts=(), client=True)
        self.stranger = self.other_ca.issue("stranger", hosts=(), client=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pytest.importorskip("cryptography")
    return Pki(tmp_path_factory.mktemp("pki"))


def tls_broker(cert: Any, client_ca: Path | None = None) -> Iterator[Any]:
    """Tansu behind stunnel presenting ``cert`` (an Issued); ``client_ca`` requires client certificates."""
    require_stunnel()
    from kqactors.testing.stunnel import TlsTansu
    bed = TlsTansu(cert.cert, cert.key, client_ca).start()
    try:
        yield bed
    finally:
        bed.stop()


def failure(client_class: Any, conf: dict[str, Any], timeout: float = 10.0) -> tuple[KafkaError, list, float]:
    """(the error list_topics raised, what error_cb heard, seconds it took) for a client that cannot connect."""
    heard: list = []
    client = client_class({**conf, "error_cb": heard.append, "kqactors.hosts": 0})
    started = time.monotonic()
    try:
        with pytest.raises(KafkaException) as info:
            client.list_topics(timeout=timeout)
        took = time.monotonic() - started
        deadline = time.monotonic() + 5
        while not heard and time.monotonic() < deadline:
            client.poll(0.2)
    finally:
        _close(client)
    return info.value.args[0], heard, took


def _close(client: Any) -> None:
    if hasattr(client, "flush"):
        client.close(1)
    else:
        client.close()


USERS = {"alice": "alice-secret-pw", "bob": "bob=,secret"}
CLIENTS = {"svc-client": "svc-client-secret-77"}


class SaslBed:
    """Tansu behind the SASL gateway (and, with ``tls``, stunnel in front of the gateway), a token endpoint
    whose key the gateway verifies OAUTHBEARER tokens with, and the users and OAuth clients above."""

    def __init__(self, tls_cert: Any = None, mechanisms: tuple[str, ...] | None = None,
                 session_lifetime_ms: int = 0) -> None:
        from kqactors.testing._process import free_loopback_port
        from kqactors.testing.sasl_gateway import MECHANISMS, SaslGateway, TokenEndpoint
        from kqactors.testing.tansu import TansuBroker
        self.front_port = free_loopback_port()
        self.idp = TokenEndpoint(CLIENTS).start()
        self.tansu = TansuBroker(advertised_port=self.front_port).start()
        gateway_port = free_loopback_port() if tls_cert is not None else self.front_port
        self.gateway = SaslGateway(self.tansu.port, self.tansu.api_versions, USERS, mechanisms or MECHANISMS,
                                   token_key_pem=self.idp.public_key_pem, allow_unsecured_jwt=True,
                                   port=gateway_port, session_lifetime_ms=session_lifetime_ms).start()
        self.proxy = None
        if tls_cert is not None:
            from kqactors.testing.stunnel import StunnelProxy
            self.proxy = StunnelProxy(gateway_port, tls_cert.cert, tls_cert.key, port=self.front_port).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.front_port}"

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        self.gateway.stop()
        self.tansu.stop()
        self.idp.stop()


def sasl_bed(**kwargs: Any) -> Iterator[SaslBed]:
    pytest.importorskip("scramp")
    pytest.importorskip("jwt")
    bed = SaslBed(**kwargs)
    try:
        yield bed
    finally:
        bed.stop()


def mechanism_conf(bed: SaslBed, mechanism: str, user: str = "alice") -> dict[str, Any]:
    """The properties of one way to authenticate (``mechanism`` names a scenario: PLAIN, SCRAM-SHA-256,
    SCRAM-SHA-512, OAUTHBEARER-oidc, OAUTHBEARER-unsecured, OAUTHBEARER-cb)."""
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        return {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": USERS[user]}
    if mechanism == "OAUTHBEARER-oidc":
        client, secret = next(iter(CLIENTS.items()))
        return {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": client, "sasl.oauthbearer.client.secret": secret,
                "sasl.oauthbearer.token.endpoint.url": bed.idp.url, "sasl.oauthbearer.scope": "kafka",
                "sasl.oauthbearer.extensions": "tenant=blue"}
    if mechanism == "OAUTHBEARER-unsecured":
        return {"sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=carol scope=read,write extension_traceId=42"}
    if mechanism == "OAUTHBEARER-cb":
        def oauth_cb(_config: str) -> tuple[str, float, str, dict[str, str]]:
            token = bed.idp.issue("dave", "kafka", lifetime_s=600)
            return token, time.time() + 600, "dave", {"tenant": "green"}
        return {"sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}
    raise ValueError(mechanism)


PRINCIPALS = {"PLAIN": "alice", "SCRAM-SHA-256": "alice", "SCRAM-SHA-512": "alice",
              "OAUTHBEARER-oidc": "svc-client", "OAUTHBEARER-unsecured": "carol", "OAUTHBEARER-cb": "dave"}
