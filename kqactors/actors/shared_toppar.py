"""Runs in: a toppar host of a shared runtime (``kqactors runtime``), one ``SharedTopparActor`` per partition of
a shared producer group (kqactors/runtime/shared.py, docs/runtime.md "Shared runtime"). Owns what makes one
toppar serve several producer processes (the group's members) at once: it is a ``TopparActor`` whose PRODUCE
frames come from many apps, each numbering its messages in its own msgid space.

Each PRODUCE gets a run of this toppar's own msgids (``MemberRanges``), so batches mix every member's messages
in arrival order (the queue is FIFO: a member's messages keep their order), and each delivery-report row is
split back into the members' msgids and sent to each member's inbox. PURGE purges only its sender's messages
(queued ones are taken out of the queue, in-flight ones reported now and their late results dropped).
MEMBER_LEFT (from the runtime's server: a member detached or died) drops that member's queued messages and
sends its later reports to nobody. A member's sequence notes are not kept: its messages share batches, so a
restart after a host's death bumps the epoch (no exact resend, see docs/runtime.md "Shared runtime").
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from typing import Any

from kqactors.actors.toppar import TopparActor
from kqactors.errors import KafkaError
from kqactors.ops import producer as pops
from kqactors.runtime.actor import ActorContext, on
from kqactors.runtime.namespace import MEMBER_LEFT
from kqactors.runtime.op import Op

log = logging.getLogger(__name__)

_LEFT_KEPT = 256  # members that left, remembered so that their late PRODUCE ops are dropped
_COMPACT_AT = 1024  # finished ranges kept at the head before the lists are compacted


class MemberRanges:
    """This toppar's msgids → (member, the member's msgid): one range per PRODUCE frame, in arrival order.

    ``add`` gives a frame its local msgids; ``split`` turns delivery-report rows in local msgids into rows per
    member (a row spanning several frames is cut at their bounds, its base offset moved along; consecutive
    pieces of one member are merged back into one row). A range is forgotten once every message in it was
    reported."""

    __slots__ = ("starts", "entries", "head", "next_local", "muted")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.entries: list[list[Any]] = []  # [local first, count, member or None, member first, unreported]
        self.head = 0  # entries before it are all reported
        self.next_local = 1
        self.muted: list[tuple[int, int]] = []  # local [start, end) already reported (purged in flight)

    def add(self, member: str, first: int, count: int) -> int:
        local = self.next_local
        self.next_local += count
        self.starts.append(local)
        self.entries.append([local, count, member, first, count])
        return local

    def __len__(self) -> int:
        return len(self.entries) - self.head

    def member_of(self, local: int) -> str | None:
        index = bisect_right(self.starts, local, self.head) - 1
        if index < self.head:
            return None
        entry = self.entries[index]
        return entry[2] if local < entry[0] + entry[1] else None

    def forget_member(self, member: str) -> None:
        """Its reports go to nobody from now on."""
        for entry in self.entries[self.head:]:
            if entry[2] == member:
                entry[2] = None

    def mute(self, start: int, end: int) -> None:
        self.muted.append((start, end))

    def split(self, rows: list) -> dict[str, list[list[int]]]:
        """Rows ``(first, count, error, base_offset, log_append_time)`` in local msgids → member → rows in the
        member's msgids; the messages count as reported. Pieces muted by a purge were reported then: skipped."""
        out: dict[str, list[list[int]]] = {}
        starts, entries = self.starts, self.entries
        muted = self.muted
        for first, count, error, base_offset, append_time in rows:
            end = first + count
            index = max(bisect_right(starts, first, self.head) - 1, self.head)
            pos = first
            while pos < end and index < len(entries):
                entry = entries[index]
                e_start, e_count, member = entry[0], entry[1], entry[2]
                e_end = e_start + e_count
                if e_end <= pos:
                    index += 1
                    continue
                if e_start > pos:  # a hole (an already forgotten range): skip to the next range
                    pos = min(e_start, end)
                    continue
                piece_end = min(end, e_end)
                n = piece_end - pos
                if muted and self._is_muted(pos, piece_end):
                    pos = piece_end
                    continue
                entry[4] -= n
                if member is not None:
                    m_first = entry[3] + (pos - e_start)
                    offset = base_offset + (pos - first) if base_offset >= 0 else -1
                    rows_out = out.get(member)
                    if rows_out is None:
                        rows_out = out[member] = []
                    last = rows_out[-1] if rows_out else None
                    if last is not None and last[0] + last[1] == m_first and last[2] == error and \
                            last[4] == append_time and (offset < 0) == (last[3] < 0) and \
                            (offset < 0 or last[3] + last[1] == offset):
                        last[1] += n
                    else:
                        rows_out.append([m_first, n, error, offset, append_time])
                pos = piece_end
        self._compact()
        return out

    def pieces(self, member: str, first: int, count: int) -> list[tuple[int, int]]:
        """The runs of local msgids in ``[first, first + count)`` that are ``member``'s."""
        out: list[tuple[int, int]] = []
        index = max(bisect_right(self.starts, first, self.head) - 1, self.head)
        end = first + count
        entries = self.entries
        while index < len(entries):
            e_start, e_count, e_member = entries[index][0], entries[index][1], entries[index][2]
            if e_start >= end:
                break
            lo, hi = max(first, e_start), min(end, e_start + e_count)
            if lo < hi and e_member == member:
                out.append((lo, hi - lo))
            index += 1
        return out

    def _is_muted(self, start: int, end: int) -> bool:
        return any(m_start <= start and end <= m_end for m_start, m_end in self.muted)

    def _compact(self) -> None:
        entries = self.entries
        head = self.head
        while head < len(entries) and entries[head][4] <= 0:
            head += 1
        self.head = head
        if head >= _COMPACT_AT and head * 2 >= len(entries):
            del entries[:head]
            del self.starts[:head]
            self.head = 0
        if self.muted:  # intervals wholly before the first unreported range can match no report any more
            floor = self.starts[self.head] if self.head < len(self.starts) else self.next_local
            self.muted = [m for m in self.muted if m[1] > floor]


class SharedTopparActor(TopparActor):
    """A TopparActor serving every member of a shared producer group (see the module docstring). Spawn args as
    TopparActor's; ``app`` and ``seq_qid`` are ignored (reports go to each PRODUCE's sender, no sequence
    notes)."""

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self.seq_notes = False  # batches mix members: a restarted toppar bumps the epoch instead
        self.ranges = MemberRanges()
        self.left: dict[str, None] = {}

    def on_stop(self) -> None:
        # Stopped only with its group, once every member left: what is left is reported to nobody.
        for entry in self.ranges.entries:
            entry[2] = None
        super().on_stop()

    @on(pops.PRODUCE)
    def _on_produce(self, op: Op) -> None:
        member = op.sender
        payload = op.payload
        try:
            first, count = int(payload["first_msgid"]), int(payload["count"])
        except (KeyError, TypeError, ValueError):
            log.error("%s: malformed PRODUCE op from %s dropped", self.ctx.name, member)
            return
        if not member or member in self.left:
            return  # a member that left: nobody would get its reports
        payload["first_msgid"] = self.ranges.add(member, first, count)
        super()._on_produce(op)

    @on(pops.PURGE)
    def _on_purge(self, op: Op) -> None:
        """Purge the sender's messages only: queued ones leave the queue (_PURGE_QUEUE); those in batches
        already cut (waiting to retry, or in flight: the others' messages share them) are reported now
        (_PURGE_QUEUE / _PURGE_INFLIGHT) and their later results skip them, as librdkafka's in-flight purge
        they may still be written. The others' messages are untouched, so no sequence gap is left."""
        payload = op.payload or {}
        member = op.sender
        if member:
            queued, cut = [], []
            if payload.get("in_queue", True):
                queued = self._take_queued(member, KafkaError._PURGE_QUEUE)
                cut = self._cut_pieces(member, self.core.retry, KafkaError._PURGE_QUEUE)
            if payload.get("in_flight", True):
                cut += self._cut_pieces(member, list(self.core.inflight.values()), KafkaError._PURGE_INFLIGHT)
            if queued or cut:
                self._send_dr(queued + cut)
            for first, count, *_ in cut:
                self.ranges.mute(first, first + count)  # reported now: their batch's result skips them
        self._pump()
        if op.is_request:
            self.ctx.reply(op, Op(pops.PURGE, {"topic": self.topic, "partition": self.partition}))

    @on(MEMBER_LEFT)
    def _on_member_left(self, op: Op) -> None:
        member = str((op.payload or {}).get("member") or "")
        if not member:
            return
        self.left[member] = None
        if len(self.left) > _LEFT_KEPT:
            del self.left[next(iter(self.left))]
        self.ranges.forget_member(member)
        self._take_queued(member, None)  # not sent: nobody waits for them
        self._pump()

    def _take_queued(self, member: str, code: int | None) -> list:
        """Take ``member``'s chunks out of the partition's queue (a chunk is one frame's, so one member's);
        their report rows (``code``), or none when ``code`` is None (reported to nobody)."""
        core = self.core
        member_of = self.ranges.member_of
        kept, rows = [], []
        for chunk in core.queue:
            if member_of(chunk.first_msgid) == member or (code is None and member_of(chunk.first_msgid) is None):
                core.queue_bytes -= chunk.size
                core.queue_count -= chunk.count
                rows.append((chunk.first_msgid, chunk.count, code if code is not None else KafkaError._PURGE_QUEUE,
                             -1, -1))
            else:
                kept.append(chunk)
        if rows:
            core.queue.clear()
            core.queue.extend(kept)
            if code is None:
                self.ranges.split(rows)  # count them as reported (to nobody)
                return []
        return rows

    def _cut_pieces(self, member: str, batches: list, code: int) -> list:
        """Report rows (``code``) of ``member``'s messages in batches already cut."""
        rows = []
        for batch in batches:
            for first, count in self.ranges.pieces(member, batch.first_msgid, batch.count):
                rows.append((first, count, code, -1, -1))
        return rows

    def _send_dr(self, rows: list) -> None:
        for member, member_rows in self.ranges.split(rows).items():
            self.ctx.send(member, Op(pops.DR, {"topic": self.topic, "partition": self.partition,
                                               "rows": member_rows}), qid=self.app_qid)
