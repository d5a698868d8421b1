"""A glob file source on an asyncio loop with a fake producer: files found later, a glob that also matches the
rotated names (nothing read twice, nothing lost), a rate limit, and --once finishing."""

from __future__ import annotations

import asyncio
import os
import time

from kqactors.ingest.checkpoint import StateStore
from kqactors.ingest.filesource import FileSource

from .fakes import FakeProducer, file_runtime

SETTINGS = {"read_bytes": 4096, "chunk_lines": 16, "rotate_wait_s": 0.1, "once": False, "poll_interval_ms": 10,
            "glob_interval_s": 0.05}


async def run_until(source, stop, done, timeout=10.0):
    task = asyncio.ensure_future(source.run(stop))
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        source.rt.emitter.service()
        await asyncio.sleep(0.01)
    stop.set()
    await task


def test_a_glob_matching_rotated_names_reads_each_line_once(tmp_path):
    producer = FakeProducer()
    rt = file_runtime(producer, time.monotonic, paths=(str(tmp_path / "app.log*"),))
    source = FileSource(rt, StateStore(str(tmp_path / "state"), fsync=False), SETTINGS, time.monotonic)
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(b"a%d\n" % i for i in range(100)))

    async def scenario():
        stop = asyncio.Event()
        task = asyncio.ensure_future(run_until(source, stop, lambda: len(producer.delivered) >= 300))
        await asyncio.sleep(0.2)
        os.rename(log, tmp_path / "app.log.1")
        log.write_bytes(b"".join(b"b%d\n" % i for i in range(100)))
        await asyncio.sleep(0.3)
        os.rename(tmp_path / "app.log.1", tmp_path / "app.log.2")
        os.rename(log, tmp_path / "app.log.1")
        log.write_bytes(b"".join(b"c%d\n" % i for i in range(100)))
        await task
        await asyncio.sleep(0.3)   # a while longer: nothing more may come
        rt.emitter.service()

    asyncio.run(scenario())
    values = producer.values()
    assert sorted(values) == sorted(b"%s%d" % (p, i) for p in (b"a", b"b", b"c") for i in range(100))


def test_rate_limit_and_once(tmp_path):
    producer = FakeProducer()
    rt = file_runtime(producer, time.monotonic, paths=(str(tmp_path / "*.log"),), rate_limit=2000.0,
                      rate_burst=100)
    for name in ("x.log", "y.log"):
        (tmp_path / name).write_bytes(b"".join(b"%d\n" % i for i in range(250)))
    source = FileSource(rt, StateStore(str(tmp_path / "state"), fsync=False), {**SETTINGS, "once": True},
                        time.monotonic)

    async def scenario():
        started = time.monotonic()
        task = asyncio.ensure_future(source.run(asyncio.Event()))
        while not task.done():
            rt.emitter.service()
            await asyncio.sleep(0.01)
        rt.emitter.service()
        return time.monotonic() - started

    elapsed = asyncio.run(scenario())
    assert rt.finished and len(producer.values()) == 500
    assert elapsed >= 0.15, "500 lines at 2000/s with a burst of 100 take about 0.2 s"
