"""Runs in: the main host. Owns the ``oauth`` actor, the client's one OAUTHBEARER token source (librdkafka's
token refresh): it holds the current token, answers broker connections' OAUTHBEARER_TOKEN requests (at once
when it has a valid token, else when the refresh it starts ends), and refreshes the token at 80% of its
lifetime, as librdkafka does. Where a token comes from:

- ``oauth_cb`` (the app's callable): OAUTHBEARER_REFRESH goes to the app, which runs the callback when it
  serves its queue (poll(), as confluent-kafka) and answers OAUTHBEARER_SET. The app also runs it once when the
  client starts and hands the token over in the spawn args, so a client's first connection never waits for
  a poll().
- ``enable.sasl.oauthbearer.unsecure.jwt``: built here from ``sasl.oauthbearer.config``.
- ``sasl.oauthbearer.method=oidc``: the client-credentials grant against sasl.oauthbearer.token.endpoint.url,
  on a worker thread (the answer comes back through a ThreadInbox); expiry and principal from the JWT.

A failed refresh answers the waiting requests with its reason (their connections fail with _AUTHENTICATION)
and is retried after 10 s. Token values never appear in a log line or an error text.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kqactors.core.sasl.mechanisms import SaslError
from kqactors.core.sasl.oauthbearer import OAuthToken, jwt_claims, parse_extensions, unsecured_token
from kqactors.ops import security as sops
from kqactors.runtime.actor import Actor, ActorContext, on
from kqactors.runtime.op import Op
from kqactors.runtime.threadsafe import ThreadInbox

log = logging.getLogger(__name__)

_TICK = "OAUTH_TICK"
_FETCHED = "OAUTH_FETCHED"
REFRESH_AT = 0.8
RETRY_AFTER_S = 10.0
HTTP_TIMEOUT_S = 30.0


def _payload(token: OAuthToken) -> dict[str, Any]:
    return sops.token_payload(token.value, token.expiry, token.principal, [list(kv) for kv in token.extensions])


def fetch_oidc_token(config: dict[str, Any], now: float) -> OAuthToken:
    """The client-credentials grant (RFC 6749 §4.4) against the configured token endpoint. Raises SaslError
    with a reason that carries neither the client secret nor the token."""
    url = str(config.get("sasl.oauthbearer.token.endpoint.url") or "")
    client_id = str(config.get("sasl.oauthbearer.client.id") or "")
    secret = str(config.get("sasl.oauthbearer.client.secret") or "")
    form = {"grant_type": "client_credentials"}
    if config.get("sasl.oauthbearer.scope"):
        form["scope"] = str(config["sasl.oauthbearer.scope"])
    basic = base64.b64encode(f"{urllib.parse.quote(client_id)}:{urllib.parse.quote(secret)}".encode()).decode()
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST", headers={
        "Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded",
        "Accept": "application/json"})
    context = None
    if url.lower().startswith("https:"):
        context = ssl.create_default_context(cafile=config.get("https.ca.location") or None,
                                             cadata=config.get("https.ca.pem") or None)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S, context=context) as answer:
            body = json.loads(answer.read().decode())
    except urllib.error.HTTPError as exc:
        raise SaslError(f"token endpoint {url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SaslError(f"token endpoint {url} failed: {getattr(exc, 'reason', exc)}") from None
    value = body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise SaslError(f"token endpoint {url} answered without an access_token")
    claims = jwt_claims(value)
    claim = str(config.get("sasl.oauthbearer.sub.claim.name") or "sub")
    principal = claims.get(claim)
    if not isinstance(principal, str) or not principal:
        raise SaslError(f"the token has no {claim!r} claim")
    expiry = claims.get("exp")
    if not isinstance(expiry, (int, float)):
        expires_in = body.get("expires_in")
        if not isinstance(expires_in, (int, float)):
            raise SaslError("the token has no 'exp' claim and the answer no expires_in")
        expiry = now + expires_in
    extensions = parse_extensions(str(config.get("sasl.oauthbearer.extensions") or ""))
    return OAuthToken(value, float(expiry), principal, extensions)


class OAuthActor(Actor):
    """``oauth``. ``config``: the security properties (librdkafka names); ``callback``: True when the app
    has an oauth_cb; ``token``: the app's first token (a token_payload) or None, ``error`` why there is none;
    ``app``: the app's address."""

    def __init__(self, ctx: ActorContext, config: dict[str, Any] | None = None, callback: bool = False,
                 token: dict[str, Any] | None = None, app: str = "app", error: str = "") -> None:
        super().__init__(ctx)
        self.config = dict(config or {})
        self.app = app
        if callback:
            self.source = "callback"
        elif self.config.get("sasl.oauthbearer.method") == "oidc":
            self.source = "oidc"
        else:
            self.source = "unsecured"
        self.token: OAuthToken | None = None
        self.issued_at = 0.0
        self.error = ""
        self.refreshing = False
        self.refresh_deadline = 0.0
        self.retry_at = 0.0
        self.waiting: list[Op] = []
        self.refreshes = 0
        self._inbox: ThreadInbox | None = None
        if token:
            self._accept(token)
        elif error:  # the app's first oauth_cb run failed: requests hear why until the retry
            self.error = error
            self.retry_at = time.time() + RETRY_AFTER_S

    def __repr__(self) -> str:
        return f"<OAuthActor {self.source}>"

    def on_start(self) -> None:
        self.ctx.timer(1.0, Op(_TICK), repeat=True)

    def on_stop(self) -> None:
        if self._inbox is not None:
            self._inbox.close()
            self._inbox = None

    # ---- requests ------------------------------------------------------------------------------------------
    @on(sops.OAUTHBEARER_TOKEN)
    def _on_token_request(self, op: Op) -> None:
        now = time.time()
        if self.token is not None and self.token.expiry > now:
            self.ctx.reply(op, Op(sops.OAUTHBEARER_TOKEN, _payload(self.token)))
            return
        if self.error and not self.refreshing and now < self.retry_at:
            self.ctx.reply(op, Op(sops.OAUTHBEARER_TOKEN, sops.token_payload(None, 0, error=self.error)))
            return
        self.waiting.append(op)
        self._refresh(now)

    @on(_TICK)
    def _on_tick(self, _op: Op) -> None:
        now = time.time()
        if self.refreshing:
            if now >= self.refresh_deadline:
                self.refreshing = False
                self._failed("oauth_cb was not run in time: the application serves it from poll()"
                             if self.source == "callback" else "the token refresh timed out")
            return
        if now < self.retry_at:
            return
        token = self.token
        if token is not None:
            if now >= self.issued_at + REFRESH_AT * max(0.0, token.expiry - self.issued_at):
                self._refresh(now)
        elif self.waiting and now >= self.retry_at:
            self._refresh(now)

    # ---- refresh -------------------------------------------------------------------------------------------
    def _refresh(self, now: float) -> None:
        if self.refreshing:
            return
        self.refreshing = True
        self.refresh_deadline = now + HTTP_TIMEOUT_S + 5
        self.refreshes += 1
        if self.source == "unsecured":
            try:
                token = unsecured_token(str(self.config.get("sasl.oauthbearer.config") or ""), now)
            except ValueError as exc:
                self._failed(f"unsecured JWT: {exc}")
                return
            self._accept(_payload(token))
        elif self.source == "oidc":
            if self._inbox is None:
                self._inbox = ThreadInbox(self.ctx)
            post, config = self._inbox.post, dict(self.config)

            def run() -> None:
                try:
                    token = fetch_oidc_token(config, time.time())
                except SaslError as exc:
                    post(Op(_FETCHED, sops.token_payload(None, 0, error=f"OIDC: {exc}")))
                    return
                post(Op(_FETCHED, _payload(token)))

            threading.Thread(target=run, name="kqactors-oidc-token", daemon=True).start()
        else:
            self.ctx.send(self.app, Op(sops.OAUTHBEARER_REFRESH,
                                       {"config": str(self.config.get("sasl.oauthbearer.config") or "")}))

    @on(_FETCHED)
    def _on_fetched(self, op: Op) -> None:
        self._set(op.payload or {})

    @on(sops.OAUTHBEARER_SET)
    def _on_set(self, op: Op) -> None:
        self._set(op.payload or {})

    def _set(self, payload: dict[str, Any]) -> None:
        if payload.get("value") is None:
            self._failed(str(payload.get("error") or "no token"))
        else:
            self._accept(payload)

    def _accept(self, payload: dict[str, Any]) -> None:
        self.token = OAuthToken(str(payload["value"]), float(payload["expiry"]), str(payload.get("principal", "")),
                                tuple(tuple(kv) for kv in payload.get("extensions") or ()))
        self.issued_at = time.time()
        self.error = ""
        self.refreshing = False
        waiting, self.waiting = self.waiting, []
        answer = _payload(self.token)
        for op in waiting:
            self.ctx.reply(op, Op(sops.OAUTHBEARER_TOKEN, answer))

    def _failed(self, reason: str) -> None:
        log.warning("OAUTHBEARER token refresh failed: %s", reason)
        self.error = reason
        self.refreshing = False
        self.retry_at = time.time() + RETRY_AFTER_S
        if self.token is not None and self.token.expiry <= time.time():
            self.token = None
        waiting, self.waiting = self.waiting, []
        for op in waiting:
            self.ctx.reply(op, Op(sops.OAUTHBEARER_TOKEN, sops.token_payload(None, 0, error=reason)))
