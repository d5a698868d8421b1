"""Runs in: the main host, inside each broker/N connection. Owns SASL as ``kqactors.core.connection`` handshake
steps: SaslHandshake v1 in AUTH_HANDSHAKE (the mechanism is offered; a broker that does not enable it answers
UNSUPPORTED_SASL_MECHANISM with the ones it does), then SaslAuthenticate rounds in AUTH_REQ until the client
mechanism is done. Any refusal is a HandshakeError (_AUTHENTICATION) whose text says why — never the secret.

``SaslAuthenticator`` is the connection's ``Authenticator``: it hands out fresh steps per connection attempt
and keeps what the last success told (the session lifetime for KIP-368 re-authentication).
"""

from __future__ import annotations

from typing import Any

from kqactors.core.connection import ConnState, HandshakeError, StepRequest
from kqactors.core.sasl.mechanisms import Mechanism, SaslCredentials, SaslError, make_mechanism
from kqactors.errors import KafkaError
from kqactors.protocol.api import NegotiatedVersions
from kqactors.protocol.requests import SASL_AUTHENTICATE, SASL_HANDSHAKE

__all__ = ["SaslAuthenticator", "SaslHandshakeStep", "SaslAuthenticateStep"]

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34


def _error_name(code: int) -> str:
    try:
        return KafkaError(code).name()
    except Exception:  # noqa: BLE001 - an unknown code is still reported by number
        return f"error {code}"


class SaslAuthenticator:
    """The SASL steps of each connection attempt of one broker connection."""

    def __init__(self, credentials: SaslCredentials) -> None:
        self.credentials = credentials
        #: the session lifetime the broker granted at the last successful authentication (0: none)
        self.session_lifetime_ms = 0
        self.authentications = 0

    def __repr__(self) -> str:
        return f"<SaslAuthenticator {self.credentials.mechanism}>"

    def steps(self) -> list[Any]:
        return [SaslHandshakeStep(self.credentials.mechanism), SaslAuthenticateStep(self)]

    def reauth_steps(self) -> list[Any]:
        """KIP-368: a re-authentication on an UP connection runs SaslHandshake + SaslAuthenticate again."""
        return self.steps()

    def authenticated(self, session_lifetime_ms: int) -> None:
        self.session_lifetime_ms = max(0, int(session_lifetime_ms))
        self.authentications += 1


class SaslHandshakeStep:
    name = "SaslHandshake"
    state = ConnState.AUTH_HANDSHAKE

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism

    def start(self, versions: NegotiatedVersions) -> StepRequest | None:
        version = versions.pick(SASL_HANDSHAKE.api_key, SASL_HANDSHAKE.min_version, SASL_HANDSHAKE.max_version)
        if version is None:
            raise HandshakeError("SASL handshake failed: the broker does not offer SaslHandshake v1 (is this a "
                                 "SASL listener?)")
        return SASL_HANDSHAKE.api_key, version, SASL_HANDSHAKE.encode(version, {"mechanism": self.mechanism}, [])

    def on_response(self, versions: NegotiatedVersions, api_key: int, version: int,
                    body: bytes) -> StepRequest | None:
        try:
            response = SASL_HANDSHAKE.decode(version, body)
        except Exception as exc:  # noqa: BLE001 - a malformed answer fails the connection, said so
            raise HandshakeError(f"SASL handshake failed: malformed SaslHandshake response: {exc}") from None
        if response.error_code == UNSUPPORTED_SASL_MECHANISM:
            offered = ", ".join(response.mechanisms) or "none"
            raise HandshakeError(f"SASL handshake failed: Unsupported SASL mechanism: the broker does not enable "
                                 f"{self.mechanism} (broker's supported mechanisms: {offered})")
        if response.error_code:
            raise HandshakeError(f"SASL handshake failed: {_error_name(response.error_code)}")
        return None


class SaslAuthenticateStep:
    name = "SaslAuthenticate"
    state = ConnState.AUTH_REQ

    def __init__(self, owner: SaslAuthenticator) -> None:
        self.owner = owner
        self.mechanism: Mechanism | None = None
        self.version = 0

    def _request(self, payload: bytes) -> StepRequest:
        return SASL_AUTHENTICATE.api_key, self.version, SASL_AUTHENTICATE.encode(self.version,
                                                                                  {"auth_bytes": payload}, [])

    def start(self, versions: NegotiatedVersions) -> StepRequest | None:
        version = versions.pick(SASL_AUTHENTICATE.api_key, SASL_AUTHENTICATE.min_version,
                                SASL_AUTHENTICATE.max_version)
        if version is None:
            raise HandshakeError("SASL authentication error: the broker does not offer SaslAuthenticate")
        self.version = version
        mechanism_name = self.owner.credentials.mechanism
        try:
            self.mechanism = make_mechanism(self.owner.credentials)
            first = self.mechanism.first()
        except SaslError as exc:
            raise HandshakeError(f"SASL authentication error: {mechanism_name}: {exc}") from None
        return self._request(first)

    def on_response(self, versions: NegotiatedVersions, api_key: int, version: int,
                    body: bytes) -> StepRequest | None:
        mechanism = self.mechanism
        assert mechanism is not None
        try:
            response = SASL_AUTHENTICATE.decode(version, body)
        except Exception as exc:  # noqa: BLE001
            raise HandshakeError(f"SASL authentication error: malformed SaslAuthenticate response: {exc}") from None
        if response.error_code:
            detail = response.error_message or _error_name(response.error_code)
            server_error = getattr(mechanism, "server_error", "")
            if server_error:
                detail = f"{detail} (token refused: {server_error})"
            if mechanism.name not in detail:
                detail = f"{detail} (mechanism {mechanism.name})"
            raise HandshakeError(f"SASL authentication error: {detail}")
        if mechanism.done and not response.auth_bytes:
            self.owner.authenticated(response.session_lifetime_ms)
            return None
        try:
            answer = mechanism.step(bytes(response.auth_bytes))
        except SaslError as exc:
            raise HandshakeError(f"SASL authentication error: {mechanism.name}: {exc}") from None
        if answer is None:
            self.owner.authenticated(response.session_lifetime_ms)
            return None
        return self._request(answer)
