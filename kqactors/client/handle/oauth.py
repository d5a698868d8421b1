"""The app's side of OAUTHBEARER: runs the application's ``oauth_cb`` (callables never leave the app) and
hands the token to the ``oauth`` actor on the main host.

Runs in: the app process, from the client handle — once when the client starts (the first token rides in the
actor's spawn args) and whenever the facade serves an OAUTHBEARER_REFRESH op (poll(), as confluent-kafka).
``oauth_cb(sasl.oauthbearer.config)`` returns ``(token, expiry)`` — expiry in seconds since the epoch —
optionally with a principal and a dict of SASL extensions. A callback that raises or returns something else
becomes an error payload; the token's value is never logged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kqactors.config.security import broker_security_config
from kqactors.ops import security as sops

__all__ = ["run_oauth_cb", "needs_token_actor", "token_actor_args", "TOKEN_ACTOR_FACTORY"]

TOKEN_ACTOR_FACTORY = "kqactors.actors.oauth:OAuthActor"


def needs_token_actor(shipped: Mapping[str, Any]) -> bool:
    """True when the client authenticates with OAUTHBEARER (it then runs the ``oauth`` actor)."""
    return (str(shipped.get("security.protocol", "")).lower() in ("sasl_plaintext", "sasl_ssl")
            and shipped.get("sasl.mechanisms") == "OAUTHBEARER")


def run_oauth_cb(callback: Callable[[str], Any], config_text: str) -> dict[str, Any]:
    """A token_payload from the application's callback (its failure as the payload's error)."""
    try:
        result = callback(config_text)
    except Exception as exc:  # noqa: BLE001 - the application's error becomes the refresh failure
        return sops.token_payload(None, 0, error=f"oauth_cb failed: {type(exc).__name__}: {exc}")
    if not isinstance(result, tuple) or not 2 <= len(result) <= 4:
        return sops.token_payload(None, 0, error="oauth_cb must return (token, expiry[, principal[, extensions]])")
    token, expiry = result[0], result[1]
    principal = result[2] if len(result) > 2 else ""
    extensions = result[3] if len(result) > 3 else {}
    if not isinstance(token, str) or not token or not isinstance(expiry, (int, float)):
        return sops.token_payload(None, 0, error="oauth_cb returned no token string or no numeric expiry")
    if not isinstance(extensions, Mapping):
        return sops.token_payload(None, 0, error="oauth_cb's extensions must be a dict")
    return sops.token_payload(token, float(expiry), str(principal or ""),
                              [[str(k), str(v)] for k, v in extensions.items()])


def token_actor_args(shipped: Mapping[str, Any], callback: Callable[[str], Any] | None) -> dict[str, Any]:
    """Spawn args of the ``oauth`` actor; with a callback, its first token is fetched here and now."""
    config = broker_security_config(shipped)
    args: dict[str, Any] = {"config": config, "callback": callback is not None, "token": None}
    if callback is not None:
        first = run_oauth_cb(callback, str(config.get("sasl.oauthbearer.config") or ""))
        if first["value"] is not None:
            args["token"] = first
        else:
            args["error"] = first["error"]
    return args
