"""Runs in: the main host. Owns nothing: it keeps the factory paths of earlier releases valid —
``kqactors.actors.broker.fetching:ConsumerMainActor`` (now ``kqactors.actors.consumer_main``) and
``...:FetchingBrokerActor`` (now a BrokerActor spawned with its fetch source, ``consumer=True``).
"""

from __future__ import annotations

from typing import Any

from kqactors.actors.broker.actor import BrokerActor
from kqactors.actors.consumer_main import ConsumerMainActor
from kqactors.runtime.actor import ActorContext

__all__ = ["ConsumerMainActor", "FetchingBrokerActor"]


def FetchingBrokerActor(ctx: ActorContext, node_id: int, host: str, port: int,  # noqa: N802 - a factory path
                        config: dict[str, Any] | None = None, owner: str = "main",
                        fetch: dict[str, Any] | None = None) -> BrokerActor:
    """A broker actor with its fetch source (the old subclass's spawn signature)."""
    return BrokerActor(ctx, node_id, host, port, config, owner, consumer=True, fetch=fetch)
