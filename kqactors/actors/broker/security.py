"""Runs in: the main host, inside each broker/N actor. Owns the actor's security part: which transport a
connection attempt gets (TLS with the process's shared ``ssl.SSLContext`` for ssl / sasl_ssl), the SASL
authenticator handed to the connection (sasl_plaintext / sasl_ssl), the OAUTHBEARER token the connection
authenticates with (asked of the ``oauth`` token actor before connecting, kept until it expires), and the
report of TLS and authentication failures to error_cb (an ERR op to main, once per distinct reason until
the connection is up again: reconnects keep their backoff, the application hears once).

``set_sasl_credentials()`` reaches it as a SASL_CREDENTIALS op (``handlers()``): the new username and password
are used by every later authentication of this connection — the next connection attempt (after the reconnect
backoff, as librdkafka) and the next KIP-368 re-authentication — while an UP connection keeps its session.

Secrets (passwords, key PEMs, tokens) stay inside this object and the connection's mechanism; ``repr`` shows
neither, and no log line or error text carries them.

The TLS and SASL machinery (``ssl``, ``core.tls``, ``core.sasl``, ``tls_transport``) is imported when a client's
security.protocol asks for it: a plaintext client's main host never loads it (tests/unit/test_lazy_imports.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kqactors.actors.broker import transport as transports
from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.ops import security as sops
from kqactors.runtime.op import Op

if TYPE_CHECKING:
    from kqactors.core.sasl.oauthbearer import OAuthToken
    from kqactors.core.sasl.steps import SaslAuthenticator

SECURITY_ERRORS = frozenset({KafkaError._SSL, KafkaError._AUTHENTICATION})
_TOKEN_MARGIN_S = 1.0  # a token this close to expiry is not used for a new connection


class BrokerSecurity:
    """One broker actor's security settings and state (``config`` holds librdkafka property names)."""

    def __init__(self, config: dict[str, Any]) -> None:
        protocol = str(config.get("security.protocol") or "plaintext").lower()
        self.protocol = protocol
        self.tls = protocol in ("ssl", "sasl_ssl")
        self.sasl = protocol in ("sasl_plaintext", "sasl_ssl")
        self._tls_config: dict[str, Any] = {}
        if self.tls:
            from kqactors.core.tls import TLS_PROPERTIES  # TLS only: ssl is not loaded for plaintext
            self._tls_config = {name: config[name] for name in TLS_PROPERTIES if name in config}
        self.mechanism = str(config.get("sasl.mechanisms") or "GSSAPI") if self.sasl else ""
        self.token: OAuthToken | None = None
        self.token_pending = False
        self.authenticator: SaslAuthenticator | None = None
        if self.sasl:
            from kqactors.core.sasl.mechanisms import SaslCredentials  # SASL only
            from kqactors.core.sasl.steps import SaslAuthenticator

            self.authenticator = SaslAuthenticator(SaslCredentials(
                self.mechanism, str(config.get("sasl.username") or ""), str(config.get("sasl.password") or ""),
                token=lambda: self.token))
        self._reported = ""

    def __repr__(self) -> str:
        return f"<BrokerSecurity {self.protocol} {self.mechanism}>".replace(" >", ">")

    # ---- credentials ---------------------------------------------------------------------------------------
    def set_credentials(self, username: str, password: str) -> None:
        """New SASL username and password for every later authentication (PLAIN, SCRAM; OAUTHBEARER ignores
        them, as librdkafka). The running mechanism, if any, finishes with the ones it started with."""
        if self.authenticator is None:
            return
        from kqactors.core.sasl.mechanisms import SaslCredentials  # loaded with the authenticator

        current = self.authenticator.credentials
        self.authenticator.credentials = SaslCredentials(current.mechanism, username, password, token=current.token)

    def handlers(self) -> dict[str, Any]:
        """The broker actor's op handlers for this part (SASL_CREDENTIALS)."""
        return {sops.SASL_CREDENTIALS: self._on_credentials}

    def _on_credentials(self, op: Op) -> None:
        payload = op.payload if isinstance(op.payload, dict) else {}
        self.set_credentials(str(payload.get("username") or ""), str(payload.get("password") or ""))

    # ---- transports ------------------------------------------------------------------------------------
    def transport(self, address: transports.AddrInfo, host: str, nodelay: bool,
                  **socket_options: Any) -> transports.Transport:
        """A transport for one attempt (``socket_options``: keepalive, sndbuf, rcvbuf). Raises TlsError when the
        TLS settings cannot be applied."""
        if not self.tls:
            return transports.PlainTransport(address, nodelay, **socket_options)
        from kqactors.actors.broker.tls_transport import TlsTransport
        from kqactors.core.tls import TlsConfigError, context_for

        try:
            context = context_for(self._tls_config)
        except TlsConfigError as exc:
            raise transports.TlsError(str(exc)) from None
        return TlsTransport(address, context, host, nodelay, **socket_options)

    # ---- OAUTHBEARER tokens --------------------------------------------------------------------------------
    def needs_token(self) -> bool:
        """True when the next attempt must first get a (fresh) OAUTHBEARER token."""
        if self.mechanism != "OAUTHBEARER":
            return False
        return self.token is None or self.token.expiry - _TOKEN_MARGIN_S <= time.time()

    def request_token(self, ctx: Any, timeout_s: float, done: Any) -> None:
        """Ask the token actor; ``done(error_text)`` runs on the answer ("" when a token arrived)."""
        if self.token_pending:
            return
        self.token_pending = True

        def on_reply(reply: Op) -> None:
            self.token_pending = False
            if reply.error is not None:
                done(f"no OAUTHBEARER token: the token source did not answer ({reply.error.code})")
                return
            payload = reply.payload or {}
            if payload.get("value") is None:
                done(f"no OAUTHBEARER token: {payload.get('error') or 'the token source has none'}")
                return
            from kqactors.core.sasl.oauthbearer import OAuthToken  # OAUTHBEARER only

            self.token = OAuthToken(payload["value"], float(payload["expiry"]), payload.get("principal", ""),
                                    tuple(tuple(kv) for kv in payload.get("extensions") or ()))
            done("")

        ctx.request(sops.TOKEN_ACTOR, Op(sops.OAUTHBEARER_TOKEN), on_reply, timeout_s)

    # ---- errors --------------------------------------------------------------------------------------------
    def report(self, ctx: Any, code: int, reason: str, text: str) -> None:
        """error_cb hears ``text`` for a TLS or authentication failure once per distinct ``reason`` until the
        next UP."""
        if code not in SECURITY_ERRORS or reason == self._reported:
            return
        self._reported = reason
        ctx.send("main", Op(ops.ERR, ops.err_payload(code, text)))

    def on_up(self) -> None:
        self._reported = ""
