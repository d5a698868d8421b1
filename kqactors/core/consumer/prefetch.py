"""Bounded consumer prefetch: credit accounting between toppar actors and the application.

Runs in: toppar hosts (``PrefetchCredit``: counts what was handed to the app and not yet consumed, and opens
or closes the partition's fetching) and the app process (``CreditReturner``: gathers what the application
consumed and returns it in a few CREDIT ops rather than one per message). ``partition_limits`` turns the
consumer-wide properties into per-partition limits.

Limits, as librdkafka documents them: queued.min.messages is per partition; queued.max.messages.kbytes is
for the whole consumer queue, so it is shared evenly by the assigned partitions. A fetch may overshoot by
one response per partition (librdkafka's documented fetch.message.max.bytes overshoot).

Versions: credit is tagged with the toppar version of the batches it is for. A version bump (seek, pause,
re-assignment) makes the app drop that partition's queued batches, so the toppar forgets what it had
outstanding and ignores credit tagged with older versions.
"""

from __future__ import annotations

from collections.abc import Hashable

from .settings import FetchSettings

__all__ = ["PrefetchCredit", "CreditReturner", "partition_limits", "RETURN_FRACTION"]

RETURN_FRACTION = 0.25
"""The app returns credit once a partition's consumed-but-unreturned amount reaches this share of its limit."""


def partition_limits(settings: FetchSettings, assigned_partitions: int) -> tuple[int, int]:
    """(max messages, max bytes) each partition may have outstanding in the app's queue."""
    share = max(1, assigned_partitions)
    return settings.queued_min_messages, max(1, settings.queued_max_messages_kbytes * 1024 // share)


class PrefetchCredit:
    """Toppar side: messages/bytes delivered to the app and not yet credited back.

    Mutators return the new flow state (True open, False closed) when it changed, else None, so the toppar
    tells its broker actor only about transitions.
    """

    __slots__ = ("max_messages", "max_bytes", "version", "outstanding_messages", "outstanding_bytes")

    def __init__(self, max_messages: int, max_bytes: int, version: int = 0) -> None:
        _check_limits(max_messages, max_bytes)
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.version = version
        self.outstanding_messages = 0
        self.outstanding_bytes = 0

    @property
    def fetch_allowed(self) -> bool:
        return self.outstanding_messages < self.max_messages and self.outstanding_bytes < self.max_bytes

    def delivered(self, messages: int, nbytes: int) -> bool | None:
        """A batch of ``messages`` (``nbytes`` frame bytes) was sent to the app at the current version."""
        before = self.fetch_allowed
        self.outstanding_messages += messages
        self.outstanding_bytes += nbytes
        return self._change(before)

    def credited(self, version: int, messages: int, nbytes: int) -> bool | None:
        """The app consumed this much of what it was sent at ``version``; stale credit is ignored."""
        if version < self.version:
            return None
        before = self.fetch_allowed
        self.outstanding_messages = max(0, self.outstanding_messages - messages)
        self.outstanding_bytes = max(0, self.outstanding_bytes - nbytes)
        return self._change(before)

    def reset(self, version: int) -> bool | None:
        """New toppar version: the app drops what is queued at older versions, so nothing is outstanding."""
        if version < self.version:
            return None
        before = self.fetch_allowed
        self.version = version
        self.outstanding_messages = 0
        self.outstanding_bytes = 0
        return self._change(before)

    def set_limits(self, max_messages: int, max_bytes: int) -> bool | None:
        """New per-partition limits (the assignment grew or shrank)."""
        _check_limits(max_messages, max_bytes)
        before = self.fetch_allowed
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        return self._change(before)

    def _change(self, before: bool) -> bool | None:
        after = self.fetch_allowed
        return None if after == before else after

    def __repr__(self) -> str:
        return (f"PrefetchCredit(v{self.version} {self.outstanding_messages}/{self.max_messages} msgs "
                f"{self.outstanding_bytes}/{self.max_bytes} B)")


class _Pending:
    __slots__ = ("version", "messages", "nbytes", "threshold_messages", "threshold_bytes")

    def __init__(self, max_messages: int, max_bytes: int, fraction: float) -> None:
        self.version = -1
        self.messages = 0
        self.nbytes = 0
        self.threshold_messages = max(1, int(max_messages * fraction))
        self.threshold_bytes = max(1, int(max_bytes * fraction))


class CreditReturner:
    """App side: accumulates consumption per partition and says when to send a CREDIT op.

    A partition whose toppar stopped fetching has at least its full limit outstanding; once the app consumes
    that, the accumulated amount passes the threshold (a fraction of the limit), so credit always flows back
    while the application keeps consuming. ``flush`` (when the app's queue runs dry) sends what lowered limits
    made due.
    """

    def __init__(self, fraction: float = RETURN_FRACTION) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], not {fraction!r}")
        self.fraction = fraction
        self._pending: dict[Hashable, _Pending] = {}

    def set_limits(self, key: Hashable, max_messages: int, max_bytes: int) -> None:
        _check_limits(max_messages, max_bytes)
        old = self._pending.get(key)
        pending = self._pending[key] = _Pending(max_messages, max_bytes, self.fraction)
        if old is not None:
            pending.version, pending.messages, pending.nbytes = old.version, old.messages, old.nbytes

    def forget(self, key: Hashable) -> None:
        """Partition unassigned: nothing more is returned for it."""
        self._pending.pop(key, None)

    def consumed(self, key: Hashable, version: int, messages: int, nbytes: int) -> tuple[int, int, int] | None:
        """The app handed out ``messages`` (``nbytes`` of frame) fetched at ``version``.

        Returns ``(version, messages, nbytes)`` to send to the partition's toppar now, or None to wait.
        """
        pending = self._pending.get(key)
        if pending is None:
            return None
        if version != pending.version:
            if version < pending.version:
                return None  # batch of an older version: the toppar has forgotten it already
            pending.version, pending.messages, pending.nbytes = version, 0, 0
        pending.messages += messages
        pending.nbytes += nbytes
        if pending.messages >= pending.threshold_messages or pending.nbytes >= pending.threshold_bytes:
            return self._take(pending)
        return None

    def flush(self) -> list[tuple[Hashable, int, int, int]]:
        """The remainders now due, as (key, version, messages, nbytes), for when the app's queue runs dry.

        A remainder below its threshold stays: a threshold never exceeds its limit, so it alone cannot keep
        fetching closed, and returning it on every dry queue would cost the toppar a wake-up per batch at
        low rates. One at or above it (its limits were lowered since) is due now: nothing consumed later
        would send it."""
        out = []
        for key, pending in self._pending.items():
            if pending.messages >= pending.threshold_messages or pending.nbytes >= pending.threshold_bytes:
                out.append((key, *self._take(pending)))
        return out

    @staticmethod
    def _take(pending: _Pending) -> tuple[int, int, int]:
        credit = (pending.version, pending.messages, pending.nbytes)
        pending.messages = 0
        pending.nbytes = 0
        return credit


def _check_limits(max_messages: int, max_bytes: int) -> None:
    if max_messages < 1 or max_bytes < 1:
        raise ValueError(f"prefetch limits must be >= 1, not {max_messages} messages / {max_bytes} bytes")
