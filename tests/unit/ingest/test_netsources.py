"""The stdin, TCP, UDP and HTTP sources on an asyncio loop with a fake producer: lines in, push-back while the
producer is full (TCP), counted drops (UDP), HTTP answers after delivery and its 503/429/4xx answers."""

from __future__ import annotations

import asyncio
import json
import os
import socket

from kqactors.ingest.config import SourceSpec
from kqactors.ingest.emit import Emitter, SourceRuntime
from kqactors.ingest.netsources import HttpSource, LineSplitter, StdinSource, TcpSource, UdpSource

from .fakes import FakeProducer


def runtime(producer, kind, **spec):
    values = {"name": kind, "type": kind, "topic": "t", "listen": "127.0.0.1:0" if kind != "stdin" else "", **spec}
    return SourceRuntime(SourceSpec(**values), Emitter(producer, 0.0))


async def pumping(emitter, until, timeout=5.0):
    """Serve delivery reports until ``until()`` is true (or fail after ``timeout``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not until():
        assert loop.time() < deadline, "timed out"
        emitter.service()
        await asyncio.sleep(0.005)


def test_line_splitter():
    s = LineSplitter(4)
    assert s.feed(b"ab\ncd") == [b"ab"] and s.feed(b"\n") == [b"cd"]
    assert s.feed(b"abcdefghij") == [b"abcd", b"efgh"] and s.split == 2
    assert s.flush() == [b"ij"] and s.flush() == []


def test_tcp_pushes_back_while_the_producer_is_full():
    async def scenario():
        producer = FakeProducer(limit=100)
        producer.up = False
        rt = runtime(producer, "tcp")
        stop = asyncio.Event()
        source = TcpSource(rt, 4096)
        await source.start(stop)
        port = source.server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        total = 20_000
        payload = b"".join(b"line-%06d\n" % i for i in range(total))
        writer.write(payload)
        await asyncio.sleep(0.5)
        # Reading stopped: the rest waits in the socket buffers (the sender blocks once they are full).
        assert rt.emitter.full and rt.stats.lines_in < 1000
        producer.up = True
        await pumping(rt.emitter, lambda: len(producer.delivered) == total)
        writer.close()
        stop.set()
        await source.close()
        assert producer.values() == [b"line-%06d" % i for i in range(total)]
    asyncio.run(scenario())


def test_udp_drops_and_counts_what_it_cannot_queue():
    async def scenario():
        producer = FakeProducer(limit=5)
        producer.up = False
        rt = runtime(producer, "udp")
        source = UdpSource(rt)
        await source.start(asyncio.Event())
        addr = source.transport.get_extra_info("sockname")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for i in range(4):
                sock.sendto(b"a%d\nb%d\n" % (i, i), addr)
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert rt.stats.lines_in == 8 and rt.stats.dropped == {"queue_full": 3}
        producer.up = True
        await pumping(rt.emitter, lambda: len(producer.delivered) == 5)
        assert rt.stats.lines_out == 5 and rt.stats.in_flight == 0
        await source.close()
    asyncio.run(scenario())


async def http(port, request: bytes, reader_writer=None):
    reader, writer = reader_writer or await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split()[1])
    length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
    body = json.loads(await reader.readexactly(length))
    return status, body, (reader, writer)


def post(path, body: bytes, extra=b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s" % (path.encode(), len(body), extra, body)


def test_http_answers_after_delivery_and_says_no_when_full():
    async def scenario():
        producer = FakeProducer(limit=4)
        rt = runtime(producer, "http", http_path="/in", max_body_bytes=100, rate_limit=1000.0, rate_burst=10)
        stop = asyncio.Event()
        source = HttpSource(rt)
        await source.start(stop)
        port = source.server.sockets[0].getsockname()[1]
        pumped = asyncio.Event()
        pump = asyncio.ensure_future(pumping(rt.emitter, pumped.is_set, 30))
        status, body, conn = await http(port, post("/in", b"a\nb\nc\n"))
        assert (status, body) == (200, {"lines": 3, "delivered": 3, "failed": 0, "filtered": 0})
        status, body, conn = await http(port, b"GET /health HTTP/1.1\r\n\r\n", conn)   # keep-alive
        assert status == 200
        assert (await http(port, post("/other", b"x")))[0] == 404
        assert (await http(port, b"GET /in HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await http(port, b"POST /in HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"))[0] == 411
        assert (await http(port, post("/in", b"x" * 101)))[0] == 413
        assert (await http(port, post("/in", b"\n".join([b"r"] * 11))))[0] == 429
        pumped.set()
        await pump
        producer.up = False
        rt.emitter.full = True
        status, body, _ = await http(port, post("/in", b"q"))
        assert status == 503
        assert rt.stats.dropped == {"rate_limit": 11, "http_503": 1}
        assert producer.values() == [b"a", b"b", b"c"]
        stop.set()
        await source.close()
    asyncio.run(scenario())


def test_stdin_reads_a_pipe_to_its_end():
    async def scenario():
        producer = FakeProducer()
        rt = runtime(producer, "stdin")
        r, w = os.pipe()
        os.write(w, b"one\ntwo\nthree")
        os.close(w)
        stop = asyncio.Event()
        await asyncio.wait_for(StdinSource(rt, 4, fd=r).run(stop), 5)
        os.close(r)
        rt.emitter.service()
        assert rt.finished and producer.values() == [b"one", b"two", b"three"]
    asyncio.run(scenario())
