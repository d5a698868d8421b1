"""Runs in: unit tests (one HostCore in this process, no broker). A producer toppar with a backlog of batches
encodes about ENCODE_STEP_BYTES of them per host turn, so each turn's batches leave for the broker actor
before the next ones are compressed, in order, and every message still goes out once."""

from __future__ import annotations

import time

import pytest

from kqactors.actors import toppar
from kqactors.core.producer.packing import PyMessagePacker
from kqactors.core.producer.settings import ProducerSettings
from kqactors.ops import client as ops
from kqactors.ops import producer as pops
from kqactors.runtime.host import DIRECTORY, HostCore
from kqactors.runtime.op import HOST_CONTROL, Op

NAME = "toppar/t/0"
BROKER = ops.broker_name(1)


def _produce_op(count: int, size: int) -> Op:
    packer = PyMessagePacker()
    now = time.monotonic()  # enqueue time: message.timeout.ms runs from here
    for msgid in range(count):
        packer.append(msgid + 1, 1_700_000_000_000, None, bytes([msgid % 251]) * size, None, now)
    cuts = packer.cuts
    first, n, enq, frame = packer.take()
    return Op(pops.PRODUCE, {"first_msgid": first, "count": n, "enq_time": enq, "flush": True, "cuts": cuts},
              [frame], target=NAME, sender="app")


def _run(batches_per_turn: list[list[int]], core: HostCore, sent: list[int]) -> None:
    turns = 0
    while core.has_work() and turns < 1000:
        before = len(sent)
        core.run()
        batches_per_turn.append(sent[before:])
        turns += 1


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_backlog_is_encoded_a_step_per_turn_and_every_batch_leaves(monkeypatch: pytest.MonkeyPatch,
                                                                    compression: str) -> None:
    monkeypatch.setattr(toppar, "ENCODE_STEP_BYTES", 20_000)
    counts: list[int] = []
    core = HostCore("h0", lambda key, batch: counts.extend(
        op.payload["record_count"] for op in batch if op.type == pops.XMIT))
    core.deliver([Op(DIRECTORY, {"set": {BROKER: "h1", "main": "h1"}}, target=HOST_CONTROL)])
    settings = {"batch.size": 10_000, "linger.ms": 0, "compression.type": compression}
    core.spawn(NAME, "kqactors.actors.toppar:TopparActor",
               {"topic": "t", "partition": 0, "settings": ProducerSettings.from_config(settings).to_dict()}, "app")
    core.deliver([Op(pops.LEADER, {"broker_id": 1}, target=NAME, sender="main")])
    core.deliver([_produce_op(400, 500)])  # ~200 kB: about 20 batches of 10 kB, 2 per 20 kB step
    per_turn: list[list[int]] = []
    _run(per_turn, core, counts)
    assert sum(counts) == 400
    busy = [batches for batches in per_turn if batches]
    assert len(busy) >= 8
    assert max(len(batches) for batches in busy) <= 3

