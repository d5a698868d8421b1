"""App-side bookkeeping of the producer facade: per-partition append buffers and pending messages.

Runs in: the app process (produce() appends under a lock; the flusher thread takes buffers; poll() turns
DR rows into delivery reports). Owns msgid assignment per partition, the pending table msgid → message
(what a delivery report needs: key, value, headers, timestamp, callback, produce time), the
queue.buffering.max.messages / kbytes accounting, and building ``Message`` objects for delivery reports.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kqactors.core.producer.packing import PyMessagePacker
from kqactors.errors import KafkaError
from kqactors.message import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message
from kqactors.native import NATIVE

__all__ = ["PartitionBuffer", "ProducerBuffers", "DeliveryReport", "OFFSET_INVALID", "NATIVE", "new_producer_buffers",
           "native_buffers_class", "PyDeliveryCounter", "PyReadyQueue", "new_delivery_counter", "serve_reports_py"]

OFFSET_INVALID = -1001
_monotonic = time.monotonic

DeliveryReport = tuple[Callable[..., Any] | None, KafkaError | None, Message]
"""(callback or None, error or None, message) ready to be served by poll()."""

# Pending entry layout (a tuple: cheap to build on the hot path).
_KEY, _VALUE, _HEADERS, _TS, _CB, _ENQ, _SIZE = range(7)


class PartitionBuffer:
    """Messages of one partition not yet handed to its toppar actor, plus those awaiting a report.

    ``packer`` and ``pending`` are never replaced (nor is a partition's buffer): the C append keeps the last
    partition's in hand (Buffers.last_* in kqactors/native/_native.h)."""

    __slots__ = ("topic", "partition", "name", "packer", "next_msgid", "pending", "spawned", "host",
                 "incarnation", "handed_upto", "restart_notice", "seq_notes", "seq_next", "spawn_retry_at")

    def __init__(self, topic: str, partition: int, packer_class: Callable[[], Any] = PyMessagePacker) -> None:
        self.topic = topic
        self.partition = partition
        self.name = f"toppar/{topic}/{partition}"
        self.packer = packer_class()
        self.next_msgid = 1
        self.pending: dict[int, tuple] = {}
        self.spawned = False
        self.host: str | None = None   # runtime host key of its toppar actor
        self.incarnation = 0           # that host's restart count when the toppar was last known alive
        self.handed_upto = 0           # highest msgid handed over to the toppar
        self.restart_notice = False    # the toppar was restarted and must hear so before new messages
        # its toppar could not be started yet (its host was restarting): when to try again (monotonic; 0: not
        # waiting). Its messages wait, pending, and are handed over in order once it runs.
        self.spawn_retry_at = 0.0
        # crash recovery (recovery.py): sequences of the idempotent toppar's unreported batches, first_msgid →
        # (count, producer_id, epoch, base_seq), and (producer_id, epoch, next sequence) after the last one
        self.seq_notes: dict[int, tuple[int, int, int, int]] = {}
        self.seq_next: tuple[int, int, int] | None = None


class PyDeliveryCounter:
    """A delivery callback that reports successes as counts: ``on_ok(n)`` for n delivered messages served in a
    row, ``on_error(err, msg)`` for each failed one (its own report, with its Message).

    For callers that only count deliveries (the ingest daemon's chunks): a delivered message's report is the
    counter's shared ``ok_report`` (no Message is built), and poll() makes a run of them one call. One entry per
    message stays in the ready queue, so len(), flush() and the queue limits count as for any callback.
    Called as a callback (a report served on its own) it does what that report means. The C twin is
    ``kqactors.native._native.DeliveryCounter``; ``new_delivery_counter`` picks the one the buffers use."""

    __slots__ = ("on_ok", "on_error", "ok_report")

    def __init__(self, on_ok: Callable[[int], Any], on_error: Callable[[Any, Any], Any]) -> None:
        if not callable(on_ok) or not callable(on_error):
            raise TypeError("DeliveryCounter(on_ok, on_error) needs two callables")
        self.on_ok = on_ok
        self.on_error = on_error
        self.ok_report = (self, None, None)

    def __call__(self, err: Any, msg: Any) -> Any:
        if err is None:
            return self.on_ok(1)
        return self.on_error(err, msg)


def _complete_ok_py(pending: dict, topic: str, partition: int, first: int, count: int, base_offset: int,
                    default_cb: Callable[..., Any] | None, now: float, ready_append: Callable[[Any], None],
                    ts_type: int) -> tuple[int, int]:
    """The common DR row (success, CreateTime, known offset) in one tight loop: pop each msgid's pending
    entry (a missing one was reported already, e.g. purged locally: exactly one report each) and queue its
    report when it has a callback. Returns (messages done, bytes freed). Caller holds the lock.
    The C twin is ``kqactors.native._native.complete_ok``."""
    pop = pending.pop
    done = 0
    freed = 0
    offset = base_offset - first
    for msgid in range(first, first + count):
        entry = pop(msgid, None)
        if entry is None:
            continue
        done += 1
        freed += entry[_SIZE]
        callback = entry[_CB] or default_cb
        if callback.__class__ is PyDeliveryCounter:
            ready_append(callback.ok_report)  # a counter: its shared report, no Message
        elif callback is not None:
            ready_append((callback, None, Message(
                topic, partition, offset + msgid, entry[_KEY], entry[_VALUE], entry[_HEADERS],
                None, (ts_type, entry[_TS]), now - entry[_ENQ])))
    return done, freed


class PyReadyQueue(deque):
    """The delivery reports waiting for poll(): a deque of (callback, error, message), one per message, so len()
    counts messages (flush() and the queue limits read it). ``add_ok`` queues a DR row's successes.

    The pure-Python twin and reference of ``kqactors.native._native.ReadyQueue``, which keeps such a row as one
    run and builds each Message only when poll() serves it (a row of thousands of Messages built at its
    arrival was out of the cache by the time poll() reached it); anything that looks inside that queue sees
    the same reports as here."""

    __slots__ = ()

    def add_ok(self, pending: dict, topic: str, partition: int, first: int, count: int, base_offset: int,
               default_cb: Callable[..., Any] | None, now: float, ts_type: int) -> tuple[int, int]:
        """complete_ok of one DR row (success, CreateTime, known offset) into this queue: (done, freed)."""
        return _complete_ok_py(pending, topic, partition, first, count, base_offset, default_cb, now, self.append,
                               ts_type)


class ProducerBuffers:
    """All partition buffers of one producer, with global message/byte limits.

    The pure-Python implementation and the reference; ``new_producer_buffers`` returns the native
    subclass when kqactors.native chose the C extension (see ``native_buffers_class``).
    """

    native: Any = None                     # the kqactors.native._native module behind this class, if any
    _packer_class: Callable[[], Any] = PyMessagePacker
    _ready_class: Callable[[], Any] = PyReadyQueue
    _lock_class: Callable[[], Any] = threading.Lock

    def __init__(self, max_messages: int, max_kbytes: int) -> None:
        self.lock = self._lock_class()  # (the extension's Lock, which its C append takes without Python calls)
        self.partitions: dict[tuple[str, int], PartitionBuffer] = {}
        self.max_messages = max_messages  # 0 = no limit
        self.max_bytes = max_kbytes * 1024
        self.count = 0       # produced and not yet reported (reports waiting in ``ready`` excluded)
        self.nbytes = 0
        self.ready: PyReadyQueue = self._ready_class()  # (a native ReadyQueue with the extension)
        self.unsent = 0      # messages sitting in packers (not yet handed to toppars)

    def _new_buffer(self, topic: str, partition: int) -> PartitionBuffer:
        """Create and register the buffer of a partition (caller holds the lock)."""
        buf = self.partitions[(topic, partition)] = PartitionBuffer(topic, partition, self._packer_class)
        return buf

    # ---- produce side (caller holds no lock) -------------------------------------------------------
    def has_room(self, size: int) -> bool:
        if self.max_messages and self.count + len(self.ready) >= self.max_messages:
            return False
        return self.nbytes + size <= self.max_bytes or self.count == 0

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: list | None, timestamp: int, callback: Callable[..., Any] | None, size: int,
               reserved: bool = False) -> bool:
        """Append one message; returns False (nothing appended) when the queue limits are reached.
        ``reserved``: its room was taken earlier by reserve(), so no limit check and no second count."""
        now = _monotonic()
        with self.lock:
            count = self.count
            if not reserved:
                if (self.max_messages and count + len(self.ready) >= self.max_messages) or \
                        (self.nbytes + size > self.max_bytes and count > 0):
                    return False
            buf = self.partitions.get((topic, partition))
            if buf is None:
                buf = self._new_buffer(topic, partition)
            msgid = buf.next_msgid
            buf.next_msgid = msgid + 1
            buf.packer.append_pending(msgid, timestamp, key, value, headers, now, buf.pending, callback, size)
            if not reserved:
                self.count = count + 1
                self.nbytes += size
            self.unsent += 1
        return True

    def append_held(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                    headers: list | None, timestamp: int, callback: Callable[..., Any] | None, size: int,
                    enq: float | None) -> None:
        """append(..., reserved=True) of a message that waited for its topic's metadata: its message.timeout.ms
        and latency count from its produce() (``enq``, monotonic), not from now. Python on both the pure and
        the native buffers (the packers take the enqueue time as an argument)."""
        if enq is None:
            enq = _monotonic()
        with self.lock:
            buf = self.partitions.get((topic, partition))
            if buf is None:
                buf = self._new_buffer(topic, partition)
            msgid = buf.next_msgid
            buf.next_msgid = msgid + 1
            buf.packer.append_pending(msgid, timestamp, key, value, headers, enq, buf.pending, callback, size)
            self.unsent += 1

    def add_unsendable(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                       headers: list | None, timestamp: int, callback: Callable[..., Any] | None, size: int,
                       reserved: bool = False) -> int | None:
        """Record a message that will never be sent (its report follows at once through complete()):
        pending only, never in a packer, so the flusher cannot hand it over meanwhile. Returns its msgid,
        or None when the queue limits are reached (``reserved``: as in append())."""
        with self.lock:
            if not reserved:
                if not self.has_room(size):
                    return None
                self.count += 1
                self.nbytes += size
            buf = self.partitions.get((topic, partition))
            if buf is None:
                buf = self._new_buffer(topic, partition)
            msgid = buf.next_msgid
            buf.next_msgid = msgid + 1
            buf.pending[msgid] = (key, value, headers, timestamp, callback, _monotonic(), size)
        return msgid

    def reserve(self, size: int) -> bool:
        """Count a message that has no partition yet (waiting for its topic's metadata) against the queue
        limits, so len(), flush() and BufferError see it; append(..., reserved=True) places it later."""
        with self.lock:
            if not self.has_room(size):
                return False
            self.count += 1
            self.nbytes += size
        return True

    def unreserve(self, size: int) -> None:
        """Give back the room of a reserve() whose message was not held after all."""
        with self.lock:
            self.count -= 1
            self.nbytes -= size

    def take_all(self) -> list[tuple[PartitionBuffer, int, int, float, bytes, int, list]]:
        """Take every non-empty packer: (buffer, first_msgid, count, first_enq_time, frame, header count,
        segment cuts)."""
        out = []
        with self.lock:
            if not self.unsent:
                return out
            for buf in self.partitions.values():
                if buf.packer.count:
                    packer = buf.packer
                    headers, cuts = packer.headers, packer.cuts
                    first, count, first_enq, frame = packer.take()
                    buf.handed_upto = first + count - 1
                    out.append((buf, first, count, first_enq, frame, headers, cuts))
            self.unsent = 0
        return out

    # ---- report side -----------------------------------------------------------------------------------
    def complete(self, topic: str, partition: int, rows: list, default_cb: Callable[..., Any] | None,
                 only_errors: bool) -> int:
        """Turn DR rows from a toppar into ready delivery reports; returns how many messages they cover.

        Ctrl+C proof: a KeyboardInterrupt that reaches this thread part-way (the app's main thread serves
        reports in poll()/flush()) is raised only once every row is done, so no report is lost and the queue
        counts stay right (flush() would wait for ever on a message counted but gone). A second pass skips
        what the first one finished: each message leaves ``pending`` together with its counts."""
        try:
            return self._complete(topic, partition, rows, default_cb, only_errors)
        except KeyboardInterrupt:
            self._complete(topic, partition, rows, default_cb, only_errors)
            raise

    def _complete(self, topic: str, partition: int, rows: list, default_cb: Callable[..., Any] | None,
                  only_errors: bool) -> int:
        buf = self.partitions.get((topic, partition))
        if buf is None:
            return 0
        now = _monotonic()
        done = 0
        freed = 0
        ready = self.ready
        append_ready = ready.append
        with self.lock:
            pending = buf.pending
            get = pending.get
            try:
                for first, count, err, base_offset, log_append_time in rows:
                    error = KafkaError(err) if err else None
                    if error is None and not only_errors and log_append_time < 0 and base_offset >= 0:
                        # The common case (success, CreateTime, known offset): one tight loop, in C (one run).
                        row_done, row_freed = ready.add_ok(pending, topic, partition, first, count, base_offset,
                                                           default_cb, now, TIMESTAMP_CREATE_TIME)
                        done += row_done
                        freed += row_freed
                        continue
                    for index in range(count):
                        msgid = first + index
                        entry = get(msgid)
                        if entry is None:
                            continue
                        callback = entry[_CB] or default_cb
                        report = None
                        if error is None and callback.__class__ in _COUNTERS:
                            if not only_errors:
                                report = callback.ok_report  # LogAppendTime, offset unknown: counted all the same
                        elif callback is not None and not (only_errors and error is None):
                            offset = base_offset + index if base_offset >= 0 and error is None else OFFSET_INVALID
                            if log_append_time >= 0:
                                ts = (TIMESTAMP_LOG_APPEND_TIME, log_append_time)
                            else:
                                ts = (TIMESTAMP_CREATE_TIME, entry[_TS])
                            report = (callback, error, Message(topic, partition, offset, entry[_KEY], entry[_VALUE],
                                                               entry[_HEADERS], error, ts, now - entry[_ENQ]))
                        # No call between taking the message off and counting it: an interrupt lands before
                        # (the next pass does it all again) or after (it is counted, below in any case).
                        del pending[msgid]
                        done += 1
                        freed += entry[_SIZE]
                        if report is not None:
                            append_ready(report)
            finally:
                self.count -= done
                self.nbytes -= freed
        return done

    def fail_unsent(self, error_code: int, default_cb: Callable[..., Any] | None) -> int:
        """Report every message still in a packer (never handed to a toppar) with ``error_code``."""
        taken = self.take_all()
        total = 0
        for buf, first, count, _enq, _frame, _headers, _cuts in taken:
            total += self.complete(buf.topic, buf.partition, [(first, count, error_code, -1, -1)], default_cb,
                                   False)
        return total

    def fail_handed_over(self, buf: PartitionBuffer, error_code: int,
                         default_cb: Callable[..., Any] | None) -> int:
        """Report the messages already handed to ``buf``'s toppar and not yet reported (its host died, so
        nobody else will); runs of consecutive msgids become one row each."""
        with self.lock:
            msgids = sorted(m for m in buf.pending if m <= buf.handed_upto)
        if not msgids:
            return 0
        rows = []
        start = prev = msgids[0]
        for msgid in msgids[1:]:
            if msgid != prev + 1:
                rows.append((start, prev - start + 1, error_code, -1, -1))
                start = msgid
            prev = msgid
        rows.append((start, prev - start + 1, error_code, -1, -1))
        return self.complete(buf.topic, buf.partition, rows, default_cb, False)

    def fail_everything(self, error_code: int, default_cb: Callable[..., Any] | None) -> int:
        """Report every pending message of every partition (used when closing or after a failure)."""
        total = 0
        for buf in list(self.partitions.values()):
            with self.lock:
                msgids = sorted(buf.pending)
                buf.packer.take()
            rows = [(msgid, 1, error_code, -1, -1) for msgid in msgids]
            total += self.complete(buf.topic, buf.partition, rows, default_cb, False)
        with self.lock:
            self.unsent = 0
        return total

    def buffer_for(self, topic: str, partition: int) -> PartitionBuffer:
        """The buffer of a partition, created empty if no message went there yet."""
        with self.lock:
            buf = self.partitions.get((topic, partition))
            if buf is None:
                buf = self._new_buffer(topic, partition)
            return buf

    def partitions_with_pending(self) -> list[PartitionBuffer]:
        with self.lock:
            return [buf for buf in self.partitions.values() if buf.pending]


_native_classes: dict[int, type[ProducerBuffers]] = {}


def native_buffers_class(native: Any) -> type[ProducerBuffers]:
    """ProducerBuffers on the C extension ``native``: its counters live in the C base ``native.Buffers``
    and ``append`` (once per produce()) is the C twin of ProducerBuffers.append; every other method is
    ProducerBuffers' own, the packers, the ready queue and the DR loop are the C ones."""
    cls = _native_classes.get(id(native))
    if cls is None:
        cls = type("NativeProducerBuffers", (ProducerBuffers, native.Buffers), {
            "__doc__": native_buffers_class.__doc__,
            "__module__": __name__,
            "native": native,
            "_packer_class": native.Packer,
            "_ready_class": native.ReadyQueue,
            "_lock_class": native.Lock,
            "append": native.Buffers.append,
        })
        _native_classes[id(native)] = cls
    return cls


def serve_reports_py(ready: deque) -> int:
    """Call the ready reports' callbacks, oldest first; a run of one counter's ``ok_report`` entries is one
    ``on_ok(n)`` (its entries are all popped before the call). Returns the reports served. An exception from a
    callback propagates; the reports after it stay queued. The caller holds the serving lock. The C twin is
    ``kqactors.native._native.serve_reports``.

    Ctrl+C proof: a KeyboardInterrupt raised once popleft() returned puts the report back."""
    served = 0
    while ready:
        report = ready[0]
        try:
            ready.popleft()
        except KeyboardInterrupt:  # raised once the call returned: the report was removed
            ready.appendleft(report)
            raise
        served += 1
        callback = report[0]
        if callback.__class__ is PyDeliveryCounter and report is callback.ok_report:
            run = 1
            while ready and ready[0] is report:
                ready.popleft()
                run += 1
            served += run - 1
            callback.on_ok(run)
        else:
            callback(report[1], report[2])
    return served


# The counter classes whose ok_report every completion path queues for a delivered message.
_COUNTERS: frozenset[type] = frozenset(
    {PyDeliveryCounter} if NATIVE is None else {PyDeliveryCounter, NATIVE.DeliveryCounter})


def new_delivery_counter(on_ok: Callable[[int], Any], on_error: Callable[[Any, Any], Any],
                         native: Any = NATIVE) -> Any:
    """A DeliveryCounter of the kind the producer's buffers recognise: the C one with the extension (which
    complete_ok and serve_reports know), else PyDeliveryCounter."""
    if native is None:
        return PyDeliveryCounter(on_ok, on_error)
    return native.DeliveryCounter(on_ok, on_error)


def new_producer_buffers(max_messages: int, max_kbytes: int, native: Any = NATIVE) -> ProducerBuffers:
    """ProducerBuffers on the C extension ``native`` (default: kqactors.native's choice), else pure Python."""
    cls = ProducerBuffers if native is None else native_buffers_class(native)
    return cls(max_messages, max_kbytes)
