"""kqactors.aio.AIOProducer on the librdkafka mock cluster: awaitable deliveries, the errors futures carry, flush,
poll, purge, the loop-driven serving (no thread per call) and close."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable
from typing import Any

import pytest

from kqactors import KafkaError, KafkaException, Message
from kqactors.aio import AIOProducer

TIMEOUT_S = 60


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "kqactors.hosts": 0, **extra}


def test_produce_resolves_to_the_delivered_message_in_order(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 2)
    seen: list[tuple[Any, Any]] = []

    async def main() -> list[Message]:
        async with AIOProducer(conf(mock_cluster.bootstrap)) as producer:
            futures = [await producer.produce(unique_topic, value=b"v%d" % i, key=b"k", partition=i % 2,
                                              headers=[("i", str(i).encode())],
                                              on_delivery=lambda err, msg: seen.append((err, msg)))
                       for i in range(40)]
            assert all(isinstance(f, asyncio.Future) for f in futures)
            delivered = await asyncio.gather(*futures)
            assert len(producer) == 0
            return delivered

    delivered = run(main())
    assert [m.value() for m in delivered] == [b"v%d" % i for i in range(40)]
    for partition in (0, 1):
        mine = [m for m in delivered if m.partition() == partition]
        assert [m.offset() for m in mine] == list(range(20)), "offsets follow produce order per partition"
    first = delivered[0]
    assert (first.topic(), first.key(), first.headers(), first.error()) == (unique_topic, b"k", [("i", b"0")], None)
    assert len(seen) == 40 and all(err is None for err, _ in seen)


def test_errors_known_at_produce_fail_the_future(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)

    async def main() -> None:
        async with AIOProducer(conf(mock_cluster.bootstrap, **{"message.max.bytes": 2000,
                                                                "queue.buffering.max.messages": 5})) as producer:
            too_large = await producer.produce(unique_topic, value=b"x" * 5000)
            no_partition = await producer.produce(unique_topic, value=b"x", partition=7)
            for fut, code in ((too_large, KafkaError.MSG_SIZE_TOO_LARGE), (no_partition, KafkaError._UNKNOWN_PARTITION)):
                with pytest.raises(KafkaException) as info:
                    await fut
                assert info.value.args[0].code() == code
            burst = [await producer.produce(unique_topic, value=b"%d" % i, partition=0) for i in range(8)]
            outcomes = await asyncio.gather(*burst, return_exceptions=True)
            assert [o.offset() for o in outcomes[:5]] == [0, 1, 2, 3, 4]
            assert all(isinstance(o, KafkaException) and o.args[0].code() == KafkaError._QUEUE_FULL
                       for o in outcomes[5:])
            with pytest.raises(TypeError):
                await producer.produce(unique_topic, value=123)
            with pytest.raises(TypeError):
                await producer.produce(unique_topic, value=b"x", on_delivery="not callable")
        with pytest.raises(RuntimeError, match="closed"):
            await producer.produce(unique_topic, value=b"x")
        assert len(producer) == 0

    run(main())


def test_a_broker_error_fails_the_delivery(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 1)
    fresh_cluster.push_request_errors(0, [KafkaError.INVALID_RECORD])  # 0 = Produce

    async def main() -> None:
        async with AIOProducer(conf(fresh_cluster.bootstrap, retries=0)) as producer:
            failed = await producer.produce(unique_topic, value=b"a")
            with pytest.raises(KafkaException) as info:
                await failed
            assert info.value.args[0].code() == KafkaError.INVALID_RECORD
            delivered = await (await producer.produce(unique_topic, value=b"b"))
            assert delivered.offset() == 0

    run(main())


def test_flush_poll_purge_and_len(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)

    async def main() -> None:
        async with AIOProducer(conf(mock_cluster.bootstrap, **{"linger.ms": 60_000})) as producer:
            futures = [await producer.produce(unique_topic, value=b"%d" % i) for i in range(10)]
            assert len(producer) == 10
            started = time.monotonic()
            assert await producer.flush(30) == 0, "flush() ignores linger.ms"
            assert time.monotonic() - started < 10
            assert all(f.done() and f.exception() is None for f in futures)
            assert await producer.poll(0) == 0
            queued = [await producer.produce(unique_topic, value=b"q%d" % i) for i in range(5)]
            await producer.purge(in_queue=True, in_flight=False)
            outcomes = await asyncio.gather(*queued, return_exceptions=True)
            assert all(isinstance(o, KafkaException) and o.args[0].code() == KafkaError._PURGE_QUEUE
                       for o in outcomes)
            assert len(producer) == 0
            later = await producer.produce(unique_topic, value=b"late")
            started = time.monotonic()
            assert await producer.poll(0.3) == 0, "lingering: no report within the timeout"
            assert 0.25 <= time.monotonic() - started < 5
            assert await producer.flush(30) == 0 and (await later).offset() == 10
        async with AIOProducer(conf(mock_cluster.bootstrap)) as producer:
            fut = await producer.produce(unique_topic, value=b"polled")
            assert await producer.poll(30) == 1, "poll() counts the report the loop served while it waited"
            assert fut.done() and (await fut).offset() == 11

    run(main())


def test_the_loop_serves_deliveries_without_a_thread_per_call(mock_cluster, unique_topic):
    """Futures resolve while the application only awaits them (nobody calls poll()), and producing and
    awaiting thousands of messages starts no thread: only the sync Producer's own (its flusher, its topic
    resolver, started by the first message to a new topic) run."""
    mock_cluster.create_topic(unique_topic, 3)

    async def main() -> None:
        before = {t.ident for t in threading.enumerate()}
        producer = AIOProducer(conf(mock_cluster.bootstrap))
        await (await producer.produce(unique_topic, value=b"first"))
        started_by_client = {t.name for t in threading.enumerate() if t.ident not in before}
        for batch in range(5):
            futures = [await producer.produce(unique_topic, value=b"%d-%d" % (batch, i)) for i in range(1000)]
            await asyncio.gather(*futures)
        now = {t.name for t in threading.enumerate() if t.ident not in before}
        assert now == started_by_client, f"threads started while producing: {now - started_by_client}"
        assert not any(name.startswith("kqactors-aio") for name in now), "no worker thread for produce/flush"
        metadata = await producer.list_topics(unique_topic, 10)  # a blocking call: on the worker
        assert list(metadata.topics[unique_topic].partitions) == [0, 1, 2]
        assert await producer.cluster_id(10) == metadata.cluster_id
        await producer.close()
        leftover = [t.name for t in threading.enumerate() if t.ident not in before and t.name.startswith("kqactors-aio")]
        assert leftover == [], "close() stops the worker thread"

    run(main())


def test_coroutine_error_cb_runs_on_the_loop(unique_topic):
    errors: list[KafkaError] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        got = asyncio.Event()

        async def error_cb(error: KafkaError) -> None:
            assert asyncio.get_running_loop() is loop
            errors.append(error)
            got.set()

        producer = AIOProducer({"bootstrap.servers": "127.0.0.1:1", "kqactors.hosts": 0, "error_cb": error_cb,
                                "message.timeout.ms": 1500})
        try:
            fut = await producer.produce(unique_topic, value=b"x")
            await asyncio.wait_for(got.wait(), 30)
            with pytest.raises(KafkaException):
                await fut
        finally:
            await producer.close()

    run(main())
    assert errors and errors[0].code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE)


def test_a_transaction_commits_through_the_event_loop(mock_cluster, unique_topic):
    """The sync Producer's transactions, awaited: init, begin, produce, commit; the messages are delivered."""
    mock_cluster.create_topic(unique_topic, 1)
    delivered: list[int] = []

    async def main() -> None:
        settings = {**conf(mock_cluster.bootstrap), "transactional.id": f"aio-{unique_topic}"}
        async with AIOProducer(settings) as producer:
            await producer.init_transactions(10)
            await producer.begin_transaction()
            futures = [await producer.produce(unique_topic, value=b"v%d" % i) for i in range(5)]
            await producer.commit_transaction(10)
            for future in futures:
                delivered.append((await future).offset())

    run(main())
    assert sorted(delivered) == delivered and len(delivered) == 5


def test_construction_needs_a_running_loop(mock_cluster):
    with pytest.raises(RuntimeError):
        AIOProducer(conf(mock_cluster.bootstrap))


def test_a_burst_is_handed_over_when_the_loop_turn_ends(mock_cluster, unique_topic):
    """Once the partitions' toppars run, a burst of produce() calls in one loop turn leaves the app's buffers
    as soon as the application awaits, not at the flusher's next tick (5 ms here)."""
    mock_cluster.create_topic(unique_topic, 1)

    async def main() -> None:
        async with AIOProducer(conf(mock_cluster.bootstrap, **{"linger.ms": 1000})) as producer:
            await producer.produce(unique_topic, value=b"first")
            await producer.flush(30)
            buffers = producer._producer._buffers
            small = [await producer.produce(unique_topic, value=b"s%d" % i) for i in range(3)]
            burst = [await producer.produce(unique_topic, value=b"b%d" % i) for i in range(100)]
            assert buffers.unsent == 103
            await asyncio.sleep(0)  # the turn that produced ends here
            await asyncio.sleep(0)
            assert buffers.unsent == 0
            assert await producer.flush(30) == 0
            assert [m.offset() for m in await asyncio.gather(*small, *burst)] == list(range(1, 104))

    run(main())
