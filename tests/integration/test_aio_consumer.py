"""kqactors.aio.AIOConsumer on the librdkafka mock cluster: consume/poll on the loop, assignment calls, group
subscriptions with coroutine callbacks that call back into the consumer (re-entrant calls), commits, close."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable
from typing import Any

import pytest
from support.kafka_io import produce_numbered

from kqactors import OFFSET_BEGINNING, TopicPartition
from kqactors.aio import AIOConsumer

TIMEOUT_S = 90


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "kqactors.hosts": 0, "group.id": "g-aio", "enable.auto.commit": False,
            **extra}


async def drain(consumer: AIOConsumer, want: int, timeout: float = 30.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        out.extend(m for m in await consumer.consume(100, 0.5) if m.error() is None)
    return out


def test_assign_consume_poll_and_positions(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 2)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 30, 2)

    async def main() -> None:
        async with AIOConsumer(conf(mock_cluster.bootstrap)) as consumer:
            before = {t.ident for t in threading.enumerate()}
            parts = [TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in (0, 1)]
            await consumer.assign(parts)
            assert sorted(tp.partition for tp in await consumer.assignment()) == [0, 1]
            first = await consumer.poll(30)
            assert first is not None and first.error() is None
            rest = await drain(consumer, 29)
            got = [first, *rest]
            assert len(got) == 30
            for p in (0, 1):
                values = [m.value() for m in got if m.partition() == p]
                assert values == [b"v%d" % i for i in range(p, 30, 2)], "each partition in offset order"
            positions = await consumer.position([TopicPartition(unique_topic, 0), TopicPartition(unique_topic, 1)])
            assert [tp.offset for tp in positions] == [15, 15]
            assert await consumer.get_watermark_offsets(TopicPartition(unique_topic, 0), 10) == (0, 15)
            started = time.monotonic()
            assert await consumer.poll(0.3) is None
            assert await consumer.consume(10, 0.3) == []
            assert 0.5 <= time.monotonic() - started < 5
            await consumer.seek(TopicPartition(unique_topic, 1, 10))
            await consumer.pause([TopicPartition(unique_topic, 0)])
            again = await drain(consumer, 5)
            assert [(m.partition(), m.offset()) for m in again] == [(1, o) for o in range(10, 15)]
            await consumer.resume([TopicPartition(unique_topic, 0)])
            await consumer.incremental_unassign([TopicPartition(unique_topic, 1)])
            assert [tp.partition for tp in await consumer.assignment()] == [0]
            await consumer.unassign()
            assert await consumer.assignment() == []
            workers = [t.name for t in threading.enumerate() if t.ident not in before]
            assert all(name.startswith("kqactors-aio") for name in workers), workers
            assert len(workers) <= 1, "one worker thread at most, whatever the number of calls"
        with pytest.raises(RuntimeError, match="Consumer closed"):
            await consumer.poll(0)
        await consumer.close()  # twice is fine

    run(main())


def test_subscribe_with_coroutine_callbacks_that_call_back(mock_cluster, unique_topic):
    """on_assign awaits something that really suspends, then assigns on the consumer it was given; on_revoke
    (after unsubscribe) commits synchronously; on_commit is a coroutine too. All of it from inside consume()."""
    mock_cluster.create_topic(unique_topic, 2)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 20, 2)
    events: list[Any] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def on_commit(err: Any, partitions: list[TopicPartition]) -> None:
            assert asyncio.get_running_loop() is loop
            events.append(("commit", err, sorted((tp.partition, tp.offset) for tp in partitions)))

        consumer = AIOConsumer(conf(mock_cluster.bootstrap, **{"group.id": f"g-{unique_topic}",
                                                               "auto.offset.reset": "earliest",
                                                               "on_commit": on_commit}))

        async def on_assign(c: AIOConsumer, partitions: list[TopicPartition]) -> None:
            assert c is consumer and asyncio.get_running_loop() is loop
            await asyncio.sleep(0.05)  # a real suspension: the worker waits for the whole coroutine
            await c.assign(partitions)
            events.append(("assign", sorted(tp.partition for tp in partitions)))

        async def on_revoke(c: AIOConsumer, partitions: list[TopicPartition]) -> None:
            committed = await c.commit(asynchronous=False)
            events.append(("revoke", sorted(tp.partition for tp in partitions),
                           sorted((tp.partition, tp.offset) for tp in committed or [])))

        try:
            await consumer.subscribe([unique_topic], on_assign=on_assign, on_revoke=on_revoke)
            got = await drain(consumer, 20)
            assert len(got) == 20
            assert ("assign", [0, 1]) in events
            await consumer.commit(asynchronous=True)
            deadline = time.monotonic() + 20
            while not any(e[0] == "commit" for e in events) and time.monotonic() < deadline:
                await consumer.poll(0.2)
            assert ("commit", None, [(0, 10), (1, 10)]) in events
            committed = await consumer.committed([TopicPartition(unique_topic, 0), TopicPartition(unique_topic, 1)])
            assert [tp.offset for tp in committed] == [10, 10]
            member = await consumer.consumer_group_metadata()
            assert member.group_id == f"g-{unique_topic}"
            await consumer.unsubscribe()
            deadline = time.monotonic() + 20
            while not any(e[0] == "revoke" for e in events) and time.monotonic() < deadline:
                await consumer.consume(10, 0.2)
        finally:
            await consumer.close()
        revokes = [e for e in events if e[0] == "revoke"]
        assert revokes == [("revoke", [0, 1], [(0, 10), (1, 10)])], events

    run(main())


def test_concurrent_consume_and_commit_share_the_consumer(mock_cluster, unique_topic):
    """A consume() waiting for data does not hold the consumer: another task's calls go through meanwhile,
    and the waiting consume() wakes when messages arrive."""
    mock_cluster.create_topic(unique_topic, 1)

    async def main() -> None:
        async with AIOConsumer(conf(mock_cluster.bootstrap)) as consumer:
            await consumer.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
            waiting = asyncio.ensure_future(consumer.consume(5, 30))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            assert [tp.partition for tp in await consumer.assignment()] == [0]
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: produce_numbered(mock_cluster.bootstrap, unique_topic, 5, 1))
            got = await waiting
            assert got and got[0].value() == b"v0"

    run(main())


def test_group_calls_without_group_and_bad_arguments(mock_cluster, unique_topic):
    async def main() -> None:
        with pytest.raises(ValueError):
            AIOConsumer(conf(mock_cluster.bootstrap), max_workers=0)
        settings = conf(mock_cluster.bootstrap)
        del settings["group.id"]
        async with AIOConsumer(settings) as consumer:
            with pytest.raises(Exception) as info:
                await consumer.subscribe([unique_topic])
            assert getattr(info.value, "args", [None])[0] is not None
            with pytest.raises(TypeError):
                await consumer.consume("many", 0)
            with pytest.raises(TypeError):
                await consumer.assign(TopicPartition(unique_topic, 0))
            await consumer.set_sasl_credentials("u", "p")  # stored for later authentications (none here)
            with pytest.raises(TypeError):
                await consumer.set_sasl_credentials("u", 1)

    run(main())
