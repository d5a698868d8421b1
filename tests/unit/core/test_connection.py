"""Unit tests for the socket-free broker connection state machine (kqactors.core.connection)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.connection import Connection, ConnState, ReconnectBackoff, Request
from kqactors.errors import KafkaError
from kqactors.protocol.api import API_VERSIONS_KEY
from kqactors.protocol.errors import ProtocolError
from kqactors.protocol.handshake import read_api_versions
from kqactors.protocol.primitives import uvarint_bytes

PRODUCE, METADATA = 0, 3


def parse_requests(data: bytes) -> list[dict]:
    """Decode size-prefixed request frames the way a broker would (header v1/v2 fields we need)."""
    out, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        frame = data[pos + 4:pos + 4 + size]
        assert len(frame) == size, "incomplete frame"
        api_key, version, corr_id, cid_len = struct.unpack_from(">hhih", frame, 0)
        client_id = frame[10:10 + cid_len].decode() if cid_len >= 0 else None
        out.append({"api_key": api_key, "version": version, "corr_id": corr_id, "client_id": client_id,
                    "rest": frame[10 + max(cid_len, 0):]})
        pos += 4 + size
    return out


def response_frame(corr_id: int, body: bytes, flexible_header: bool = False) -> bytes:
    payload = struct.pack(">i", corr_id) + (b"\x00" if flexible_header else b"") + body
    return struct.pack(">i", len(payload)) + payload


def api_versions_body_v0(ranges: dict[int, tuple[int, int]]) -> bytes:
    body = struct.pack(">hi", 0, len(ranges))
    for key, (low, high) in ranges.items():
        body += struct.pack(">hhh", key, low, high)
    return body


def api_versions_body_v3(ranges: dict[int, tuple[int, int]]) -> bytes:
    body = struct.pack(">h", 0) + uvarint_bytes(len(ranges) + 1)
    for key, (low, high) in ranges.items():
        body += struct.pack(">hhh", key, low, high) + b"\x00"
    return body + struct.pack(">i", 0) + b"\x00"


BROKER_APIS = {PRODUCE: (3, 9), METADATA: (0, 12), API_VERSIONS_KEY: (0, 3)}


def drain(conn: Connection, now: float = 0.0) -> bytes:
    data = b"".join(bytes(b) for b in conn.output_buffers(limit=10_000))
    conn.on_written(len(data), now)
    return data


def up_connection(max_in_flight: int = 5) -> Connection:
    conn = Connection(client_id="tester", max_in_flight=max_in_flight)
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    (req,) = parse_requests(drain(conn))
    conn.feed(response_frame(req["corr_id"], api_versions_body_v3(BROKER_APIS)), 0.0)
    assert conn.state == ConnState.UP
    return conn


def test_handshake_sends_api_versions_v3_first_and_goes_up():
    conn = Connection(client_id="tester")
    assert conn.state == ConnState.INIT
    conn.start_connect(0.0)
    assert conn.state == ConnState.CONNECT
    conn.enqueue(Request(METADATA, 4, [b"body"]), 0.0)
    conn.on_connected(0.1)
    assert conn.state == ConnState.APIVERSION_QUERY
    (req,) = parse_requests(drain(conn))
    assert (req["api_key"], req["version"], req["client_id"]) == (API_VERSIONS_KEY, 3, "tester")
    # header v2: empty tagged fields, then compact strings "kqactors" and its version
    assert req["rest"][0] == 0 and req["rest"][1] == len("kqactors") + 1
    done = conn.feed(response_frame(req["corr_id"], api_versions_body_v3(BROKER_APIS)), 0.2)
    assert done == []
    assert conn.state == ConnState.UP
    assert conn.pick_version(PRODUCE, 0, 11) == 9
    assert conn.pick_version(METADATA, 0, 4) == 4
    assert conn.pick_version(99, 0, 4) is None
    # the queued Metadata request went out only now
    (meta,) = parse_requests(drain(conn))
    assert meta["api_key"] == METADATA and meta["rest"] == b"body"


def test_unsupported_version_answer_retries_at_the_mock_clusters_advertised_version():
    conn = Connection()
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    (first,) = parse_requests(drain(conn))
    # non-standard body: error code, then the api count as one raw byte; it advertises ApiVersions v0..v2
    weird = struct.pack(">h", KafkaError.UNSUPPORTED_VERSION) + bytes([1]) + struct.pack(">hhh", 18, 0, 2)
    conn.feed(response_frame(first["corr_id"], weird), 0.0)
    assert conn.state == ConnState.APIVERSION_QUERY
    (second,) = parse_requests(drain(conn))
    assert second["api_key"] == API_VERSIONS_KEY and second["version"] == 2
    assert second["rest"] == b""  # header v1, empty body
    v2_body = api_versions_body_v0(BROKER_APIS) + struct.pack(">i", 0)  # v1+ adds throttle_time_ms
    conn.feed(response_frame(second["corr_id"], v2_body), 0.0)
    assert conn.state == ConnState.UP
    assert conn.versions.broker[PRODUCE] == (3, 9)


def test_unsupported_version_answer_without_a_readable_range_retries_at_v0():
    conn = Connection()
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    (first,) = parse_requests(drain(conn))
    conn.feed(response_frame(first["corr_id"], struct.pack(">h", KafkaError.UNSUPPORTED_VERSION)), 0.0)
    (second,) = parse_requests(drain(conn))
    assert second["api_key"] == API_VERSIONS_KEY and second["version"] == 0
    conn.feed(response_frame(second["corr_id"], api_versions_body_v0(BROKER_APIS)), 0.0)
    assert conn.state == ConnState.UP


def test_api_versions_error_is_a_connection_error():
    conn = Connection()
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    (req,) = parse_requests(drain(conn))
    with pytest.raises(ConnectionError):
        conn.feed(response_frame(req["corr_id"], struct.pack(">h", 33)), 0.0)


def test_in_flight_window_and_responses_split_across_reads():
    conn = up_connection(max_in_flight=2)
    for i in range(5):
        conn.enqueue(Request(PRODUCE, 9, [b"a" * i, memoryview(b"batch")], flexible=True, context=i), 1.0)
    sent = parse_requests(drain(conn))
    assert [r["corr_id"] for r in sent] == [2, 3]  # ApiVersions used 1
    assert len(conn.waiting) == 3
    # responses for both, fed one byte at a time, complete in order and free the window
    stream = response_frame(2, b"r0", True) + response_frame(3, b"r1", True)
    done = []
    for i in range(len(stream)):
        done += conn.feed(stream[i:i + 1], 1.1)
    assert [(c.request.context, c.error_code, c.response) for c in done] == [(0, 0, b"r0"), (1, 0, b"r1")]
    more = parse_requests(drain(conn))
    assert [r["corr_id"] for r in more] == [4, 5]
    assert more[0]["rest"] == b"\x00" + b"aa" + b"batch"  # tagged fields, then the spliced body parts


def test_responses_read_through_a_reused_buffer_own_their_bytes():
    """The broker actor reads into one buffer it reuses: a completed response must not point into it."""
    conn = up_connection(max_in_flight=2)
    for i in range(2):
        conn.enqueue(Request(PRODUCE, 9, [b"req"], flexible=True, context=i), 1.0)
    drain(conn)
    stream = response_frame(2, b"first" * 1000, True) + response_frame(3, b"second", True)
    buf = memoryview(bytearray(4096))
    done = []
    for start in range(0, len(stream), len(buf)):
        chunk = stream[start:start + len(buf)]
        buf[:len(chunk)] = chunk
        done += conn.feed(buf[:len(chunk)], 1.1)
        buf[:] = b"\xee" * len(buf)  # the next read overwrites it
    assert [(c.request.context, bytes(c.response)) for c in done] == [(0, b"first" * 1000), (1, b"second")]


def test_partial_writes_keep_byte_order():
    conn = up_connection()
    conn.enqueue(Request(METADATA, 1, [b"x" * 100], context="a"), 0.0)
    conn.enqueue(Request(METADATA, 1, [b"y" * 50], context="b"), 0.0)
    written = bytearray()
    while conn.has_output():
        chunk = b"".join(bytes(b) for b in conn.output_buffers())[:7]
        written += chunk
        conn.on_written(len(chunk), 0.0)
    reqs = parse_requests(bytes(written))
    assert [r["rest"] for r in reqs] == [b"x" * 100, b"y" * 50]


def test_no_response_requests_complete_when_written():
    conn = up_connection()
    conn.enqueue(Request(PRODUCE, 9, [b"acks0"], flexible=True, expect_response=False, context="z"), 0.0)
    buffers = conn.output_buffers()
    total = sum(len(b) for b in buffers)
    assert conn.on_written(total - 1, 0.0) == []
    (done,) = conn.on_written(1, 0.0)
    assert done.request.context == "z" and done.error_code == 0 and done.response is None
    assert not conn.in_flight


def test_unknown_correlation_id_is_counted_not_fatal():
    conn = up_connection()
    assert conn.feed(response_frame(999, b"late"), 0.0) == []
    assert conn.unknown_responses == 1


def test_bad_frame_size_raises():
    conn = up_connection()
    with pytest.raises(ConnectionError):
        conn.feed(struct.pack(">i", -5) + b"\x00" * 8, 0.0)


def test_in_flight_timeout_times_out_and_asks_for_disconnect_then_rest_fail_transport():
    conn = up_connection(max_in_flight=1)
    conn.enqueue(Request(METADATA, 1, [b"1"], timeout_ms=1000, context="first"), 10.0)
    conn.enqueue(Request(METADATA, 1, [b"2"], timeout_ms=5000, context="second"), 10.0)
    drain(conn, 10.0)
    assert conn.next_deadline() == pytest.approx(11.0)
    assert conn.check_timeouts(10.5) == ([], False)
    done, must_disconnect = conn.check_timeouts(11.0)
    assert must_disconnect and [(c.request.context, c.error_code) for c in done] == [("first", KafkaError._TIMED_OUT)]
    rest = conn.on_disconnect(11.0, "timeout")
    assert [(c.request.context, c.error_code) for c in rest] == [("second", KafkaError._TRANSPORT)]
    assert conn.state == ConnState.DOWN and not conn.has_output()


def test_queued_timeout_does_not_disconnect():
    conn = Connection()
    conn.enqueue(Request(METADATA, 1, [b""], timeout_ms=100, context="q"), 0.0)
    done, must_disconnect = conn.check_timeouts(0.2)
    assert not must_disconnect and [c.request.context for c in done] == ["q"]


def test_connect_setup_timeout():
    conn = Connection(connect_timeout_ms=2000)
    conn.start_connect(1.0)
    assert conn.next_deadline() == pytest.approx(3.0)
    assert conn.check_timeouts(2.9)[1] is False
    assert conn.check_timeouts(3.0)[1] is True


def test_disconnect_fails_everything_exactly_once_and_reconnect_works():
    conn = up_connection(max_in_flight=2)
    for i in range(4):
        conn.enqueue(Request(PRODUCE, 9, [b"b"], context=i), 0.0)
    drain(conn)
    failed = conn.on_disconnect(0.5, "reset by peer")
    assert sorted(c.request.context for c in failed) == [0, 1, 2, 3]
    assert {c.error_code for c in failed} == {KafkaError._TRANSPORT}
    assert conn.on_disconnect(0.6, "again") == []
    # new connection: handshake again, then new requests flow
    conn.start_connect(1.0)
    conn.on_connected(1.0)
    (req,) = parse_requests(drain(conn))
    assert req["api_key"] == API_VERSIONS_KEY
    conn.feed(response_frame(req["corr_id"], api_versions_body_v3(BROKER_APIS)), 1.0)
    conn.enqueue(Request(METADATA, 1, [b""], context="after"), 1.0)
    (meta,) = parse_requests(drain(conn))
    (done,) = conn.feed(response_frame(meta["corr_id"], b"ok"), 1.0)
    assert done.request.context == "after" and done.response == b"ok"


def test_invalid_state_transitions_raise():
    conn = Connection()
    with pytest.raises(RuntimeError):
        conn.on_connected(0.0)
    conn.start_connect(0.0)
    with pytest.raises(RuntimeError):
        conn.start_connect(0.0)
    with pytest.raises(ValueError):
        Connection(max_in_flight=0)


def test_backoff_grows_caps_and_resets_with_jitter_bounds():
    picks = []

    def rng(low, high):
        picks.append((low, high))
        return high

    backoff = ReconnectBackoff(100, 1000, rng=rng)
    delays = [backoff.next_delay_ms(t * 0.01) for t in range(6)]
    assert picks[:4] == [(75, 150), (150, 300), (300, 600), (600, 1200)]
    assert delays[:3] == [150, 300, 600] and max(delays) == 1000
    # quiet for longer than max: start again from the initial value
    assert backoff.next_delay_ms(100.0) == 150


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 5000), st.integers(0, 20000), st.lists(st.floats(0, 1), min_size=1, max_size=20))
def test_backoff_stays_within_jitter_bounds(initial, maximum, fractions):
    import random
    backoff = ReconnectBackoff(initial, maximum, rng=random.Random(1).uniform)
    current = initial
    cap = max(maximum, initial)
    for step, _ in enumerate(fractions):
        delay = backoff.next_delay_ms(step * 0.001)
        assert 0.75 * current - 1e-9 <= delay <= min(1.5 * current, cap) + 1e-9
        current = min(current * 2, cap) if initial else 0


def test_api_versions_answer_rejects_truncation():
    body = api_versions_body_v0(BROKER_APIS)
    with pytest.raises(ProtocolError):
        read_api_versions(body[:-2], 0, 0)
    answer = read_api_versions(body, 0, 0)
    assert {e.api_key: e.max_version for e in answer.response.api_keys}[METADATA] == 12


def test_handshake_is_internal_on_disconnect_and_timeout():
    conn = Connection(api_version_timeout_ms=500)
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    drain(conn)
    conn.enqueue(Request(METADATA, 1, [b""], timeout_ms=5000, context="user"), 0.0)
    done, must_disconnect = conn.check_timeouts(0.6)
    assert must_disconnect and done == [] and "ApiVersions" in conn.last_error
    failed = conn.on_disconnect(0.6, "handshake timed out")
    assert [c.request.context for c in failed] == ["user"]  # the handshake itself has no requester


# ---- pre-UP handshake steps (TLS state, pluggable authentication steps) ------------------------------------

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class EchoStep:
    """A test step: sends `rounds` requests of `api_key`, each carrying its round number, and checks that the
    response echoes it; a response of b"no" fails the handshake."""

    def __init__(self, name, state, api_key, rounds, log):
        self.name, self.state, self.api_key, self.rounds, self.log = name, state, api_key, rounds, log
        self.sent = 0

    def _next(self, versions):
        if self.sent == self.rounds:
            return None
        self.sent += 1
        version = versions.pick(self.api_key, 0, 1)
        return (self.api_key, version, [b"round%d" % self.sent])

    def start(self, versions):
        self.log.append(("start", self.name))
        return self._next(versions)

    def on_response(self, versions, api_key, version, body):
        from kqactors.core.connection import HandshakeError
        self.log.append(("response", self.name, body))
        if body == b"no":
            raise HandshakeError(f"{self.name} refused")
        assert body == b"round%d" % self.sent and api_key == self.api_key
        return self._next(versions)


class StepsAuthenticator:
    def __init__(self, rounds=(1, 2)):
        self.rounds = rounds
        self.log = []

    def steps(self):
        return [EchoStep("handshake", ConnState.AUTH_HANDSHAKE, SASL_HANDSHAKE, self.rounds[0], self.log),
                EchoStep("authenticate", ConnState.AUTH_REQ, SASL_AUTHENTICATE, self.rounds[1], self.log)]


AUTH_APIS = {**BROKER_APIS, SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}


def answer_api_versions(conn, ranges=AUTH_APIS, now=0.0):
    (req,) = parse_requests(drain(conn))
    assert req["api_key"] == API_VERSIONS_KEY
    conn.feed(response_frame(req["corr_id"], api_versions_body_v3(ranges)), now)


def test_authentication_steps_run_in_order_in_their_states_before_up():
    auth = StepsAuthenticator()
    conn = Connection(authenticator=auth)
    conn.start_connect(0.0)
    conn.enqueue(Request(METADATA, 4, [b"app"]), 0.0)
    conn.on_connected(0.0)
    answer_api_versions(conn)
    seen = []
    while conn.state != ConnState.UP:
        seen.append(conn.state)
        (req,) = parse_requests(drain(conn))  # one handshake request at a time, the app's request held back
        assert req["api_key"] in (SASL_HANDSHAKE, SASL_AUTHENTICATE)
        assert req["version"] == 1  # the highest of the step's 0..1 both sides offer
        assert conn.feed(response_frame(req["corr_id"], req["rest"]), 0.0) == []
    assert seen == [ConnState.AUTH_HANDSHAKE, ConnState.AUTH_REQ, ConnState.AUTH_REQ]
    assert [entry[:2] for entry in auth.log] == [("start", "handshake"), ("response", "handshake"),
                                                  ("start", "authenticate"), ("response", "authenticate"),
                                                  ("response", "authenticate")]
    (app,) = parse_requests(drain(conn))
    assert app["api_key"] == METADATA and app["rest"] == b"app"


def test_a_step_with_nothing_to_send_is_skipped():
    auth = StepsAuthenticator(rounds=(0, 1))
    conn = Connection(authenticator=auth)
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    answer_api_versions(conn)
    assert conn.state == ConnState.AUTH_REQ
    (req,) = parse_requests(drain(conn))
    conn.feed(response_frame(req["corr_id"], req["rest"]), 0.0)
    assert conn.state == ConnState.UP


def test_a_refused_step_fails_the_connection_with_its_code_and_steps_restart_on_reconnect():
    from kqactors.core.connection import HandshakeError
    auth = StepsAuthenticator()
    conn = Connection(authenticator=auth)
    conn.start_connect(0.0)
    conn.enqueue(Request(METADATA, 4, [b"app"]), 0.0)
    conn.on_connected(0.0)
    answer_api_versions(conn)
    (req,) = parse_requests(drain(conn))
    with pytest.raises(HandshakeError) as info:
        conn.feed(response_frame(req["corr_id"], b"no"), 0.0)
    assert info.value.error_code == KafkaError._AUTHENTICATION
    (failed,) = conn.on_disconnect(0.0, str(info.value), info.value.error_code)
    assert failed.error_code == KafkaError._AUTHENTICATION and failed.request.api_key == METADATA
    # a new attempt runs fresh steps from the start
    conn.start_connect(1.0)
    conn.on_connected(1.0)
    answer_api_versions(conn, now=1.0)
    assert conn.state == ConnState.AUTH_HANDSHAKE and auth.log[-1] == ("start", "handshake")


def test_a_step_request_that_times_out_disconnects_naming_the_step():
    conn = Connection(authenticator=StepsAuthenticator(), api_version_timeout_ms=1000)
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    answer_api_versions(conn)
    drain(conn)
    done, must_disconnect = conn.check_timeouts(1.5)
    assert done == [] and must_disconnect
    assert conn.last_error == "handshake request timed out after 1000 ms"


def test_tls_transport_handshake_state_comes_before_api_versions():
    conn = Connection(tls=True, connect_timeout_ms=2000)
    conn.start_connect(0.0)
    conn.on_connected(0.5)
    assert conn.state == ConnState.SSL_HANDSHAKE and not conn.has_output()
    assert conn.next_deadline() == 2.0  # socket.connection.setup.timeout.ms covers the TLS handshake
    with pytest.raises(RuntimeError):
        conn.on_connected(0.6)
    conn.on_tls_ready(0.7)
    assert conn.state == ConnState.APIVERSION_QUERY
    answer_api_versions(conn, BROKER_APIS)
    assert conn.state == ConnState.UP


def test_tls_handshake_past_the_setup_timeout_disconnects():
    conn = Connection(tls=True, connect_timeout_ms=2000)
    conn.start_connect(0.0)
    conn.on_connected(0.5)
    assert conn.check_timeouts(2.1) == ([], True)
    assert conn.last_error.startswith("connection setup timed out in state SSL_HANDSHAKE")


def test_versions_come_from_the_request_table_through_negotiate():
    from kqactors.protocol.requests import REQUEST_KINDS
    conn = up_connection()
    assert conn.version_for(REQUEST_KINDS["Produce"]) == 9  # broker 3-9, client 3-10
    assert conn.version_for(REQUEST_KINDS["Metadata"]) == 12
    assert conn.version_for(REQUEST_KINDS["Fetch"]) is None  # not offered by this broker
    assert conn.versions[PRODUCE] == 9 and PRODUCE in conn.versions.broker


@pytest.mark.parametrize("bad", ["size", "header"])
def test_a_bad_frame_keeps_the_answers_before_it_and_fails_the_rest_on_disconnect(bad):
    """A garbage frame drops the connection, but the responses read before it in the same feed still complete
    (they ride on the error), and the request whose header was unreadable fails _TRANSPORT on disconnect
    instead of waiting forever."""
    conn = up_connection()
    for i in range(3):
        conn.enqueue(Request(PRODUCE, 9, [b"x"], flexible=True, context=i), 1.0)
    first, second, _ = (r["corr_id"] for r in parse_requests(drain(conn)))
    garbage = (struct.pack(">i", -5) + b"\x00" * 8 if bad == "size"
               else struct.pack(">ii", 5, second) + b"\xff")  # the tag-section count runs past the frame
    with pytest.raises(ConnectionError) as caught:
        conn.feed(response_frame(first, b"ok", True) + garbage, 1.1)
    assert [(c.request.context, c.response) for c in caught.value.completions] == [(0, b"ok")]
    failed = conn.on_disconnect(1.2, "receive failed")
    assert sorted(c.request.context for c in failed) == [1, 2]
    assert all(c.error_code == KafkaError._TRANSPORT for c in failed)
