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
