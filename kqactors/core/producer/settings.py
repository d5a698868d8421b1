"""Producer settings used by the toppar core, and retry backoff arithmetic.

Runs in: the app process (built once from the user's config, validated) and toppar hosts (shipped as a
plain dict when a toppar actor is spawned). Owns the subset of librdkafka producer properties the
partition core needs, their defaults, and the exponential backoff with jitter between retries.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["ProducerSettings", "retry_backoff_ms", "IDEMPOTENT_MAX_IN_FLIGHT"]

IDEMPOTENT_MAX_IN_FLIGHT = 5
"""Brokers remember the last five batches per producer and partition; more in flight breaks dedup."""

_INT32_MAX = 2_147_483_647

# Config property (and aliases) → settings field.
_PROPERTY_FIELDS: dict[str, str] = {
    "linger.ms": "linger_ms",
    "queue.buffering.max.ms": "linger_ms",
    "batch.size": "batch_size",
    "batch.num.messages": "batch_num_messages",
    "message.max.bytes": "message_max_bytes",
    "message.timeout.ms": "message_timeout_ms",
    "delivery.timeout.ms": "message_timeout_ms",
    "retries": "retries",
    "message.send.max.retries": "retries",
    "retry.backoff.ms": "retry_backoff_ms",
    "retry.backoff.max.ms": "retry_backoff_max_ms",
    "acks": "acks",
    "request.required.acks": "acks",
    "enable.idempotence": "idempotence",
    "enable.gapless.guarantee": "gapless",
    "max.in.flight": "max_in_flight",
    "max.in.flight.requests.per.connection": "max_in_flight",
    "request.timeout.ms": "request_timeout_ms",
    "socket.timeout.ms": "socket_timeout_ms",
    "compression.type": "compression_type",
    "compression.codec": "compression_type",
    "compression.level": "compression_level",
}


@dataclass(frozen=True)
class ProducerSettings:
    """What a toppar needs to batch, retry and time out; defaults are librdkafka's."""

    linger_ms: float = 5.0
    batch_size: int = 1_000_000
    batch_num_messages: int = 10_000
    message_max_bytes: int = 1_000_000
    message_timeout_ms: int = 300_000
    retries: int = _INT32_MAX
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    acks: int = -1
    idempotence: bool = False
    gapless: bool = False
    max_in_flight: int = 1_000_000
    request_timeout_ms: int = 30_000
    socket_timeout_ms: int = 60_000
    compression_type: str = "none"
    compression_level: int = -1
    transactional: bool = False  # transactional.id is set: a partition sends only once it is in the transaction

    @property
    def max_batch_bytes(self) -> int:
        """A batch is cut at min(batch.size, message.max.bytes)."""
        return min(self.batch_size, self.message_max_bytes)

    @property
    def in_flight_limit(self) -> int:
        """Batches of one partition allowed in flight at once."""
        if self.idempotence:
            return min(self.max_in_flight, IDEMPOTENT_MAX_IN_FLIGHT)
        return self.max_in_flight

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ProducerSettings:
        """Settings from librdkafka-named properties; unknown names are ignored (other parts own them).

        Raises ValueError for values of the wrong type or range, and for properties that contradict
        enable.idempotence (acks other than all, retries 0, max.in.flight above 5), as librdkafka does.
        """
        values: dict[str, Any] = {}
        explicit: set[str] = set()
        for prop, raw in config.items():
            field_name = _PROPERTY_FIELDS.get(prop)
            if field_name is None:
                continue
            values[field_name] = _coerce(prop, field_name, raw)
            explicit.add(field_name)
        if values.get("idempotence"):
            if "acks" in explicit and values["acks"] != -1:
                raise ValueError("`acks` must be set to `all` when `enable.idempotence` is true")
            if "retries" in explicit and values["retries"] == 0:
                raise ValueError("`retries` must not be 0 when `enable.idempotence` is true")
            if "max_in_flight" in explicit and values["max_in_flight"] > IDEMPOTENT_MAX_IN_FLIGHT:
                raise ValueError("`max.in.flight` must be at most 5 when `enable.idempotence` is true")
            values["acks"] = -1
        if config.get("transactional.id"):
            values["transactional"] = True
            values["idempotence"] = True
            values["acks"] = -1
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for a spawn payload (msgpack-able)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProducerSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


_RANGES: dict[str, tuple[int, int]] = {
    "linger_ms": (0, 900_000),
    "batch_size": (1, _INT32_MAX),
    "batch_num_messages": (1, 1_000_000),
    "message_max_bytes": (1000, 1_000_000_000),
    "message_timeout_ms": (0, _INT32_MAX),
    "retries": (0, _INT32_MAX),
    "retry_backoff_ms": (1, 300_000),
    "retry_backoff_max_ms": (1, 300_000),
    "acks": (-1, 1000),
    "max_in_flight": (1, 1_000_000),
    "request_timeout_ms": (1, 900_000),
    "socket_timeout_ms": (10, 300_000),
    "compression_level": (-1, 12),
}
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _coerce(prop: str, field_name: str, raw: Any) -> Any:
    if field_name in ("idempotence", "gapless"):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in _TRUE + _FALSE:
            return raw.lower() in _TRUE
        raise ValueError(f"Invalid value for configuration property \"{prop}\": {raw!r} (expected a boolean)")
    if field_name == "compression_type":
        text = str(raw).lower()
        if text not in _CODECS:
            raise ValueError(f"Invalid value \"{raw}\" for configuration property \"{prop}\"")
        return text
    if field_name == "acks" and isinstance(raw, str) and raw.lower() == "all":
        return -1
    if isinstance(raw, bool):
        raise ValueError(f"Invalid value for configuration property \"{prop}\": {raw!r} (expected a number)")
    try:
        number = float(raw) if field_name == "linger_ms" else int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"Invalid value for configuration property \"{prop}\": {raw!r}") from None
    low, high = _RANGES[field_name]
    if not low <= number <= high:
        raise ValueError(f"Configuration property \"{prop}\" value {raw} is outside allowed range {low}..{high}")
    return number


def retry_backoff_ms(retries: int, base_ms: int, max_ms: int,
                     rand: Callable[[], float] = random.random) -> float:
    """Backoff before retry number ``retries`` (1 = first retry): base doubled per retry, capped at max,
    with ±20% jitter so partitions that failed together do not retry in lockstep."""
    exponent = min(max(retries - 1, 0), 30)
    backoff = min(base_ms * (1 << exponent), max_ms)
    jitter = 0.8 + 0.4 * rand()
    return min(backoff * jitter, max_ms)
