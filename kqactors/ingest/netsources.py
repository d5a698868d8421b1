"""The stdin, TCP, UDP and HTTP sources, on the worker's asyncio loop.

Runs in: the worker processes. Owns the listeners and connections and how each kind meets backpressure (the
producer's queue is full, or the source's rate limit is reached):

- stdin and TCP **push back**: they stop reading (a reader thread blocks for stdin; the kernel's socket buffers
  fill and the TCP sender blocks). Lines are in memory only, so across a crash they are at-most-once.
- UDP cannot push back: a datagram arriving then is read and its lines **dropped**, counted under
  ``lines_dropped{reason="queue_full"|"rate_limit"}``.
- HTTP: ``POST <http_path>`` with a body of lines answers after their delivery reports (200, JSON counts), so a
  client that retries on anything else gets at-least-once. When the producer is full it answers 503 with
  Retry-After, over the rate limit 429 (both counted as dropped lines, reason ``http_503``/``rate_limit``);
  413 for bodies over ``max_body_bytes``. ``GET /health`` answers 200. Bodies need Content-Length (HTTP/1.1
  keep-alive is supported; chunked bodies get 411).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import threading
from collections.abc import Callable
from typing import Any

from kqactors.ingest.checkpoint import Chunk
from kqactors.ingest.emit import Batch, SourceRuntime

__all__ = ["LineSplitter", "StdinSource", "TcpSource", "UdpSource", "HttpSource"]

_log = logging.getLogger("kqactors.ingest.netsources")
_HTTP_WAIT_S = 5.0          # how long a request waits for room in the producer before its rest fails (503)


class LineSplitter:
    """Bytes in → complete lines out; keeps the partial last line; splits lines over ``max_line`` bytes."""

    __slots__ = ("carry", "max_line", "split")

    def __init__(self, max_line: int) -> None:
        self.carry = b""
        self.max_line = max_line
        self.split = 0

    def feed(self, data: bytes) -> list[bytes]:
        buf = self.carry + data if self.carry else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            self.carry = buf
            lines: list[bytes] = []
        else:
            self.carry = buf[cut + 1:]
            lines = buf[:cut].split(b"\n")
        while len(self.carry) > self.max_line:
            lines.append(self.carry[:self.max_line])
            self.carry = self.carry[self.max_line:]
            self.split += 1
        return lines

    def flush(self) -> list[bytes]:
        line, self.carry = self.carry, b""
        return [line] if line else []


async def _emit_all(rt: SourceRuntime, lines: list[bytes], stop: asyncio.Event,
                    on_done: Callable[[Chunk], Any] | None = None) -> Batch | None:
    """Wait out the rate limit, then produce ``lines``, waiting for room as long as it takes (or until stop)."""
    if not lines:
        return None
    if rt.bucket.rate:
        delay = rt.bucket.delay(len(lines))
        if delay > 0:
            await asyncio.sleep(delay)
    batch = rt.make_batch(lines, sum(map(len, lines)), on_done=on_done)
    while not rt.emitter.emit(batch):
        if stop.is_set():
            return batch
        await rt.emitter.wait_room(0.1)
    return batch


# ---- stdin -------------------------------------------------------------------------------------------------
class StdinSource:
    """Lines from file descriptor 0 until EOF (a reader thread hands blocks over through a 4-slot queue)."""

    def __init__(self, rt: SourceRuntime, read_bytes: int, fd: int = 0) -> None:
        self.rt = rt
        self.read_bytes = read_bytes
        self.fd = fd

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(4)
        gone = threading.Event()

        def reader() -> None:
            try:
                while not gone.is_set():
                    try:
                        data = os.read(self.fd, self.read_bytes)
                    except OSError as exc:
                        _log.error("stdin: %s", exc.strerror, extra={"event": "read_error", "source": self.rt.name})
                        data = b""
                    fut = asyncio.run_coroutine_threadsafe(queue.put(data or None), loop)
                    fut.result()
                    if not data:
                        return
            except RuntimeError:  # the loop closed under us (worker exiting)
                return

        if stat.S_ISREG(os.fstat(self.fd).st_mode):
            _log.info("stdin is a regular file", extra={"event": "stdin_file", "source": self.rt.name})
        thread = threading.Thread(target=reader, name="kqactors-ingest-stdin", daemon=True)
        thread.start()
        splitter = LineSplitter(self.rt.spec.max_line_bytes)
        try:
            while not stop.is_set():
                getter = asyncio.ensure_future(queue.get())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                if not getter.done():
                    getter.cancel()
                    break
                data = getter.result()
                lines = splitter.feed(data) if data is not None else splitter.flush()
                _count_split(self.rt, splitter)
                await _emit_all(self.rt, lines, stop)
                if data is None:
                    self.rt.finished = True
                    return
        finally:
            gone.set()


def _count_split(rt: SourceRuntime, splitter: LineSplitter) -> None:
    if splitter.split:
        rt.stats.error("line_split", splitter.split)
        splitter.split = 0


# ---- TCP ---------------------------------------------------------------------------------------------------
class TcpSource:
    """A TCP listener; every connection is a stream of lines."""

    def __init__(self, rt: SourceRuntime, read_bytes: int) -> None:
        self.rt = rt
        self.read_bytes = min(read_bytes, 65536)
        self.server: asyncio.AbstractServer | None = None
        self.connections: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()

    async def start(self, stop: asyncio.Event) -> None:
        self._stop = stop
        host, port = self.rt.spec.host_port
        self.server = await asyncio.start_server(self._serve, host, port, limit=self.read_bytes * 2)
        _log.info("tcp source listening on %s", _bound(self.server),
                  extra={"event": "listening", "source": self.rt.name, "address": _bound(self.server)})

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rt = self.rt
        if len(self.connections) >= rt.spec.max_connections:
            rt.stats.error("connection_refused")
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        splitter = LineSplitter(rt.spec.max_line_bytes)
        try:
            while not self._stop.is_set():
                if rt.emitter.full:
                    await rt.emitter.wait_room(0.1)  # not reading: the sender's TCP window closes
                    continue
                data = await reader.read(self.read_bytes)
                lines = splitter.feed(data) if data else splitter.flush()
                _count_split(rt, splitter)
                await _emit_all(rt, lines, self._stop)
                if not data:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            rt.stats.error("connection")
        except asyncio.CancelledError:
            pass  # closing: end normally (asyncio reports a cancelled connection callback as an error)
        finally:
            self.connections.discard(task)
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self.connections):
                task.cancel()
            await asyncio.gather(*self.connections, return_exceptions=True)


def _bound(server: asyncio.AbstractServer) -> str:
    sockets = getattr(server, "sockets", None) or []
    if not sockets:
        return "?"
    host, port = sockets[0].getsockname()[:2]
    return f"{host}:{port}"


# ---- UDP ---------------------------------------------------------------------------------------------------
class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, source: UdpSource) -> None:
        self.source = source

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.source.received(data)

    def error_received(self, exc: Exception) -> None:
        self.source.rt.stats.error("socket")


class UdpSource:
    """A UDP listener: each datagram holds one or more lines; dropped (counted) when they cannot be queued."""

    def __init__(self, rt: SourceRuntime) -> None:
        self.rt = rt
        self.transport: asyncio.DatagramTransport | None = None

    async def start(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.rt.spec.host_port
        self.transport, _ = await loop.create_datagram_endpoint(lambda: _UdpProtocol(self),
                                                                local_addr=(host, port))
        sock = self.transport.get_extra_info("sockname")
        _log.info("udp source listening on %s:%s", sock[0], sock[1],
                  extra={"event": "listening", "source": self.rt.name, "address": f"{sock[0]}:{sock[1]}"})

    def received(self, data: bytes) -> None:
        rt = self.rt
        if data.endswith(b"\n"):
            data = data[:-1]
        lines = data.split(b"\n")
        if rt.emitter.full:
            rt.stats.lines_in += len(lines)
            rt.stats.drop("queue_full", len(lines))
            return
        if not rt.bucket.try_take(len(lines)):
            rt.stats.lines_in += len(lines)
            rt.stats.drop("rate_limit", len(lines))
            return
        batch = rt.make_batch(lines, sum(map(len, lines)))
        if not rt.emitter.emit(batch):
            rest = len(batch.values) - batch.next
            rt.stats.drop("queue_full", rest)
            batch.chunk.settle(rest)

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


# ---- HTTP --------------------------------------------------------------------------------------------------
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
            413: "Content Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable"}


class HttpSource:
    """``POST http_path`` with newline-separated lines; the answer waits for their delivery reports."""

    def __init__(self, rt: SourceRuntime) -> None:
        self.rt = rt
        self.server: asyncio.AbstractServer | None = None
        self.connections: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()

    async def start(self, stop: asyncio.Event) -> None:
        self._stop = stop
        host, port = self.rt.spec.host_port
        self.server = await asyncio.start_server(self._serve, host, port, limit=65536)
        _log.info("http source listening on %s", _bound(self.server),
                  extra={"event": "listening", "source": self.rt.name, "address": _bound(self.server)})

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rt = self.rt
        if len(self.connections) >= rt.spec.max_connections:
            rt.stats.error("connection_refused")
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        try:
            while not self._stop.is_set():
                keep = await self._request(reader, writer)
                await writer.drain()
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            rt.stats.error("request")
        except asyncio.CancelledError:
            pass
        finally:
            self.connections.discard(task)
            writer.close()

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line:
            return False
        parts = line.decode("latin-1").split()
        if len(parts) != 3:
            self._answer(writer, 400, {"error": "bad request line"}, False)
            return False
        method, target, version = parts
        headers: dict[str, str] = {}
        while True:
            h = await reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
            if len(headers) > 100:
                self._answer(writer, 400, {"error": "too many headers"}, False)
                return False
        conn = headers.get("connection", "").lower()
        keep = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
        path = target.split("?", 1)[0]
        if method == "GET" and path == "/health":
            self._answer(writer, 200, {"status": "ok"}, keep)
            return keep
        length_text = headers.get("content-length")
        if path != self.rt.spec.http_path:
            await self._discard(reader, length_text)
            self._answer(writer, 404, {"error": f"POST lines to {self.rt.spec.http_path}"}, keep)
            return keep
        if method != "POST":
            await self._discard(reader, length_text)
            self._answer(writer, 405, {"error": "POST only"}, keep, [("Allow", "POST")])
            return keep
        if "chunked" in headers.get("transfer-encoding", "").lower() or length_text is None:
            self._answer(writer, 411, {"error": "Content-Length required"}, False)
            return False
        length = int(length_text)
        if length < 0 or length > self.rt.spec.max_body_bytes:
            self._answer(writer, 413, {"error": f"body over {self.rt.spec.max_body_bytes} bytes"}, False)
            return False
        body = await reader.readexactly(length)
        status, result = await self._ingest(body)
        extra = [("Retry-After", "1")] if status in (429, 503) else []
        self._answer(writer, status, result, keep, extra)
        return keep

    async def _discard(self, reader: asyncio.StreamReader, length_text: str | None) -> None:
        if length_text and length_text.isdigit() and int(length_text) <= self.rt.spec.max_body_bytes:
            await reader.readexactly(int(length_text))

    async def _ingest(self, body: bytes) -> tuple[int, dict[str, Any]]:
        rt = self.rt
        if body.endswith(b"\n"):
            body = body[:-1]
        lines = body.split(b"\n") if body else []
        if not lines:
            return 200, {"lines": 0, "delivered": 0, "failed": 0}
        if rt.emitter.full:
            rt.stats.lines_in += len(lines)
            rt.stats.drop("http_503", len(lines))
            return 503, {"error": "the producer's queue is full; retry later"}
        if not rt.bucket.try_take(len(lines)):
            rt.stats.lines_in += len(lines)
            rt.stats.drop("rate_limit", len(lines))
            return 429, {"error": "rate limit"}
        done: asyncio.Future[Chunk] = asyncio.get_running_loop().create_future()

        def finished(chunk: Chunk) -> None:
            if not done.done():
                done.set_result(chunk)

        batch = rt.make_batch(lines, sum(map(len, lines)), on_done=finished)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _HTTP_WAIT_S
        while not rt.emitter.emit(batch):
            remaining = deadline - loop.time()
            if remaining <= 0 or self._stop.is_set():
                rest = len(batch.values) - batch.next
                rt.stats.drop("http_503", rest)
                batch.chunk.settle(rest)
                break
            await rt.emitter.wait_room(min(remaining, 0.1))
        stopper = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({done, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not done.done():
            return 503, {"error": "shutting down before delivery"}
        chunk = done.result()
        delivered = chunk.lines - chunk.failed
        result = {"lines": len(lines), "delivered": delivered, "failed": chunk.failed,
                  "filtered": len(lines) - chunk.lines}
        return (503 if chunk.failed else 200), result

    def _answer(self, writer: asyncio.StreamWriter, status: int, body: dict[str, Any], keep: bool,
                extra: list[tuple[str, str]] | None = None) -> None:
        payload = json.dumps(body).encode()
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", "Content-Type: application/json",
                f"Content-Length: {len(payload)}", "Connection: " + ("keep-alive" if keep else "close")]
        head.extend(f"{k}: {v}" for k, v in extra or [])
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self.connections):
                task.cancel()
            await asyncio.gather(*self.connections, return_exceptions=True)
