"""The Producer facade: confluent-kafka's Producer API on top of the actor runtime.

Runs in: the app process (the user's threads, plus one background flusher thread). Owns the public
Producer: argument checking, partitioning, the per-partition append buffers (``buffers``), the flusher
that hands buffers to toppar actors in batches (spawning a toppar actor the first time a partition is
used), delivery reports served by poll()/flush(), BufferError backpressure (optionally blocking), purge,
what a toppar host's death costs (nothing: its messages are re-handed, recovery.py) and
close. What every client shares (runtime start, error_cb, statistics, host-death notices, list_topics) is
the client handle's (kqactors.client.handle), which the Producer holds as ``_handle``.

Hot path (produce): check types, choose the partition, append to a buffer under one lock. With the C
extension (kqactors.native) Producer derives from ``kqactors.native._native.ProducerCore``, whose C produce()
does the common case and hands every other one to ``Producer._produce_py``, the Python body below, which
stays the reference (and is produce() itself without the extension). Nothing in produce() talks to another
process: a message to a topic whose partition count is not known yet waits in
``producer_unassigned`` (librdkafka's UA partition) while a background lookup fetches it; an explicit
partition beyond the count then fails in its delivery report (_UNKNOWN_PARTITION), as in librdkafka.

Bulk extensions (kqactors only; confluent-kafka has neither, so the drop-in API is unchanged):
``produce_values()`` queues a list of values of one topic in one call (C: no Python call per message), and
``delivery_counter()`` makes a callback whose delivered messages are reported as counts, a run of them in one
call and without a Message each (failed ones still one by one). The ingest daemon produces its lines with them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kqactors.client.handle import ClientHandle, ClusterMetadata
from kqactors.client.handle.placement import fixed_host_for
from kqactors.client.handle.recovery import MainState
from kqactors.client.producer.buffers import new_delivery_counter, new_producer_buffers, serve_reports_py
from kqactors.client.producer.moves import TopparMoves
from kqactors.client.producer.recovery import (
    brokers_down,
    expired_upto,
    lost_runs,
    note_sequences,
    recovery_ops,
)
from kqactors.client.producer.transactions import TransactionalApi
from kqactors.client.producer.unassigned import RETRY, HeldMessage, UnassignedMessages
from kqactors.config import Config
from kqactors.core.producer.packing import HEADER_MAX_OVERHEAD, RECORD_MAX_OVERHEAD
from kqactors.core.producer.settings import ProducerSettings
from kqactors.errors import KafkaError, KafkaException
from kqactors.native import NATIVE
from kqactors.ops import client as ops
from kqactors.ops import producer as pops
from kqactors.ops.producer import FATAL, FLUSH, PURGE, RESTARTED
from kqactors.partitioner import Partitioner
from kqactors.runtime.op import ActorError, Op

__all__ = ["Producer"]

_log = logging.getLogger("kqactors.client.producer.producer")

TOPPAR_FACTORY = "kqactors.actors.toppar:TopparActor"
MAIN_FACTORY = "kqactors.actors.main:MainActor"
# Unsent messages that produce() hands over itself, without waiting for linger.ms (read by C too). Not left to
# the flusher: a thread that produces flat out holds the GIL, and the flusher then waited a switch interval
# (5 ms) for it after each blocking call of a hand-over; at 1 KiB the toppars got their first messages
# hundreds of milliseconds late, in bursts.
_FLUSH_MESSAGES = 4096
# linger.ms=0: produce() hands the first message over itself only after this long without a hand-over (a quiet
# period, so that message leaves at once). Sooner, it wakes the flusher instead, which hands over whatever
# accumulated meanwhile: under load messages go in batches, as librdkafka's at linger.ms=0 batch what arrives
# while a request is in flight. Handing over every message itself made produce() 20x slower (a thread producing
# flat out calls it every few microseconds). It was 1 ms: at 1,000 msg/s about half the messages came sooner
# than that after the previous one and paid a flusher wake-up (a thread switch and a GIL hand-off) each.
_QUIET_S = 0.0002
_METADATA_RETRY_S = 1.0         # a topic known not to exist (or failed for good) is looked up again after this
_LOOKUP_TIMEOUT_S = 2.0         # longest wait for one metadata answer of the resolver (it asks again after)
# Topic errors that fail a topic's messages at once (librdkafka's topic state ERROR); UNKNOWN_TOPIC_OR_PART
# does after topic.metadata.propagation.max.ms, any other is transient and the topic is looked up again.
_TOPIC_FATAL_ERRORS = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.TOPIC_EXCEPTION})
_POLL_SLICE_S = 0.1             # poll() re-checks reports queued by the app's own threads this often
_IDEMPOTENT_OPS = frozenset({pops.DR, ops.TOPIC_PARTITIONS})  # handling one twice changes nothing
_CLOSE_FLUSH_S = 5.0
_IDLE_WAIT_S = 0.2              # the flusher's sleep with nothing buffered (a host's death wakes it)
# A toppar spawn runs on the flusher thread: if its host does not answer in time, that hand-over is reported
# failed (retriable _TRANSPORT) and the spawn is tried again with the partition's next messages, instead of
# stalling every partition's hand-over for the runtime's default 30 s.
_SPAWN_TIMEOUT_S = 5.0
#: A toppar whose spawn met a dying or restarting host is tried again this much later (a restart takes ~0.5 s).
_SPAWN_RETRY_S = 0.1
_HOST_RESTART_CODES = frozenset({"DEAD_ACTOR", "TIMED_OUT"})

_time_ns = time.time_ns

# Delivery reports' serving loop (Producer._serve_ready): C with the extension.
_serve_reports: Callable[[Any], int] = serve_reports_py if NATIVE is None else NATIVE.serve_reports

# With the extension, the state produce() reads lives in C members of this base (see Producer).
_ProducerBase: type = object if NATIVE is None else NATIVE.ProducerCore


def _to_bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


def _normalise_headers(headers: Any) -> list[tuple[str, bytes | None]] | None:
    if headers is None:
        return None
    if isinstance(headers, Mapping):
        items = headers.items()
    elif isinstance(headers, (list, tuple)):
        items = headers
    else:
        raise TypeError(f"headers must be a list of (str, bytes) tuples or a dict, not {type(headers).__name__}")
    out = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError(f"headers must be (key, value) tuples, got {item!r}")
        name, value = item
        if not isinstance(name, str):
            raise TypeError(f"header key must be str, not {type(name).__name__}")
        out.append((name, _to_bytes(value, f"header {name!r} value")))
    return out or None


def _batch_error(code: int) -> KafkaError:
    """The ``_error`` produce_batch() leaves in a message dict it could not queue (confluent-kafka's text)."""
    return KafkaError(code, f"Message failed: {KafkaError(code).str()}")


class Producer(_ProducerBase):
    """Asynchronous Kafka producer, a drop-in for ``confluent_kafka.Producer``.

    ``config`` uses librdkafka property names (``bootstrap.servers``, ``linger.ms``, ...), plus
    ``on_delivery``, ``error_cb``, ``logger`` and ``kqactors.hosts`` (number of toppar host processes).
    """

    # produce() is the app thread's hot path, and at small messages the app thread is the producer's
    # bottleneck. With the extension, produce() is ProducerCore.produce (kqactors/native/_native_produce.c): it
    # does the common case in C, reading the attributes it needs (_buffers, _closed, ...) from C members of
    # the base (they are still plain attributes here), and calls _produce_py below, the reference, with the
    # same arguments for anything else. Without the extension, produce() is _produce_py itself.

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        conf = Config(config, kind="producer", **kwargs)
        self._handle = handle = ClientHandle(conf, "producer", _log)
        self._on_delivery: Callable[..., Any] | None = handle.callbacks.get("on_delivery")
        self._logger = handle.logger
        self._only_errors = bool(conf["delivery.report.only.error"])
        self._partitioner = Partitioner(conf["partitioner"], int(conf["sticky.partitioning.linger.ms"]))
        # Null-key fast path: topic → (partition, wall-clock ms it expires at, partition count).
        self._null_sticky_ms = self._partitioner.null_key_sticky_ms
        self._null_sticky: dict[str, tuple[int, int, int]] = {}
        self._settings = ProducerSettings.from_config(handle.shipped)
        self._max_message_bytes = int(conf["message.max.bytes"])
        self._max_payload_bytes = self._max_message_bytes - RECORD_MAX_OVERHEAD
        self._flush_messages = _FLUSH_MESSAGES  # unsent messages that produce() hands over (C produce too)
        self._checked_cb: Callable[..., Any] | None = None  # the last callback known to be callable
        self._buffers = new_producer_buffers(int(conf["queue.buffering.max.messages"]),
                                             int(conf["queue.buffering.max.kbytes"]))
        self._socket_timeout_s = handle.socket_timeout_s
        # topic.metadata.propagation.max.ms: how long a new topic may stay unknown before its messages fail
        self._propagation_s = int(conf["topic.metadata.propagation.max.ms"]) / 1000.0
        linger_s = self._settings.linger_ms / 1000.0
        self._tick_s = min(max(linger_s / 2, 0.0005), 0.005)
        # linger.ms=0 asks for latency: the first message after a hand-over wakes the flusher at once (as
        # librdkafka wakes its broker thread), the ones that arrive while it works go in its next round.
        self._wake_on_first = linger_s == 0
        # With nothing buffered the flusher sleeps (no tick) until a first message wakes it.
        self._flusher_idle = False
        self._handed_at = 0.0  # monotonic time of the last hand-over (see _QUIET_S)
        self._partition_counts: dict[str, int] = {}
        # topic → (when it was found missing or failed for good, the error produce() raises until it is
        # looked up again, after _METADATA_RETRY_S)
        self._metadata_failed_at: dict[str, tuple[float, int]] = {}
        self._metadata_errors: dict[str, int] = {}
        # topic → when a message first waited for it (kept until it has partitions: as librdkafka's topic
        # creation time, the propagation window opens once, so later messages to a missing topic fail sooner)
        self._first_referenced: dict[str, float] = {}
        self._propagation_s = int(conf["topic.metadata.propagation.max.ms"]) / 1000.0
        self._fatal: KafkaError | None = None
        self._closed = False
        self._flushing = 0
        self._wake = threading.Event()
        self._handover_lock = threading.Lock()  # the flusher's hand-over, or produce()'s (see _hand_over_now)
        self._serve_lock = threading.RLock()  # one thread at a time calls delivery callbacks (_serve_ready)
        self._hosts = handle.hosts
        handle.stats_fields = self._stats_fields
        handle.on_fatal = self._on_fatal
        handle.on_restarted = self._on_restarted
        handle.on_metadata(self._note_partition_counts)
        handle.on_actors_down(self._actors_down)
        self._main_state = MainState(handle.shipped)  # what a restarted main is restarted with (recovery.py)
        # The toppar hosts import the producer pipeline while the main host starts main, rather than one
        # host after the other inside the first produce()'s hand-over.
        self._rt = handle.start(MAIN_FACTORY, [TOPPAR_FACTORY])
        # A host's death wakes the flusher, which serves the notice before its next hand-over.
        handle.wake_on_notice(self._wake.set)
        self._toppar_args = {"settings": self._settings.to_dict()}
        # crash recovery: idempotent toppars' sequence notes (TOPPAR_SEQ) come to a queue of their own, drained by
        # the hand-over thread, which therefore knows every note received before it rebuilds a restarted toppar
        self._seq_queue = self._rt.new_queue()
        self._toppar_args["seq_qid"] = self._seq_queue.qid
        self._unassigned = UnassignedMessages(self._lookup_partition_count, self._release_held, self._fail_held,
                                              timeout_s=self._settings.message_timeout_ms / 1000.0,
                                              on_expired=self._expire_held)
        # adaptive placement (kqactors.hosts=-1): toppar hosts join as the rate climbs and toppars move to them
        # (moves.py); a transactional producer's toppars stay where they start
        self._placement = None if conf["transactional.id"] else handle.placement
        self._moves = TopparMoves(self._rt, self._buffers.lock, self._spawn_moved, self._logger)
        # toppars whose first spawn met a restarting host (name → buffer), tried again by _retry_spawns; and those
        # started late that way, re-handed their waiting messages without a restart notice
        self._awaiting_spawn: dict[str, Any] = {}
        self._fresh_rehand: set[str] = set()
        self._joining: str | None = None  # a toppar host started for adaptive placement, not running yet
        self._retiring: str | None = None  # a toppar host whose toppars move back, stopped once they have
        self._txn: TransactionalApi | None = None
        if conf["transactional.id"]:
            self._txn_setup(int(conf["transaction.timeout.ms"]))
        self._flusher = threading.Thread(target=self._flush_loop, name="kqactors-producer-flusher", daemon=True)
        self._flusher.start()

    # ---- produce --------------------------------------------------------------------------------------
    def _produce_py(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                    on_delivery: Callable[..., Any] | None = None, callback: Callable[..., Any] | None = None,
                    timestamp: int = 0, headers: Any = None, *, block_timeout: float | None = None) -> None:
        """Queue one message; its delivery report is served by poll()/flush().

        Raises BufferError when queue.buffering.max.messages/kbytes is reached (after waiting up to
        ``block_timeout`` seconds while serving delivery reports, if given), KafkaException for
        MSG_SIZE_TOO_LARGE, _UNKNOWN_PARTITION or a fatal producer state, TypeError for wrong types.

        This is produce() in Python, the reference; with the extension the C produce() runs it for every
        case it does not do itself (see the comment at the top of the class).
        """
        # Fast checks first (exact classes); the generic checks run only for anything unusual.
        if topic.__class__ is not str or not topic:
            if not isinstance(topic, str) or not topic:
                raise TypeError(f"topic must be a non-empty str, not {topic!r}")
        if value is not None and value.__class__ is not bytes:
            value = _to_bytes(value, "value")
        if key is not None and key.__class__ is not bytes:
            key = _to_bytes(key, "key")
        if partition.__class__ is not int:
            if not isinstance(partition, int) or isinstance(partition, bool):
                raise TypeError(f"partition must be an int, not {type(partition).__name__}")
        cb = on_delivery if on_delivery is not None else callback
        if cb is not None and cb is not self._checked_cb:
            if not callable(cb):
                raise TypeError("on_delivery must be callable")
            self._checked_cb = cb
        if timestamp.__class__ is not int:
            if not isinstance(timestamp, int) or isinstance(timestamp, bool):
                raise TypeError(f"timestamp must be an int, not {type(timestamp).__name__}")
        hdrs = None if headers is None else _normalise_headers(headers)
        if self._closed:
            raise RuntimeError("Producer has been closed")
        if self._fatal is not None:
            raise KafkaException(KafkaError(KafkaError._FATAL, f"Producer is in a fatal state: {self._fatal.str()}",
                                            fatal=True))
        size = (len(key) if key else 0) + (len(value) if value else 0)
        if hdrs:
            for name, hval in hdrs:
                size += len(name) + (len(hval) if hval else 0) + HEADER_MAX_OVERHEAD
        if size > self._max_payload_bytes:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE,
                                            f"Message size {size} exceeds message.max.bytes"))
        count = self._partition_counts.get(topic)
        if count is None or (self._unassigned.held and topic in self._unassigned.held):
            if self._hold(topic, partition, key, value, hdrs, timestamp, cb, size, block_timeout, count is None):
                return
        if count is None:  # found missing (or failed for good) moments ago: librdkafka's produce() fails
            code = self._metadata_failed_at.get(topic, (0.0, KafkaError._UNKNOWN_TOPIC))[1]
            raise KafkaException(KafkaError(code, f"Unable to produce message: {KafkaError(code).str()}"))
        if partition < 0:
            now_ms = _time_ns() // 1_000_000  # one clock read for the sticky expiry and the timestamp
            if timestamp == 0:
                timestamp = now_ms
            partition = self._partition_for(topic, key, count, now_ms)
        elif partition >= count:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION,
                                            f"Partition {partition} does not exist in topic {topic}"))
        if timestamp == 0:
            timestamp = _time_ns() // 1_000_000
        buffers = self._buffers
        if not buffers.append(topic, partition, key, value, hdrs, timestamp, cb, size):
            if not self._wait_for_room(size, block_timeout) or \
                    not buffers.append(topic, partition, key, value, hdrs, timestamp, cb, size):
                raise BufferError("Local: Queue full")
        unsent = buffers.unsent
        if ((unsent == 1 and self._wake_on_first and self._flusher_idle) or unsent >= self._flush_messages) \
                and self._hand_over_now(topic, partition):
            return
        if (unsent >= self._flush_messages or (unsent == 1 and (self._wake_on_first or self._flusher_idle))) \
                and not self._wake.is_set():
            self._wake.set()

    # Argument errors raised by calling it (missing topic, unknown keyword, ...) name produce(), as they
    # did before it was renamed, also when the C produce() passes such a call on.
    _produce_py.__name__ = "produce"
    _produce_py.__qualname__ = "Producer.produce"

    if TYPE_CHECKING or NATIVE is None:
        produce = _produce_py

    def _produce_values_py(self, topic: str, values: list, start: int = 0, keys: list | None = None,
                           headers: Any = None, on_delivery: Callable[..., Any] | None = None) -> int:
        """Queue ``values[start:]`` (with ``keys[i]`` if given, the same ``headers`` on each) as produce() would,
        one by one, in one call; returns the index of the first value not queued (``len(values)`` when all
        were). A kqactors extension for bulk callers (the ingest daemon): no Python call per message with the
        extension. It stops before a value it does not take — the queue is full, or produce() would raise for
        it — and the caller produce()s that one value itself to get its outcome (BufferError,
        KafkaException, TypeError, ...), then calls again from the next. Messages are partitioned and
        reported exactly as produce()'s. The Python body and reference; with the extension produce_values()
        is ``ProducerCore.produce_values`` (C), which may stop earlier (before any unusual value) but never
        later."""
        if not isinstance(values, list):
            raise TypeError("produce_values(): values must be a list")
        n = len(values)
        if not 0 <= start <= n:
            raise ValueError("produce_values(): start out of range")
        if keys is not None and (not isinstance(keys, list) or len(keys) < n):
            raise TypeError("produce_values(): keys must be None or a list as long as values")
        produce = self._produce_py
        for index in range(start, n):
            try:
                produce(topic, values[index], None if keys is None else keys[index], -1, on_delivery,
                        headers=headers)
            except Exception:  # noqa: BLE001 - the caller's produce() of this value raises it again
                return index
        return n

    if TYPE_CHECKING or NATIVE is None:
        produce_values = _produce_values_py

    @staticmethod
    def delivery_counter(on_ok: Callable[[int], Any], on_error: Callable[[Any, Any], Any]) -> Any:
        """A delivery callback that counts successes (a kqactors extension): ``on_ok(n)`` once for n delivered
        messages whose reports poll() serves in a row, ``on_error(err, msg)`` for each failed message. No
        Message is built for a delivered one. Pass it as ``on_delivery`` (produce(), produce_values())."""
        return new_delivery_counter(on_ok, on_error)

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], partition: int = -1,
                      callback: Callable[..., Any] | None = None,
                      on_delivery: Callable[..., Any] | None = None) -> int:
        """Queue a list of messages for ``topic``; returns how many were queued. confluent-kafka's
        produce_batch() (librdkafka's rd_kafka_produce_batch()), its observed behaviour included.

        Each message is a dict with optional ``value``, ``key`` (bytes or str) and ``callback`` (its own
        delivery callback; else ``callback``, else ``on_delivery``, else the configured one). The batch's
        ``partition`` (default: the partitioner's choice per message) applies to every message: a
        message's own ``partition`` key is checked but not used, and its ``headers`` are checked but not
        sent, as in confluent-kafka 2.16 (its batch call honours neither). A ``timestamp`` raises
        NotImplementedError. Every message is checked before any is queued (TypeError, ValueError). A
        message that cannot be queued (queue full, too large, unknown partition) gets no delivery report:
        its dict gets an ``_error`` key (a KafkaError) instead, and it is not counted.
        """
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        if not isinstance(messages, list):
            raise TypeError("messages must be a list")
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise TypeError(f"partition must be an int, not {type(partition).__name__}")
        default_cb = callback if callback is not None else on_delivery
        parsed = []
        for index, msg in enumerate(messages):
            if not isinstance(msg, dict):
                raise TypeError(f"Message at index {index} must be a dict")
            value, key = msg.get("value"), msg.get("key")
            if value is not None and not isinstance(value, (bytes, str)):
                raise TypeError(f"Message value at index {index} must be bytes or str")
            if key is not None and not isinstance(key, (bytes, str)):
                raise TypeError(f"Message key at index {index} must be bytes or str")
            own_partition = msg.get("partition")
            if own_partition is not None and (isinstance(own_partition, bool) or not isinstance(own_partition, int)):
                raise TypeError(f"Message partition at index {index} must be int")
            if msg.get("timestamp") is not None:
                raise NotImplementedError("Message timestamps are not currently supported in batch mode")
            if msg.get("headers") is not None:
                try:
                    _normalise_headers(msg["headers"])
                except TypeError:
                    raise ValueError(f"Invalid headers at index {index}") from None
            cb = msg.get("callback")
            if cb is None:
                cb = default_cb
            if cb is not None and not callable(cb):
                raise TypeError(f"Message callback at index {index} must be callable")
            parsed.append((msg, value, key, cb))
        produce = self.produce
        queued = 0
        for msg, value, key, cb in parsed:
            try:
                produce(topic, value, key, partition, cb)
            except BufferError:
                msg["_error"] = _batch_error(KafkaError._QUEUE_FULL)
            except KafkaException as exc:
                msg["_error"] = _batch_error(exc.args[0].code())
            else:
                queued += 1
        return queued

    def _hold(self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: Any,
              timestamp: int, cb: Callable[..., Any] | None, size: int, block_timeout: float | None,
              unknown: bool) -> bool:
        """Queue a message for a topic without a partition count (or behind ones that wait for it).
        False: nothing held, the caller goes on (the topic was released meanwhile, or its lookup failed
        moments ago and the caller reports the message at once)."""
        if unknown and self._lookup_failed_recently(topic):
            return False
        if timestamp == 0:
            timestamp = _time_ns() // 1_000_000
        held_at = time.monotonic()
        if unknown:
            self._first_referenced.setdefault(topic, held_at)
        buffers = self._buffers
        if not buffers.reserve(size):
            if not self._wait_for_room(size, block_timeout) or not buffers.reserve(size):
                raise BufferError("Local: Queue full")
        held = HeldMessage(partition, key, value, headers, timestamp, cb, size, held_at)
        if self._unassigned.hold(topic, held, start=unknown):
            return True
        buffers.unreserve(size)  # released meanwhile: the caller appends it normally
        return False

    def _release_held(self, topic: str, messages: list[HeldMessage], count: int) -> None:
        """The topic's partition count arrived: partition the held messages in produce order."""
        buffers = self._buffers
        for msg in messages:
            partition = msg.partition
            if partition < 0:
                partition = self._partition_for(topic, msg.key, count, _time_ns() // 1_000_000)
            elif partition >= count:
                self._report_now(topic, partition, msg.key, msg.value, msg.headers, msg.timestamp, msg.callback,
                                 KafkaError._UNKNOWN_PARTITION, reserved_size=msg.size)
                continue
            buffers.append_held(topic, partition, msg.key, msg.value, msg.headers, msg.timestamp, msg.callback,
                                msg.size, msg.held_at)
        self._first_referenced.pop(topic, None)
        self._wake.set()

    def _expire_held(self, topic: str, messages: list[HeldMessage]) -> None:
        """Held past message.timeout.ms (no metadata came for the topic): as librdkafka's UA partition."""
        self._fail_held(topic, messages, KafkaError._MSG_TIMED_OUT)

    def _fail_held(self, topic: str, messages: list[HeldMessage], code: int | None = None) -> None:
        if code is None:
            code = self._metadata_errors.get(topic, KafkaError.UNKNOWN_TOPIC_OR_PART)
        for msg in messages:
            self._report_now(topic, msg.partition, msg.key, msg.value, msg.headers, msg.timestamp, msg.callback,
                             code, reserved_size=msg.size)

    def _partition_for(self, topic: str, key: bytes | None, count: int, now_ms: int) -> int:
        """The partitioner's choice; a null key's sticky choice is cached until it expires."""
        if key is None and self._null_sticky_ms:
            sticky = self._null_sticky.get(topic)
            if sticky is not None and now_ms < sticky[1] and sticky[2] == count:
                return sticky[0]
            partition = self._partitioner(topic, None, count)
            self._null_sticky[topic] = (partition, now_ms + self._null_sticky_ms, count)
            return partition
        return self._partitioner(topic, key, count)

    def _wait_for_room(self, size: int, block_timeout: float | None) -> bool:
        if not block_timeout or block_timeout <= 0:
            return False
        deadline = time.monotonic() + block_timeout
        while not self._buffers.has_room(size):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.poll(min(remaining, 0.1))
        return True

    def _report_now(self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: Any,
                    timestamp: int, cb: Callable[..., Any] | None, code: int, reserved_size: int | None = None) -> None:
        """A message that never reaches a toppar still gets exactly one delivery report; one that never got a
        partition reports partition -1 (librdkafka's unassigned partition)."""
        buffers = self._buffers
        msgid = buffers.add_unsendable(topic, partition, key, value, headers, timestamp or int(time.time() * 1000),
                                       cb, reserved_size or 0, reserved=reserved_size is not None)
        if msgid is None:
            raise BufferError("Local: Queue full")
        buffers.complete(topic, partition, [(msgid, 1, code, -1, -1)], self._on_delivery, self._only_errors)
        if self._txn is not None:
            self._txn.note_failed(1)

    def _lookup_failed_recently(self, topic: str) -> bool:
        """The topic was found missing (or failed for good) less than _METADATA_RETRY_S ago: produce() raises
        without another lookup, as librdkafka's produce() does while the topic is in that state."""
        failed = self._metadata_failed_at.get(topic)
        if failed is None:
            return False
        if time.monotonic() - failed[0] < _METADATA_RETRY_S:
            return True
        del self._metadata_failed_at[topic]
        return False

    def _lookup_partition_count(self, topic: str) -> Any:
        """One metadata lookup for a held topic (on the resolver thread): its partition count; None when it
        failed for good (the error is in ``_metadata_errors``); RETRY when there is no answer yet: no broker
        reachable, none configured, or the topic still missing within topic.metadata.propagation.max.ms.
        Messages that wait meanwhile time out at message.timeout.ms (``_expire_held``)."""
        if self._closed or self._rt.closed:
            self._unassigned.stop()
            return RETRY
        timeout = min(self._socket_timeout_s, _LOOKUP_TIMEOUT_S)
        try:
            cluster = self._metadata([topic], timeout, allow_auto_create=True)
        except (KafkaException, RuntimeError):
            return RETRY  # transport, timeout, no broker: ask again after a backoff
        count = self._partition_counts.get(topic)
        if count is not None:
            return count
        meta = cluster.topics.get(topic)
        code = meta.error.code() if meta is not None and meta.error is not None else 0
        if code in _TOPIC_FATAL_ERRORS:
            return self._failed_for_good(topic, code, code)
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            first = self._first_referenced.get(topic, time.monotonic())
            if time.monotonic() - first >= self._propagation_s:
                return self._failed_for_good(topic, code, KafkaError._UNKNOWN_TOPIC)
        return RETRY  # no partitions yet (being created), or a transient error

    def _failed_for_good(self, topic: str, code: int, produce_code: int) -> None:
        """Held messages fail with ``code``; produce() raises ``produce_code`` for the next _METADATA_RETRY_S."""
        self._metadata_errors[topic] = code
        self._metadata_failed_at[topic] = (time.monotonic(), produce_code)
        return None

    # ---- delivery reports --------------------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery reports and error callbacks; wait up to ``timeout`` seconds (None/-1: forever)
        for at least one. Returns the number of events served."""
        if timeout is None or timeout < 0:
            timeout = float("inf")
        elif not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number")
        deadline = time.monotonic() + timeout
        served = self._serve_ready()
        if served or self._closed:
            return served
        events = self._rt.events
        while True:
            remaining = deadline - time.monotonic()
            # in slices: reports the app's own threads queue (timed-out held messages) wake no queue
            op = events.poll(max(0.0, min(remaining, _POLL_SLICE_S)))
            handled = 0
            while op is not None:
                try:
                    handled += self._handle_op(op)
                except KeyboardInterrupt:
                    # Ctrl+C between taking the op and handling it: a report op is handled again (it is
                    # idempotent) so no report is lost, then the interrupt goes on
                    if op.type in _IDEMPOTENT_OPS:
                        self._handle_op(op)
                    raise
                op = events.poll(0)
            served = self._serve_ready() + handled
            if served or remaining <= 0:
                return served

    def _handle_op(self, op: Op) -> int:
        payload = op.payload if isinstance(op.payload, dict) else {}
        if op.type == pops.DR:
            self._buffers.complete(payload["topic"], payload["partition"], payload["rows"], self._on_delivery,
                                   self._only_errors)
            if self._txn is not None:
                self._txn.note_reports(payload["rows"])
            return 0
        if op.type == pops.SEQ:
            note_sequences(self._buffers, payload)
            return 0
        if op.type == pops.TXN_STATE:
            if self._txn is not None:
                self._txn.on_state(payload)
            return 0
        if op.type == ops.TOPIC_PARTITIONS:
            count = int(payload.get("partition_count", 0))
            if count > 0:
                self._partition_counts[payload["topic"]] = count
            return 0
        return self._handle.handle_op(op) or 0  # ERR, STATS, CHILD_EXITED

    def _stats_fields(self) -> tuple[dict[str, Any], None]:
        """The producer's own statistics fields (the handle adds them to main's snapshot)."""
        buffers = self._buffers
        return {"replyq": len(buffers.ready), "msg_cnt": len(self), "msg_size": buffers.nbytes,
                "msg_max": buffers.max_messages, "msg_size_max": buffers.max_bytes}, None

    def _on_fatal(self, error: KafkaError) -> None:
        """The first fatal error (idempotence): every toppar stops producing; produce() raises from now on."""
        self._fatal = error
        self._broadcast(Op(FATAL, {"code": error.code(), "reason": error.str()}))

    def _on_restarted(self, op: Op) -> None:
        self._wake.set()  # a dead host's toppars are back: hand over what waits for them

    def _serve_ready(self) -> int:
        """Call the ready reports' callbacks, oldest first, one serving thread at a time (each report goes to
        one thread; a callback may poll() again). A report leaves the queue only as its callback is called:
        an interrupt (Ctrl+C) right after its removal puts it back. If a callback raises (KeyboardInterrupt
        included), the exception propagates and the reports after it wait for the next poll()."""
        ready = self._buffers.ready
        if not ready:
            return 0
        lock = self._serve_lock
        lock.acquire()
        try:
            return _serve_reports(ready)  # in C with the extension (serve_reports), else serve_reports_py
        finally:
            lock.release()

    def flush(self, timeout: float | None = None) -> int:
        """Send everything now (ignoring linger.ms) and serve delivery reports until none are outstanding
        or ``timeout`` seconds pass. Returns the number of messages still outstanding."""
        if timeout is None or timeout < 0:
            timeout = float("inf")
        deadline = time.monotonic() + timeout
        self._flushing += 1
        try:
            self._wake.set()
            self._send_to_pending(Op(FLUSH, {}))
            while len(self) > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.poll(min(remaining, 0.1))
        finally:
            self._flushing -= 1
        return len(self)

    def __len__(self) -> int:
        return self._buffers.count + len(self._buffers.ready)

    def __bool__(self) -> bool:
        return True

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Fail queued (_PURGE_QUEUE) and/or in-flight (_PURGE_INFLIGHT) messages; reports are served by
        the next poll()/flush()."""
        if in_queue:
            for topic, messages in self._unassigned.take_all().items():
                self._fail_held(topic, messages, KafkaError._PURGE_QUEUE)
            self._buffers.fail_unsent(KafkaError._PURGE_QUEUE, self._on_delivery)
            if self._awaiting_spawn:  # taken already, but no toppar has them yet: still queued
                with self._handover_lock:
                    for buf in list(self._awaiting_spawn.values()):
                        self._fail_pending(buf, buf.handed_upto, KafkaError._PURGE_QUEUE)
        op_payload = {"in_queue": bool(in_queue), "in_flight": bool(in_flight)}
        targets = [buf.name for buf in self._buffers.partitions_with_pending() if buf.spawned]
        if not targets:
            return
        if not blocking:
            self._rt.send_many((name, Op(PURGE, dict(op_payload))) for name in targets)
            return
        replies = self._rt.new_queue()
        for name in targets:
            try:
                self._rt.request_async(name, Op(PURGE, dict(op_payload)), replies, self._socket_timeout_s)
            except ActorError:
                continue
            replies.poll(self._socket_timeout_s + 1.0)

    # ---- metadata ------------------------------------------------------------------------------------
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Cluster metadata (all topics, or just ``topic``); raises KafkaException on timeout or error."""
        self._check_open()
        return self._handle.list_topics(topic, timeout)

    def cluster_id(self, timeout: float | None = -1) -> str:
        """The cluster id (from broker metadata, KIP-78): at once once known, else asked for, waiting up to
        ``timeout`` seconds (None/-1: socket.timeout.ms). Raises KafkaException(_TIMED_OUT) if none came."""
        self._check_open()
        return self._handle.cluster_id(timeout)

    # ---- security ------------------------------------------------------------------------------------
    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set the SASL username and password (PLAIN, SCRAM) used by every later authentication of every
        broker connection; connections already up keep their session (librdkafka). TypeError for non-str."""
        self._check_open()
        self._handle.set_sasl_credentials(username, password)

    def _metadata(self, topics: list[str] | None, timeout: float, allow_auto_create: bool) -> ClusterMetadata:
        self._check_open()
        return self._handle.metadata(topics, timeout, allow_auto_create)

    def _note_partition_counts(self, cluster: ClusterMetadata) -> None:
        """Every metadata answer (list_topics too) teaches the partition counts produce() needs."""
        for name, meta in cluster.topics.items():
            if meta.error is None and meta.partitions:
                self._partition_counts[name] = len(meta.partitions)

    # ---- flusher thread -------------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        buffers = self._buffers
        wake = self._wake
        while not self._closed:
            if (buffers.unsent or self._flushing or self._moves or self._joining or self._retiring
                    or self._awaiting_spawn):
                wake.wait(self._tick_s)  # messages flow (or toppars move): hand over every tick
                wake.clear()
            else:
                # Idle: sleep until a first message (or flush/close) wakes us, instead of ticking. The
                # flag goes up before the re-check, so a produce() either sees it or is seen here.
                self._flusher_idle = True
                if not buffers.unsent:
                    wake.wait(_IDLE_WAIT_S)
                self._flusher_idle = False
                wake.clear()
                if buffers.unsent and not self._wake_on_first and not self._flushing:
                    wake.wait(self._tick_s)  # woken by a first message: let the batch fill for a tick
                    wake.clear()
            with self._handover_lock:
                try:
                    self._hand_over()
                except Exception:  # the flusher must survive anything; failures become delivery reports
                    self._logger.log(logging.ERROR, "kqactors producer flusher failed", exc_info=True)
            if self._unassigned.held:
                self._unassigned.expire()  # held past message.timeout.ms: _MSG_TIMED_OUT

    def _hand_over_now(self, topic: str, partition: int) -> bool:
        """Hand what is unsent over from the producing thread: the one message when linger.ms=0 and the
        flusher sleeps, or a backlog of _FLUSH_MESSAGES. Saves waking the flusher (a thread wake-up plus a
        GIL hand-off, a tenth of a millisecond when idle, a 5 ms switch interval per blocking call when this
        thread produces flat out). Only to a toppar that runs already: starting one may block for a while.
        The one message only after a quiet period (_QUIET_S): under load the flusher batches."""
        if self._buffers.unsent < self._flush_messages and time.monotonic() - self._handed_at < _QUIET_S:
            return False
        if not self._buffers.buffer_for(topic, partition).spawned or not self._handover_lock.acquire(False):
            return False
        try:
            self._hand_over()
        except Exception:  # as in the flusher: failures become delivery reports, produce() has succeeded
            self._logger.log(logging.ERROR, "kqactors producer hand-over failed", exc_info=True)
        finally:
            self._handover_lock.release()
        return True

    def hand_over_burst(self) -> bool:
        """Hand every unsent message to its toppar now, from the calling thread, if each of those toppars runs
        already (starting one may block: that stays the flusher's). For an event loop at the end of a burst of
        produce() calls (kqactors.aio): the flusher would first wait for the loop thread to release the GIL,
        then a tick. linger.ms still counts from each message's produce(). False: nothing was handed over."""
        if not self._buffers.unsent or not self._handover_lock.acquire(False):
            return False
        try:
            if any(buf.packer.count and not buf.spawned for buf in list(self._buffers.partitions.values())):
                return False
            self._hand_over()
        except Exception:  # as in the flusher: failures become delivery reports
            self._logger.log(logging.ERROR, "kqactors producer hand-over failed", exc_info=True)
        finally:
            self._handover_lock.release()
        return True

    def _hand_over(self) -> None:
        self._handle.serve_notices()  # a toppar host died since the last one: see _actors_down
        if self._joining is not None and self._rt.host_ready(self._joining):
            self._joined()
        if self._moves:
            for buf in self._moves.advance():
                buf.restart_notice = True  # its successor gets what was held back, before anything new
        if self._placement is not None and self._joining is None:
            self._retire_step()
        self._retry_spawns()
        self._recover_restarted()
        taken = self._buffers.take_all()
        if not taken:
            return
        self._handed_at = time.monotonic()
        flush = self._flushing > 0
        sends = []
        moves = self._moves
        for buf, first, count, first_enq, frame, headers, cuts in taken:
            if moves and moves.holding(buf.name):
                moves.hold(buf.name, (first, count, first_enq, frame, headers, cuts))
                continue  # moving: held (pending) until its successor runs, see moves.py
            if not buf.spawned:
                if buf.spawn_retry_at or not self._spawn(buf):
                    if not buf.spawn_retry_at:  # not a host restart: the spawn cannot succeed
                        self._fail_handover(buf, first, count)
                    continue  # they stay pending and go over in order once it runs (_retry_spawns)
                self._spawn_siblings(buf.topic)
            if buf.restart_notice:
                continue  # its toppar is not rebuilt yet: these stay pending and are re-handed with the rest
            payload = {"first_msgid": first, "count": count, "enq_time": first_enq, "flush": flush}
            if headers:
                payload["headers"] = headers
            if cuts:
                payload["cuts"] = cuts
            sends.append((buf, Op(pops.PRODUCE, payload, [frame])))
        if self._placement is not None and self._placement.note(sum(entry[2] for entry in taken)) \
                and self._joining is None:
            self._grow()
        if not sends:
            return
        try:
            self._rt.send_many((buf.name, op) for buf, op in sends)
        except ActorError:
            # Some destination is unreachable (its host is restarting): send one by one so only the
            # messages for that toppar fail, and the restart notice is kept for the next attempt.
            failed: set[str] = set()
            for buf, op in sends:
                if buf.name in failed:
                    if op.type == pops.PRODUCE:
                        self._fail_handover(buf, op.payload["first_msgid"], op.payload["count"])
                    continue
                try:
                    self._rt.send(buf.name, op)
                except ActorError as exc:
                    self._logger.log(logging.DEBUG, f"kqactors producer could not hand over to {buf.name}: {exc}")
                    failed.add(buf.name)
                    if op.type == pops.PRODUCE:
                        self._fail_handover(buf, op.payload["first_msgid"], op.payload["count"])
                    continue
                if op.type == RESTARTED:
                    buf.restart_notice = False
            return
        for buf, op in sends:
            if op.type == RESTARTED:
                buf.restart_notice = False

    def _actors_down(self, host: str, names: list[str], restarts: int) -> None:
        """A toppar host died (kill -9, crash): whatever its toppars held is gone with it, but every message stays
        in the pending table until its delivery report. Mark the toppars to rebuild: the next hand-over re-hands
        them what their predecessors held (_recover_restarted), before any new message. Runs on the thread that
        hands over, under the hand-over lock, before the hand-over that follows the death."""
        brokers_down(self._rt, self._buffers, host, names)
        for buf in list(self._buffers.partitions.values()):
            if not buf.spawned or buf.host != host or restarts == buf.incarnation:
                continue
            buf.incarnation = restarts
            buf.restart_notice = True
            self._logger.log(logging.INFO, f"kqactors producer: host of {buf.name} died; re-handing what it held")

    def _recover_restarted(self) -> None:
        """Rebuild each restarted toppar (docs/reliability.md): the restart notice with the sequences it may
        resend, then every message handed to its predecessor and not reported yet. A toppar still restarting
        (DEAD_ACTOR) is tried again at the next hand-over (the restart wakes the flusher)."""
        idempotent = self._settings.idempotence and not self._settings.transactional
        if idempotent:
            queue = self._seq_queue
            while (op := queue.poll(0)) is not None:
                if op.type == pops.SEQ:
                    self._main_state.note_identity(note_sequences(self._buffers, op.payload))
        moves = self._moves
        for buf in [b for b in list(self._buffers.partitions.values()) if b.restart_notice and b.spawned]:
            if moves and moves.holding(buf.name):
                continue  # moving: its successor gets these (moves.py)
            if self._txn is not None:  # what the dead toppar held fails with the transaction, is not re-handed
                self._fail_pending(buf, self._txn_lost_upto.pop(buf.name, 0), KafkaError._TRANSPORT)
            fresh = buf.name in self._fresh_rehand
            ops_ = recovery_ops(self._buffers, buf, idempotent, self._flushing > 0, notice=not fresh,
                                held=moves.take_held(buf.name))
            try:
                self._rt.send_many((buf.name, op) for op in ops_)
            except ActorError as exc:
                self._logger.log(logging.DEBUG, f"kqactors producer: {buf.name} not back yet: {exc}")
                continue
            buf.restart_notice = False
            self._fresh_rehand.discard(buf.name)

    def _retry_spawns(self) -> None:
        """Start the toppars whose first spawn met a restarting host (a crash is only a pause); once one runs it
        gets every message waiting for it, in order, before anything new (``restart_notice`` without the notice).
        Messages that waited longer than message.timeout.ms fail with _MSG_TIMED_OUT, as anywhere else."""
        if not self._awaiting_spawn:
            return
        now = time.monotonic()
        for buf in list(self._awaiting_spawn.values()):
            if now < buf.spawn_retry_at:
                continue
            if self._spawn(buf):
                buf.restart_notice = True
                self._fresh_rehand.add(buf.name)
                continue
            if buf.spawn_retry_at:  # still restarting: only what waited too long fails
                self._fail_pending(buf, expired_upto(self._buffers, buf, now, self._settings.message_timeout_ms / 1000),
                                   KafkaError._MSG_TIMED_OUT)
            else:
                self._fail_pending(buf, buf.handed_upto, KafkaError._TRANSPORT)

    def _fail_handover(self, buf: Any, first: int, count: int) -> None:
        if buf.spawned:
            # Its host is restarting: the messages stay pending and are re-handed to the restarted toppar.
            buf.restart_notice = True
            return
        self._buffers.complete(buf.topic, buf.partition, [(first, count, KafkaError._TRANSPORT, -1, -1)],
                               self._on_delivery, self._only_errors)
        if self._txn is not None:
            self._txn.note_failed(count)

    def _spawn_siblings(self, topic: str) -> None:
        """Start the toppars of a topic's other partitions too, as librdkafka creates all of a topic's
        toppars from metadata: the sticky partitioner moves on to them within milliseconds, and a toppar
        started then would stall the hand-over while messages pile up."""
        count = self._partition_counts.get(topic) or 0
        for partition in range(count):
            sibling = self._buffers.buffer_for(topic, partition)
            if not sibling.spawned:
                self._spawn(sibling)  # on failure it is retried when a message goes there

    def _grow(self) -> None:
        """Adaptive placement: start one more toppar host; once it runs, ``_joined`` moves toppars there."""
        try:
            index = self._handle.add_toppar_host([TOPPAR_FACTORY])
        except (ActorError, OSError, ValueError) as exc:
            self._logger.log(logging.WARNING, f"kqactors producer could not start a toppar host: {exc}")
            return
        self._joining = self._rt.host_keys[index]

    def _joined(self) -> None:
        """The new toppar host runs: place partitions over it too, and move the toppars that belong there now (at
        the start of a hand-over: each move counts what was handed over so far as sent to the old toppar)."""
        index = self._rt.host_keys.index(self._joining)
        self._joining = None
        self._placement.grew(index)
        keys = self._rt.host_keys
        for buf in list(self._buffers.partitions.values()):
            if buf.spawned:
                target = self._placement.host_for(buf.topic, buf.partition)
                if keys[target] != buf.host:
                    self._moves.start(buf, target)

    def _retire_step(self) -> None:
        """Adaptive placement, the rate has dropped: move the last toppar host's toppars back (moves.py) and stop
        it once none is left there (its successors run elsewhere)."""
        retiring = self._retiring
        if retiring is None:
            if self._moves or not self._placement.retire_due():
                return
            retiring = self._retiring = self._rt.host_keys[self._placement.retire()]
            for buf in list(self._buffers.partitions.values()):
                if buf.spawned and buf.host == retiring:
                    self._moves.start(buf, self._placement.host_for(buf.topic, buf.partition))
        if any(buf.host == retiring for buf in self._buffers.partitions.values() if buf.spawned):
            return
        self._retiring = None
        self._handle.retire_toppar_host(retiring)

    def _spawn_moved(self, buf: Any, host: int) -> bool:
        return self._spawn(buf, host)

    def _spawn(self, buf: Any, host: int | None = None) -> bool:
        # Consecutive partitions of a topic go to consecutive hosts (fixed_host_for); with no toppar hosts
        # (kqactors.hosts=0, or adaptive placement while the rate is low) toppars share the main host.
        if host is None:
            placement = self._placement
            host = (placement.host_for(buf.topic, buf.partition) if placement is not None
                    else fixed_host_for(buf.topic, buf.partition, self._hosts))
        args = {"topic": buf.topic, "partition": buf.partition, **self._toppar_args}
        try:
            self._rt.spawn(buf.name, TOPPAR_FACTORY, args, host=host, timeout=_SPAWN_TIMEOUT_S)
        except (ActorError, ValueError) as exc:
            if isinstance(exc, ActorError) and exc.code in _HOST_RESTART_CODES and not buf.spawned:
                # its host died (or is restarting): an internal fault, so try again shortly
                buf.spawn_retry_at = time.monotonic() + _SPAWN_RETRY_S
                self._awaiting_spawn[buf.name] = buf
                self._logger.log(logging.INFO, f"kqactors producer: {buf.name} not started yet ({exc}): retrying")
            else:
                buf.spawn_retry_at = 0.0
                self._awaiting_spawn.pop(buf.name, None)
                self._logger.log(logging.ERROR, f"kqactors producer could not start {buf.name}: {exc}")
            return False
        buf.spawn_retry_at = 0.0
        self._awaiting_spawn.pop(buf.name, None)
        buf.spawned = True
        self._main_state.toppar_spawned(buf.topic, buf.partition, buf.name)
        buf.host = self._rt.host_keys[host]
        buf.incarnation = self._rt.host_restarts(buf.host)
        if self._fatal is not None:
            self._rt.send(buf.name, Op(FATAL, {"code": self._fatal.code(), "reason": self._fatal.str()}))
        return True

    def _send_to_pending(self, op: Op) -> None:
        targets = [buf.name for buf in self._buffers.partitions_with_pending() if buf.spawned]
        if targets:
            try:
                self._rt.send_many((name, Op(op.type, dict(op.payload or {}))) for name in targets)
            except ActorError:
                pass

    def _broadcast(self, op: Op) -> None:
        targets = [buf.name for buf in self._buffers.partitions.values() if buf.spawned]
        if targets:
            try:
                self._rt.send_many((name, Op(op.type, dict(op.payload or {}))) for name in targets)
            except ActorError:
                pass

    # ---- transactions ------------------------------------------------------------------------------------
    def _txn_setup(self, transaction_timeout_ms: int) -> None:
        """transactional.id: produce() is allowed only inside a transaction. The gate wraps this instance's
        produce() (the C one, or a subclass's), so a non-transactional producer's hot path is untouched."""
        self._txn = TransactionalApi(self, transaction_timeout_ms)
        self._txn_lost_upto: dict[str, int] = {}  # toppar → last msgid handed to it before its host died
        inner = self.produce

        def produce(*args: Any, **kwargs: Any) -> None:
            txn = self._txn
            if txn is not None and not txn.may_enq and self._fatal is None and not self._closed:
                raise txn.produce_refused()
            inner(*args, **kwargs)

        produce.__doc__ = inner.__doc__
        self.produce = produce  # type: ignore[method-assign]
        inner_values = self.produce_values

        def produce_values(*args: Any, **kwargs: Any) -> int:
            txn = self._txn
            if txn is not None and not txn.may_enq and self._fatal is None and not self._closed:
                raise txn.produce_refused()
            return inner_values(*args, **kwargs)

        produce_values.__doc__ = inner_values.__doc__
        self.produce_values = produce_values  # type: ignore[method-assign]
        # A toppar host that dies takes the messages it held with it: the transaction cannot commit.
        self._handle.on_actors_down(self._txn_host_down)

    def _txn_host_down(self, host: str, names: list[str], _restarts: int) -> None:
        """A host died mid-transaction: its messages (a toppar host) or the transaction itself (main's host, see
        TransactionalApi.on_main_lost) are lost, so the transaction cannot commit: abortable. What its toppars
        held is reported failed when they are rebuilt (_recover_restarted), never re-handed."""
        if self._txn is None:
            return
        self._txn.note_failed(1)
        lost = False
        for buf in list(self._buffers.partitions.values()):
            if buf.spawned and buf.host == host:
                self._txn_lost_upto[buf.name] = buf.handed_upto
                lost = True
        if "main" in names:
            self._txn.on_main_lost()
        elif lost:
            # The broker holds sequences of the current epoch that the restarted toppars no longer know: tell main
            # now, so the transaction fails with a bump (or, between transactions, bumps at once). The restarted
            # toppars do not ask themselves: one back only after the abort would fail the next transaction.
            try:
                self._rt.send("main", Op(pops.PID_BUMP, {"reason": f"toppar host {host} died", "current": True}))
            except ActorError:
                pass

    def _fail_pending(self, buf: Any, upto: int, code: int) -> None:
        """Report ``buf``'s pending messages up to msgid ``upto`` failed with ``code``."""
        rows = [(first, count, code, -1, -1) for first, count in lost_runs(self._buffers, buf, upto)]
        if rows:
            self._buffers.complete(buf.topic, buf.partition, rows, self._on_delivery, self._only_errors)

    def _fail_rebuilding(self) -> None:
        """An abort: the messages waiting for a toppar still being rebuilt after its host died belong to the
        aborted transaction: purged (_PURGE_QUEUE) rather than re-handed into the next one."""
        with self._handover_lock:
            for buf in [b for b in list(self._buffers.partitions.values()) if b.restart_notice and b.spawned]:
                self._fail_pending(buf, buf.handed_upto, KafkaError._PURGE_QUEUE)
                self._txn_lost_upto.pop(buf.name, None)
            for buf in list(self._awaiting_spawn.values()):  # never reached a toppar: the abort purges them
                self._fail_pending(buf, buf.handed_upto, KafkaError._PURGE_QUEUE)

    def _require_txn(self) -> TransactionalApi:
        self._check_open()
        if self._txn is None:
            raise KafkaException(KafkaError(KafkaError._NOT_CONFIGURED,
                                            "The Transactional API requires transactional.id to be configured"))
        return self._txn

    def init_transactions(self, timeout: float | None = None) -> None:
        """Acquire the producer id for ``transactional.id`` from the transaction coordinator, fencing older
        producers with the same id and completing their open transactions. ``timeout`` in seconds (None or -1:
        twice transaction.timeout.ms). Raises KafkaException; a retriable error may be retried (resumes)."""
        self._require_txn().init_transactions(timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: produce() is allowed until commit_transaction() or abort_transaction()."""
        self._require_txn().begin_transaction()

    def send_offsets_to_transaction(self, positions: list, group_metadata: Any, timeout: float | None = None) -> None:
        """Commit the consumer's ``positions`` (the next offsets to read) as part of the transaction, for the
        group of ``group_metadata`` (the consumer's consumer_group_metadata(): its generation and member id
        fence zombie members, KIP-447). ``timeout`` is capped at transaction.timeout.ms."""
        self._require_txn().send_offsets_to_transaction(positions, group_metadata, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit the transaction. A retriable error (e.g. the timeout) resumes when called again;
        txn_requires_abort() means abort_transaction(); fatal() means this producer is unusable."""
        self._require_txn().commit_transaction(timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Purge what is queued, wait for what is in flight, then abort the transaction."""
        self._require_txn().abort_transaction(timeout)

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Producer has been closed")

    def close(self, timeout: float = _CLOSE_FLUSH_S) -> None:
        """Flush for up to ``timeout`` seconds, fail whatever is left (_PURGE_QUEUE / _PURGE_INFLIGHT /
        _DESTROY), serve every remaining delivery report, then stop all processes. Never hangs."""
        if self._closed:
            return
        try:
            self.flush(timeout)
            if len(self) > 0:
                self.purge(in_queue=True, in_flight=True, blocking=True)
                end = time.monotonic() + 1.0
                while self._buffers.count > 0 and time.monotonic() < end:
                    self.poll(0.05)
        finally:
            self._closed = True
            self._wake.set()
            self._flusher.join(timeout=2.0)
            self._unassigned.close()
            for topic, messages in self._unassigned.take_all().items():
                self._fail_held(topic, messages, KafkaError._DESTROY)
            self._buffers.fail_everything(KafkaError._DESTROY, self._on_delivery)
            try:
                self._serve_ready()
            finally:
                self._handle.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
