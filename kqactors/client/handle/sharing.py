"""Which clients attached to a shared runtime (``kqactors.runtime.dir``) share actors: broker connections,
toppars and their batches.

Runs in: the app process, from the client handle when it attaches. Owns the group key: a producer's
fingerprint of every setting its actors (main, the broker connections, the toppars) act on, so that clients
whose key is the same can be served by one set of actors (docs/runtime.md "Shared runtime"). Settings that only
the app's own side reads are left out (``APP_SIDE_ONLY``): they differ freely between members. Every other
setting is in, unknown or new ones included, so a setting nobody thought about splits groups rather than being
silently taken from another client. ``client.id`` is in: brokers apply quotas and log by it.

Not shared (None: the client gets a namespace of its own, as before): consumers and admin clients (their mains
hold per-client state: a group membership, admin requests), transactional producers (a transactional.id is one
producer's identity) and OAUTHBEARER clients (each runs its own oauth_cb).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kqactors.client.handle.oauth import needs_token_actor

__all__ = ["APP_SIDE_ONLY", "GROUP_FACTORIES", "PRODUCER_MAIN_FACTORY", "group_key"]

PRODUCER_MAIN_FACTORY = "kqactors.actors.main:MainActor"
TOPPAR_FACTORY = "kqactors.actors.toppar:TopparActor"
SHARED_TOPPAR_FACTORY = "kqactors.actors.shared_toppar:SharedTopparActor"
GROUP_FACTORIES = {TOPPAR_FACTORY: SHARED_TOPPAR_FACTORY}
"""In a group, the member-aware actor spawned instead of the app's (its reports go to each message's member)."""

APP_SIDE_ONLY = frozenset({
    "queue.buffering.max.messages", "queue.buffering.max.kbytes",  # each member's own pending table
    "partitioner", "sticky.partitioning.linger.ms",  # the app picks the partition
    "delivery.report.only.error",  # the app turns report rows into callbacks
    "topic.metadata.propagation.max.ms",  # the app's resolver of unknown topics
    "kqactors.runtime.dir", "kqactors.hosts",  # the runtime's, not the client's
    "kqactors.explicit",  # which settings were set by hand: only their values matter
})
"""Producer settings that no actor reads: members of one group may differ in them."""


def group_key(kind: str, shipped: Mapping[str, Any], main_factory: str) -> str | None:
    """The shared group of a client with these settings, or None when it must have actors of its own."""
    if kind != "producer" or main_factory != PRODUCER_MAIN_FACTORY:
        return None  # consumers; an AdminClient's handle says "producer" but runs its own main
    if shipped.get("transactional.id") or needs_token_actor(shipped):
        return None
    items = sorted((name, value) for name, value in shipped.items() if name not in APP_SIDE_ONLY)
    text = json.dumps(items, default=repr, separators=(",", ":"))
    try:  # hashlib's own BLAKE2, without the OpenSSL binding `import hashlib` loads (~5 ms of an attach)
        from _blake2 import blake2b
    except ImportError:  # an interpreter built without it
        from hashlib import blake2b
    return blake2b(text.encode(), digest_size=32).hexdigest()  # secrets reach the server only hashed
