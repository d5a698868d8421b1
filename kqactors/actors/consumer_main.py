"""Runs in: the main host. Owns ``ConsumerMainActor``, a Consumer's ``main``: the MainActor whose broker actors
are spawned with their fetch part (``consumer=True``) and get the fetch properties in their config.
"""

from __future__ import annotations

from typing import Any

from kqactors.actors.main import BROKER_FACTORY, MainActor
from kqactors.core.consumer.settings import _PROPERTIES as FETCH_PROPERTIES
from kqactors.runtime.actor import ActorContext


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
