"""Runs in: the main host (broker/N connections). Owns the client mechanism interface and the factory that
makes a fresh mechanism per connection attempt from the credentials.

A mechanism is a small state machine: ``first()`` gives the initial client message, ``step(challenge)`` the
answer to each server message (None when the client has nothing more to send), and ``done`` says whether the
exchange is complete from the client's side. A bad server message raises SaslError; credentials are never in
its text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["SaslError", "Mechanism", "SaslCredentials", "make_mechanism"]


class SaslError(Exception):
    """The exchange cannot go on (a malformed or failed server message, a signature that does not verify)."""


class Mechanism(Protocol):
    name: str
    done: bool

    def first(self) -> bytes: ...

    def step(self, challenge: bytes) -> bytes | None: ...


@dataclass
class SaslCredentials:
    """What a connection authenticates with. Secrets are kept out of ``repr``; ``token`` (OAUTHBEARER) is a
    callable returning the current ``OAuthToken`` or None."""

    mechanism: str
    username: str = ""
    password: str = field(default="", repr=False)
    token: Callable[[], object] | None = field(default=None, repr=False)


def make_mechanism(credentials: SaslCredentials) -> Mechanism:
    """A fresh client mechanism for one authentication. Raises SaslError for an unknown name or a missing
    token."""
    name = credentials.mechanism
    if name == "PLAIN":
        from kqactors.core.sasl.plain import Plain
        return Plain(credentials.username, credentials.password)
    if name in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        from kqactors.core.sasl.scram import Scram
        return Scram(name, credentials.username, credentials.password)
    if name == "OAUTHBEARER":
        from kqactors.core.sasl.oauthbearer import OAuthBearer, OAuthToken
        token = credentials.token() if credentials.token is not None else None
        if not isinstance(token, OAuthToken):
            raise SaslError("no OAUTHBEARER token available")
        return OAuthBearer(token)
    raise SaslError(f"unsupported SASL mechanism {name}")
