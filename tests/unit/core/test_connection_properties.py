"""Unit tests for the connection's share of librdkafka properties (kqactors.core.connection):
receive.message.max.bytes, the untransmitted count queue.buffering.backpressure.threshold reads, and the
debug=protocol trace hook."""

from __future__ import annotations

import struct

import pytest

from kqactors.core.connection import MAX_RESPONSE_SIZE, Connection, Request
from tests.unit.core.test_connection import drain, parse_requests, response_frame, up_connection

METADATA = 3


def test_default_response_limit_is_librdkafkas():
    assert Connection().max_response_size == MAX_RESPONSE_SIZE == 100000000


def test_a_response_larger_than_receive_message_max_bytes_fails_the_connection():
    conn = up_connection()
    conn.max_response_size = 1000
    conn.enqueue(Request(METADATA, 12, [b"x"]), 0.0)
    (req,) = parse_requests(drain(conn))
    conn.feed(response_frame(req["corr_id"], b"\0" * 900), 0.0)  # within the limit
    conn.enqueue(Request(METADATA, 12, [b"x"]), 0.0)
    drain(conn)
    with pytest.raises(ConnectionError, match=r"Invalid response size 1005 \(0..1000\): increase "
                                              r"receive.message.max.bytes"):
        conn.feed(struct.pack(">i", 1005) + b"\0" * 8, 0.0)  # the size prefix alone is enough to refuse it


def test_untransmitted_counts_queued_and_partly_written_requests():
    conn = up_connection(max_in_flight=2)
    for _ in range(3):
        conn.enqueue(Request(METADATA, 12, [b"abc"]), 0.0)
    assert conn.untransmitted == 3  # two in the output, one waiting for the in-flight window
    first = bytes(conn.output_buffers()[0])
    conn.on_written(len(first) - 1, 0.0)
    assert conn.untransmitted == 3  # partly written still counts
    drain(conn)
    assert conn.untransmitted == 1 and len(conn.waiting) == 1


def test_trace_hook_sees_requests_sent_and_responses_received():
    conn = up_connection()
    seen: list[tuple[bool, int, int]] = []
    conn.on_trace = lambda sent, request, nbytes, rtt: seen.append((sent, request.corr_id, nbytes))
    conn.enqueue(Request(METADATA, 12, [b"abcd"]), 0.0)
    (req,) = parse_requests(drain(conn))
    conn.feed(response_frame(req["corr_id"], b"\0" * 10), 0.5)
    assert [(sent, corr) for sent, corr, _ in seen] == [(True, req["corr_id"]), (False, req["corr_id"])]
    assert seen[1][2] == 4 + 4 + 10  # size prefix + correlation id + body
