"""Runs in: the main host, inside broker/N actors. Owns reading a response's ``throttle_time_ms`` (KIP-219: the
broker asks the client to hold back for that long because a quota was exceeded) and librdkafka's rule for
reporting it: a throttle event when the time is above zero, and one more (0) when it drops back to zero.

Most responses carry the field first, so it is read without decoding the body; Produce (where it follows the
per-partition results) and the few others are decoded with their generated response class.
"""

from __future__ import annotations

import importlib
import struct
from typing import Any

from kqactors.protocol.generated import API_TABLE

_I32 = struct.Struct(">i")
_PRODUCE = 0

# api key → the first version whose response starts with throttle_time_ms (Kafka's message specs)
FIRST_FIELD_FROM: dict[int, int] = {
    1: 1, 2: 2, 3: 3, 8: 3, 9: 3, 10: 1, 11: 2, 12: 1, 13: 1, 14: 1, 15: 1, 16: 1, 19: 2, 20: 1, 21: 0, 22: 0,
    23: 2, 24: 0, 25: 0, 26: 0, 28: 0, 29: 0, 30: 0, 31: 0, 32: 0, 33: 0, 37: 0, 42: 0, 44: 0, 50: 0, 51: 0,
    43: 0, 60: 0, 68: 0, 69: 0,
}
# api key → the first version whose response has throttle_time_ms somewhere after other fields
LATER_FIELD_FROM: dict[int, int] = {_PRODUCE: 1, 18: 1, 47: 0}
# api keys whose responses carry no throttle_time_ms at any version (SaslHandshake, SaslAuthenticate)
WITHOUT_FIELD: frozenset[int] = frozenset({17, 36})

_classes: dict[int, Any] = {}


def _response_class(api_key: int) -> Any:
    cls = _classes.get(api_key)
    if cls is None:
        _name, module, _request, response, _versions, _flexible = API_TABLE[api_key]
        cls = getattr(importlib.import_module(f"kqactors.protocol.generated.{module}"), response)
        _classes[api_key] = cls
    return cls


def throttle_time_ms(api_key: int, version: int, body: Any, decode_later: bool = True) -> int:
    """The throttle time a response body (after the response header) asks for, 0 when it has none or it
    cannot be read. ``decode_later=False`` skips the responses that would have to be decoded for it."""
    first_from = FIRST_FIELD_FROM.get(api_key)
    if first_from is not None:
        if version < first_from or len(body) < 4:
            return 0
        return max(0, _I32.unpack_from(body, 0)[0])
    later_from = LATER_FIELD_FROM.get(api_key)
    if later_from is None or version < later_from or not decode_later:
        return 0
    if api_key == _PRODUCE and API_TABLE[_PRODUCE][5] is not None and version < API_TABLE[_PRODUCE][5]:
        # Produce before its flexible versions ends with the field: no decoding needed
        return max(0, _I32.unpack_from(body, len(body) - 4)[0]) if len(body) >= 4 else 0
    try:
        return max(0, int(_response_class(api_key).decode(bytes(body), version).throttle_time_ms or 0))
    except Exception:  # noqa: BLE001 - a body the owner of the request will report as malformed anyway
        return 0


class ThrottleReporter:
    """librdkafka's rd_kafka_op_throttle_time: ``observe`` returns the time to report (the throttle event's)
    or None when there is nothing to report. librdkafka remembers the last throttle time per client, so the
    broker actors of a client share one reporter (``CLIENT_REPORTER``: all of them run on the client's main
    host, which runs no other client)."""

    __slots__ = ("last_ms",)

    def __init__(self) -> None:
        self.last_ms = 0

    def observe(self, throttle_ms: int) -> int | None:
        if throttle_ms <= 0 and self.last_ms <= 0:
            return None
        self.last_ms = throttle_ms
        return throttle_ms


CLIENT_REPORTER = ThrottleReporter()
"""The reporter of the client whose main host this process is."""
