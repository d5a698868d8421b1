"""Consumer fetch settings: the subset of librdkafka consumer properties the fetch pipeline needs.

Runs in: the app process (built once from the validated Config) and broker/toppar hosts (shipped as a plain
dict when a fetcher or toppar actor starts). Owns the defaults (librdkafka's), the normalisation of
``auto.offset.reset`` aliases and ``isolation.level``, and the request timeout of a Fetch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["FetchSettings", "EARLIEST", "LATEST", "ERROR"]

EARLIEST = "earliest"
"""auto.offset.reset: restart from the log start offset."""
LATEST = "latest"
"""auto.offset.reset: restart from the log end offset (high watermark)."""
ERROR = "error"
"""auto.offset.reset: stop the partition and deliver _AUTO_OFFSET_RESET to the application."""

_RESET_ALIASES = {
    "smallest": EARLIEST, "earliest": EARLIEST, "beginning": EARLIEST,
    "largest": LATEST, "latest": LATEST, "end": LATEST,
    "error": ERROR,
}  # fmt: skip

# property name (canonical or alias) → (field, kind, low, high)
_INT32_MAX = 2_147_483_647
_PROPERTIES: dict[str, tuple[str, str, int, int]] = {
    "fetch.wait.max.ms": ("fetch_wait_max_ms", "int", 0, 300_000),
    "fetch.min.bytes": ("fetch_min_bytes", "int", 0, _INT32_MAX),
    "fetch.max.bytes": ("fetch_max_bytes", "int", 0, 2_147_483_135),
    "fetch.message.max.bytes": ("max_partition_fetch_bytes", "int", 1, 1_000_000_000),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", "int", 1, 1_000_000_000),
    "fetch.error.backoff.ms": ("fetch_error_backoff_ms", "int", 0, 300_000),
    "queued.min.messages": ("queued_min_messages", "int", 1, 10_000_000),
    "queued.max.messages.kbytes": ("queued_max_messages_kbytes", "int", 1, 2_097_151),
    "socket.timeout.ms": ("socket_timeout_ms", "int", 10, 300_000),
    "isolation.level": ("read_committed", "isolation", 0, 0),
    "enable.partition.eof": ("enable_partition_eof", "bool", 0, 0),
    "check.crcs": ("check_crcs", "bool", 0, 0),
    "enable.auto.offset.store": ("enable_auto_offset_store", "bool", 0, 0),
    "auto.offset.reset": ("auto_offset_reset", "reset", 0, 0),
    "client.rack": ("client_rack", "str", 0, 0),
}
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


@dataclass(frozen=True)
class FetchSettings:
    """What the fetch planner, decoder and prefetch accounting need; defaults are librdkafka's."""

    fetch_wait_max_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    fetch_error_backoff_ms: int = 500
    queued_min_messages: int = 100_000
    queued_max_messages_kbytes: int = 65_536
    socket_timeout_ms: int = 60_000
    read_committed: bool = True
    enable_partition_eof: bool = False
    check_crcs: bool = False
    enable_auto_offset_store: bool = True
    auto_offset_reset: str = LATEST
    #: Fetch v11+ RackId (KIP-392): a broker with a rack-aware replica.selector.class may name a closer
    #: replica to fetch from.
    client_rack: str = ""

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in (EARLIEST, LATEST, ERROR):
            raise ValueError(f"auto_offset_reset must be earliest, latest or error, not {self.auto_offset_reset!r}")

    @property
    def isolation_level(self) -> int:
        """The Fetch request's IsolationLevel field: 0 = read_uncommitted, 1 = read_committed."""
        return 1 if self.read_committed else 0

    @property
    def request_timeout_ms(self) -> int:
        """A Fetch may legitimately take fetch.wait.max.ms, so its timeout adds socket.timeout.ms to that."""
        return self.fetch_wait_max_ms + self.socket_timeout_ms

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FetchSettings:
        """Settings from librdkafka-named properties: a kqactors Config, its ``to_dict()``, or a plain dict.

        Properties this part does not use are ignored. Raises ValueError for wrong types or ranges.
        """
        values: dict[str, Any] = {}
        for prop, (field_name, kind, low, high) in _PROPERTIES.items():
            if prop not in config:  # a Config holds every property (typed, defaults included)
                continue
            raw = config[prop]
            if raw is None:
                continue
            values[field_name] = _coerce(prop, kind, low, high, raw)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for a spawn payload (msgpack-able)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FetchSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _coerce(prop: str, kind: str, low: int, high: int, raw: Any) -> Any:
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in _TRUE + _FALSE:
            return raw.lower() in _TRUE
        raise ValueError(f'Invalid value for configuration property "{prop}": {raw!r} (expected a boolean)')
    if kind == "isolation":
        text = str(raw).lower()
        if text not in ("read_committed", "read_uncommitted"):
            raise ValueError(f'Invalid value "{raw}" for configuration property "{prop}"')
        return text == "read_committed"
    if kind == "str":
        if not isinstance(raw, str):
            raise ValueError(f'Invalid value for configuration property "{prop}": {raw!r} (expected a string)')
        return raw
    if kind == "reset":
        policy = _RESET_ALIASES.get(str(raw).lower())
        if policy is None:
            raise ValueError(f'Invalid value "{raw}" for configuration property "{prop}"')
        return policy
    if isinstance(raw, bool):
        raise ValueError(f'Invalid value for configuration property "{prop}": {raw!r} (expected a number)')
    try:
        number = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f'Invalid value for configuration property "{prop}": {raw!r}') from None
    if not low <= number <= high:
        raise ValueError(f'Configuration property "{prop}" value {raw} is outside allowed range {low}..{high}')
    return number
