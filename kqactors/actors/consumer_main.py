"""Runs in: the main host. Owns ``ConsumerMainActor``, a Consumer's ``main``: the MainActor whose broker actors
are spawned with their fetch part (``consumer=True``) and get the fetch properties in their config.

Ops in (besides MainActor's): C_REPLICA_KNOWN (ctoppar request; refreshes metadata for an unknown broker).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kqactors.actors.main import BROKER_FACTORY, MainActor
from kqactors.core.consumer.settings import _PROPERTIES as FETCH_PROPERTIES
from kqactors.ops import consumer as cops
from kqactors.runtime.actor import ActorContext, on
from kqactors.runtime.op import Op

log = logging.getLogger(__name__)


class ConsumerMainActor(MainActor):
    """The consumer's ``main``: spawns broker actors with a fetch source and gives them the fetch properties."""

    KIND = "consumer"
    BROKER_ARGS = {"consumer": True}

    def __init__(self, ctx: ActorContext, config: dict[str, Any] | None = None, app: str = "app",
                 broker_factory: str = BROKER_FACTORY) -> None:
        super().__init__(ctx, config, app, broker_factory)

    def _broker_config(self) -> dict[str, Any]:
        config = super()._broker_config()
        for name in FETCH_PROPERTIES:
            if self.config.get(name) is not None:
                config[name] = self.config[name]
        return config

    @on(cops.REPLICA_KNOWN)
    def _on_replica_known(self, op: Op) -> None:
        """KIP-392: a leader named a preferred read replica. One main has no broker actor for (not in the
        metadata it holds) cannot be fetched from: refresh the metadata (librdkafka does the same), and say so."""
        broker_id = int((op.payload or {}).get("broker_id", -1))
        known = broker_id in self.brokers
        if not known:
            log.info("preferred read replica %d is not a known broker: refreshing metadata", broker_id)
            now = time.monotonic()
            self.scheduler.request(None, now)
            self._maybe_refresh(now)
        self.ctx.reply(op, Op(cops.REPLICA_KNOWN, {"broker_id": broker_id, "known": known}))
