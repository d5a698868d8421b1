"""The producer facade's app-side bookkeeping (``ProducerBuffers``): append, hand-over, delivery reports,
queue limits — on the pure-Python path and the C one (``impl``), and the two compared report for report."""

from __future__ import annotations

import gc
import struct
import sys
import threading
import weakref

from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.client.producer.buffers import OFFSET_INVALID, _complete_ok_py, new_producer_buffers
from kqactors.core.producer.packing import unpack_messages
from kqactors.errors import KafkaError
from kqactors.message import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=32))
_headers = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=6), _bytes_or_none), min_size=1, max_size=3))
_message = st.tuples(_bytes_or_none, _bytes_or_none, _headers, st.integers(min_value=0, max_value=2**62))


def fields(msg: Message) -> tuple:
    """Every slot but the latency (a clock reading), read directly: a slot added to Message that the C
    report loop does not fill fails here (an unset slot raises AttributeError)."""
    assert msg._delivery_count is None  # share consumers only; read here so that an unfilled slot fails
    return tuple(getattr(msg, slot) for slot in Message.__slots__ if slot not in ("_latency", "_delivery_count"))


def make(impl, max_messages=100_000, max_kbytes=1_000_000):
    return new_producer_buffers(max_messages, max_kbytes, native=impl)


def test_append_take_and_report_round_trip(impl):
    buffers = make(impl)
    got = []
    callback = got.append
    assert buffers.append("t", 0, b"k1", b"v1", None, 11, None, 4)
    assert buffers.append("t", 0, None, b"v2", [("h", b"x"), ("n", None)], 12, None, 20)
    assert buffers.append("t", 1, b"k3", None, None, 13, None, 2)
    assert (buffers.count, buffers.nbytes, buffers.unsent) == (3, 26, 3)
    taken = {buf.partition: rest for buf, *rest in buffers.take_all()}
    assert buffers.unsent == 0 and buffers.take_all() == []
    first, count, _enq, frame, headers, cuts = taken[0]
    assert (first, count, headers, cuts) == (1, 2, 2, [])
    assert unpack_messages(frame, count) == [(11, b"k1", b"v1", None), (12, None, b"v2", [("h", b"x"), ("n", None)])]
    done = buffers.complete("t", 0, [(1, 2, 0, 100, -1)], lambda err, msg: got.append((err, msg)), False)
    assert done == 2 and (buffers.count, buffers.nbytes) == (1, 2)
    reports = list(buffers.ready)
    assert [r[1] for r in reports] == [None, None]
    assert [fields(r[2]) for r in reports] == [
        ("t", 0, 100, b"k1", b"v1", None, None, (TIMESTAMP_CREATE_TIME, 11), None),
        ("t", 0, 101, None, b"v2", [("h", b"x"), ("n", None)], None, (TIMESTAMP_CREATE_TIME, 12), None),
    ]
    assert all(isinstance(r[2].latency(), float) and r[2].latency() >= 0 for r in reports)
    # A second DR for the same msgids (already reported) adds nothing: exactly one report per message.
    assert buffers.complete("t", 0, [(1, 2, 0, 100, -1)], callback, False) == 0
    assert len(buffers.ready) == 2


def test_callbacks_default_and_none(impl):
    buffers = make(impl)
    own, default = [], []
    buffers.append("t", 0, None, b"a", None, 1, own.append, 1)
    buffers.append("t", 0, None, b"b", None, 2, None, 1)
    buffers.take_all()
    assert buffers.complete("t", 0, [(1, 2, 0, 0, -1)], default.append, False) == 2
    assert [r[0] for r in buffers.ready] == [own.append, default.append]
    buffers.ready.clear()
    # Without any callback the messages still count as done (and free their room), with no report.
    buffers.append("t", 0, None, b"c", None, 3, None, 5)
    buffers.take_all()
    assert buffers.complete("t", 0, [(3, 1, 0, 7, -1)], None, False) == 1
    assert not buffers.ready and (buffers.count, buffers.nbytes) == (0, 0)


def test_errors_log_append_time_and_only_errors(impl):
    buffers = make(impl)
    for index in range(6):
        buffers.append("t", 2, None, b"v", None, 50 + index, None, 1)
    buffers.take_all()
    cb = print
    rows = [(1, 2, KafkaError._MSG_TIMED_OUT, -1, -1), (3, 2, 0, 40, 999), (5, 2, 0, -1, -1)]
    assert buffers.complete("t", 2, rows, cb, False) == 6
    # Message.offset() is None for a logical offset, as confluent-kafka's: the slot holds OFFSET_INVALID
    reports = [(err.code() if err else None, msg._offset, msg.timestamp()) for _cb, err, msg in buffers.ready]
    assert reports == [
        (KafkaError._MSG_TIMED_OUT, OFFSET_INVALID, (TIMESTAMP_CREATE_TIME, 50)),
        (KafkaError._MSG_TIMED_OUT, OFFSET_INVALID, (TIMESTAMP_CREATE_TIME, 51)),
        (None, 40, (TIMESTAMP_LOG_APPEND_TIME, 999)),
        (None, 41, (TIMESTAMP_LOG_APPEND_TIME, 999)),
        (None, OFFSET_INVALID, (TIMESTAMP_CREATE_TIME, 54)),
        (None, OFFSET_INVALID, (TIMESTAMP_CREATE_TIME, 55)),
    ]
    buffers.ready.clear()
    buffers.append("t", 2, None, b"v", None, 1, None, 1)
    buffers.append("t", 2, None, b"v", None, 1, None, 1)
    buffers.take_all()
    assert buffers.complete("t", 2, [(7, 1, 0, 5, -1), (8, 1, KafkaError._PURGE_QUEUE, -1, -1)], cb, True) == 2
    assert [err.code() for _cb, err, _msg in buffers.ready] == [KafkaError._PURGE_QUEUE]


def test_queue_limits(impl):
    buffers = make(impl, max_messages=2, max_kbytes=1)
    assert buffers.append("t", 0, None, b"x" * 10, None, 1, None, 10)
    assert buffers.append("t", 0, None, b"x" * 10, None, 1, None, 10)
    assert not buffers.append("t", 0, None, b"x", None, 1, None, 1)  # max messages
    assert buffers.count == 2 and buffers.unsent == 2
    buffers.take_all()
    buffers.complete("t", 0, [(1, 2, 0, 0, -1)], None, False)
    assert buffers.append("t", 0, None, b"x" * 2000, None, 1, None, 2000)  # alone may exceed the bytes
    assert not buffers.append("t", 0, None, b"x" * 100, None, 1, None, 100)  # bytes
    assert buffers.reserve(10) is False
    msgid = buffers.add_unsendable("t", 0, None, b"y", None, 1, None, 1)
    assert msgid is None


def test_fail_everything_reports_each_pending_message_once(impl):
    buffers = make(impl)
    for index in range(5):
        buffers.append("t", index % 2, None, b"v", None, index, None, 1)
    buffers.take_all()
    buffers.append("t", 0, None, b"w", None, 9, None, 1)  # still in its packer
    buffers.complete("t", 0, [(1, 1, 0, 0, -1)], None, False)
    assert buffers.fail_everything(KafkaError._DESTROY, print) == 5
    assert len(buffers.ready) == 5 and buffers.count == 0 and buffers.unsent == 0
    assert all(err.code() == KafkaError._DESTROY for _cb, err, _msg in buffers.ready)


def test_concurrent_takes_lose_and_duplicate_nothing(impl):
    """produce() appends while the flusher thread takes: every msgid is handed over exactly once, in order."""
    buffers = make(impl, max_messages=0)
    total = 20_000
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def flusher():
        while not stop.is_set() or buffers.unsent:
            for _buf, first, count, _enq, frame, _headers, _cuts in buffers.take_all():
                assert len(unpack_messages(frame, count)) == count
                seen.append((first, count))

    thread = threading.Thread(target=flusher)
    thread.start()
    for index in range(total):
        buffers.append("t", 0, None, index.to_bytes(4, "big"), None, index, None, 4)
    stop.set()
    thread.join(10)
    msgids = [first + i for first, count in seen for i in range(count)]
    assert msgids == list(range(1, total + 1))


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(_message, min_size=1, max_size=40), data=st.data())
def test_native_buffers_match_python(native, messages, data):
    """The same produce/hand-over/report sequence through both paths gives the same frames and the same
    reports (latency aside: it is a clock reading)."""
    callbacks = [None, print, repr]
    rows = []
    first = 1
    while first <= len(messages):  # DR rows: runs of msgids with an error, an offset, a timestamp type
        count = data.draw(st.integers(1, len(messages) - first + 1))
        rows.append((first, count, data.draw(st.sampled_from([0, 0, 2])), data.draw(st.sampled_from([-1, 5, 1000])),
                     data.draw(st.sampled_from([-1, -1, 77]))))
        first += count
    outcomes = []
    for impl in (None, native):
        buffers = make(impl)
        for index, (key, value, headers, ts) in enumerate(messages):
            assert buffers.append("t", 0, key, value, headers, ts, callbacks[index % 3], index)
        frames = [tuple(rest) for _buf, *rest in buffers.take_all()]
        buffers.complete("t", 0, rows, len, False)
        reports = [(cb, err.code() if err else None, fields(msg)) for cb, err, msg in buffers.ready]
        outcomes.append((frames[0][:2] + frames[0][3:], reports, buffers.count, buffers.nbytes))
    assert outcomes[0] == outcomes[1]


def test_native_complete_ok_matches_python_and_does_not_leak(native):
    key, value, headers = b"key" * 5, b"value" * 30, [("h", b"v")]
    objects = (key, value, headers)

    def run(complete_ok):
        pending = {msgid: (key, value, headers, 1000 + msgid, None if msgid % 3 else print, 0.5, 7)
                   for msgid in range(1, 501)}
        del pending[10]  # reported already: skipped
        ready: list = []
        done = complete_ok(pending, "topic", 3, 1, 500, 4000, len, 2.0, ready.append, TIMESTAMP_CREATE_TIME)
        return done, pending, [(cb, err, fields(msg), msg.latency()) for cb, err, msg in ready]

    gc.collect()
    before = [sys.getrefcount(obj) for obj in objects]
    for _ in range(3):
        assert run(native.complete_ok) == run(_complete_ok_py)
    gc.collect()
    assert [sys.getrefcount(obj) for obj in objects] == before
    done, pending, reports = run(native.complete_ok)
    assert done == (499, 499 * 7) and pending == {}
    assert reports[0] == (len, None, ("topic", 3, 4000, key, value, headers, None, (1, 1001), None), 1.5)
    assert reports[2][0] is print


def test_native_append_and_reports_do_not_leak(native):
    """Through the C append, the C DR loop and back: every reference taken is given back."""
    key, value, headers, callback = b"k" * 8, b"v" * 100, [("h", b"x")], print
    objects = (key, value, headers, callback)
    gc.collect()
    before = [sys.getrefcount(obj) for obj in objects]
    for _ in range(3):
        buffers = make(native)
        for _index in range(1000):
            assert buffers.append("t", 0, key, value, headers, 5, callback, 120)
        assert not buffers.append("t", 0, key, value, headers, 5, callback, 10**12)  # over the bytes limit
        buffers.take_all()
        buffers.complete("t", 0, [(1, 1000, 0, 0, -1)], None, False)
        assert len(buffers.ready) == 1000 and buffers.count == 0
        del buffers
    gc.collect()
    assert [sys.getrefcount(obj) for obj in objects] == before


def test_native_append_error_releases_the_lock_and_changes_nothing(native):
    buffers = make(native)
    assert buffers.append("t", 0, None, b"v", None, 1, None, 1)
    for bad in (dict(key="not bytes"), dict(headers=[(b"name", b"v")]), dict(timestamp=2**64)):
        args = dict(key=None, headers=None, timestamp=1) | bad
        try:
            buffers.append("t", 0, args["key"], b"v", args["headers"], args["timestamp"], None, 1)
        except (TypeError, OverflowError, ValueError, struct.error):
            pass
        else:
            raise AssertionError(f"{bad} was accepted")
        assert not buffers.lock.locked()
    assert (buffers.count, buffers.nbytes, buffers.unsent) == (1, 1, 1)
    assert buffers.append("t", 0, None, b"w", None, 2, None, 1, reserved=True)
    assert (buffers.count, buffers.nbytes, buffers.unsent) == (1, 1, 2)  # reserved: counted before
    (_buf, first, count, _enq, frame, _h, _c), = buffers.take_all()
    assert (first, count) == (1, 2)  # no msgid was used up by the failed appends
    assert unpack_messages(frame, count) == [(1, None, b"v", None), (2, None, b"w", None)]


class _Box:
    """A weak-referenceable object to close a cycle with."""

    ref: object = None


def test_native_in_flight_objects_stay_out_of_the_cycle_collector(native):
    """Pending entries and delivery reports are untracked (full collections no longer scan every message
    in flight); a setter that stores an arbitrary object tracks its Message again, so a cycle through a
    report is still collected."""
    buffers = make(native)
    assert buffers.append("t", 0, b"k", b"v", [("h", b"x")], 5, print, 4)
    assert buffers.append("t", 0, None, b"w", None, 6, print, 1)
    entries = [entry for buf in buffers.partitions.values() for entry in buf.pending.values()]
    assert len(entries) == 2 and not any(gc.is_tracked(entry) for entry in entries)
    buffers.take_all()
    buffers.complete("t", 0, [(1, 2, 0, 10, -1)], None, False)
    reports = list(buffers.ready)
    assert len(reports) == 2
    assert not any(gc.is_tracked(report) or gc.is_tracked(report[2]) for report in reports)
    buffers.ready.clear()

    for setter in ("set_key", "set_value", "set_error", "set_topic"):
        msg = reports.pop()[2] if reports else Message("t", 0, 1)
        box = _Box()
        box.ref = msg
        getattr(msg, setter)(box)  # msg -> box -> msg
        assert gc.is_tracked(msg)
        box_alive = weakref.ref(box)
        del box, msg
        gc.collect()
        assert box_alive() is None, setter
