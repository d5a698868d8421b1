"""The AdminClient's futures and the thread that completes them.

Runs in: the app process. Owns ``Dispatcher``: it sends each admin request to ``main`` (kqactors.ops.admin) as an
asynchronous runtime request and, on its own daemon thread (started with the first request), waits for the
replies and hands each to the completion registered with it — which sets the request's futures, as
librdkafka's background thread does for confluent-kafka, so a future completes whether or not the application
polls. Completions (and the futures' done-callbacks they trigger) run on that thread; one that raises fails
the futures it was given. A request that cannot be sent, or gets no reply, completes with a runtime error
outcome (_TRANSPORT, _TIMED_OUT, _DESTROY when the client closes).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kqactors.errors import KafkaError, KafkaException
from kqactors.ops import admin as aops
from kqactors.ops.client import runtime_failure_code
from kqactors.runtime.op import ActorError, Op
from kqactors.runtime.runtime import Runtime

__all__ = ["Dispatcher", "Outcome", "new_future", "fail_all"]

_log = logging.getLogger("kqactors.client.admin")
_SLICE_S = 0.2
_REPLY_GRACE_S = 2.0  # main answers by the request timeout; the runtime's own deadline is a safety net

Outcome = dict[str, Any]
"""One call's outcome: {"error_code", "reason", "result", "broker_id"} (kqactors.ops.admin.outcome)."""
Completion = Callable[[list[Outcome]], None]


def new_future() -> concurrent.futures.Future:
    """A running future, as confluent-kafka's (set_running_or_notify_cancel() done: it cannot be cancelled)."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_running_or_notify_cancel()
    return future


def fail_all(futures: Iterable[concurrent.futures.Future], exc: BaseException) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)


def _error_outcomes(count: int, code: int, reason: str) -> list[Outcome]:
    return [aops.outcome(code, reason) for _ in range(max(count, 1))]


class Dispatcher:
    """Sends admin requests to ``main`` and runs each one's completion with its outcomes, on its own thread."""

    def __init__(self, runtime: Runtime, target: str = "main") -> None:
        self._rt = runtime
        self._target = target
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[int, Completion, list[concurrent.futures.Future]]] = {}
        self._queue: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def __len__(self) -> int:
        """Admin requests waiting for their answer."""
        return len(self._pending)

    def submit(self, op_type: str, calls: list[dict[str, Any]], request_timeout_ms: int, complete: Completion,
               futures: list[concurrent.futures.Future]) -> None:
        """Send one admin request; ``complete(outcomes)`` runs once with one outcome per call (``futures`` are
        failed if it raises)."""
        if not calls:
            self._run(complete, [], futures)
            return
        op = Op(op_type, aops.request_payload(calls, request_timeout_ms))
        timeout_s = max(request_timeout_ms, 1) / 1000 + _REPLY_GRACE_S
        with self._lock:
            if self._closed:
                raise RuntimeError("AdminClient has been closed")
            if self._queue is None:
                self._queue = self._rt.new_queue()
            try:
                req_id = self._rt.request_async(self._target, op, self._queue, timeout_s)
            except ActorError as exc:
                outcomes = _error_outcomes(len(calls), KafkaError._TRANSPORT, f"admin request not sent: {exc}")
                req_id = None
            else:
                self._pending[req_id] = (len(calls), complete, futures)
                self._start_thread()
        if req_id is None:
            self._run(complete, outcomes, futures)

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="kqactors-admin", daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                queue = self._queue
            try:
                reply = queue.poll(_SLICE_S)
            except ActorError:
                return  # the runtime closed: close() fails what is left
            if reply is None:
                continue
            with self._lock:
                entry = self._pending.pop(reply.req_id, None)
            if entry is None:
                continue
            count, complete, futures = entry
            if reply.error is not None:
                code = runtime_failure_code(reply.error.code)
                outcomes = _error_outcomes(count, code, f"admin request failed: {reply.error.message}")
            else:
                outcomes = list((reply.payload or {}).get("results") or ())
            self._run(complete, outcomes, futures)

    @staticmethod
    def _run(complete: Completion, outcomes: list[Outcome], futures: list[concurrent.futures.Future]) -> None:
        try:
            complete(outcomes)
        except Exception as exc:  # noqa: BLE001 - a completion's failure is its futures' failure
            _log.debug("admin completion failed", exc_info=True)
            fail_all(futures, exc)

    def close(self) -> None:
        """Fail every request still waiting with _DESTROY and stop the thread (safe to call twice)."""
        with self._lock:
            self._closed = True
            pending, self._pending = self._pending, {}
        for _count, _complete, futures in pending.values():
            fail_all(futures, KafkaException(KafkaError(KafkaError._DESTROY, "Handle is terminating")))
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * _SLICE_S + 1.0)
