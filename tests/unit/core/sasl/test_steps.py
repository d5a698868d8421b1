"""SASL as connection handshake steps: a Connection with a SaslAuthenticator runs ApiVersions →
SaslHandshake (AUTH_HANDSHAKE) → SaslAuthenticate rounds (AUTH_REQ) → UP against a scripted broker, and each
refusal is a HandshakeError (_AUTHENTICATION) whose text says why."""

from __future__ import annotations

import struct

import pytest

from kqactors.core.connection import Connection, ConnState, HandshakeError
from kqactors.core.sasl.mechanisms import SaslCredentials
from kqactors.core.sasl.steps import SaslAuthenticator
from kqactors.errors import KafkaError
from kqactors.protocol.api import decode_request, response_header_version
from kqactors.protocol.generated.api_versions import ApiVersion, ApiVersionsResponse
from kqactors.protocol.generated.sasl_authenticate import SaslAuthenticateResponse
from kqactors.protocol.generated.sasl_handshake import SaslHandshakeResponse

APIS = {18: (0, 3), 3: (0, 12), 17: (0, 1), 36: (0, 2)}


def _run(conn: Connection, answer, limit: int = 10) -> list[tuple[int, int, ConnState]]:
    """Serve the connection's requests with ``answer(api_key, version, request) -> body`` until UP."""
    seen = []
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    for _ in range(limit):
        data = b"".join(bytes(b) for b in conn.output_buffers(limit=1000))
        conn.on_written(len(data), 0.0)
        pos = 0
        while pos < len(data):
            (size,) = struct.unpack_from(">i", data, pos)
            api_key, version, corr_id, _client, request = decode_request(data[pos + 4:pos + 4 + size])
            pos += 4 + size
            seen.append((api_key, version, conn.state))
            body = answer(api_key, version, request)
            header = struct.pack(">i", corr_id) + (b"\0" if response_header_version(api_key, version) else b"")
            conn.feed(struct.pack(">i", len(header) + len(body)) + header + body, 0.0)
        if conn.state == ConnState.UP:
            return seen
    raise AssertionError(f"not UP after {limit} rounds: {seen}")


def _api_versions(apis=APIS):
    return ApiVersionsResponse(api_keys=[ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                         for k, (lo, hi) in apis.items()])


def _broker(auth_answers, mechanisms=("PLAIN",), handshake_error=0, apis=APIS):
    answers = list(auth_answers)

    def answer(api_key, version, request):
        if api_key == 18:
            return _api_versions(apis).encode(version)
        if api_key == 17:
            return SaslHandshakeResponse(error_code=handshake_error, mechanisms=list(mechanisms)).encode(version)
        if api_key == 36:
            return answers.pop(0)(request).encode(version)
        raise AssertionError(api_key)
    return answer


def _conn(mechanism="PLAIN", password="pw"):
    auth = SaslAuthenticator(SaslCredentials(mechanism, "alice", password))
    return Connection(client_id="t", authenticator=auth), auth


def test_plain_runs_handshake_then_authenticate_and_goes_up():
    conn, auth = _conn()
    got = []
    seen = _run(conn, _broker([lambda r: (got.append(r.auth_bytes), SaslAuthenticateResponse(
        session_lifetime_ms=60000))[1]]))
    assert [(k, s) for k, _v, s in seen] == [(18, ConnState.APIVERSION_QUERY), (17, ConnState.AUTH_HANDSHAKE),
                                             (36, ConnState.AUTH_REQ)]
    assert seen[1][1] == 1 and seen[2][1] == 2  # SaslHandshake v1, SaslAuthenticate at the broker's max
    assert got == [b"\0alice\0pw"]
    assert auth.session_lifetime_ms == 60000 and auth.authentications == 1


def test_scram_takes_two_rounds_against_scramp():
    scramp = pytest.importorskip("scramp")
    mechanism = scramp.ScramMechanism("SCRAM-SHA-256")
    info = mechanism.make_auth_info("pw", iteration_count=4096)
    server = mechanism.make_server(lambda _u: info)

    def first(request):
        server.set_client_first(request.auth_bytes.decode())
        return SaslAuthenticateResponse(auth_bytes=server.get_server_first().encode())

    def final(request):
        server.set_client_final(request.auth_bytes.decode())
        return SaslAuthenticateResponse(auth_bytes=server.get_server_final().encode())
    conn, _auth = _conn("SCRAM-SHA-256")
    seen = _run(conn, _broker([first, final], mechanisms=("SCRAM-SHA-256",)))
    assert [k for k, _v, _s in seen] == [18, 17, 36, 36]


def test_unsupported_mechanism_names_the_brokers_mechanisms():
    conn, _ = _conn("SCRAM-SHA-512")
    with pytest.raises(HandshakeError) as info:
        _run(conn, _broker([], mechanisms=("PLAIN", "OAUTHBEARER"), handshake_error=33))
    assert info.value.error_code == KafkaError._AUTHENTICATION
    assert "SCRAM-SHA-512" in str(info.value) and "PLAIN, OAUTHBEARER" in str(info.value)


def test_an_authentication_error_carries_the_brokers_message_not_the_password():
    conn, _ = _conn(password="hunter2")
    with pytest.raises(HandshakeError) as info:
        _run(conn, _broker([lambda r: SaslAuthenticateResponse(
            error_code=58, error_message="Authentication failed: Invalid username or password")]))
    text = str(info.value)
    assert "Invalid username or password" in text and "PLAIN" in text and "hunter2" not in text


def test_a_broker_without_sasl_apis_fails_clearly():
    conn, _ = _conn()
    with pytest.raises(HandshakeError, match="SaslHandshake"):
        _run(conn, _broker([], apis={18: (0, 3), 3: (0, 12)}))


def test_disconnect_during_authentication_fails_nothing_internal_and_retries_fresh():
    conn, _ = _conn()
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    assert conn.on_disconnect(0.0, "gone") == []
    seen = _run(conn, _broker([lambda r: SaslAuthenticateResponse()]))
    assert seen[-1][0] == 36


def test_reauthentication_on_an_up_connection_holds_new_requests_until_done():
    from kqactors.core.connection import Request
    conn, auth = _conn()
    _run(conn, _broker([lambda r: SaslAuthenticateResponse(session_lifetime_ms=1000)]))
    metadata = Request(3, 12, [b"\0" * 10])
    conn.enqueue(metadata, 0.0)
    in_flight = b"".join(bytes(b) for b in conn.output_buffers(limit=100))
    conn.on_written(len(in_flight), 0.0)
    (corr_in_flight,) = struct.unpack_from(">i", in_flight, 8)
    assert conn.start_reauthentication(1.0) and conn.state == ConnState.AUTH_HANDSHAKE
    later = Request(3, 12, [b"\0" * 10])
    conn.enqueue(later, 1.0)
    data = b"".join(bytes(b) for b in conn.output_buffers(limit=100))
    conn.on_written(len(data), 1.0)
    api_key, _version, corr_id, _client, _request = decode_request(data[4:])
    assert api_key == 17 and len(data) == 4 + struct.unpack_from(">i", data)[0]  # only the handshake went out
    # the request in flight before the re-authentication still completes meanwhile
    done = conn.feed(struct.pack(">ii", 4 + 2, corr_in_flight) + b"\0\0", 1.0)
    assert [c.request for c in done] == [metadata]
    conn.feed(struct.pack(">ii", 4 + len(body := SaslHandshakeResponse(mechanisms=["PLAIN"]).encode(1)), corr_id)
              + body, 1.0)
    assert conn.state == ConnState.AUTH_REQ
    data = b"".join(bytes(b) for b in conn.output_buffers(limit=100))
    conn.on_written(len(data), 1.0)
    _k, version, corr_id, _c, _r = decode_request(data[4:])
    body = SaslAuthenticateResponse(session_lifetime_ms=1000).encode(version)
    header = struct.pack(">i", corr_id) + (b"\0" if response_header_version(36, version) else b"")
    conn.feed(struct.pack(">i", len(header) + len(body)) + header + body, 1.0)
    assert conn.state == ConnState.UP and auth.authentications == 2
    assert conn.has_output()  # the request held during the re-authentication goes out now
