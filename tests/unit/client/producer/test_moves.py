"""Runs in: pytest. A toppar move (kqactors/client/producer/moves.py) with a recording runtime: the old toppar is
stopped only once every message sent to it is reported, then its successor is spawned on the new host; a host that
died meanwhile ends the wait."""

from __future__ import annotations

import logging
import threading

from kqactors.client.producer.buffers import PartitionBuffer
from kqactors.client.producer.moves import TopparMoves


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def stop(self, name: str) -> None:
        self.calls.append(("stop", name))

    def send(self, name: str, op: object) -> None:
        self.calls.append((getattr(op, "type", "?"), name))


def _setup(spawn_ok: bool = True) -> tuple[TopparMoves, PartitionBuffer, Recorder, list]:
    rt = Recorder()
    spawned: list[tuple[str, int]] = []

    def spawn(buf: PartitionBuffer, host: int) -> bool:
        spawned.append((buf.name, host))
        if spawn_ok:
            buf.spawned, buf.host = True, f"h{host}"
        return spawn_ok

    buf = PartitionBuffer("t", 0)
    buf.spawned, buf.host = True, "h0"
    for msgid in range(1, 11):
        buf.pending[msgid] = ()
    buf.handed_upto = 10  # 1..10 sent to the old toppar
    return TopparMoves(rt, threading.Lock(), spawn, logging.getLogger("test")), buf, rt, spawned


def test_the_old_toppar_stops_only_once_what_it_was_sent_is_reported() -> None:
    moves, buf, rt, spawned = _setup()
    moves.start(buf, 2)
    buf.pending[11] = ()  # produced after the move began: held
    buf.handed_upto = 11
    assert moves.holding(buf.name)
    assert moves.advance() == [] and rt.calls == [("FLUSH", buf.name)] and spawned == []
    for msgid in range(1, 10):
        del buf.pending[msgid]
    assert moves.advance() == []  # msgid 10 is still with the old toppar
    del buf.pending[10]
    assert moves.advance() == [buf]
    assert rt.calls == [("FLUSH", buf.name), ("stop", buf.name)] and spawned == [(buf.name, 2)]
    assert buf.host == "h2" and not moves.holding(buf.name) and moves.done == 1
    assert list(buf.pending) == [11]  # re-handed to the successor by the caller (restart_notice)


def test_a_host_death_ends_the_wait_and_a_failed_spawn_is_retried() -> None:
    moves, buf, rt, spawned = _setup(spawn_ok=False)
    moves.start(buf, 1)
    buf.restart_notice = True  # the old toppar's host died: what it held is gone
    assert moves.advance() == [] and rt.calls == [("FLUSH", buf.name), ("stop", buf.name)] and spawned == [(buf.name, 1)]
    assert moves.holding(buf.name) and not buf.spawned
    assert moves.advance() == [] and len(spawned) == 2 and len(rt.calls) == 2  # stopped once, spawn retried


def _held_setup() -> tuple:
    """A native-or-Python buffers' partition moving while three frames are taken for it (msgids 1..9)."""
    from kqactors.client.producer.buffers import new_producer_buffers
    from kqactors.client.producer.recovery import recovery_ops

    buffers = new_producer_buffers(1000, 1000)
    moves = TopparMoves(Recorder(), buffers.lock, lambda buf, host: True, logging.getLogger("test"))
    buf = buffers.buffer_for("t", 0)
    buf.spawned = True
    moves.start(buf, 1)
    for _frame in range(3):
        for _ in range(3):
            assert buffers.append("t", 0, None, b"v%d" % buf.next_msgid, None, 7, None, 2)
        (_buf, first, count, enq, frame, headers, cuts), = buffers.take_all()
        moves.hold(buf.name, (first, count, enq, frame, headers, cuts))
    assert buffers.append("t", 0, None, b"later", None, 7, None, 5)  # not taken yet: not re-handed
    assert moves.advance() == [buf]
    return buffers, buf, moves, recovery_ops


def _produced(ops: list) -> list:
    from kqactors.core.producer.packing import unpack_messages

    return [(op.payload["first_msgid"], [m[2] for m in unpack_messages(op.frames[0], op.payload["count"])]) for op in ops
            if op.type == "PRODUCE"]


def test_a_moved_toppar_is_handed_the_held_frames_as_they_were_packed() -> None:
    buffers, buf, moves, recovery_ops = _held_setup()
    held = moves.take_held(buf.name)
    assert [frame[:2] for frame in held] == [(1, 3), (4, 3), (7, 3)] and moves.take_held(buf.name) is None
    ops = recovery_ops(buffers, buf, False, False, held=held)
    assert ops[0].type == "TOPPAR_RESTARTED"
    assert len(ops) == 4 and all(op.frames[0] is frame[3] for op, frame in zip(ops[1:], held, strict=True))
    assert _produced(ops) == [(1, [b"v1", b"v2", b"v3"]), (4, [b"v4", b"v5", b"v6"]), (7, [b"v7", b"v8", b"v9"])]


def test_held_frames_that_no_longer_match_the_pending_table_are_packed_again() -> None:
    buffers, buf, moves, recovery_ops = _held_setup()
    held = moves.take_held(buf.name)
    del buf.pending[5]  # reported meanwhile (a purge): it must not be sent again
    ops = recovery_ops(buffers, buf, False, False, held=held)
    assert all(op.frames[0] is not frame[3] for op in ops[1:] for frame in held)
    assert _produced(ops) == [(1, [b"v1", b"v2", b"v3", b"v4"]), (6, [b"v6", b"v7", b"v8", b"v9"])]
