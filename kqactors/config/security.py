"""The security properties' rules: which secrets are never shown, which librdkafka properties cannot apply to
Python's ssl module (refused with the reason), and librdkafka's cross-property checks for TLS and SASL.

Runs in: the app process, from ``Config`` when a client is created (the TLS context is built once there so a
bad CA file or key fails the constructor, as librdkafka does). Owns nothing at run time: broker actors read the
typed values (``broker_security_config``) and ``kqactors.core.tls`` / ``kqactors.core.sasl`` do the work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SECRETS", "UNSUPPORTED", "MECHANISMS", "check_security", "broker_security_config", "redact",
           "SECURITY_PROPERTIES"]

SECRETS = frozenset({"sasl.password", "ssl.key.password", "ssl.key.pem", "ssl.keystore.password",
                     "sasl.oauthbearer.client.secret", "sasl.oauthbearer.assertion.private.key.passphrase",
                     "sasl.oauthbearer.assertion.private.key.pem",
                     "sasl.oauthbearer.client.credentials.client.secret"})
"""Properties whose values never appear in a repr, a log line, an error text or statistics."""

UNSUPPORTED = {
    "ssl.engine.location": "OpenSSL engines cannot be loaded through Python's ssl module",
    "ssl.engine.id": "OpenSSL engines cannot be loaded through Python's ssl module",
    "ssl.providers": "OpenSSL providers cannot be selected through Python's ssl module",
    "ssl.sigalgs.list": "Python's ssl module cannot set the signature algorithms list",
}
"""librdkafka properties that cannot apply to Python's ssl module: with TLS in use, setting one is an error."""

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

SECURITY_PROPERTIES = (
    "security.protocol", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem",
    "ssl.key.location", "ssl.key.pem", "ssl.key.password", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.crl.location", "ssl.cipher.suites", "ssl.curves.list", "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification", "sasl.mechanisms", "sasl.username", "sasl.password",
    "sasl.oauthbearer.config", "enable.sasl.oauthbearer.unsecure.jwt", "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope",
    "sasl.oauthbearer.extensions", "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.sub.claim.name",
    "https.ca.location", "https.ca.pem")
"""What a broker connection needs of the security configuration (shipped to its broker actor)."""

_MASK = "[REDACTED]"


def redact(name: str, value: Any) -> Any:
    """``value``, or a mask when ``name`` is a secret property that is set."""
    return _MASK if name in SECRETS and value not in (None, "") else value


def broker_security_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The security properties a broker actor gets, picked from a client's (shipped) configuration."""
    return {name: config[name] for name in SECURITY_PROPERTIES if name in config}


def uses_tls(config: Mapping[str, Any]) -> bool:
    return str(config.get("security.protocol", "plaintext")).lower() in ("ssl", "sasl_ssl")


def uses_sasl(config: Mapping[str, Any]) -> bool:
    return str(config.get("security.protocol", "plaintext")).lower() in ("sasl_plaintext", "sasl_ssl")


def check_security(config: Mapping[str, Any], is_set: Callable[[str], bool], explicit_ignored: Mapping[str, Any],
                   has_oauth_cb: bool, warn: Callable[[str], None], failed: Callable[[str], Exception],
                   error: Callable[[str], Exception]) -> None:
    """librdkafka's construction-time checks. ``failed(reason)`` makes "Failed to create <kind>: reason";
    ``error(text)`` a plain configuration error; both are raised here."""
    if uses_tls(config):
        for name in sorted(explicit_ignored):
            if name in UNSUPPORTED:
                raise error(f'Configuration property "{name}" is not supported by kqactors: {UNSUPPORTED[name]}')
    mechanism = str(config["sasl.mechanisms"]).strip()
    if uses_sasl(config):
        if mechanism == "GSSAPI":
            raise failed("SASL mechanism GSSAPI (Kerberos) is not supported by kqactors: use PLAIN, "
                         "SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
        if mechanism not in MECHANISMS:
            raise failed(f"Unsupported SASL mechanism: {mechanism}")
        if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            if not config["sasl.username"] or not config["sasl.password"]:
                raise failed("sasl.username and sasl.password must be set")
        if mechanism == "OAUTHBEARER":
            _check_oauthbearer(config, has_oauth_cb, failed)
    elif is_set("sasl.mechanisms"):
        warn(f"Configuration property `sasl.mechanism` set to `{mechanism}` but `security.protocol` is not "
             "configured for SASL: recommend setting `security.protocol` to SASL_SSL or SASL_PLAINTEXT")
    if uses_tls(config):
        from kqactors.core.tls import TlsConfigError, build_context
        try:
            build_context(config)
        except TlsConfigError as exc:
            raise failed(str(exc)) from None
        if config["ssl.keystore.location"] and not config["ssl.keystore.password"]:
            raise failed("`ssl.keystore.password` is mandatory when `ssl.keystore.location` is set")


def _check_oauthbearer(config: Mapping[str, Any], has_oauth_cb: bool, failed: Callable[[str], Exception]) -> None:
    unsecure = bool(config["enable.sasl.oauthbearer.unsecure.jwt"])
    oidc = config["sasl.oauthbearer.method"] == "oidc"
    if unsecure and has_oauth_cb:
        raise failed("`enable.sasl.oauthbearer.unsecure.jwt` and `oauthbearer_token_refresh_cb` are mutually "
                     "exclusive")
    if oidc and unsecure:
        raise failed("`enable.sasl.oauthbearer.unsecure.jwt` and `sasl.oauthbearer.method=oidc` are mutually "
                     "exclusive")
    if oidc:
        for name in ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
                     "sasl.oauthbearer.client.secret"):
            if not config[name]:
                raise failed(f"`{name}` is mandatory when `sasl.oauthbearer.method=oidc` is set")
    if unsecure:
        from kqactors.core.sasl.oauthbearer import UnsecuredJwtError, parse_unsecured_config
        try:
            parse_unsecured_config(str(config["sasl.oauthbearer.config"]))
        except UnsecuredJwtError as exc:
            raise failed(f"sasl.oauthbearer.config: {exc}") from None
    if not (unsecure or oidc or has_oauth_cb):
        raise failed("OAUTHBEARER needs a token source: set oauth_cb, sasl.oauthbearer.method=oidc, or "
                     "enable.sasl.oauthbearer.unsecure.jwt=true")
