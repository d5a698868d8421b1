"""Classification of per-partition Fetch errors into actions.

Runs in: broker actors (pure function, no state). Owns the decision table for an error code found in a
Fetch response partition: whether the client handles it itself (metadata refresh and retry after
fetch.error.backoff.ms), whether the position is reset per auto.offset.reset, or whether the error is
handed to the application (as a consumer error message at the fetch position). The facts follow
librdkafka's Fetch reply handling.
"""

from __future__ import annotations

from dataclasses import dataclass

from kqactors.errors import ERROR_CODES

__all__ = ["FetchErrorAction", "classify_fetch_error", "REFRESH", "RESET", "REPORT", "REPORT_ONCE", "BACKOFF"]

REFRESH = 1
"""Leadership or topic metadata is stale: ask main for a metadata refresh (the partition may move)."""
RESET = 2
"""The fetch offset is outside the log: reset the position per auto.offset.reset."""
REPORT = 4
"""Deliver the error to the application as a consumer error."""
REPORT_ONCE = 8
"""Deliver the error only when it differs from the partition's previous fetch error (no flood)."""
BACKOFF = 16
"""Do not fetch this partition again before fetch.error.backoff.ms."""


@dataclass(frozen=True)
class FetchErrorAction:
    flags: int

    @property
    def refresh(self) -> bool:
        return bool(self.flags & REFRESH)

    @property
    def reset(self) -> bool:
        return bool(self.flags & RESET)

    @property
    def report(self) -> bool:
        return bool(self.flags & (REPORT | REPORT_ONCE))

    @property
    def report_once(self) -> bool:
        return bool(self.flags & REPORT_ONCE)

    @property
    def backoff(self) -> bool:
        return bool(self.flags & BACKOFF)


def _build_table() -> dict[int, int]:
    table: dict[int, int] = {}

    def put(flags: int, *names: str) -> None:
        for name in names:
            table[ERROR_CODES[name]] = flags

    # Handled by the client: stale leadership or topic knowledge, or a replica not caught up yet.
    put(REFRESH | BACKOFF, "OFFSET_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PART", "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_FOR_PARTITION", "BROKER_NOT_AVAILABLE", "REPLICA_NOT_AVAILABLE", "KAFKA_STORAGE_ERROR",
        "UNKNOWN_LEADER_EPOCH", "FENCED_LEADER_EPOCH", "UNKNOWN_TOPIC_ID", "INCONSISTENT_TOPIC_ID")
    put(RESET | BACKOFF, "OFFSET_OUT_OF_RANGE")
    # Not authorised: tell the application once, keep retrying slowly (ACLs may change).
    put(REPORT_ONCE | BACKOFF, "TOPIC_AUTHORIZATION_FAILED")
    return table


_TABLE = _build_table()
_DEFAULT = FetchErrorAction(REPORT | BACKOFF)
_ACTIONS = {code: FetchErrorAction(flags) for code, flags in _TABLE.items()}


def classify_fetch_error(code: int) -> FetchErrorAction:
    """Actions for a non-zero partition error code in a Fetch response; unknown codes are reported."""
    if code == 0:
        raise ValueError("error code 0 (NO_ERROR) is not a fetch error")
    return _ACTIONS.get(code, _DEFAULT)
