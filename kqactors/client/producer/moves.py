"""Moving a producer's toppar actors to another host (adaptive placement, kqactors/client/handle/placement.py).

Runs in: the app process, on the producer's hand-over thread under its hand-over lock (the flusher, or produce()
handing over itself). Owns the moves in progress. A move is a hand-over in three steps, so a partition's messages
reach the broker, and their delivery reports the app, in produce() order:

1. hold: from now on the partition's messages are taken from its buffer as usual but not sent; they stay in the
   pending table (as a dead host's do, recovery.py);
2. drain: wait until every message sent to the old toppar has its delivery report (none is in its queue or in
   flight; it is told to FLUSH when the move starts, so linger.ms does not add to the wait), then stop it —
   nothing is left for its ``on_stop`` to fail;
3. restart: spawn the toppar under the same name on its new host and hand it what was held, through the
   crash-recovery path: ``TOPPAR_RECOVER`` with the idempotent sequences to go on from (else ``TOPPAR_RESTARTED``),
   then the held messages in msgid order, before any new one. The frames held in step 1 are kept (``hold``) and
   handed over as they were packed (``take_held``), rather than packed again from the pending table one message
   at a time in Python: a move at full rate holds tens of thousands of messages.

A host that dies during a move ends the wait: its successor is re-handed every unreported message, as after any
crash. Transactional producers are not moved (a toppar in a transaction is registered with the coordinator).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kqactors.ops import producer as pops
from kqactors.runtime.op import ActorError, Op

__all__ = ["TopparMoves"]


class _Move:
    __slots__ = ("buf", "target", "sent_upto", "stopped", "held")

    def __init__(self, buf: Any, target: int, sent_upto: int) -> None:
        self.buf = buf
        self.target = target
        self.sent_upto = sent_upto
        self.stopped = False
        self.held: list[tuple] = []  # the frames taken while held: (first, count, first_enq, frame, headers, cuts)


class TopparMoves:
    """The moves in progress of one producer. ``spawn(buf, host_index)`` spawns a toppar (without waiting for the
    host); ``runtime`` is the producer's Runtime; ``lock`` its buffers' lock."""

    def __init__(self, runtime: Any, lock: Any, spawn: Callable[[Any, int], bool], logger: logging.Logger) -> None:
        self._rt = runtime
        self._lock = lock
        self._spawn = spawn
        self._logger = logger
        self._moves: dict[str, _Move] = {}
        self._held: dict[str, list[tuple]] = {}  # moved toppars' held frames, until take_held
        #: moves finished (statistics, tests)
        self.done = 0

    def __bool__(self) -> bool:
        return bool(self._moves)

    def holding(self, name: str) -> bool:
        """True while messages of toppar ``name`` are held back (step 1 and 2)."""
        return name in self._moves

    def hold(self, name: str, frame: tuple) -> None:
        """Keep a frame taken for toppar ``name`` while it is held: (first msgid, count, first enqueue time, frame,
        header count, segment cuts), as the buffers' take_all gives it."""
        self._moves[name].held.append(frame)

    def take_held(self, name: str) -> list[tuple] | None:
        """The frames held for toppar ``name`` during the move that just restarted it, oldest first (once)."""
        return self._held.pop(name, None)

    def start(self, buf: Any, target: int) -> None:
        """Begin moving ``buf``'s toppar to host index ``target`` (a no-op if it is moving already)."""
        if buf.name in self._moves:
            return
        self._moves[buf.name] = _Move(buf, target, buf.handed_upto)
        try:  # the old toppar sends what it holds now, not after linger.ms: the drain (step 2) ends sooner
            self._rt.send(buf.name, Op(pops.FLUSH, {}))
        except ActorError:
            pass  # its host died: the drain ends at once (restart_notice)

    def advance(self) -> list[Any]:
        """Do what can be done now; returns the buffers whose toppar runs on its new host and must get the restart
        notice and the held messages (the caller marks them ``restart_notice``)."""
        restarted = []
        for name, move in list(self._moves.items()):
            buf = move.buf
            if not move.stopped:
                with self._lock:
                    oldest = next(iter(buf.pending), None)
                # Its host died meanwhile (restart_notice): what the old toppar held is gone; its successor is
                # re-handed everything unreported, as after any crash.
                if not buf.restart_notice and oldest is not None and oldest <= move.sent_upto:
                    continue  # the old toppar still holds messages: their reports come first
                try:
                    self._rt.stop(name)
                except ActorError:
                    pass  # already gone (its host died): recovery re-hands the same way
                move.stopped = True
                buf.spawned = False
            if not self._spawn(buf, move.target):
                continue  # tried again at the next hand-over; the messages stay pending
            del self._moves[name]
            if move.held:
                self._held[name] = move.held
            self.done += 1
            restarted.append(buf)
            self._logger.log(logging.DEBUG, f"kqactors producer: {name} moved to {buf.host}")
        return restarted
