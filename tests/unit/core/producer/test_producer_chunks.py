"""PartitionProducer keeps PRODUCE frames whole as queue chunks: batches cut across and inside frames,
chunk-level timeouts and reports, and records encoded straight from the batch's frame slices."""

from __future__ import annotations

import pytest
from support.clock import FakeClock

from kqactors.core.producer.packing import SEGMENT_BYTES, MessagePacker, pack_messages, record_size_estimate
from kqactors.core.producer.partition import PartitionProducer
from kqactors.core.producer.settings import ProducerSettings
from kqactors.errors import KafkaError
from kqactors.records import RecordBatchBuilder, decode_record_set


def make(**overrides):
    clock = FakeClock(500.0)
    core = PartitionProducer("t", 0, ProducerSettings(**overrides), clock=clock, rand=lambda: 0.5)
    core.set_leader(1)
    return core, clock


def produce(core, clock, first, values):
    """One PRODUCE op's worth: values packed into one frame, as the app hands them over."""
    frame, count, headers = pack_messages([(1000 + first + i, None, v, None) for i, v in enumerate(values)])
    core.enqueue_frame(first, count, frame, headers, clock())


def encode(batch):
    builder = RecordBatchBuilder()
    for frame, start, end in batch.slices:
        builder.append_packed(frame, start, end)
    return decode_record_set(bytes(builder.build()))[0].records


def drain(core):
    out = []
    while (batch := core.next_batch()) is not None:
        out.append(batch)
    return out


def test_batches_span_frames_and_split_them_keeping_every_message_once_in_order():
    one = record_size_estimate(0, 100, 0)
    core, clock = make(linger_ms=0, batch_size=61 + 5 * one)
    values = [b"%03d" % i + b"v" * 97 for i in range(23)]
    produce(core, clock, 1, values[:3])
    produce(core, clock, 4, values[3:11])
    produce(core, clock, 12, values[11:])
    batches = drain(core)
    assert sum(b.count for b in batches) == len(values) and all(b.count <= 5 for b in batches)
    firsts = [b.first_msgid for b in batches]
    assert firsts == sorted(firsts) and firsts[0] == 1
    for earlier, later in zip(batches, batches[1:], strict=False):
        assert later.first_msgid == earlier.first_msgid + earlier.count
    assert sum(b.count for b in batches) == 23
    decoded = [record for batch in batches for record in encode(batch)]
    assert [r[3] for r in decoded] == values
    assert [r[1] for r in decoded] == [1001 + i for i in range(23)]
    assert core.queue_count == 0 and core.queue_bytes == 0


def test_batch_num_messages_splits_a_frame_and_the_rest_keeps_lingering():
    core, clock = make(linger_ms=100, batch_num_messages=4)
    produce(core, clock, 1, [b"a"] * 6)
    (batch,) = drain(core)
    assert (batch.first_msgid, batch.count) == (1, 4)
    assert [r[3] for r in encode(batch)] == [b"a"] * 4
    assert core.queue_count == 2
    assert core.next_wakeup() == pytest.approx(clock() + 0.1)  # the tail keeps its enqueue time
    clock.now += 0.1
    (tail,) = drain(core)
    assert (tail.first_msgid, tail.count) == (5, 2)


def test_a_half_full_batch_ends_at_a_frame_boundary_instead_of_splitting():
    core, clock = make(linger_ms=0, batch_num_messages=10)
    produce(core, clock, 1, [b"x"] * 6)
    produce(core, clock, 7, [b"y"] * 6)
    batches = drain(core)
    assert [(b.first_msgid, b.count) for b in batches] == [(1, 6), (7, 6)]


def test_queued_frames_time_out_together_with_one_report_per_msgid_run():
    core, clock = make(linger_ms=10_000, message_timeout_ms=1000)
    produce(core, clock, 1, [b"a"] * 3)
    produce(core, clock, 4, [b"b"] * 2)
    clock.now += 0.5
    produce(core, clock, 6, [b"c"] * 2)
    clock.now += 0.6
    core.expire()
    assert core.take_effects().reports == [(1, 5, KafkaError._MSG_TIMED_OUT, -1, -1)]
    assert core.pending_count == 2
    core.purge(in_queue=True, in_flight=False)
    assert core.take_effects().reports == [(6, 2, KafkaError._PURGE_QUEUE, -1, -1)]
    assert core.pending_count == 0


def test_a_malformed_frame_is_cut_whole_and_fails_encoding():
    core, clock = make(linger_ms=0)
    frame, _count, _headers = pack_messages([(0, None, b"abc", None)] * 3)
    core.enqueue_frame(1, 3, frame[:-2], 0, clock())
    (batch,) = drain(core)
    assert (batch.first_msgid, batch.count) == (1, 3)
    with pytest.raises(ValueError):
        encode(batch)


def packed_with_cuts(values):
    packer = MessagePacker()
    for index, value in enumerate(values):
        packer.append(index + 1, 2000 + index, None, value, None, 0.0)
    cuts, headers = packer.cuts, packer.headers
    _first, count, _enq, frame = packer.take()
    return frame, count, headers, cuts


def test_the_packer_marks_a_segment_boundary_every_segment_bytes():
    values = [b"%05d" % i + b"z" * 995 for i in range(300)]
    frame, count, _headers, cuts = packed_with_cuts(values)
    per_message = len(frame) // count
    assert len(cuts) == len(frame) // SEGMENT_BYTES >= 2  # at least one pair of cuts to compare
    assert [c[1] for c in cuts] == [c[0] * per_message for c in cuts]
    assert all(later[1] - earlier[1] < SEGMENT_BYTES + per_message for earlier, later in zip(cuts, cuts[1:],
                                                                                          strict=False))
    packer = MessagePacker()
    packer.append(1, 0, None, b"x", None, 0.0)
    packer.take()
    assert packer.cuts == [] and packer.headers == 0


def test_segments_become_chunks_and_batches_end_on_their_boundaries():
    values = [b"%05d" % i + b"z" * 995 for i in range(300)]
    frame, count, headers, cuts = packed_with_cuts(values)
    core, clock = make(linger_ms=0, batch_size=200_000)
    core.enqueue_frame(1, count, frame, headers, clock(), cuts)
    assert len(core.queue) == len(cuts) + 1
    batches = drain(core)
    ends = {c[0] for c in cuts} | {count}
    assert sum(b.count for b in batches) == count
    assert all(b.first_msgid - 1 + b.count in ends for b in batches)
    assert all(b.size <= 200_000 for b in batches)
    assert [r[3] for b in batches for r in encode(b)] == values


def test_malformed_cuts_are_ignored():
    values = [b"v" * 10] * 5
    frame, count, headers, _cuts = packed_with_cuts(values)
    core, clock = make(linger_ms=0)
    core.enqueue_frame(1, count, frame, headers, clock(), [[3, len(frame) + 5, 0]])
    core.enqueue_frame(6, count, frame, headers, clock(), [[4, 10, 0], [2, 20, 0]])
    core.enqueue_frame(11, count, frame, headers, clock(), [["x", None]])
    assert len(core.queue) == 3
    (batch,) = drain(core)
    assert (batch.first_msgid, batch.count) == (1, 15)
    assert [r[3] for r in encode(batch)] == values * 3
