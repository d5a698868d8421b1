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
    assert moves.advance() == [] and rt.calls == [] and spawned == []
    for msgid in range(1, 10):
        del buf.pending[msgid]
    assert moves.advance() == []  # msgid 10 is still with the old toppar
    del buf.pending[10]
    assert moves.advance() == [buf]
    assert rt.calls == [("stop", buf.name)] and spawned == [(buf.name, 2)]
    assert buf.host == "h2" and not moves.holding(buf.name) and moves.done == 1
    assert list(buf.pending) == [11]  # re-handed to the successor by the caller (restart_notice)


def test_a_host_death_ends_the_wait_and_a_failed_spawn_is_retried() -> None:
    moves, buf, rt, spawned = _setup(spawn_ok=False)
    moves.start(buf, 1)
    buf.restart_notice = True  # the old toppar's host died: what it held is gone
    assert moves.advance() == [] and rt.calls == [("stop", buf.name)] and spawned == [(buf.name, 1)]
    assert moves.holding(buf.name) and not buf.spawned
    assert moves.advance() == [] and len(spawned) == 2 and len(rt.calls) == 1  # stopped once, spawn retried
