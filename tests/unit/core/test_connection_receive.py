"""Unit tests for the connection's receive buffers (kqactors.core.connection receive_buffer/received): the broker
actor reads the socket into them, small answers come from a reused scratch buffer as bytes copies, and a large
Fetch answer is read straight into a buffer of its own and handed over as a read-only view of it."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.connection import DIRECT_MIN, SCRATCH_SIZE, Connection, Request
from tests.unit.core.test_connection import drain, parse_requests, response_frame, up_connection

FETCH, METADATA = 1, 3


def read_stream(conn: Connection, stream: bytes, chunks: list[int] | None = None, now: float = 1.0) -> list:
    """Feed ``stream`` as a socket would through recv_into(conn.receive_buffer()): each read gets at most the
    next chunk size (cycled) and never more than the buffer offered. The scratch buffer is overwritten with
    garbage at the end, so an answer still pointing into it shows."""
    scratch = conn.receive_buffer().obj  # at a frame boundary: the reused scratch buffer
    done, pos, turn = [], 0, 0
    while pos < len(stream):
        buf = conn.receive_buffer()
        limit = chunks[turn % len(chunks)] if chunks else len(buf)
        turn += 1
        count = min(len(buf), limit, len(stream) - pos)
        assert count > 0, "the connection offered no room to read into"
        buf[:count] = stream[pos:pos + count]
        pos += count
        done += conn.received(count, now)
    scratch[:] = b"\xee" * len(scratch)  # as later reads would: an answer pointing into it would show
    return done


def send(conn: Connection, api_key: int, version: int, count: int) -> list[int]:
    for i in range(count):
        conn.enqueue(Request(api_key, version, [b"x"], context=i), 1.0)
    return [r["corr_id"] for r in parse_requests(drain(conn))]


def test_a_large_fetch_answer_is_read_into_its_own_buffer_and_handed_over_without_a_copy():
    conn = up_connection()
    (corr,) = send(conn, FETCH, 11, 1)
    body = bytes(range(256)) * (DIRECT_MIN // 64)  # 4x DIRECT_MIN
    stream = response_frame(corr, body)
    first = conn.receive_buffer()
    first[:1000] = stream[:1000]
    assert conn.received(1000, 1.0) == []
    rest = conn.receive_buffer()  # from here on the socket writes into the frame's own buffer
    assert rest.obj is not first.obj and len(rest) == len(stream) - 1000
    rest[:] = stream[1000:]
    (done,) = conn.received(len(rest), 1.0)
    assert isinstance(done.response, memoryview) and done.response.readonly
    assert done.response.obj is rest.obj  # the very buffer the socket read into
    assert bytes(done.response) == body
    # the scratch buffer is free again and small answers are copies
    (corr,) = send(conn, FETCH, 11, 1)
    (small,) = read_stream(conn, response_frame(corr, b"tiny"))
    assert type(small.response) is bytes and small.response == b"tiny"


def test_large_answers_of_other_apis_are_bytes():
    conn = up_connection()
    (corr,) = send(conn, METADATA, 8, 1)
    body = b"m" * (3 * DIRECT_MIN)
    (done,) = read_stream(conn, response_frame(corr, body), chunks=[50_000])
    assert type(done.response) is bytes and done.response == body


def test_feed_still_takes_already_read_bytes_in_any_split():
    conn = up_connection()
    corrs = send(conn, FETCH, 11, 3)
    bodies = [b"a" * 10, b"b" * (DIRECT_MIN + 10), b"c" * 20]
    stream = b"".join(response_frame(c, b) for c, b in zip(corrs, bodies, strict=True))
    done = conn.feed(stream[:7], 1.0) + conn.feed(stream[7:DIRECT_MIN], 1.0) + conn.feed(stream[DIRECT_MIN:], 1.0)
    assert [bytes(c.response) for c in done] == bodies


def test_a_bad_size_after_a_large_answer_keeps_the_answers_before_it():
    conn = up_connection()
    corrs = send(conn, FETCH, 11, 2)
    good = response_frame(corrs[0], b"g" * (DIRECT_MIN * 2)) + response_frame(corrs[1], b"ok")
    with pytest.raises(ConnectionError) as caught:
        conn.feed(good + struct.pack(">i", -5) + b"\0" * 8, 1.0)
    assert [bytes(c.response)[:2] for c in caught.value.completions] == [b"gg", b"ok"]


def test_disconnect_drops_a_half_received_large_answer():
    conn = up_connection()
    (corr,) = send(conn, FETCH, 11, 1)
    conn.feed(response_frame(corr, b"z" * (DIRECT_MIN * 2))[:DIRECT_MIN], 1.0)
    assert len(conn.receive_buffer()) < DIRECT_MIN * 2  # the rest of that frame
    conn.on_disconnect(1.1, "gone")
    assert len(conn.receive_buffer()) == SCRATCH_SIZE


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 100, DIRECT_MIN - 9, DIRECT_MIN - 8, DIRECT_MIN, 3 * DIRECT_MIN,
                                        SCRATCH_SIZE + 17]), min_size=1, max_size=8),
       apis=st.lists(st.sampled_from([FETCH, METADATA]), min_size=12, max_size=12),
       chunks=st.lists(st.sampled_from([1, 3, 5, 4096, DIRECT_MIN - 1, SCRATCH_SIZE]) | st.integers(6, SCRATCH_SIZE),
                       min_size=1, max_size=5))
def test_any_mix_of_answers_read_in_any_pieces_arrives_whole_and_in_order(sizes, apis, chunks):
    conn = up_connection(max_in_flight=100)
    for size, api in zip(sizes, apis, strict=False):
        conn.enqueue(Request(api, 11 if api == FETCH else 8, [b"x"], context=(api, size)), 1.0)
    corrs = [r["corr_id"] for r in parse_requests(drain(conn))]
    bodies = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    stream = b"".join(response_frame(c, b) for c, b in zip(corrs, bodies, strict=True))
    done = read_stream(conn, stream, chunks)
    assert [bytes(c.response) for c in done] == bodies
    for completion in done:
        api, size = completion.request.context
        if type(completion.response) is not bytes:  # views only of large Fetch answers
            assert api == FETCH and size + 4 >= DIRECT_MIN and completion.response.readonly


def test_a_fetch_answer_read_into_its_own_buffer_decodes_to_the_records_sent():
    """What the fetch source does with a large answer: decode it, slice out the record set and decode that (the
    ctoppar's work), all on views of the buffer the socket read into."""
    from kqactors.core.consumer.decoder import FetchedSlice, SliceDecoder
    from kqactors.core.consumer.packing import MessageBatch
    from kqactors.core.consumer.settings import FetchSettings
    from kqactors.protocol.generated.fetch import FetchableTopicResponse, FetchResponse, PartitionData
    from kqactors.protocol.requests import FETCH as FETCH_KIND
    from kqactors.records import build_batch, scan_record_set

    values = [bytes([i % 256]) * 300 for i in range(1000)]
    records = bytes(build_batch([(1_700_000_000_000, None, v, None) for v in values], base_offset=0))
    assert len(records) > DIRECT_MIN
    body = FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[
        PartitionData(partition_index=0, high_watermark=1000, records=records)])]).encode(11)
    conn = up_connection()
    (corr,) = send(conn, FETCH, 11, 1)
    (done,) = read_stream(conn, response_frame(corr, body), chunks=[4096, 65536])
    answer = FETCH_KIND.decode(11, done.response)
    got = answer.responses[0].partitions[0].records
    assert isinstance(got, memoryview) and got.obj is done.response.obj  # no copy on the way
    scan = scan_record_set(got)
    sl = FetchedSlice("t", 0, 1, 0, scan.batches[-1].next_offset, got[:scan.consumed])
    taken = []
    for decoded in SliceDecoder(FetchSettings()).decode_chunks(sl, 1 << 20):
        batch = MessageBatch("t", 0, decoded.frame, 1)
        taken += batch.take(None)[0]
    assert [m.value() for m in taken] == values and [m.offset() for m in taken] == list(range(1000))
