"""Crash recovery of the producer facade: what the app keeps so that a toppar host's death costs no message.

Runs in: the app process (the thread that serves reports notes sequences; the hand-over thread, under the
hand-over lock, re-hands). Owns the recovery state of each partition buffer and the ops that rebuild a restarted
toppar (docs/reliability.md):

- every message stays in the buffer's pending table until its delivery report (the table already holds key,
  value, headers and timestamp for the report), so a restarted toppar is re-handed every message handed to its
  predecessor and not reported yet, re-packed from that table in msgid order, before any new message;
- an idempotent (not transactional) toppar tells the app each batch's sequences as it first sends (or
  renumbers) it (``TOPPAR_SEQ``); the app keeps those of unreported batches and the next sequence, and the
  restarted toppar gets them (``TOPPAR_RECOVER``) to resend those batches with the same producer id, epoch and
  sequences — the broker answers any it already wrote as a duplicate — and to number what follows on;
- without known sequences (non-idempotent, transactional, or nothing sent yet) the restarted toppar gets
  ``TOPPAR_RESTARTED`` (an idempotent one moves to a new epoch first);
- what a restarted ``main`` must not lose is kept in the configuration it is restarted from
  (``kqactors.client.handle.recovery.MainState``): the producer
  id/epoch the toppars stamp (from their TOPPAR_SEQ notes) and the toppars that joined main. The restarted main
  adopts that identity instead of asking for a new one, so the toppars' retries of what was in flight when the
  broker connections died are deduplicated by the broker, and tells every toppar its leader again.
"""

from __future__ import annotations

from typing import Any

from kqactors.core.producer.packing import pack_messages
from kqactors.ops import producer as pops
from kqactors.runtime.op import ActorError, Op

__all__ = ["brokers_down", "lost_runs", "note_sequences", "recovery_ops"]

_SEQ_MOD = 1 << 31
# pending entry layout (kqactors.client.producer.buffers)
_KEY, _VALUE, _HEADERS, _TS, _CB, _ENQ, _SIZE = range(7)
#: messages per re-handed PRODUCE frame
_REHAND_MESSAGES = 4096


def note_sequences(buffers: Any, payload: dict) -> tuple[int, int] | None:
    """A toppar's TOPPAR_SEQ rows [first_msgid, count, producer_id, epoch, base_seq]: keep them for the batches
    not reported yet (a batch is reported whole, so one msgid tells), and the sequence that follows the last.
    Returns the (producer id, epoch) of the last row."""
    buf = buffers.partitions.get((payload["topic"], payload["partition"]))
    if buf is None:
        return None
    with buffers.lock:
        notes = buf.seq_notes
        for first, count, producer_id, epoch, base_seq in payload["rows"]:
            notes[first] = (count, producer_id, epoch, base_seq)
            buf.seq_next = (producer_id, epoch, (base_seq + count) % _SEQ_MOD)
        pending = buf.pending
        for first in [first for first in notes if first not in pending]:
            del notes[first]
        seq_next = buf.seq_next
    return None if seq_next is None else (seq_next[0], seq_next[1])


def lost_runs(buffers: Any, buf: Any, upto: int) -> list[tuple[int, int]]:
    """A transactional toppar's host died: what it held (msgids up to ``upto``) belongs to the transaction that
    fails with it (abortable), so it is not re-handed (a later transaction would commit it): (first msgid,
    count) runs of those messages still pending, to be reported failed."""
    with buffers.lock:
        msgids = sorted(m for m in buf.pending if m <= upto)
    runs: list[tuple[int, int]] = []
    for msgid in msgids:
        if runs and runs[-1][0] + runs[-1][1] == msgid:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((msgid, 1))
    return runs


def expired_upto(buffers: Any, buf: Any, now: float, timeout_s: float) -> int:
    """The highest msgid handed to ``buf`` whose message has waited ``timeout_s`` since its produce(); 0: none."""
    with buffers.lock:
        upto = buf.handed_upto
        return max((m for m, entry in buf.pending.items() if m <= upto and now - entry[_ENQ] >= timeout_s),
                   default=0)


def _held_frames_cover(buf: Any, held: list[tuple] | None) -> bool:
    """True when ``held`` (frames kept by a move, oldest first) are exactly the messages of ``buf`` handed over and
    not reported: consecutive, ending at its last hand-over, none reported meanwhile and none older pending (the
    old toppar drained). Caller holds the buffers' lock. Then they can be handed over as they are."""
    if not held:
        return False
    for before, after in zip(held, held[1:], strict=False):
        if before[0] + before[1] != after[0]:
            return False
    first, total = held[0][0], sum(frame[1] for frame in held)
    pending = buf.pending
    # pending holds those handed over (msgid <= handed_upto) and those still in the packer, in msgid order
    return (first + total - 1 == buf.handed_upto and next(iter(pending), None) == first
            and len(pending) - buf.packer.count == total)


def recovery_ops(buffers: Any, buf: Any, idempotent: bool, flush: bool, notice: bool = True,
                 held: list[tuple] | None = None) -> list[Op]:
    """The ops that rebuild ``buf``'s restarted toppar: the restart notice (TOPPAR_RECOVER with the known
    sequences, else TOPPAR_RESTARTED), then every message handed to its predecessor and not reported yet.
    ``notice=False``: a toppar started late (its first spawn met a restarting host) gets only the messages.
    ``held``: frames a move kept (moves.py); when they are exactly those messages they are handed over as they
    are, else the messages are packed again from the pending table."""
    with buffers.lock:
        pending = buf.pending
        as_held = _held_frames_cover(buf, held)
        msgids = [] if as_held else sorted(m for m in pending if m <= buf.handed_upto)
        entries = [pending[m] for m in msgids]
        notes = buf.seq_notes
        for first in [first for first in notes if first not in pending]:
            del notes[first]
        seq_next = buf.seq_next
        batches = []
        if idempotent and seq_next is not None:
            producer_id, epoch, _next = seq_next
            batches = sorted([first, count, base_seq] for first, (count, pid, ep, base_seq) in notes.items()
                             if (pid, ep) == (producer_id, epoch))
    if not notice:
        ops = []
    elif idempotent and seq_next is not None:
        producer_id, epoch, next_seq = seq_next
        ops = [Op(pops.RECOVER, {"producer_id": producer_id, "epoch": epoch, "next_seq": next_seq,
                                 "batches": batches})]
    else:
        ops = [Op(pops.RESTARTED, {})]
    if as_held:
        for first, count, first_enq, frame, headers, cuts in held or ():
            payload = {"first_msgid": first, "count": count, "enq_time": first_enq, "flush": flush}
            if headers:
                payload["headers"] = headers
            if cuts:
                payload["cuts"] = cuts
            ops.append(Op(pops.PRODUCE, payload, [frame]))
    start = 0
    while start < len(msgids):
        end = start + 1
        while end < len(msgids) and msgids[end] == msgids[end - 1] + 1 and end - start < _REHAND_MESSAGES:
            end += 1
        run = entries[start:end]
        frame, count, headers = pack_messages((e[_TS], e[_KEY], e[_VALUE], e[_HEADERS]) for e in run)
        payload = {"first_msgid": msgids[start], "count": count, "enq_time": min(e[_ENQ] for e in run),
                   "flush": flush}
        if headers:
            payload["headers"] = headers
        ops.append(Op(pops.PRODUCE, payload, [frame]))
        start = end
    return ops


def brokers_down(rt: Any, buffers: Any, host: str, names: list[str]) -> None:
    """Main's host died with its broker actors: tell every toppar elsewhere (BROKERS_DOWN) that what those
    accepted will never be answered, so it retries that now instead of at its request timeout. The toppars of
    the dead host itself are rebuilt whole (recovery_ops)."""
    brokers = [int(name[len("broker/"):]) for name in names
               if name.startswith("broker/") and name[len("broker/"):].lstrip("-").isdigit()]
    if not brokers:
        return
    targets = [buf.name for buf in list(buffers.partitions.values()) if buf.spawned and buf.host != host]
    for name in targets:
        try:
            rt.send(name, Op(pops.BROKERS_DOWN, {"brokers": brokers}))
        except ActorError:
            pass  # its own host is restarting too: it is rebuilt whole
