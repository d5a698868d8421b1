"""Runs in: a toppar host (one ConsumerTopparActor per assigned partition, many per host). Owns one partition
of a consumer: which broker fetches it (the leader main tells it about), the version barrier for everything
fetched, decoding fetched record sets (``consumer_core.SliceDecoder``: decompression, aborted transactions,
control records) into packed message frames for the app, and bounded prefetch (``PrefetchCredit``) that opens
and closes its broker's fetching of this partition.

Ops in:  C_FETCH_START / C_FETCH_STOP / C_CREDIT / C_PREFETCH_LIMITS (app), LEADER (main),
         B_FETCHED / B_FETCH_ERROR / B_FETCH_POSITION / B_FETCH_PREFERRED / B_FETCH_REVERT (broker/N).
Ops out: C_READY / C_BATCH (app), TOPPAR_JOIN / C_REPLICA_KNOWN (main), B_FETCH_START / B_FETCH_STOP / B_FETCH_FLOW (broker/N).

Decoding in steps: a slice is decoded and sent in frames of about ``DECODE_STEP_BYTES`` of messages, one
per host turn (``ActorContext.continue_later``), so the app gets the first messages of a large fetch while the
rest is still being decompressed, and no frame needs tens of MiB at once. What goes to the app (decoded
frames, error events) leaves in the order it was fetched.

Closest replica (KIP-392, with client.rack): when the leader names a preferred read replica, fetching moves to
that broker's actor (``follower`` in B_FETCH_START) and goes back to the leader when the follower cannot serve
the partition (B_FETCH_REVERT), when the leader changes, and when the replica's lease ends (5 minutes, as in
librdkafka). A new preferred replica within a minute of the last one waits fetch.error.backoff.ms first, so a
leader and a follower that disagree cannot bounce the partition back and forth at full speed.

Staleness: data is accepted only from the broker currently fetching the partition, at the current version,
and contiguous with what was accepted before (its fetch offset is the previous slice's next offset). So a
slice from a former leader, or fetched before a seek, is dropped, never delivered twice or out of order.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from kqactors.core.consumer.decoder import FetchedSlice, SliceDecoder
from kqactors.core.consumer.packing import MessageBatchWriter
from kqactors.core.consumer.prefetch import PrefetchCredit
from kqactors.core.consumer.settings import EARLIEST, ERROR, FetchSettings
from kqactors.errors import KafkaError
from kqactors.message import OFFSET_BEGINNING, OFFSET_END
from kqactors.ops import client as ops
from kqactors.ops import consumer as cops
from kqactors.ops import producer as pops
from kqactors.runtime.actor import Actor, ActorContext, on
from kqactors.runtime.op import Op

log = logging.getLogger(__name__)

_REJOIN = "CTOPPAR_REJOIN"
_DECODE_STEP = "CTOPPAR_DECODE_STEP"
#: Decoded bytes per frame sent to the app: big enough that per-frame costs vanish, small enough that the
#: first messages of a large fetch leave within a millisecond or two of its arrival.
DECODE_STEP_BYTES = 1 << 20
#: Fetched bytes that may always wait here undecoded while the partition's fetching stays open (more when
#: the prefetch queue has room). Small slices (a few messages each, at low rates) then never close it, which
#: would cost a FETCH_FLOW round trip through the broker actor and a skipped Fetch.
MAX_UNDECODED_BYTES = 1 << 20
_JOIN_RETRY_S = 0.2
_LEASE_END = "CTOPPAR_LEASE_END"
_MOVE_LATER = "CTOPPAR_MOVE_LATER"
_RESTART_AT_LEADER = "CTOPPAR_RESTART_AT_LEADER"
#: How long a ctoppar waits for main to say whether a preferred read replica is a known broker.
REPLICA_CHECK_TIMEOUT_S = 5.0
#: How long fetching stays on a preferred read replica before it goes back to the leader (which may name it
#: again): librdkafka's fixed lease.
FOLLOWER_LEASE_S = 300.0
#: A preferred replica named within this long of the last one is followed only after fetch.error.backoff.ms.
NEW_LEASE_INTERVAL_S = 60.0
_AUTO_OFFSET_RESET = KafkaError._AUTO_OFFSET_RESET


class ConsumerTopparActor(Actor):
    """ctoppar/<topic>/<partition>. Args: topic, partition, settings (FetchSettings.to_dict()), app_qid, main."""

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self.topic: str = args["topic"]
        self.partition: int = int(args["partition"])
        self.settings = FetchSettings.from_dict(args.get("settings") or {})
        self.app_qid = int(args.get("app_qid", 0))
        self.main_name: str = args.get("main", "main")
        self.decoder = SliceDecoder(self.settings)
        self.credit = PrefetchCredit(self.settings.queued_min_messages,
                                     max(1, self.settings.queued_max_messages_kbytes * 1024))
        self.version = 0
        self.active = False
        self.paused = False
        self.start_offset = OFFSET_END
        self.next_offset = -1
        self.broker_id = -1  # the broker fetching the partition: the leader, or a preferred read replica
        self.leader_id = -1
        self._lease = 0  # counts moves to a follower (a lease-end timer of an older one is stale)
        self._lease_started = -NEW_LEASE_INTERVAL_S
        self.joined = False
        self.delivered_messages = 0
        self.delivered_bytes = 0
        self.dropped_slices = 0
        self.watermarks = (-1, -1, -1)  # log start, high watermark, last stable offset: from the last Fetch
        #: (version, frames to send the app, fetched bytes) in fetch order; the head one is being decoded
        #: step by step.
        self._outbound: deque[tuple[int, Iterator[tuple[Op, bool]], int]] = deque()
        self._undecoded_bytes = 0  # fetched bytes of the slices in _outbound
        self._step_posted = False
        self._flow_sent = True  # the fetch flow state the broker actor was last told (see _update_flow)

    # ---- lifecycle ---------------------------------------------------------------------------------------

    def on_start(self) -> None:
        incarnation = f"{os.getpid()}-{time.monotonic_ns()}"
        self.ctx.send("app", Op(cops.CTOPPAR_READY, {"topic": self.topic, "partition": self.partition,
                                                     "incarnation": incarnation}), qid=self.app_qid)
        self._join()

    def _join(self) -> None:
        """Announce this partition to main (repeated until its first LEADER: an op to a just-started actor may
        race the runtime's directory)."""
        if self.joined:
            return
        self.ctx.send(self.main_name, Op(pops.TOPPAR_JOIN, {"topic": self.topic, "partition": self.partition,
                                                           "name": self.ctx.name}))
        self.ctx.timer(_JOIN_RETRY_S, Op(_REJOIN))

    @on(_REJOIN)
    def _on_rejoin(self, _op: Op) -> None:
        self._join()

    def on_stop(self) -> None:
        if self.active and self.broker_id >= 0:
            self._to_broker(self.broker_id, cops.BROKER_FETCH_STOP, {"version": self.version})

    # ---- app ---------------------------------------------------------------------------------------------

    @on(cops.FETCH_START)
    def _on_fetch_start(self, op: Op) -> None:
        p = op.payload
        version = int(p["version"])
        if version < self.version:
            return
        self.version = version
        self._clear_outbound()
        self.credit.reset(version)
        self.credit.set_limits(int(p.get("max_messages", self.credit.max_messages)),
                               int(p.get("max_bytes", self.credit.max_bytes)))
        self.paused = bool(p.get("paused", False))
        offset = int(p["offset"])
        if offset < 0 and offset not in (OFFSET_BEGINNING, OFFSET_END):
            # OFFSET_STORED / OFFSET_INVALID without a committed offset: auto.offset.reset decides.
            if self.settings.auto_offset_reset == ERROR:
                self.active = False
                self._send_error(offset, _AUTO_OFFSET_RESET,
                                 "no valid start offset and auto.offset.reset is error")
                return
            offset = OFFSET_BEGINNING if self.settings.auto_offset_reset == EARLIEST else OFFSET_END
        self.start_offset = offset
        self.next_offset = offset if offset >= 0 else -1
        self.active = True
        self._start_broker()

    @on(cops.FETCH_STOP)
    def _on_fetch_stop(self, op: Op) -> None:
        version = int(op.payload["version"])
        if version < self.version:
            return
        self.version = version
        self._clear_outbound()
        self.credit.reset(version)
        if self.active and self.broker_id >= 0:
            self._to_broker(self.broker_id, cops.BROKER_FETCH_STOP, {"version": version})
        self.active = False

    @on(cops.CREDIT)
    def _on_credit(self, op: Op) -> None:
        p = op.payload
        self.credit.credited(int(p["version"]), int(p["messages"]), int(p["nbytes"]))
        self._update_flow()

    @on(cops.PREFETCH_LIMITS)
    def _on_limits(self, op: Op) -> None:
        p = op.payload
        self.credit.set_limits(int(p["max_messages"]), int(p["max_bytes"]))
        self._update_flow()

    # ---- main --------------------------------------------------------------------------------------------

    @on(pops.LEADER, pops.TOPPAR_JOIN)
    def _on_leader(self, op: Op) -> None:
        self.joined = True
        new = int((op.payload or {}).get("broker_id", -1))
        if (op.payload or {}).get("restarted"):
            # main restarted: its broker actors are new ones, that know nothing of this partition: fetch from the
            # leader again (a preferred replica's lease ends with the old main)
            self.leader_id = new
            if new == self.broker_id:
                self._start_broker()
            else:
                self._move(new)
            return
        if new == self.leader_id and self.broker_id >= 0:
            return  # the same leader again: a follower being fetched from stays
        self.leader_id = new
        self._move(new)  # a new leader also ends a preferred replica's lease

    def _move(self, broker_id: int) -> None:
        """Fetch from ``broker_id`` from now on (at the current position and version)."""
        old, self.broker_id = self.broker_id, broker_id
        if old == broker_id or not self.active:
            return
        if old >= 0:
            self._to_broker(old, cops.BROKER_FETCH_STOP, {"version": self.version})
        self._start_broker()

    @on(cops.FETCH_PREFERRED)
    def _on_preferred(self, op: Op) -> None:
        if not self._from_current(op):
            return
        replica = int(op.payload["broker_id"])
        if replica == self.broker_id:
            self._start_broker()  # it named the broker already fetching: go on there
            return
        now = time.monotonic()
        if now - self._lease_started < NEW_LEASE_INTERVAL_S:
            log.info("%s: preferred replica %d named %.0f s after the last one: backing off", self.ctx.name,
                     replica, now - self._lease_started)
            self.ctx.timer(self.settings.fetch_error_backoff_ms / 1000.0,
                           Op(_MOVE_LATER, {"version": self.version, "broker_id": replica,
                                            "from": self.broker_id}))
            return
        self._to_follower(replica, now)

    @on(_MOVE_LATER)
    def _on_move_later(self, op: Op) -> None:
        p = op.payload
        if self.active and int(p["version"]) == self.version and int(p["from"]) == self.broker_id:
            self._to_follower(int(p["broker_id"]), time.monotonic())

    def _to_follower(self, replica: int, now: float) -> None:
        """Ask main whether it knows the replica's broker first: a name with no broker actor behind it would
        hold the partition's fetching forever."""
        leader, version = self.broker_id, self.version
        self.ctx.request(self.main_name, Op(cops.REPLICA_KNOWN, {"broker_id": replica}),
                         lambda reply: self._on_replica_checked(reply, replica, leader, version),
                         REPLICA_CHECK_TIMEOUT_S)

    def _on_replica_checked(self, reply: Op, replica: int, leader: int, version: int) -> None:
        if not self.active or self.version != version or self.broker_id != leader:
            return  # seeked, stopped or moved meanwhile
        if reply.error is None and (reply.payload or {}).get("known"):
            self._lease_to(replica, time.monotonic())
            return
        # Unknown (main refreshes its metadata) or main did not answer: fetch on at the leader after
        # fetch.error.backoff.ms; it names the replica again, known by then.
        log.info("%s: preferred read replica %d is not known yet: fetching from leader %d meanwhile", self.ctx.name,
                 replica, leader)
        self.ctx.timer(self.settings.fetch_error_backoff_ms / 1000.0, Op(_RESTART_AT_LEADER, {"version": version,
                                                                                         "from": leader}))

    @on(_RESTART_AT_LEADER)
    def _on_restart_at_leader(self, op: Op) -> None:
        p = op.payload
        if self.active and int(p["version"]) == self.version and int(p["from"]) == self.broker_id:
            self._start_broker()

    def _lease_to(self, replica: int, now: float) -> None:
        self._lease += 1
        self._lease_started = now
        self.ctx.timer(FOLLOWER_LEASE_S, Op(_LEASE_END, {"lease": self._lease}))
        self._move(replica)

    @on(_LEASE_END)
    def _on_lease_end(self, op: Op) -> None:
        if int(op.payload["lease"]) == self._lease and self.broker_id != self.leader_id:
            self._move(self.leader_id)

    @on(cops.FETCH_REVERT)
    def _on_revert(self, op: Op) -> None:
        if not self._from_current(op):
            return
        if self.broker_id != self.leader_id:
            log.debug("%s: follower %d cannot serve the partition (error %s): back to leader %d", self.ctx.name,
                      self.broker_id, op.payload.get("code"), self.leader_id)
            self._move(self.leader_id)
        else:
            self._start_broker()  # the follower became the leader meanwhile: fetch there as from a leader

    # ---- broker ------------------------------------------------------------------------------------------

    def _from_current(self, op: Op) -> bool:
        p = op.payload
        return (self.active and op.sender == ops.broker_name(self.broker_id)
                and int(p.get("version", -1)) == self.version)

    @on(ops.STATS)
    def _on_stats(self, op: Op) -> None:
        """This partition's fetch side of librdkafka's statistics (the app adds its positions)."""
        low, high, stable = self.watermarks
        self.ctx.reply(op, Op(ops.STATS, {
            "topic": self.topic, "partition": self.partition, "leader": self.leader_id, "broker": self.broker_id,
            "fetch_state": "active" if self.active else "stopped", "next_offset": self.next_offset,
            "lo_offset": low, "hi_offset": high, "ls_offset": stable if stable >= 0 else high,
            "rxmsgs": self.delivered_messages, "rxbytes": self.delivered_bytes, "msgs": self.delivered_messages,
            "_read_committed": self.settings.read_committed,
        }))  # fmt: skip

    @on(cops.FETCHED)
    def _on_fetched(self, op: Op) -> None:
        p = op.payload
        if not self._from_current(op) or (self.next_offset >= 0 and p["fetch_offset"] != self.next_offset):
            self.dropped_slices += 1
            return
        sl = FetchedSlice.from_payload(p, op.frames[0] if op.frames else b"")
        self.next_offset = sl.next_offset
        self.watermarks = (sl.log_start_offset, sl.high_watermark, sl.last_stable_offset)
        self._queue_outbound(self._decoded_ops(sl), len(sl.records))

    def _decoded_ops(self, sl: FetchedSlice) -> Iterator[tuple[Op, bool]]:
        """The slice's frames for the app, each with whether it is the last (so no further turn is needed
        just to find the job done)."""
        chunks = self.decoder.decode_chunks(sl, DECODE_STEP_BYTES)
        undelivered = sl.fetch_offset
        while True:
            try:
                batch = next(chunks, None)
            except Exception as exc:  # noqa: BLE001 - a decoder bug: the rest of the slice is lost, said so
                log.exception("%s: decoding a slice at offset %d failed", self.ctx.name, undelivered)
                yield self._error_op(undelivered, KafkaError._BAD_MSG, f"decoding failed: {exc!r}"), True
                return
            if batch is None:
                return
            if batch.is_empty:
                continue
            undelivered = max(undelivered, batch.last_offset + 1)
            self.delivered_messages += batch.messages
            self.delivered_bytes += batch.nbytes
            self.credit.delivered(batch.messages, batch.nbytes)
            self._update_flow()
            yield Op(cops.CONSUMER_BATCH, {
                "topic": self.topic, "partition": self.partition, "version": sl.version,
                "messages": batch.messages, "last_offset": batch.last_offset, "high_watermark": sl.high_watermark,
                "last_stable_offset": sl.last_stable_offset, "log_start_offset": sl.log_start_offset,
            }, [batch.frame]), batch.final  # fmt: skip

    def _queue_outbound(self, frames: Iterator[tuple[Op, bool]], fetched_bytes: int = 0) -> None:
        self._outbound.append((self.version, frames, fetched_bytes))
        self._undecoded_bytes += fetched_bytes
        if not self._step_posted:
            self._send_step()
        self._update_flow()

    @on(_DECODE_STEP)
    def _on_decode_step(self, _op: Op) -> None:
        self._step_posted = False
        self._send_step()

    def _send_step(self) -> None:
        """Send the next frame of the oldest outbound job, then come back for more in the next host turn
        (unless that frame finished the last job: a small slice costs one turn)."""
        outbound = self._outbound
        while outbound:
            version, frames, fetched_bytes = outbound[0]
            item = next(frames, None) if version == self.version else None  # else: seeked or stopped since
            if item is None:
                self._job_done(fetched_bytes)
                continue
            op, final = item
            self.ctx.send("app", op, qid=self.app_qid)
            if final:
                self._job_done(fetched_bytes)
                if not outbound:
                    return
            self._step_posted = True
            self.ctx.continue_later(Op(_DECODE_STEP))
            return

    def _job_done(self, fetched_bytes: int) -> None:
        self._outbound.popleft()
        self._undecoded_bytes -= fetched_bytes
        self._update_flow()

    @on(cops.FETCH_ERROR)
    def _on_fetch_error(self, op: Op) -> None:
        if not self._from_current(op):
            return
        p = op.payload
        self._send_error(int(p["offset"]), int(p["code"]), str(p.get("reason", "")))

    @on(cops.FETCH_POSITION)
    def _on_fetch_position(self, op: Op) -> None:
        if self._from_current(op):
            self.next_offset = int(op.payload["offset"])

    # ---- helpers -----------------------------------------------------------------------------------------

    def _start_broker(self) -> None:
        if not self.active or self.broker_id < 0:
            return
        offset = self.next_offset if self.next_offset >= 0 else self.start_offset
        self._flow_sent = self._fetch_wanted()
        self._to_broker(self.broker_id, cops.BROKER_FETCH_START, {
            "offset": offset, "version": self.version, "flow_open": self._flow_sent, "paused": self.paused,
            "follower": self.broker_id != self.leader_id})

    def _fetch_wanted(self) -> bool:
        """Prefetch credit is left, and little fetched data waits here undecoded: credit is charged as
        frames are decoded, so without the second condition slices could pile up undecoded."""
        credit = self.credit
        if not credit.fetch_allowed:
            return False
        # Undecoded bytes count against the partition's share of queued.max.messages.kbytes (librdkafka
        # counts fetched bytes there too): while the queue has room, a slice arriving before the previous
        # one is decoded keeps fetching open, so the next Fetch overlaps the decode instead of waiting for it.
        room = max(MAX_UNDECODED_BYTES, credit.max_bytes - credit.outstanding_bytes)
        return len(self._outbound) <= 1 or self._undecoded_bytes < room

    def _clear_outbound(self) -> None:
        self._outbound.clear()
        self._undecoded_bytes = 0

    def _update_flow(self) -> None:
        """Tell the broker actor when fetching this partition should stop or go on."""
        wanted = self._fetch_wanted()
        if wanted != self._flow_sent:
            self._flow_sent = wanted
            if self.active and self.broker_id >= 0:
                self._to_broker(self.broker_id, cops.FETCH_FLOW, {"open": wanted, "version": self.version})

    def _to_broker(self, broker_id: int, op_type: str, payload: dict[str, Any]) -> None:
        self.ctx.send(ops.broker_name(broker_id), Op(op_type, {"topic": self.topic, "partition": self.partition, **payload}))

    def _send_error(self, offset: int, code: int, reason: str) -> None:
        """An error event for the app, behind whatever fetched data is still on its way there."""
        self._queue_outbound(iter(((self._error_op(offset, code, reason), True),)))

    def _error_op(self, offset: int, code: int, reason: str) -> Op:
        writer = MessageBatchWriter()
        writer.add_error(offset, code, reason)
        return Op(cops.CONSUMER_BATCH, {
            "topic": self.topic, "partition": self.partition, "version": self.version, "messages": 0,
            "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
        }, [writer.getvalue()])  # fmt: skip
