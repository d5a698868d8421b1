"""Runs in: the main host (broker/N connections build the OAUTHBEARER message; the token source actor builds
unsecured tokens) and the app (configuration checks). Owns the OAUTHBEARER client mechanism (RFC 7628 as Kafka
uses it, KIP-255/KIP-342), the token value type, and librdkafka's unsecured-JWT builder
(``enable.sasl.oauthbearer.unsecure.jwt`` with ``sasl.oauthbearer.config``).

A token's value never appears in a repr or an error text.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field

from kqactors.core.sasl.mechanisms import SaslError

__all__ = ["OAuthToken", "OAuthBearer", "UnsecuredJwtError", "parse_unsecured_config", "unsecured_token",
           "parse_extensions", "jwt_claims"]

_EXTENSION_KEY = re.compile(r"^[A-Za-z]+$")
_RESERVED_KEY = "auth"


@dataclass(frozen=True)
class OAuthToken:
    """A bearer token: its value (secret), when it expires (seconds since the epoch), the principal it names
    and SASL extensions (KIP-342)."""

    value: str = field(repr=False)
    expiry: float
    principal: str = ""
    extensions: tuple[tuple[str, str], ...] = ()

    def lifetime_fraction_left(self, now: float, issued: float) -> float:
        span = self.expiry - issued
        return (self.expiry - now) / span if span > 0 else 0.0


def check_extensions(extensions: dict[str, str] | tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """KIP-342's rules: keys are letters only and not "auth"; values are printable (0x21-0x7E, space, tab)."""
    items = tuple(extensions.items()) if isinstance(extensions, dict) else tuple(extensions)
    for key, value in items:
        if not _EXTENSION_KEY.match(key) or key == _RESERVED_KEY:
            raise SaslError(f"invalid SASL extension key {key!r}")
        if any(not (0x21 <= ord(ch) <= 0x7E or ch in " \t\r\n") for ch in value):
            raise SaslError(f"invalid SASL extension value for key {key!r}")
    return items


def parse_extensions(text: str) -> tuple[tuple[str, str], ...]:
    """librdkafka's sasl.oauthbearer.extensions form: ``key=value,key=value``."""
    pairs = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise SaslError(f"SASL extension {key!r} has no '='")
        pairs.append((key.strip(), value.strip()))
    return check_extensions(tuple(pairs))


class OAuthBearer:
    """One OAUTHBEARER exchange: the client message carries the token; a server that refuses it answers with
    a JSON error, to which the client sends the single byte 0x01 (RFC 7628 §3.2.3) and the server then fails
    the exchange."""

    name = "OAUTHBEARER"

    def __init__(self, token: OAuthToken) -> None:
        self._token = token
        self.done = False
        self.server_error = ""

    def __repr__(self) -> str:
        return "<OAuthBearer>"

    def first(self) -> bytes:
        extensions = "".join(f"{key}={value}\x01" for key, value in check_extensions(self._token.extensions))
        return f"n,,\x01auth=Bearer {self._token.value}\x01{extensions}\x01".encode()

    def step(self, challenge: bytes) -> bytes | None:
        if not challenge:
            self.done = True
            return None
        try:
            self.server_error = json.loads(challenge.decode()).get("status", "") or "invalid_token"
        except (ValueError, AttributeError):
            self.server_error = "invalid_token"
        self.done = True
        return b"\x01"


class UnsecuredJwtError(ValueError):
    """sasl.oauthbearer.config cannot make an unsecured token."""


def parse_unsecured_config(text: str) -> dict[str, object]:
    """librdkafka's unsecured-JWT settings: space-separated ``name=value`` among principal (required),
    principalClaimName (sub), scope (comma-separated), scopeClaimName (scope), lifeSeconds (3600) and
    extension_<key>=<value>."""
    settings: dict[str, object] = {"principalClaimName": "sub", "scopeClaimName": "scope", "lifeSeconds": 3600,
                                   "scope": [], "extensions": {}}
    principal = None
    for item in text.split():
        name, sep, value = item.partition("=")
        if not sep:
            raise UnsecuredJwtError(f"malformed item {name!r}: expected name=value")
        if name == "principal":
            principal = value
        elif name in ("principalClaimName", "scopeClaimName"):
            if not value:
                raise UnsecuredJwtError(f"{name} must not be empty")
            settings[name] = value
        elif name == "scope":
            settings["scope"] = [s for s in value.split(",") if s]
        elif name == "lifeSeconds":
            try:
                life = int(value)
            except ValueError:
                raise UnsecuredJwtError(f"lifeSeconds must be an integer, not {value!r}") from None
            if life <= 0:
                raise UnsecuredJwtError("lifeSeconds must be > 0")
            settings["lifeSeconds"] = life
        elif name.startswith("extension_"):
            settings["extensions"][name[len("extension_"):]] = value  # type: ignore[index]
        else:
            raise UnsecuredJwtError(f"unrecognized name {name!r}")
    if not principal:
        raise UnsecuredJwtError("principal=<value> is required")
    settings["principal"] = principal
    try:
        check_extensions(settings["extensions"])  # type: ignore[arg-type]
    except SaslError as exc:
        raise UnsecuredJwtError(str(exc)) from None
    return settings


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsecured_token(config_text: str, now: float) -> OAuthToken:
    """An unsigned JWT (``alg: none``, RFC 7515 appendix A.5) as librdkafka's built-in handler makes it."""
    settings = parse_unsecured_config(config_text)
    life = int(settings["lifeSeconds"])  # type: ignore[arg-type]
    claims: dict[str, object] = {settings["principalClaimName"]: settings["principal"],  # type: ignore[dict-item]
                                 "iat": round(now, 3), "exp": round(now + life, 3)}
    if settings["scope"]:
        claims[settings["scopeClaimName"]] = settings["scope"]  # type: ignore[index]
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return OAuthToken(f"{header}.{payload}.", now + life, str(settings["principal"]),
                      tuple(settings["extensions"].items()))  # type: ignore[union-attr]


def jwt_claims(token: str) -> dict[str, object]:
    """The claims of a JWS compact token, unverified (the broker verifies): used to read ``exp`` and the
    subject of a token an identity provider handed out. Raises SaslError when it is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        raise SaslError("the token is not a JWT (expected three dot-separated parts)")
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(padded))
    except ValueError:
        raise SaslError("the token's payload is not base64url JSON") from None
    if not isinstance(claims, dict):
        raise SaslError("the token's payload is not a JSON object")
    return claims
