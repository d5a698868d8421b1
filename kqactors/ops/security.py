"""Ops of the OAUTHBEARER token plane: broker connections ask the token source for a token, and the token
source asks the app to run ``oauth_cb`` (callables never leave the app). Also SASL_CREDENTIALS, the
application's ``set_sasl_credentials()`` on its way to every actor that authenticates or spawns connections.

Runs in: every process (names and payload shapes only). The token source is the ``oauth`` actor on the main
host (kqactors.actors.oauth); it holds the current token, refreshes it at 80% of its lifetime (librdkafka's
rule), and answers every OAUTHBEARER_TOKEN request with the token or an error once one is known. A token's
value is a secret: it travels in these payloads only and is never logged.
"""

from __future__ import annotations

from typing import Any

TOKEN_ACTOR = "oauth"
"""The token source's actor name."""

# broker/N → oauth (a request): the current token; the reply is OAUTHBEARER_TOKEN with token_payload()
OAUTHBEARER_TOKEN = "OAUTHBEARER_TOKEN"
# oauth → app: run oauth_cb(sasl.oauthbearer.config) and answer with OAUTHBEARER_SET (served by poll())
OAUTHBEARER_REFRESH = "OAUTHBEARER_REFRESH"
# app → oauth: the callback's token (token_payload), or its failure (error set)
OAUTHBEARER_SET = "OAUTHBEARER_SET"
# app → main (and → the consumer's cgrp), main → broker/N, cgrp → cgrp-coord/N: the SASL username and password
# (PLAIN, SCRAM) of every later authentication, as rd_kafka_sasl_set_credentials(); credentials_payload()
SASL_CREDENTIALS = "SASL_CREDENTIALS"


def credentials_payload(username: str, password: str) -> dict[str, str]:
    """The new SASL credentials. The password is a secret: it travels in this payload only, never logged."""
    return {"username": username, "password": password}


def token_payload(value: str | None, expiry: float, principal: str = "",
                  extensions: list[list[str]] | None = None, error: str = "") -> dict[str, Any]:
    """A token (expiry: seconds since the epoch) or an error text (value None)."""
    return {"value": value, "expiry": expiry, "principal": principal, "extensions": extensions or [],
            "error": error}
