"""The producer side of one partition: queue, batching, in-flight, retries, timeouts, idempotence.

Runs in: toppar hosts (one ``PartitionProducer`` per ``toppar/<topic>/<p>`` actor); pure logic on an
injectable clock, tested without processes. Owns everything between "messages arrived from the app" and
"delivery reports go back": when a batch is ready (linger.ms, batch.size, batch.num.messages, flush),
how many batches may be in flight, what a Produce result means (classify + idempotence rules), retry
backoff and counting, message.timeout.ms for queued, retrying and in-flight messages, purge, and the
KIP-360 drain/epoch-bump handshake.

The actor drives it with events (``enqueue_frame``, ``set_leader``, ``set_pid``, ``on_result``, ``expire``,
``purge``, ``request_flush``), asks ``next_batch`` for work and ``next_wakeup`` for its timer, and after
each event collects the side effects with ``take_effects``.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kqactors.core.producer.batch import BATCH_OVERHEAD, Batch, Chunk, FrameSlice
from kqactors.core.producer.classify import PERMANENT, POSSIBLY_PERSISTED, REFRESH, classify_produce_error
from kqactors.core.producer.idempotence import IdempotenceState
from kqactors.core.producer.packing import PackedMessage, pack_messages
from kqactors.core.producer.settings import ProducerSettings, retry_backoff_ms
from kqactors.errors import KafkaError
from kqactors.records.packed import frame_size_estimate, scan_packed

__all__ = ["PartitionProducer", "Effects", "DrRow", "INFLIGHT_GRACE_S"]

INFLIGHT_GRACE_S = 5.0
"""A batch in flight this long past its message timeout is failed locally (the broker actor should have
answered with a timeout already; this guarantees a delivery report even if that answer is lost)."""

DrRow = tuple[int, int, int, int, int]
"""Delivery-report row: (first_msgid, count, error_code, base_offset, log_append_time_ms or -1)."""

_TIMEOUT_CODES = frozenset({KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE})


@dataclass
class Effects:
    """Side effects collected since the last ``take_effects``."""

    reports: list[DrRow] = field(default_factory=list)
    refresh_reason: str | None = None
    bump_reason: str | None = None
    fatal: tuple[int, str] | None = None

    def __bool__(self) -> bool:
        return bool(self.reports) or self.refresh_reason is not None or self.bump_reason is not None \
            or self.fatal is not None


def _checked_cuts(cuts: list, count: int, frame_len: int, headers: int) -> list | None:
    """Segment boundaries plus the frame's end, or None unless every field rises within the frame."""
    bounds = []
    previous = (0, 0, 0)
    try:
        for upto, end, upto_headers in cuts:
            upto, end, upto_headers = int(upto), int(end), int(upto_headers)
            if not (previous[0] <= upto <= count and previous[1] <= end <= frame_len
                    and previous[2] <= upto_headers <= headers):
                return None
            bounds.append((upto, end, upto_headers))
            previous = (upto, end, upto_headers)
    except (TypeError, ValueError):
        return None
    bounds.append((count, frame_len, headers))
    return bounds


class PartitionProducer:
    """Producer state machine of one partition (see module docstring)."""

    def __init__(self, topic: str, partition: int, settings: ProducerSettings,
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        self.topic = topic
        self.partition = partition
        self.settings = settings
        self.clock = clock
        self.rand = rand
        self.queue: deque[Chunk] = deque()   # PRODUCE frames (their unsent tails), oldest first
        self.queue_bytes = 0
        self.queue_count = 0
        self.retry: list[Batch] = []          # sorted by first msgid; always sent before the queue
        self.inflight: dict[int, Batch] = {}  # batch_id → batch, in send order
        self.leader = -1
        self.idemp = IdempotenceState(settings.gapless, settings.transactional) if settings.idempotence else None
        #: a transactional partition sends nothing until it is registered in the current transaction (the
        #: actor lifts the hold when main grants it, and sets it again whenever the partition runs empty)
        self.txn_hold = settings.transactional
        self.pid_held = settings.idempotence  # idempotent: no sending until a valid PID arrives
        self.bump_requested = False
        self.drain_before_retry = False
        self.fatal_error: tuple[int, str] | None = None
        self.flush_upto = 0
        #: crash recovery (``recover``): batches a predecessor sent, [first_msgid, count, base_seq] in order,
        #: cut again with exactly those bounds and sequences; then numbering goes on from ``_recovery_next``
        self.recovery: deque[tuple[int, int, int]] = deque()
        self._recovery_next = 0
        #: the recovered identity is gone (main lost it: new producer id or epoch): the recovered batches may be in
        #: the log and cannot be deduplicated under another identity, so they are reported _FAIL, not resent
        self._recovery_void = False
        self._last_msgid = 0
        #: idempotence: the highest msgid a success acknowledged (librdkafka's acked_msgid), None before the first
        #: send; messages between it and a succeeding batch are not acknowledged (a gap, see ``on_success``)
        self._acked_msgid: int | None = None
        #: idempotence: batch id → the error response of a batch waiting to be retried, and the ids of those that
        #: a later batch of the same identity succeeded behind (``_implicit_acks``): written or not depends on the
        #: broker, so they are resent only under their own sequences, never renumbered (``set_pid``)
        self._retry_error: dict[int, int] = {}
        self._implied: set[int] = set()
        self._next_batch_id = 1
        self._linger_s = settings.linger_ms / 1000.0
        self._timeout_s = settings.message_timeout_ms / 1000.0 if settings.message_timeout_ms else math.inf
        self._max_batch_bytes = settings.max_batch_bytes
        self._max_batch_msgs = settings.batch_num_messages
        self._in_flight_limit = settings.in_flight_limit
        self._effects = Effects()
        #: statistics: messages handed to this partition, and messages and encoded bytes the broker acked
        self.msgs = 0
        self.tx_msgs = 0
        self.tx_bytes = 0

    # ---- events -------------------------------------------------------------------------------------
    def enqueue(self, first_msgid: int, messages: Iterable[PackedMessage], enq_time: float) -> None:
        """Append (timestamp, key, value, headers) tuples (consecutive msgids from ``first_msgid``) produced
        at ``enq_time``; packs them into one frame (the actor's path is ``enqueue_frame``)."""
        frame, count, headers = pack_messages(messages)
        self.enqueue_frame(first_msgid, count, frame, headers, enq_time)

    def enqueue_frame(self, first_msgid: int, count: int, frame: bytes, headers: int, enq_time: float,
                      cuts: list | None = None) -> None:
        """Queue a packed frame of ``count`` messages holding ``headers`` headers in all, produced at
        ``enq_time``. The frame is kept whole; batches take slices of it. ``cuts`` (the packer's segment
        boundaries, cumulative ``[count, frame offset, headers]``) split it into several queue chunks so
        batches can end between them without walking the frame; malformed cuts are ignored."""
        if count > 0:
            deadline = enq_time + self._timeout_s
            bounds = _checked_cuts(cuts, count, len(frame), headers) if cuts else None
            if bounds is None:
                bounds = ((count, len(frame), headers),)
            queue = self.queue
            done = pos = done_headers = 0
            for upto, end, upto_headers in bounds:
                if upto <= done:
                    continue
                size = frame_size_estimate(end - pos, upto - done, upto_headers - done_headers)
                queue.append(Chunk(frame, pos, end, first_msgid + done, upto - done, size, enq_time, deadline))
                self.queue_bytes += size
                done, pos, done_headers = upto, end, upto_headers
            self.queue_count += count
            self.msgs += count
            self._last_msgid = first_msgid + count - 1
        if self.fatal_error is not None:
            self._fail_queue(KafkaError._FATAL)

    def request_flush(self) -> None:
        """Send everything queued now, ignoring linger.ms (messages enqueued later linger as usual)."""
        self.flush_upto = self._last_msgid

    def set_leader(self, broker_id: int) -> None:
        self.leader = broker_id

    def set_pid(self, producer_id: int, epoch: int) -> None:
        """New producer id/epoch from ``main``; -1 holds sending (drain before a bump)."""
        if self.idemp is None:
            return
        if producer_id < 0:
            self.pid_held = True
            return
        if self.idemp.reset(producer_id, epoch):
            # Sequences restart: batches waiting for retry are renumbered in order (KIP-360). A recovery under
            # the old epoch is void: what it would resend is numbered from 0 like the rest.
            self._recovery_void = bool(self.recovery)
            if self._implied:
                self._fail_implied()
            for batch in self.retry:
                batch.possibly_persisted = False
                self.idemp.stamp(batch)
            self.drain_before_retry = False
        self.pid_held = False
        self.bump_requested = False

    def recover(self, producer_id: int, epoch: int, next_seq: int, batches: list) -> bool:
        """This partition replaces one whose host died (the app re-hands every unreported message). Resend the
        batches the predecessor sent (``batches``: [first_msgid, count, base_seq], in order) with the same
        producer id, epoch and sequences, so the broker answers those it already has as duplicates, and number
        the messages after them from ``next_seq``. Refused (False: the caller bumps the epoch instead) when the
        partition already uses another identity or has sent anything."""
        idemp = self.idemp
        if idemp is None or producer_id < 0 or self.inflight or self.retry:
            return False
        self.recovery = deque((int(f), int(c), int(q)) for f, c, q in batches)
        if idemp.valid and (idemp.producer_id, idemp.epoch) != (producer_id, epoch):
            self._recovery_void = bool(self.recovery)
            return False
        idemp.producer_id, idemp.epoch = producer_id, epoch
        self._recovery_next = int(next_seq)
        first = self.recovery[0][2] if self.recovery else self._recovery_next
        idemp.next_seq = idemp.next_ack_seq = idemp.next_err_seq = first
        self.pid_held = False
        return True

    def request_bump(self, reason: str) -> None:
        """Hold sending and ask for a drain + epoch bump (e.g. this partition's earlier state was lost)."""
        if self.idemp is not None:
            self._want_bump(reason)

    def fail_queued(self, code: int) -> None:
        """Fail everything not sent yet (queued, and waiting to retry) with ``code``; a transactional
        partition whose data cannot join the transaction."""
        if self.retry and self.idemp is not None:
            self._want_bump("batches holding sequences were failed before they were sent again")
        self._fail_queue(code)

    @property
    def idle(self) -> bool:
        """Nothing queued, waiting to retry or in flight."""
        return not (self.queue_count or self.retry or self.inflight)

    def set_fatal(self, code: int, reason: str) -> None:
        """The producer hit a fatal error: fail everything queued, send nothing more."""
        if self.fatal_error is None:
            self.fatal_error = (code, reason)
        self._fail_queue(KafkaError._PURGE_QUEUE)

    def purge(self, in_queue: bool = True, in_flight: bool = True) -> None:
        """librdkafka purge(): queued → _PURGE_QUEUE, in flight → _PURGE_INFLIGHT (late results ignored)."""
        sequenced_dropped = False
        if in_queue:
            sequenced_dropped = bool(self.retry) and self.idemp is not None
            self._fail_queue(KafkaError._PURGE_QUEUE)
        if in_flight and self.inflight:
            sequenced_dropped = sequenced_dropped or self.idemp is not None
            for batch in list(self.inflight.values()):
                self._report(batch, KafkaError._PURGE_INFLIGHT)
            self.inflight.clear()
        if sequenced_dropped:
            self._want_bump("purged batches left a sequence gap")

    def expire(self, now: float | None = None) -> None:
        """Fail messages whose message.timeout.ms has passed: queued, waiting to retry, or stuck in flight."""
        if now is None:
            now = self.clock()
        queue = self.queue
        if queue and queue[0].deadline <= now:
            expired: list[Chunk] = []
            while queue and queue[0].deadline <= now:
                chunk = queue.popleft()
                self.queue_bytes -= chunk.size
                self.queue_count -= chunk.count
                expired.append(chunk)
            self._report_chunks(expired, KafkaError._MSG_TIMED_OUT)
        if self.retry and any(b.deadline <= now for b in self.retry):
            keep = []
            for batch in self.retry:
                if batch.deadline <= now:
                    self._report(batch, KafkaError._MSG_TIMED_OUT)
                    if self.idemp is not None:
                        self._want_bump("batch timed out while waiting to be retried")
                else:
                    keep.append(batch)
            self.retry = keep
        if self.inflight:
            stuck = [b for b in self.inflight.values() if b.deadline + INFLIGHT_GRACE_S <= now]
            for batch in stuck:
                del self.inflight[batch.batch_id]
                self._report(batch, KafkaError._MSG_TIMED_OUT)
                if self.idemp is not None:
                    self._want_bump("in-flight batch timed out")

    def on_result(self, batch_id: int, error: int, base_offset: int = -1, log_append_time: int = -1,
                  request_sent: bool = True, now: float | None = None) -> bool:
        """Handle the Produce result of an in-flight batch; False when the batch is unknown (stale)."""
        batch = self.inflight.pop(batch_id, None)
        if batch is None:
            return False
        if now is None:
            now = self.clock()
        idemp = self.idemp
        if not error:
            if idemp is not None:
                after_gap = self._after_gap(batch)  # before the implicit acks fill it (librdkafka's order)
                self._implicit_acks(batch)
                fatal = idemp.on_success(batch, after_gap)
                self._note_acked(batch)
                if fatal:
                    self._raise_fatal(KafkaError._INCONSISTENT, fatal)
            self._effects.reports.append((batch.first_msgid, batch.count, 0, base_offset, log_append_time))
            self._count_acked(batch)
            return True
        action = classify_produce_error(error, request_sent)
        if idemp is not None:
            after_gap = self._after_gap(batch)
            verdict = idemp.on_error(batch, error, action, after_gap)
            if verdict.fatal_reason is not None:
                self._report(batch, error)
                self._raise_fatal(verdict.fatal_code, verdict.fatal_reason)
                return True
            if verdict.bump_reason is not None:
                self._want_bump(verdict.bump_reason)
            action = verdict.action
            if not verdict.error:
                self._implicit_acks(batch)
                self._note_acked(batch)
                self._effects.reports.append((batch.first_msgid, batch.count, 0, -1, -1))
                self._count_acked(batch)
                return True
        if action.flags & REFRESH:
            self._effects.refresh_reason = f"produce failed with error {error}"
        if action.retriable:
            final_error = error
            if now >= batch.deadline:
                final_error = KafkaError._MSG_TIMED_OUT
            elif action.count_retry and batch.retries >= self.settings.retries:
                final_error = KafkaError._MSG_TIMED_OUT if error in _TIMEOUT_CODES else error
            else:
                if action.count_retry:
                    batch.retries += 1
                # Only a request that got no answer (a local code: the connection went, the request timed out)
                # may be acknowledged implicitly by a later success; an error response is the broker's word
                # that this request was not appended, and the batch is resent (deduplicated if it was written).
                # Sticky under these sequences: an earlier attempt may be the one that was written.
                batch.possibly_persisted = batch.possibly_persisted or \
                    (bool(action.flags & POSSIBLY_PERSISTED) and error < 0)
                if idemp is not None and error > 0:
                    self._retry_error[batch.batch_id] = error
                backoff = retry_backoff_ms(max(batch.retries, 1), self.settings.retry_backoff_ms,
                                           self.settings.retry_backoff_max_ms, self.rand)
                batch.backoff_until = now + backoff / 1000.0
                self._insert_retry(batch)
                if idemp is not None:
                    self.drain_before_retry = True
                return True
            self._report(batch, final_error)
            if idemp is not None:
                self._want_bump("retries exhausted for a sequenced batch")
            return True
        assert action.flags & PERMANENT
        self._report(batch, KafkaError._MSG_TIMED_OUT if error in _TIMEOUT_CODES else error)
        return True

    # ---- work ---------------------------------------------------------------------------------------
    def next_batch(self, now: float | None = None) -> Batch | None:
        """The next batch to transmit now (marked in flight), or None."""
        if now is None:
            now = self.clock()
        if not self._may_send():
            return None
        if self.retry:
            if self.drain_before_retry:
                if self.inflight:
                    return None
                self.drain_before_retry = False
            head = self.retry[0]
            if head.backoff_until > now:
                return None
            self.retry.pop(0)
            self._retry_error.pop(head.batch_id, None)
            self._implied.discard(head.batch_id)
            return self._mark_sent(head, now)
        if not self.queue or not self._queue_ready(now):
            return None
        while self.recovery and self.queue:
            head = self._recovered_bounds(self.queue[0].first_msgid)
            if self.bump_requested:
                return None
            if head is None or not self._recovery_void:
                break
            self._report(self._cut_batch(), KafkaError._FAIL)  # possibly in the log under the lost identity
        if not self.queue:
            return None
        return self._mark_sent(self._cut_batch(), now)

    def next_wakeup(self, now: float | None = None) -> float | None:
        """Clock value at which ``expire``/``next_batch`` may have new work, or None when idle."""
        if now is None:
            now = self.clock()
        times: list[float] = []
        may_send = self._may_send()
        if self.queue:
            head = self.queue[0]
            times.append(head.deadline)
            if may_send and not self.retry:
                if self._queue_ready(now):
                    times.append(now)
                else:
                    times.append(head.enq_time + self._linger_s)
        if may_send and self.retry and not (self.drain_before_retry and self.inflight):
            times.append(self.retry[0].backoff_until)
        for batch in self.retry:
            times.append(batch.deadline)
        for batch in self.inflight.values():
            times.append(batch.deadline + INFLIGHT_GRACE_S)
        times = [t for t in times if t != math.inf]
        return min(times) if times else None

    def take_effects(self) -> Effects:
        effects = self._effects
        self._effects = Effects()
        return effects

    # ---- state queries ----------------------------------------------------------------------------------
    @property
    def in_flight_count(self) -> int:
        return len(self.inflight)

    @property
    def pending_count(self) -> int:
        """Messages not yet reported: queued, waiting to retry, or in flight."""
        return self.queue_count + sum(b.count for b in self.retry) + sum(b.count for b in self.inflight.values())

    def stats(self) -> dict[str, int]:
        """This partition's producer fields of librdkafka's statistics (``topics.*.partitions.*``)."""
        return {"leader": self.leader, "broker": self.leader, "msgq_cnt": self.queue_count,
                "msgq_bytes": self.queue_bytes, "xmit_msgq_cnt": sum(b.count for b in self.retry),
                "msgs_inflight": sum(b.count for b in self.inflight.values()), "txmsgs": self.tx_msgs,
                "txbytes": self.tx_bytes, "msgs": self.msgs}

    # ---- internals --------------------------------------------------------------------------------------
    def _count_acked(self, batch: Batch) -> None:
        self.tx_msgs += batch.count
        self.tx_bytes += len(batch.payload) if batch.payload is not None else 0

    def _may_send(self) -> bool:
        if self.fatal_error is not None or self.leader < 0 or self.txn_hold:
            return False
        if len(self.inflight) >= self._in_flight_limit:
            return False
        if self.idemp is not None:
            if self.pid_held or self.bump_requested or not self.idemp.valid:
                return False
            # After a leader change, wait until the old leader has answered everything (no reordering).
            for batch in self.inflight.values():
                if batch.broker_id != self.leader:
                    return False
        return True

    def _queue_ready(self, now: float) -> bool:
        if self.queue_count >= self._max_batch_msgs or \
                self.queue_bytes + BATCH_OVERHEAD >= self._max_batch_bytes:
            return True
        head = self.queue[0]
        return self.flush_upto >= head.first_msgid or now >= head.enq_time + self._linger_s

    def _cut_batch(self) -> Batch:
        """Take whole chunks while they fit batch.num.messages and batch.size; split the one that does not
        (walking only that chunk's entries) unless the batch is already half full by either limit, then it
        ends at the chunk boundary. The first message is taken even if it alone is too big."""
        queue = self.queue
        head = queue[0]
        first_msgid = head.first_msgid
        deadline = head.deadline
        slices: list[FrameSlice] = []
        count = 0
        size = BATCH_OVERHEAD
        max_msgs = self._max_batch_msgs
        max_bytes = self._max_batch_bytes
        recovered = self._recovered_bounds(first_msgid) if self.recovery else None
        if recovered is not None:
            max_msgs, max_bytes = recovered[1], 1 << 62  # exactly the predecessor's batch
        while queue and count < max_msgs:
            chunk = queue[0]
            start = chunk.pos
            if chunk.count <= max_msgs - count and size + chunk.size <= max_bytes:
                taken, end, taken_size = chunk.count, chunk.end, chunk.size
            elif count and (size * 2 >= max_bytes or count * 2 >= max_msgs):
                break  # already at least half full: end at a chunk boundary rather than walk a frame
            else:
                try:
                    taken, end, taken_size = scan_packed(chunk.frame, start, max_msgs - count, max_bytes - size,
                                                         count == 0, chunk.end)
                except ValueError:
                    # A malformed frame: hand all of it to the encoder, which fails the batch with _BAD_MSG.
                    taken, end, taken_size = chunk.count, chunk.end, chunk.size
                if taken == 0:
                    break
                if taken >= chunk.count:
                    taken, end, taken_size = chunk.count, chunk.end, chunk.size
            slices.append((chunk.frame, start, end))
            count += taken
            size += taken_size
            if taken == chunk.count:
                queue.popleft()
                continue
            chunk.pos = end
            chunk.first_msgid += taken
            chunk.count -= taken
            chunk.size -= taken_size
            break
        self.queue_bytes -= size - BATCH_OVERHEAD
        self.queue_count -= count
        batch = Batch(self._next_batch_id, slices, first_msgid, count, size, deadline)
        self._next_batch_id += 1
        if self.idemp is not None:
            if recovered is not None and self._recovery_void:
                self.recovery.popleft()
                return batch
            if recovered is not None:
                self.idemp.next_seq = recovered[2]
                self.recovery.popleft()
            self.idemp.stamp(batch)
            if recovered is not None and not self.recovery:
                self.idemp.next_seq = self._recovery_next
        return batch

    def _recovered_bounds(self, first_msgid: int) -> tuple[int, int, int] | None:
        """The recovered batch starting at ``first_msgid``; recovered batches before it were reported meanwhile
        (dropped). Messages queued before the next recovered batch have no known sequence: the recovery is
        abandoned for an epoch bump (sequences from 0; see docs/reliability.md)."""
        recovery = self.recovery
        while recovery and recovery[0][0] + recovery[0][1] <= first_msgid:
            recovery.popleft()
        if recovery and recovery[0][0] == first_msgid:
            return recovery[0]
        if recovery:
            recovery.clear()
            self._want_bump("recovered sequences do not match the re-handed messages")
        elif self.idemp is not None and not self._recovery_void:
            self.idemp.next_seq = self._recovery_next
        return None

    def _mark_sent(self, batch: Batch, now: float) -> Batch:
        if self._acked_msgid is None:
            self._acked_msgid = batch.first_msgid - 1
        batch.broker_id = self.leader
        batch.sent_at = now
        self.inflight[batch.batch_id] = batch
        return batch

    def _insert_retry(self, batch: Batch) -> None:
        retry = self.retry
        index = len(retry)
        while index > 0 and retry[index - 1].first_msgid > batch.first_msgid:
            index -= 1
        retry.insert(index, batch)

    def _implicit_acks(self, batch: Batch) -> None:
        """A later batch was accepted, so earlier ones of the same epoch waiting to retry whose request got no
        answer were written (a broker refuses a sequence gap). One that got an error response was not written
        by the broker's own word and stays to be resent: a broker that accepted the later batch anyway (the
        mock cluster) writes it then, one that had written it after all answers it as a duplicate."""
        if not self.retry or self.idemp is None:
            return
        keep = []
        for earlier in self.retry:
            if earlier.first_msgid < batch.first_msgid and self.idemp.same_identity(earlier):
                if earlier.possibly_persisted:
                    self._effects.reports.append((earlier.first_msgid, earlier.count, 0, -1, -1))
                    self._note_acked(earlier)
                    continue
                if earlier.batch_id in self._retry_error:  # not written by its answer, unless the broker says so
                    self._implied.add(earlier.batch_id)
            keep.append(earlier)
        self.retry = keep

    def _fail_implied(self) -> None:
        """The identity changes while batches a later success was accepted behind wait to be retried: a strict
        broker wrote them (it refuses a sequence gap), a lenient one did not. Renumbered they could be written
        twice, so they fail with the error they got (possibly persisted), as librdkafka fails a batch whose
        producer id changed; the others are renumbered."""
        keep = []
        for batch in self.retry:
            if batch.batch_id in self._implied:
                self._report(batch, self._retry_error.get(batch.batch_id, KafkaError._MSG_TIMED_OUT))
            else:
                keep.append(batch)
        self.retry = keep
        self._implied.clear()
        live = {batch.batch_id for batch in keep}
        self._retry_error = {k: v for k, v in self._retry_error.items() if k in live}

    def _after_gap(self, batch: Batch) -> bool:
        """Messages before ``batch`` are not acknowledged (failed, or waiting to be retried)."""
        return self._acked_msgid is not None and batch.first_msgid - 1 > self._acked_msgid

    def _note_acked(self, batch: Batch) -> None:
        if self._acked_msgid is None or batch.last_msgid > self._acked_msgid:
            self._acked_msgid = batch.last_msgid

    def _want_bump(self, reason: str) -> None:
        if not self.bump_requested:
            self.bump_requested = True
            self._effects.bump_reason = reason

    def _raise_fatal(self, code: int, reason: str) -> None:
        self._effects.fatal = (code, reason)
        self.set_fatal(code, reason)

    def _fail_queue(self, error: int) -> None:
        for batch in self.retry:
            self._report(batch, error)
        self.retry = []
        if self.queue:
            chunks = list(self.queue)
            self.queue.clear()
            self.queue_bytes = 0
            self.queue_count = 0
            self._report_chunks(chunks, error)

    def _report(self, batch: Batch, error: int) -> None:
        self._effects.reports.append((batch.first_msgid, batch.count, error, -1, -1))

    def _report_chunks(self, chunks: list[Chunk], error: int) -> None:
        """Report runs of consecutive msgids with one row each."""
        reports = self._effects.reports
        run_start = chunks[0].first_msgid
        run_end = run_start + chunks[0].count
        for chunk in chunks[1:]:
            if chunk.first_msgid == run_end:
                run_end += chunk.count
                continue
            reports.append((run_start, run_end - run_start, error, -1, -1))
            run_start = chunk.first_msgid
            run_end = run_start + chunk.count
        reports.append((run_start, run_end - run_start, error, -1, -1))
