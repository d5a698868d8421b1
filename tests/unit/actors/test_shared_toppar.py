"""Runs in: unit tests (one HostCore in this process, no broker). A shared group's toppar batches every member's
messages together and hands each member the delivery reports of its own messages, in its own msgids, with the
offsets the broker gave; a member's purge touches its messages only, and a member that left gets nothing."""

from __future__ import annotations

import time

from kqactors.actors.shared_toppar import MemberRanges
from kqactors.core.producer.packing import PyMessagePacker
from kqactors.core.producer.settings import ProducerSettings
from kqactors.errors import KafkaError
from kqactors.ops import producer as pops
from kqactors.runtime.host import DIRECTORY, HostCore
from kqactors.runtime.namespace import MEMBER_LEFT
from kqactors.runtime.op import HOST_CONTROL, Op

NAME = "_nsg1/toppar/t/0"
BROKER = "_nsg1/broker/1"
A, B = "_ns1/app", "_ns2/app"
OK = 0


# ---- MemberRanges ---------------------------------------------------------------------------------------------
def test_a_report_row_is_split_at_the_members_frames_with_offsets_moved_along() -> None:
    ranges = MemberRanges()
    assert ranges.add(A, 1, 5) == 1      # local 1..5  = A's 1..5
    assert ranges.add(B, 1, 3) == 6      # local 6..8  = B's 1..3
    assert ranges.add(A, 6, 2) == 9      # local 9..10 = A's 6..7
    out = ranges.split([(1, 10, OK, 100, -1)])
    assert out == {A: [[1, 5, OK, 100, -1], [6, 2, OK, 108, -1]], B: [[1, 3, OK, 105, -1]]}
    assert len(ranges) == 0  # every message reported: nothing kept


def test_rows_without_offsets_merge_a_members_consecutive_frames() -> None:
    ranges = MemberRanges()
    ranges.add(A, 1, 5)
    ranges.add(B, 1, 3)
    ranges.add(A, 6, 2)
    out = ranges.split([(1, 10, KafkaError._MSG_TIMED_OUT, -1, -1)])
    assert out == {A: [[1, 7, KafkaError._MSG_TIMED_OUT, -1, -1]], B: [[1, 3, KafkaError._MSG_TIMED_OUT, -1, -1]]}


def test_rows_out_of_order_and_partial_rows_keep_the_ranges_until_all_is_reported() -> None:
    ranges = MemberRanges()
    ranges.add(A, 10, 4)  # local 1..4
    ranges.add(B, 20, 4)  # local 5..8
    assert ranges.split([(5, 2, OK, 50, -1)]) == {B: [[20, 2, OK, 50, -1]]}
    assert ranges.split([(3, 2, OK, 30, -1)]) == {A: [[12, 2, OK, 30, -1]]}
    assert len(ranges) == 2
    assert ranges.split([(1, 2, OK, 10, -1), (7, 2, OK, 70, -1)]) == {A: [[10, 2, OK, 10, -1]],
                                                                       B: [[22, 2, OK, 70, -1]]}
    assert len(ranges) == 0


def test_a_forgotten_member_gets_nothing_and_muted_pieces_are_not_reported_twice() -> None:
    ranges = MemberRanges()
    ranges.add(A, 1, 3)
    ranges.add(B, 1, 3)
    ranges.forget_member(A)
    assert ranges.split([(1, 6, OK, 0, -1)]) == {B: [[1, 3, OK, 3, -1]]}
    ranges.add(A, 4, 2)  # local 7..8
    ranges.add(B, 4, 2)  # local 9..10
    purged = KafkaError._PURGE_INFLIGHT
    assert ranges.split([(7, 2, purged, -1, -1)]) == {A: [[4, 2, purged, -1, -1]]}  # A purges its part...
    ranges.mute(7, 9)  # ...so the batch's result skips it
    assert ranges.split([(7, 4, OK, 100, -1)]) == {B: [[4, 2, OK, 102, -1]]}
    assert len(ranges) == 0 and ranges.muted == []


def test_compaction_keeps_lookups_right() -> None:
    ranges = MemberRanges()
    for i in range(3000):
        ranges.add(A if i % 2 else B, i + 1, 1)
    for local in range(1, 2991):
        ranges.split([(local, 1, OK, local, -1)])
    assert len(ranges) == 10
    assert ranges.member_of(2991) == B and ranges.member_of(2992) == A
    assert ranges.split([(2995, 1, OK, 7, -1)]) == {B: [[2995, 1, OK, 7, -1]]}


# ---- the actor on a host --------------------------------------------------------------------------------------
def _produce(sender: str, first: int, values: list[bytes]) -> Op:
    packer = PyMessagePacker()
    now = time.monotonic()
    for i, value in enumerate(values):
        packer.append(first + i, 1_700_000_000_000, None, value, None, now)
    msgid, count, enq, frame = packer.take()
    return Op(pops.PRODUCE, {"first_msgid": msgid, "count": count, "enq_time": enq}, [frame], target=NAME,
              sender=sender)


class _Host:
    def __init__(self, linger_ms: int = 60_000) -> None:
        self.sent: dict[str, list[Op]] = {}
        self.core = HostCore("h1", lambda key, batch: self.sent.setdefault(key, []).extend(batch))
        self.core.deliver([Op(DIRECTORY, {"set": {BROKER: "h0", "_nsg1/main": "h0"}}, target=HOST_CONTROL)])
        settings = ProducerSettings.from_config({"linger.ms": linger_ms}).to_dict()
        self.core.spawn(NAME, "kqactors.actors.shared_toppar:SharedTopparActor",
                        {"topic": "t", "partition": 0, "settings": settings}, "_nsg1/app")
        self.deliver(Op(pops.LEADER, {"broker_id": 1}, target=NAME, sender="_nsg1/main"))

    def deliver(self, op: Op) -> None:
        self.core.deliver([op])
        for _ in range(50):
            if not self.core.has_work():
                break
            self.core.run()
            self.core.flush()

    def take(self, key: str, op_type: str) -> list[Op]:
        ops = [op for op in self.sent.get(key, []) if op.type == op_type]
        self.sent[key] = [op for op in self.sent.get(key, []) if op.type != op_type]
        return ops

    def rows(self, member: str) -> list[list[int]]:
        return [list(row) for op in self.take(member, pops.DR) for row in op.payload["rows"]]

    def result(self, xmit: Op, base_offset: int, code: int = 0) -> None:
        self.deliver(Op(pops.XMIT_RESULT, {"batch_id": xmit.payload["batch_id"], "toppar_version": 1,
                                           "error_code": code, "base_offset": base_offset},
                        target=NAME, sender=BROKER))


def test_members_messages_share_one_batch_and_each_member_gets_its_own_reports() -> None:
    host = _Host()
    host.deliver(_produce(A, 1, [b"a1", b"a2"]))
    host.deliver(_produce(B, 1, [b"b1", b"b2", b"b3"]))
    host.deliver(_produce(A, 3, [b"a3"]))
    host.deliver(Op(pops.FLUSH, {}, target=NAME, sender=A))
    xmits = host.take("h0", pops.XMIT)
    assert [x.payload["record_count"] for x in xmits] == [6]  # one batch for both members
    host.result(xmits[0], 500)
    assert host.rows(A) == [[1, 2, OK, 500, -1], [3, 1, OK, 505, -1]]
    assert host.rows(B) == [[1, 3, OK, 502, -1]]


def test_a_members_purge_leaves_the_others_messages_alone() -> None:
    host = _Host()
    host.deliver(_produce(A, 1, [b"a1", b"a2"]))
    host.deliver(_produce(B, 1, [b"b1"]))
    host.deliver(Op(pops.PURGE, {"in_queue": True, "in_flight": True}, target=NAME, sender=A))
    assert host.rows(A) == [[1, 2, KafkaError._PURGE_QUEUE, -1, -1]]
    assert host.rows(B) == []
    host.deliver(Op(pops.FLUSH, {}, target=NAME, sender=B))
    xmits = host.take("h0", pops.XMIT)
    assert [x.payload["record_count"] for x in xmits] == [1]
    host.result(xmits[0], 7)
    assert host.rows(B) == [[1, 1, OK, 7, -1]]
    assert host.rows(A) == []


def test_an_in_flight_purge_reports_now_and_the_late_result_goes_to_the_others_only() -> None:
    host = _Host()
    host.deliver(_produce(A, 1, [b"a1"]))
    host.deliver(_produce(B, 1, [b"b1"]))
    host.deliver(Op(pops.FLUSH, {}, target=NAME, sender=B))
    xmits = host.take("h0", pops.XMIT)
    host.deliver(Op(pops.PURGE, {"in_queue": True, "in_flight": True}, target=NAME, sender=A))
    assert host.rows(A) == [[1, 1, KafkaError._PURGE_INFLIGHT, -1, -1]]
    host.result(xmits[0], 40)
    assert host.rows(B) == [[1, 1, OK, 41, -1]]
    assert host.rows(A) == []  # reported once


def test_a_member_that_left_loses_its_queued_messages_and_gets_no_reports() -> None:
    host = _Host()
    host.deliver(_produce(A, 1, [b"a1"]))
    host.deliver(Op(pops.FLUSH, {}, target=NAME, sender=A))
    in_flight = host.take("h0", pops.XMIT)
    host.deliver(_produce(A, 2, [b"a2", b"a3"]))
    host.deliver(_produce(B, 1, [b"b1"]))
    host.deliver(Op(MEMBER_LEFT, {"member": A}, target=NAME, sender="app"))
    host.deliver(_produce(A, 4, [b"late"]))  # on its way before the notice: dropped
    host.deliver(Op(pops.FLUSH, {}, target=NAME, sender=B))
    xmits = host.take("h0", pops.XMIT)
    assert [x.payload["record_count"] for x in xmits] == [1]  # B's only: A's queued ones were dropped
    host.result(in_flight[0], 0)
    host.result(xmits[0], 1)
    assert host.rows(A) == []
    assert host.rows(B) == [[1, 1, OK, 1, -1]]
