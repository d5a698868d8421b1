"""Runs in: the main host (broker/N connections). Owns the SCRAM client mechanism (RFC 5802, with SHA-256 per
RFC 7677 and SHA-512 as Kafka names them): client-first with a fresh nonce, the proof computed from the salted
password, and the server's final signature verified — a server that does not know the password cannot pass.

The password is used as UTF-8 bytes without SASLprep (librdkafka does the same).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from kqactors.core.sasl.mechanisms import SaslError

__all__ = ["Scram", "saslname", "parse_attributes"]

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_MIN_ITERATIONS = 4096


def saslname(name: str) -> str:
    """RFC 5802's escaping of a user name: '=' as '=3D', ',' as '=2C'."""
    return name.replace("=", "=3D").replace(",", "=2C")


def parse_attributes(message: bytes) -> dict[str, str]:
    """``a=value,b=value`` → {"a": "value", ...}; raises SaslError when malformed."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise SaslError("SCRAM server message is not UTF-8") from None
    attributes: dict[str, str] = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslError(f"malformed SCRAM server message attribute {part[:20]!r}")
        attributes.setdefault(part[0], part[2:])
    return attributes


class Scram:
    """One SCRAM exchange: first() → client-first; step(server-first) → client-final;
    step(server-final) → None after verifying the server signature."""

    def __init__(self, name: str, username: str, password: str, nonce: str | None = None) -> None:
        if name not in _HASHES:
            raise SaslError(f"unsupported SCRAM mechanism {name}")
        self.name = name
        self._hash = _HASHES[name]
        self._username = username
        self._password = password.encode()
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._client_first_bare = ""
        self._server_signature = b""
        self._state = 0
        self.done = False

    def __repr__(self) -> str:
        return f"<Scram {self.name} step {self._state}>"

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self._hash).digest()

    def first(self) -> bytes:
        self._client_first_bare = f"n={saslname(self._username)},r={self._nonce}"
        self._state = 1
        return ("n,," + self._client_first_bare).encode()

    def step(self, challenge: bytes) -> bytes | None:
        if self._state == 1:
            self._state = 2
            return self._client_final(challenge)
        if self._state == 2:
            self._verify_server_final(challenge)
            self._state = 3
            self.done = True
            return None
        raise SaslError("unexpected SCRAM server message after the exchange ended")

    def _client_final(self, server_first: bytes) -> bytes:
        attributes = parse_attributes(server_first)
        if "m" in attributes:
            raise SaslError("SCRAM server asks for an extension this client does not support")
        if "e" in attributes:
            raise SaslError(f"SCRAM server error: {attributes['e']}")
        nonce, salt_text, iterations_text = attributes.get("r"), attributes.get("s"), attributes.get("i")
        if nonce is None or salt_text is None or iterations_text is None:
            raise SaslError("SCRAM server-first message lacks r, s or i")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslError("SCRAM server nonce does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_text, validate=True)
            iterations = int(iterations_text)
        except ValueError:
            raise SaslError("SCRAM server-first message has a malformed salt or iteration count") from None
        if iterations < _MIN_ITERATIONS:
            raise SaslError(f"SCRAM iteration count {iterations} is below {_MIN_ITERATIONS}")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first.decode()},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: bytes) -> None:
        attributes = parse_attributes(server_final)
        if "e" in attributes:
            raise SaslError(f"SCRAM server error: {attributes['e']}")
        try:
            verifier = base64.b64decode(attributes.get("v", ""), validate=True)
        except ValueError:
            raise SaslError("SCRAM server-final message has a malformed signature") from None
        if not verifier or not hmac.compare_digest(verifier, self._server_signature):
            raise SaslError("SCRAM server signature does not verify: the server does not know the credentials")
