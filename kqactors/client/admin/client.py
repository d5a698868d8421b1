"""The AdminClient facade: confluent-kafka's AdminClient API on the actor runtime.

Runs in: the app process. Owns the public AdminClient: the method groups are mixins (topics.py, configs.py,
groups.py, acls.py) over base.AdminBase, which holds the client handle (no toppar hosts: the app and the main
host, whose ``main`` is kqactors.actors.admin:AdminMainActor), the futures dispatcher and option parsing. Here:
poll() (error_cb, stats_cb and the other client callbacks) and set_sasl_credentials().
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kqactors.client.admin.acls import AclsMixin
from kqactors.client.admin.configs import ConfigsMixin
from kqactors.client.admin.groups import GroupsMixin
from kqactors.client.admin.options import c_float
from kqactors.client.admin.topics import TopicsMixin

__all__ = ["AdminClient"]


class AdminClient(TopicsMixin, ConfigsMixin, GroupsMixin, AclsMixin):
    """Kafka admin client, a drop-in for ``confluent_kafka.admin.AdminClient``.

    The admin methods are asynchronous: each returns concurrent.futures.Future objects (a dict of them keyed
    by topic, resource, group, partition, ...; or one future), completed by a background thread whether or not
    the application polls. ``conf`` uses librdkafka property names (bootstrap.servers, socket.timeout.ms —
    the default request and operation timeouts —, error_cb, stats_cb, logger, ...).
    """

    def __init__(self, conf: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(conf, **kwargs)

    def poll(self, timeout: float) -> int:
        """Serve the client's callbacks (error_cb, stats_cb); wait up to ``timeout`` seconds for one (negative:
        without limit). Admin results need no poll. Returns the number of callbacks served."""
        seconds = c_float(timeout)
        self._check_open()
        deadline = time.monotonic() + (float("inf") if seconds < 0 else seconds)
        events = self._rt.events
        served = 0
        while True:
            remaining = deadline - time.monotonic()
            op = events.poll(max(0.0, min(remaining, 3600.0)))
            while op is not None:
                served += self._handle.handle_op(op) or 0
                op = events.poll(0)
            if served or remaining <= 0:
                return served

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set the SASL username and password (PLAIN, SCRAM) used by every later authentication of every
        broker connection; connections already up keep their session (librdkafka). TypeError for non-str."""
        self._check_open()
        self._handle.set_sasl_credentials(username, password)
