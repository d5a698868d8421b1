"""Delivery counters and the serving loop: the C twins (kqactors.native._native) against the Python references
(kqactors.client.producer.buffers), with the same inputs.

A counter's delivered messages are queued as its one shared ``ok_report`` (no Message), and the serving loop
turns a run of them into one ``on_ok(n)``; every other report is served as it is, one callback call each.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from kqactors.client.producer.buffers import (
    PyDeliveryCounter,
    _complete_ok_py,
    new_delivery_counter,
    serve_reports_py,
)
from kqactors.errors import KafkaError
from kqactors.message import TIMESTAMP_CREATE_TIME, Message
from kqactors.native import NATIVE_AVAILABLE, native_module

NATIVE = native_module() if NATIVE_AVAILABLE else None

KINDS = ["python"] + (["native"] if NATIVE is not None else [])


def _impl(kind: str) -> tuple[Any, Any, Any]:
    """(counter class, serve loop, complete_ok) of one implementation."""
    if kind == "python":
        return PyDeliveryCounter, serve_reports_py, _complete_ok_py
    return NATIVE.DeliveryCounter, NATIVE.serve_reports, NATIVE.complete_ok


def _recorder(log: list, name: str) -> tuple[Any, Any]:
    return (lambda n: log.append((name, "ok", n)),
            lambda err, msg: log.append((name, "error", err.code(), msg.value())))


def _scenario(kind: str) -> tuple[list, int, int]:
    """Runs of two counters' successes, an error, and plain callbacks in one queue; what got called."""
    counter_class, serve, _ = _impl(kind)
    log: list = []
    a = counter_class(*_recorder(log, "a"))
    b = counter_class(*_recorder(log, "b"))
    msg = Message("t", 0, -1001, None, b"bad", None, KafkaError(KafkaError._MSG_TIMED_OUT))
    plain = lambda err, m: log.append(("plain", err, m))  # noqa: E731
    ready: deque = deque([a.ok_report, a.ok_report, a.ok_report, b.ok_report, a.ok_report,
                          (a, KafkaError(KafkaError._MSG_TIMED_OUT), msg), (plain, None, "m1"),
                          (b, None, "lone success"), b.ok_report, b.ok_report])
    served = serve(ready)
    return log, served, len(ready)


@pytest.mark.parametrize("kind", KINDS)
def test_runs_of_successes_are_one_call_and_everything_else_is_served_as_queued(kind):
    log, served, left = _scenario(kind)
    assert served == 10 and left == 0
    assert log == [("a", "ok", 3), ("b", "ok", 1), ("a", "ok", 1), ("a", "error", KafkaError._MSG_TIMED_OUT, b"bad"),
                   ("plain", None, "m1"), ("b", "ok", 1), ("b", "ok", 2)]


@pytest.mark.skipif(NATIVE is None, reason="the C extension is not built")
def test_c_and_python_serve_the_same():
    assert _scenario("native") == _scenario("python")


@pytest.mark.parametrize("kind", KINDS)
def test_a_raising_callback_leaves_the_later_reports_queued(kind):
    counter_class, serve, _ = _impl(kind)
    calls: list = []

    def boom(n: int) -> None:
        calls.append(n)
        raise RuntimeError("app callback failed")

    a = counter_class(boom, lambda err, msg: None)
    after = (lambda err, m: calls.append("after"), None, None)
    ready: deque = deque([a.ok_report, a.ok_report, after])
    with pytest.raises(RuntimeError):
        serve(ready)
    assert calls == [2] and list(ready) == [after]
    assert serve(ready) == 1 and calls == [2, "after"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_counter_called_as_a_callback(kind):
    counter_class, _, _ = _impl(kind)
    log: list = []
    counter = counter_class(*_recorder(log, "c"))
    counter(None, "a message")
    counter(KafkaError(KafkaError._MSG_TIMED_OUT), Message("t", 0, -1001, None, b"v", None, None))
    assert log == [("c", "ok", 1), ("c", "error", KafkaError._MSG_TIMED_OUT, b"v")]
    assert counter.ok_report == (counter, None, None)
    with pytest.raises(TypeError):
        counter_class(1, lambda err, msg: None)
    with pytest.raises(TypeError):
        counter_class(lambda n: None, None)


@pytest.mark.parametrize("kind", KINDS)
def test_complete_ok_queues_a_counters_shared_report_and_a_message_for_the_rest(kind):
    counter_class, _, complete_ok = _impl(kind)
    counter = counter_class(lambda n: None, lambda err, msg: None)
    plain = lambda err, msg: None  # noqa: E731
    pending = {1: (None, b"a", None, 111, counter, 0.5, 10), 2: (None, b"b", None, 112, plain, 0.5, 20),
               3: (b"k", b"c", None, 113, counter, 0.5, 30), 5: (None, b"e", None, 115, None, 0.5, 50)}
    ready: deque = deque()
    done, freed = complete_ok(pending, "t", 2, 1, 5, 100, None, 1.0, ready.append, TIMESTAMP_CREATE_TIME)
    assert (done, freed) == (4, 110) and pending == {}
    assert ready[0] is counter.ok_report and ready[2] is counter.ok_report and len(ready) == 3
    callback, err, msg = ready[1]
    assert callback is plain and err is None
    assert (msg.partition(), msg.offset(), msg.value(), msg.timestamp()) == (2, 101, b"b", (TIMESTAMP_CREATE_TIME, 112))


def test_new_delivery_counter_follows_the_switch():
    assert type(new_delivery_counter(print, print, native=None)) is PyDeliveryCounter
    if NATIVE is not None:
        assert type(new_delivery_counter(print, print, native=NATIVE)) is NATIVE.DeliveryCounter
