"""The producer's ready queue: the C ReadyQueue (a successful DR row kept as one run, its Messages built when
served) against its Python twin PyReadyQueue (a deque whose add_ok queues every report at once), with the same
inputs: the same reports in the same order, the same counts, the same callbacks, nothing leaked.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

from kqactors.client.producer.buffers import PyDeliveryCounter, PyReadyQueue, serve_reports_py
from kqactors.errors import KafkaError
from kqactors.message import TIMESTAMP_CREATE_TIME
from kqactors.native import NATIVE_AVAILABLE, native_module

NATIVE = native_module() if NATIVE_AVAILABLE else None
KINDS = ["python"] + (["native"] if NATIVE is not None else [])


def _impl(kind: str) -> tuple[Any, Any, Any]:
    """(queue class, serve loop, counter class) of one implementation."""
    if kind == "python":
        return PyReadyQueue, serve_reports_py, PyDeliveryCounter
    return NATIVE.ReadyQueue, NATIVE.serve_reports, NATIVE.DeliveryCounter


def _pending(first: int, count: int, callback: Any = None, counter: Any = None) -> dict:
    """Pending entries (key, value, headers, timestamp, callback, enq_time, size); every 4th has ``counter``."""
    out = {}
    for msgid in range(first, first + count):
        cb = counter if counter is not None and msgid % 4 == 0 else callback
        out[msgid] = (b"k%d" % msgid, b"v%d" % msgid, None, 1000 + msgid, cb, 0.25, 10 + msgid)
    return out


def _fields(report: tuple) -> tuple:
    cb, err, msg = report
    if msg is None:
        return (cb, err, None)
    return (cb, err, msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp(),
            msg.latency())


@pytest.mark.parametrize("kind", KINDS)
def test_add_ok_counts_and_reports_as_complete_ok_would(kind):
    queue_class, _serve, _counter = _impl(kind)
    ready = queue_class()
    pending = _pending(1, 6)
    del pending[3]  # reported already: skipped
    done = ready.add_ok(pending, "t", 2, 1, 6, 500, len, 2.0, TIMESTAMP_CREATE_TIME)
    assert done == (5, sum(10 + m for m in (1, 2, 4, 5, 6))) and pending == {}
    assert len(ready) == 5 and bool(ready)
    reports = [_fields(r) for r in ready]
    assert reports[0] == (len, None, "t", 2, 500, b"k1", b"v1", (TIMESTAMP_CREATE_TIME, 1001), 1.75)
    assert [r[4] for r in reports] == [500, 501, 503, 504, 505]  # offset = base + (msgid - first)
    assert [_fields(r) for r in ready] == reports  # looking again gives the same reports


@pytest.mark.parametrize("kind", KINDS)
def test_deque_operations_see_one_report_per_message_in_order(kind):
    queue_class, _serve, _counter = _impl(kind)
    ready = queue_class()
    ready.append(("a", None, None))
    ready.add_ok(_pending(1, 3), "t", 0, 1, 3, 0, print, 1.0, TIMESTAMP_CREATE_TIME)
    ready.append(("b", None, None))
    ready.appendleft(("first", None, None))
    assert len(ready) == 6
    assert ready[0] == ("first", None, None)
    assert ready.popleft() == ("first", None, None) and ready.popleft() == ("a", None, None)
    head = ready[0]
    assert head[0] is print and head[2].value() == b"v1"
    assert ready.popleft() is head  # what [0] showed is what popleft() takes
    assert [_fields(r)[6] if r[2] is not None else r[0] for r in ready] == [b"v2", b"v3", "b"]
    assert ready[-1] == ("b", None, None) and ready[1][2].value() == b"v3"
    with pytest.raises(IndexError):
        ready[3]
    ready.clear()
    assert len(ready) == 0 and not ready and list(ready) == []
    with pytest.raises(IndexError):
        ready.popleft()


@pytest.mark.parametrize("kind", KINDS)
def test_serving_calls_every_callback_in_order_and_a_counters_run_once(kind):
    queue_class, serve, counter_class = _impl(kind)
    log: list = []
    counter = counter_class(lambda n: log.append(("ok", n)), lambda err, msg: log.append(("err", msg.value())))
    plain = lambda err, msg: log.append(("plain", msg.offset(), msg.latency()))  # noqa: E731
    ready = queue_class()
    ready.add_ok(_pending(1, 8, plain, counter), "t", 1, 1, 8, 100, None, 3.0, TIMESTAMP_CREATE_TIME)
    ready.append(counter.ok_report)  # a success queued on the slow path: one run with msgid 8's
    ready.add_ok(_pending(9, 4, None, counter), "t", 1, 9, 4, 108, plain, 3.0, TIMESTAMP_CREATE_TIME)
    ready.add_ok(_pending(13, 1, counter), "t", 1, 13, 1, 112, None, 3.0, TIMESTAMP_CREATE_TIME)
    ready.append((counter, KafkaError(KafkaError._MSG_TIMED_OUT), _Msg(b"bad")))
    assert len(ready) == 15
    assert serve(ready) == 15 and len(ready) == 0
    # msgids 1-3 plain, 4 counter, 5-7 plain, 8 + the appended success (one run), 9-11 plain (the default
    # callback), 12 + 13 (one run across two rows), then the error; latency = now - enqueue time
    assert log == [("plain", 100, 2.75), ("plain", 101, 2.75), ("plain", 102, 2.75), ("ok", 1),
                   ("plain", 104, 2.75), ("plain", 105, 2.75), ("plain", 106, 2.75), ("ok", 2),
                   ("plain", 108, 2.75), ("plain", 109, 2.75), ("plain", 110, 2.75), ("ok", 2), ("err", b"bad")]


class _Msg:
    def __init__(self, value: bytes) -> None:
        self._v = value

    def value(self) -> bytes:
        return self._v


@pytest.mark.parametrize("kind", KINDS)
def test_a_raising_callback_leaves_the_rest_queued(kind):
    queue_class, serve, _counter = _impl(kind)
    calls: list = []

    def callback(err: Any, msg: Any) -> None:
        calls.append(msg.offset())
        if msg.offset() == 11:
            raise KeyboardInterrupt

    ready = queue_class()
    ready.add_ok(_pending(1, 4, callback), "t", 0, 1, 4, 10, None, 1.0, TIMESTAMP_CREATE_TIME)
    with pytest.raises(KeyboardInterrupt):
        serve(ready)
    assert calls == [10, 11] and len(ready) == 2
    assert serve(ready) == 2 and calls == [10, 11, 12, 13] and not ready


@pytest.mark.skipif(NATIVE is None, reason="the C extension is not built")
def test_native_queue_releases_every_reference():
    key, value = b"key" * 4, b"value" * 20

    def callback(err: Any, msg: Any) -> None:
        pass

    objects = (key, value, callback)
    gc.collect()
    before = [sys.getrefcount(obj) for obj in objects]
    for way in ("serve", "iterate", "clear", "drop", "popleft"):
        ready = NATIVE.ReadyQueue()
        pending = {m: (key, value, None, 5, callback, 0.5, 3) for m in range(1, 301)}
        ready.add_ok(pending, "t", 0, 1, 300, 0, None, 1.0, TIMESTAMP_CREATE_TIME)
        if way == "serve":
            assert NATIVE.serve_reports(ready) == 300
        elif way == "iterate":
            assert len(list(ready)) == 300
        elif way == "clear":
            ready.clear()
        elif way == "popleft":
            while ready:
                ready.popleft()
        del ready, pending
    gc.collect()
    assert [sys.getrefcount(obj) for obj in objects] == before


@pytest.mark.skipif(NATIVE is None, reason="the C extension is not built")
def test_native_append_alternating_partitions_keeps_each_partitions_msgids_and_frames():
    """The C append remembers the last partition it appended to: alternating partitions, topics and a new
    partition in between must still number and pack each partition's messages on their own."""
    from kqactors.client.producer.buffers import new_producer_buffers

    buffers = new_producer_buffers(1000, 1000)
    order = [("a", 0), ("a", 0), ("a", 1), ("b", 0), ("a", 0), ("a", 1), ("a", 1), ("a", 2), ("a", 0)]
    for index, (topic, partition) in enumerate(order):
        assert buffers.append(topic, partition, None, b"v%d" % index, None, 1, None, 2)
    got = {(buf.topic, buf.partition): (first, count) for buf, first, count, *_ in buffers.take_all()}
    assert got == {("a", 0): (1, 4), ("a", 1): (1, 3), ("b", 0): (1, 1), ("a", 2): (1, 1)}
    pending = {key: sorted((msgid, entry[1]) for msgid, entry in buf.pending.items())
               for key, buf in buffers.partitions.items()}
    assert pending[("a", 0)] == [(1, b"v0"), (2, b"v1"), (3, b"v4"), (4, b"v8")]
    assert pending[("a", 1)] == [(1, b"v2"), (2, b"v5"), (3, b"v6")]


@pytest.mark.skipif(NATIVE is None, reason="the C extension is not built")
def test_native_lock_behaves_as_threading_lock():
    """ProducerBuffers.lock with the extension: threading.Lock's surface, and a waiter blocks (GIL released)
    until the holder lets go."""
    import threading
    import time

    lock = NATIVE.Lock()
    assert not lock.locked() and lock.acquire() and lock.locked()
    assert lock.acquire(False) is False and lock.acquire(timeout=0.01) is False
    with pytest.raises(ValueError):
        lock.acquire(False, 1.0)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
    with lock:
        assert lock.locked()
    assert not lock.locked()
    got: list = []
    lock.acquire()
    waiter = threading.Thread(target=lambda: got.append(lock.acquire()))
    waiter.start()
    time.sleep(0.05)  # the waiter blocks meanwhile (and must not hold the GIL: this thread runs on)
    assert got == []
    lock.release()
    waiter.join(10)
    assert got == [True] and lock.locked()
    lock.release()
    from kqactors.client.producer.buffers import new_producer_buffers

    assert isinstance(new_producer_buffers(10, 10).lock, NATIVE.Lock)
