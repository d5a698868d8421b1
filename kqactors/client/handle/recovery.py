"""What a client keeps for a restarted ``main`` (docs/reliability.md, "Crash recovery").

Runs in: the app process. ``main`` is restarted by the supervisor from its spawn args, whose ``config`` is the
client handle's ``shipped`` dict (the same object): the facade keeps ``shipped["_recovery"]`` current, so the
main that replaces a dead one starts with it (kqactors.actors.main ``_restore``): the partition actors that
joined main (registered again, told their leader and that main restarted) and, for an idempotent producer, the
producer id/epoch its toppars stamp (adopted instead of a new InitProducerId, so the broker goes on
deduplicating their retries).
"""

from __future__ import annotations

from typing import Any

__all__ = ["RECOVERY_KEY", "MainState"]

RECOVERY_KEY = "_recovery"
"""The shipped-config key main is restarted with (kqactors.actors.main reads it)."""


class MainState:
    """What the app keeps for a restarted main, published into ``shipped`` (main's spawn config, shared with the
    supervisor's spec: the dict is replaced whole, never mutated, so a concurrent re-spawn packs a consistent
    value). Called from one thread at a time (the producer's hand-over thread, the consumer's caller)."""

    __slots__ = ("shipped", "toppars", "identity")

    def __init__(self, shipped: dict[str, Any]) -> None:
        self.shipped = shipped
        self.toppars: list[list[Any]] = []
        self.identity: tuple[int, int] = (-1, -1)
        shipped[RECOVERY_KEY] = {}  # the key exists before main is spawned: later updates only replace it

    def toppar_spawned(self, topic: str, partition: int, name: str) -> None:
        if any(row[2] == name for row in self.toppars):
            return  # spawned again under the same name (after a stop): already known
        self.toppars.append([topic, partition, name])
        self._publish()

    def note_identity(self, identity: tuple[int, int] | None) -> None:
        if identity is not None and identity != self.identity:
            self.identity = identity
            self._publish()

    def _publish(self) -> None:
        producer_id, epoch = self.identity
        self.shipped[RECOVERY_KEY] = {"producer_id": producer_id, "epoch": epoch, "toppars": list(self.toppars)}
