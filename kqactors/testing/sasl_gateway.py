"""A SASL front for a broker without a user store (Tansu): it answers ApiVersions, SaslHandshake and
SaslAuthenticate itself with real server-side implementations, then forwards the connection's bytes to the
broker untouched. Plus a small OAuth token endpoint (client-credentials grant, RS256 JWTs) whose key the
gateway verifies OAUTHBEARER tokens with.

Runs in: the test process, on threads (an accept thread, one per connection, two per forwarded connection).
Server sides: PLAIN against a user table; SCRAM-SHA-256/512 with ``scramp`` (salted credentials made from the
user table); OAUTHBEARER with ``PyJWT`` (RS256 against the token endpoint's key, or unsecured ``alg: none``
tokens when ``allow_unsecured_jwt``), failing as Kafka does: a JSON error challenge, then
SASL_AUTHENTICATION_FAILED once the client answers it. The broker behind must advertise the gateway's port (or
the TLS terminator's in front of it) — ``TansuBroker(advertised_port=...)`` — so no address is rewritten.

``SaslGateway.authentications`` (and ``reauthentications``, KIP-368: SASL requests on an authenticated
connection are answered here too) record (mechanism, principal, extensions) of each success for tests. With
``session_lifetime_ms`` the gateway grants that session lifetime and, as Kafka, closes a connection that sends
a request after it expired without re-authenticating.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from kqactors.protocol.api import decode_request, response_header_version
from kqactors.protocol.generated.api_versions import ApiVersion, ApiVersionsResponse
from kqactors.protocol.generated.sasl_authenticate import SaslAuthenticateResponse
from kqactors.protocol.generated.sasl_handshake import SaslHandshakeResponse
from kqactors.testing._process import free_loopback_port

__all__ = ["SaslGateway", "TokenEndpoint", "MECHANISMS"]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, UNSUPPORTED_VERSION = 33, 34, 35
SASL_AUTHENTICATION_FAILED = 58


class _Closed(Exception):
    pass


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise _Closed
        data += chunk
    return bytes(data)


def _read_frame(sock: socket.socket) -> bytes:
    (size,) = _SIZE.unpack(_read_exact(sock, 4))
    if size < 8 or size > 100 << 20:
        raise _Closed
    return _read_exact(sock, size)


def _response(api_key: int, version: int, corr_id: int, body: bytes) -> bytes:
    header = _SIZE.pack(corr_id) + (b"\x00" if response_header_version(api_key, version) >= 1 else b"")
    return _SIZE.pack(len(header) + len(body)) + header + body


class TokenEndpoint:
    """An OAuth 2 token endpoint on loopback (client-credentials grant, HTTP Basic or form client
    authentication) issuing RS256 JWTs: ``sub`` is the client id, ``scope`` the requested scope, ``exp``
    ``lifetime_s`` ahead. ``public_key_pem`` is what resource servers (the gateway) verify with."""

    def __init__(self, clients: dict[str, str], lifetime_s: int = 3600, issuer: str = "kqactors-test-idp") -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        self.clients = dict(clients)
        self.lifetime_s = lifetime_s
        self.issuer = issuer
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption())
        self.public_key_pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        self.issued: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/token"

    def issue(self, subject: str, scope: str = "", lifetime_s: int | None = None) -> str:
        import jwt
        now = int(time.time())
        claims = {"sub": subject, "iss": self.issuer, "iat": now, "exp": now + (lifetime_s or self.lifetime_s),
                  "jti": uuid.uuid4().hex}
        if scope:
            claims["scope"] = scope
        self.issued.append(claims)
        return jwt.encode(claims, self._private_pem, algorithm="RS256")

    def start(self) -> TokenEndpoint:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
                auth = self.headers.get("Authorization", "")
                if auth.lower().startswith("basic "):
                    client_id, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
                endpoint.requests.append({"client_id": client_id, "grant_type": form.get("grant_type"),
                                          "scope": form.get("scope", "")})
                if form.get("grant_type") != "client_credentials":
                    self._answer(400, {"error": "unsupported_grant_type"})
                elif endpoint.clients.get(client_id) != secret or not client_id:
                    self._answer(401, {"error": "invalid_client"})
                else:
                    token = endpoint.issue(client_id, form.get("scope", ""))
                    self._answer(200, {"access_token": token, "token_type": "bearer",
                                       "expires_in": endpoint.lifetime_s})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="kq-token-endpoint", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> TokenEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Refused(Exception):
    """Authentication failed: the SaslAuthenticate error message."""


class _ScramServer:
    def __init__(self, mechanism: str, users: dict[str, str]) -> None:
        from scramp import ScramMechanism
        scram = ScramMechanism(mechanism)
        self.mechanism = mechanism
        infos = {user: scram.make_auth_info(password, iteration_count=4096) for user, password in users.items()}

        def lookup(username: str) -> Any:
            if username not in infos:
                raise KeyError(username)
            return infos[username]

        self._server = scram.make_server(lookup)
        self._step = 0
        self.principal = ""

    def step(self, data: bytes) -> tuple[bytes, bool]:
        from scramp import ScramException
        try:
            if self._step == 0:
                self._step = 1
                text = data.decode()
                self._server.set_client_first(text)
                bare = text.split(",", 2)[2] if text.count(",") >= 2 else ""
                name = bare.split(",")[0]
                self.principal = name[2:].replace("=2C", ",").replace("=3D", "=") if name.startswith("n=") else ""
                return self._server.get_server_first().encode(), False
            self._server.set_client_final(data.decode())
            return self._server.get_server_final().encode(), True
        except (ScramException, KeyError, UnicodeDecodeError, AttributeError):
            raise _Refused("Authentication failed during authentication due to invalid credentials with SASL "
                           f"mechanism {self.mechanism}") from None


class _OAuthServer:
    def __init__(self, public_key_pem: bytes | None, allow_unsecured: bool) -> None:
        self._key = public_key_pem
        self._allow_unsecured = allow_unsecured
        self._failed = ""
        self.principal = ""
        self.extensions: dict[str, str] = {}

    def step(self, data: bytes) -> tuple[bytes, bool]:
        if self._failed:  # the client's 0x01 after our error challenge
            raise _Refused(f"Authentication failed: {self._failed}")
        parts = data.decode("utf-8", "replace").split("\x01")
        fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        auth = fields.pop("auth", "")
        if not parts[0].startswith("n,") or not auth.startswith("Bearer "):
            raise _Refused("Authentication failed: malformed OAUTHBEARER client message")
        try:
            claims = self._validate(auth[len("Bearer "):])
        except Exception as exc:  # noqa: BLE001 - any invalid token: the error challenge
            self._failed = f"invalid token: {exc}"
            return json.dumps({"status": "invalid_token"}).encode(), False
        self.principal = str(claims.get("sub", ""))
        self.extensions = fields
        return b"", True

    def _validate(self, token: str) -> dict[str, Any]:
        import jwt
        header = jwt.get_unverified_header(token)
        if header.get("alg") == "none":
            if not self._allow_unsecured:
                raise ValueError("unsecured tokens are not accepted")
            claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
            if float(claims.get("exp", 0)) < time.time():
                raise ValueError("token expired")
            return claims
        if self._key is None:
            raise ValueError("no key to verify signed tokens")
        return jwt.decode(token, self._key, algorithms=["RS256"], options={"require": ["exp", "sub"]})


class SaslGateway:
    """Listens on 127.0.0.1:``port`` (chosen when None), authenticates each connection with one of
    ``mechanisms`` and forwards it to 127.0.0.1:``upstream_port``. ``api_versions`` are the broker's
    ({key: (min, max)}: ``TansuBroker.api_versions``); SaslHandshake v0-1 and SaslAuthenticate v0-2 are added."""

    def __init__(self, upstream_port: int, api_versions: dict[int, tuple[int, int]],
                 users: dict[str, str] | None = None, mechanisms: Iterable[str] = MECHANISMS,
                 token_key_pem: bytes | None = None, allow_unsecured_jwt: bool = False, port: int | None = None,
                 session_lifetime_ms: int = 0) -> None:
        self.upstream_port = upstream_port
        self.users = dict(users or {})
        self.mechanisms = tuple(mechanisms)
        self.token_key_pem = token_key_pem
        self.allow_unsecured_jwt = allow_unsecured_jwt
        self.session_lifetime_ms = session_lifetime_ms
        self.port = port or free_loopback_port()
        versions = dict(api_versions)
        versions[SASL_HANDSHAKE] = (0, 1)
        versions[SASL_AUTHENTICATE] = (0, 2)
        self._api_keys = [ApiVersion(api_key=k, min_version=lo, max_version=hi)
                          for k, (lo, hi) in sorted(versions.items())]
        self.authentications: list[tuple[str, str, dict[str, str]]] = []
        self.reauthentications: list[tuple[str, str, dict[str, str]]] = []
        self.failures: list[str] = []
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> SaslGateway:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="kq-sasl-gateway", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            for sock in list(self._sockets):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self._sockets.clear()

    def __enter__(self) -> SaslGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- connections -----------------------------------------------------------------------------------
    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            listener = self._listener
            if listener is None:
                return
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            self._track(client)
            threading.Thread(target=self._serve, args=(client,), name="kq-sasl-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        session = _Session()
        try:
            if self._authenticate(client, session):
                self._forward(client, session)
        except (_Closed, OSError):
            pass
        finally:
            client.close()

    def _authenticate(self, client: socket.socket, session: _Session, frame: bytes | None = None,
                      send: Any = None) -> bool:
        """Answer ApiVersions / SaslHandshake / SaslAuthenticate until the client is authenticated (True) or
        refused (False). With ``frame`` (a re-authentication on a forwarded connection) the first request is
        given and ``send`` writes answers."""
        send = send or (lambda data: client.sendall(data))
        while True:
            if frame is None:
                frame = _read_frame(client)
            api_key, version, corr_id = _HEADER.unpack_from(frame, 0)
            current, frame = frame, None
            if api_key == API_VERSIONS and not session.reauthenticating:
                if version > 3:
                    body = ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=self._api_keys).encode(0)
                    send(_response(api_key, 0, corr_id, body))
                else:
                    body = ApiVersionsResponse(error_code=0, api_keys=self._api_keys).encode(version)
                    send(_response(api_key, version, corr_id, body))
                continue
            if api_key == SASL_HANDSHAKE:
                _, _, _, _, request = decode_request(current)
                if request.mechanism not in self.mechanisms or (session.reauthenticating
                                                                and request.mechanism != session.mechanism):
                    body = SaslHandshakeResponse(error_code=UNSUPPORTED_SASL_MECHANISM,
                                                 mechanisms=list(self.mechanisms)).encode(version)
                    send(_response(api_key, version, corr_id, body))
                    self.failures.append(f"unsupported mechanism {request.mechanism}")
                    return False
                session.mechanism = request.mechanism
                session.server = self._server_for(request.mechanism)
                send(_response(api_key, version, corr_id,
                               SaslHandshakeResponse(error_code=0, mechanisms=list(self.mechanisms)).encode(version)))
                continue
            if api_key == SASL_AUTHENTICATE and session.server is not None:
                _, _, _, _, request = decode_request(current)
                try:
                    answer, done = session.server.step(bytes(request.auth_bytes))
                except _Refused as refused:
                    body = SaslAuthenticateResponse(error_code=SASL_AUTHENTICATION_FAILED,
                                                    error_message=str(refused)).encode(version)
                    send(_response(api_key, version, corr_id, body))
                    self.failures.append(str(refused))
                    return False
                lifetime = self.session_lifetime_ms if done else 0
                body = SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=answer,
                                                session_lifetime_ms=lifetime).encode(version)
                send(_response(api_key, version, corr_id, body))
                if done:
                    record = (session.mechanism or "", session.server.principal,
                              dict(getattr(session.server, "extensions", {})))
                    (self.reauthentications if session.reauthenticating else self.authentications).append(record)
                    session.expires = time.monotonic() + lifetime / 1000 if lifetime else 0.0
                    session.server = None
                    session.reauthenticating = False
                    return True
                continue
            self.failures.append(f"request {api_key} before authentication")
            return False  # Kafka closes a connection that skips authentication

    def _server_for(self, mechanism: str) -> Any:
        if mechanism == "PLAIN":
            return _PlainServer(self.users)
        if mechanism.startswith("SCRAM-"):
            return _ScramServer(mechanism, self.users)
        return _OAuthServer(self.token_key_pem, self.allow_unsecured_jwt)

    def _forward(self, client: socket.socket, session: _Session) -> None:
        """Frames both ways; SASL requests on the way up are a re-authentication (KIP-368) answered here, and
        a request after the session expired closes the connection, as a Kafka broker does."""
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        self._track(upstream)
        lock = threading.Lock()

        def to_client(data: bytes) -> None:
            with lock:
                client.sendall(data)

        def close_both() -> None:
            for sock in (client, upstream):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        def back() -> None:
            try:
                while True:
                    frame = _read_frame(upstream)
                    to_client(_SIZE.pack(len(frame)) + frame)
            except (_Closed, OSError):
                pass
            finally:
                close_both()

        thread = threading.Thread(target=back, name="kq-sasl-back", daemon=True)
        thread.start()
        try:
            while True:
                frame = _read_frame(client)
                (api_key,) = struct.unpack_from(">h", frame, 0)
                if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
                    session.reauthenticating = True
                    if not self._authenticate(client, session, frame, to_client):
                        break
                    continue
                if session.expires and time.monotonic() > session.expires:
                    self.failures.append("session expired without re-authentication")
                    break
                upstream.sendall(_SIZE.pack(len(frame)) + frame)
        except (_Closed, OSError):
            pass
        finally:
            close_both()
            thread.join(5)
            upstream.close()


class _Session:
    """One connection's authentication state."""

    def __init__(self) -> None:
        self.mechanism = ""
        self.server: Any = None
        self.reauthenticating = False
        self.expires = 0.0


class _PlainServer:
    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.principal = ""

    def step(self, data: bytes) -> tuple[bytes, bool]:
        parts = data.split(b"\0")
        if len(parts) != 3:
            raise _Refused("Authentication failed: malformed PLAIN message")
        user, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        if self._users.get(user) != password:
            raise _Refused("Authentication failed: Invalid username or password")
        self.principal = user
        return b"", True
