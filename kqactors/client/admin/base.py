"""What every AdminClient method shares: the client handle, option parsing, futures and the dispatcher.

Runs in: the app process. ``AdminBase`` is the AdminClient's root class; the method groups (topics.py,
configs.py, groups.py, acls.py) are mixins over it. It starts the client through the client handle with no
toppar hosts at all — an admin client is the app plus the main host (``main`` is AdminMainActor) — and
closes it with the dispatcher, failing what was still waiting with _DESTROY.
"""

from __future__ import annotations

import concurrent.futures
import logging
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kqactors.client.admin import options as opts
from kqactors.client.admin.dispatch import Dispatcher, Outcome, fail_all, new_future
from kqactors.client.handle import ClientHandle
from kqactors.config import Config

__all__ = ["AdminBase", "MAIN_FACTORY"]

_log = logging.getLogger("kqactors.client.admin")
MAIN_FACTORY = "kqactors.actors.admin:AdminMainActor"
CLOSED = "AdminClient has been closed"


def _close(handle: ClientHandle, dispatcher: Dispatcher) -> None:
    dispatcher.close()
    handle.close()


class AdminBase:
    """The AdminClient's shared part (see the module docstring)."""

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        config = Config(conf, kind="admin", **kwargs)
        # librdkafka's admin client is a producer handle: statistics name it "<client.id>#producer-<n>"
        self._handle = handle = ClientHandle(config, "producer", _log)
        handle.hosts = 0  # no toppar hosts: the main host only
        self._default_timeout_ms = int(config["socket.timeout.ms"])
        self._rt = handle.start(MAIN_FACTORY)
        self._dispatcher = Dispatcher(self._rt)
        self._closed = False
        self._finalizer = weakref.finalize(self, _close, handle, self._dispatcher)

    # ---- lifecycle -------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(CLOSED)

    def _close(self) -> None:
        self._closed = True
        self._finalizer()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def __len__(self) -> int:
        """Admin requests (and queued events) not served yet."""
        if self._closed:
            return 0
        return len(self._dispatcher)

    # ---- plumbing for the methods ----------------------------------------------------------------------
    def _options(self, kwargs: dict[str, Any], allowed: tuple[str, ...]) -> opts.Options:
        return opts.parse(kwargs, allowed, self._default_timeout_ms)

    def _submit(self, op_type: str, calls: list[dict[str, Any]], options: opts.Options,
                complete: Callable[[list[Outcome]], None], futures: Iterable[concurrent.futures.Future]) -> None:
        """Send the calls as one admin request; ``complete(outcomes)`` sets the futures from the dispatcher's
        thread (``futures`` fail with whatever it raises)."""
        self._check_open()
        self._dispatcher.submit(op_type, calls, options.request_timeout_ms, complete, list(futures))

    @staticmethod
    def _futures(keys: Iterable[Any], check: type | tuple[type, ...] | None = None,
                 error: type[Exception] = ValueError, what: str = "") -> dict[Any, concurrent.futures.Future]:
        """One running future per key (duplicates share one, as confluent-kafka's dict does); a key that is
        not a ``check`` instance raises ``error`` ("Expected list of <what>"). Methods return a copy of the
        dict: the caller may change theirs, the completion sets the futures of this one."""
        futures: dict[Any, concurrent.futures.Future] = {}
        for key in keys:
            if check is not None and not isinstance(key, check):
                raise error(f"Expected list of {what or repr(check)}")
            futures[key] = new_future()
        return futures

    @staticmethod
    def _fail(futures: Iterable[concurrent.futures.Future], exc: BaseException) -> None:
        fail_all(futures, exc)
