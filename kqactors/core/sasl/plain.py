"""Runs in: the main host (broker/N connections). Owns the PLAIN client mechanism (RFC 4616): one message,
``authzid NUL authcid NUL password`` (no authorization identity, as librdkafka)."""

from __future__ import annotations

__all__ = ["Plain"]


class Plain:
    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._message = b"\0" + username.encode() + b"\0" + password.encode()
        self.done = False

    def first(self) -> bytes:
        self.done = True
        return self._message

    def step(self, challenge: bytes) -> bytes | None:
        return None  # the server's (empty) answer ends the exchange

    def __repr__(self) -> str:
        return "<Plain>"
