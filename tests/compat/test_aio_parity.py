"""confluent_kafka.aio and kqactors.aio side by side: the same asyncio scenario on a fresh librdkafka mock
cluster each, the same outcomes — which messages were delivered where and in which order, the error each
failed future raises, what a subscribed consumer reads (messages, partition EOF events) and what its
coroutine rebalance callback was given.

Known differences, by design (kqactors/aio/producer.py): kqactors' produce() accepts headers and a
per-message on_delivery, and raises TypeError at once; confluent-kafka's holds messages in a Python buffer
(batch_size, buffer_timeout), so the scenario flushes before it awaits the deliveries.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import pytest
from support.kafka_io import produce_numbered

import kqactors.aio

confluent_aio = pytest.importorskip("confluent_kafka.aio")

TOPIC = "parity"
PARTITIONS = 3
KQACTORS_EXTRA = {"kqactors.hosts": 0}


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


def error_code(outcome: Any) -> Any:
    """A future's outcome as comparable data: ("ok", partition, offset) or ("error", code name)."""
    if isinstance(outcome, BaseException):
        error = outcome.args[0] if outcome.args else None
        return ("error", error.name() if hasattr(error, "name") else type(outcome).__name__)
    return ("ok", outcome.partition(), outcome.offset())


def extra_for(module: ModuleType) -> dict[str, Any]:
    return dict(KQACTORS_EXTRA) if module is kqactors.aio else {}


async def produce_scenario(module: ModuleType, bootstrap: str, push_error: Callable[[], None]) -> dict[str, Any]:
    outcome: dict[str, Any] = {}
    producer = module.AIOProducer({"bootstrap.servers": bootstrap, "message.max.bytes": 2000, "retries": 0,
                                   **extra_for(module)})
    try:
        keyed = [await producer.produce(TOPIC, value=b"v%d" % i, key=b"k%d" % (i % 10)) for i in range(30)]
        await producer.flush()
        outcome["keyed"] = [error_code(o) for o in await asyncio.gather(*keyed, return_exceptions=True)]
        bad = [await producer.produce(TOPIC, value=b"x" * 5000, partition=0),
               await producer.produce(TOPIC, value=b"x", partition=7)]
        await producer.flush()
        outcome["immediate"] = [error_code(o) for o in await asyncio.gather(*bad, return_exceptions=True)]
        push_error()
        refused = await producer.produce(TOPIC, value=b"refused", partition=1)
        await producer.flush()
        outcome["refused"] = error_code((await asyncio.gather(refused, return_exceptions=True))[0])
        after = await producer.produce(TOPIC, value=b"after", partition=1)
        await producer.flush()
        outcome["after"] = error_code((await asyncio.gather(after, return_exceptions=True))[0])
        outcome["len"] = len(producer)
    finally:
        await producer.close()
    small = module.AIOProducer({"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 5,
                                **extra_for(module)})
    try:
        burst = [await small.produce(TOPIC, value=b"q%d" % i, partition=2) for i in range(8)]
        await small.flush()
        outcome["queue_full"] = [error_code(o) for o in await asyncio.gather(*burst, return_exceptions=True)]
    finally:
        await small.close()
    return outcome


async def consume_scenario(module: ModuleType, bootstrap: str, group: str) -> dict[str, Any]:
    assigned: list[Any] = []
    consumer = module.AIOConsumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                                   "enable.partition.eof": True, "enable.auto.commit": False, **extra_for(module)})

    async def on_assign(c: Any, partitions: list[Any]) -> None:
        assigned.append((c is consumer, sorted((tp.topic, tp.partition) for tp in partitions)))
        await asyncio.sleep(0)

    messages: list[tuple[int, int, bytes | None, bytes | None]] = []
    eofs: set[tuple[int, int]] = set()
    try:
        await consumer.subscribe([TOPIC], on_assign=on_assign)
        deadline = asyncio.get_running_loop().time() + 60
        while len(eofs) < PARTITIONS and asyncio.get_running_loop().time() < deadline:
            for msg in await consumer.consume(100, 0.5):
                error = msg.error()
                if error is None:
                    messages.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
                elif error.code() == -191:  # _PARTITION_EOF
                    eofs.add((msg.partition(), msg.offset()))
                else:
                    messages.append((msg.partition(), -1, None, error.name().encode()))
        committed = await consumer.commit(asynchronous=False)
        result = {"assigned": assigned, "eofs": sorted(eofs),
                  "committed": sorted((tp.partition, tp.offset) for tp in committed or [])}
    finally:
        await consumer.close()
    per_partition = {p: [m[1:] for m in messages if m[0] == p] for p in range(PARTITIONS)}
    result["messages"] = per_partition
    return result


def _public_methods(cls: type) -> dict[str, bool]:
    """Public (and context-manager) methods → whether each is a coroutine function."""
    return {name: inspect.iscoroutinefunction(member) for name, member in inspect.getmembers(cls, callable)
            if not name.startswith("_") or name in ("__aenter__", "__aexit__", "__len__")}


@pytest.mark.parametrize("name", ["AIOProducer", "AIOConsumer", "AsyncSerializingProducer",
                                  "AsyncDeserializingConsumer"])
def test_same_public_shape(name):
    """Every public method of confluent_kafka.aio's class exists here, awaitable where theirs is, and the
    constructors take the same parameters."""
    assert set(confluent_aio.__all__) <= set(kqactors.aio.__all__)
    theirs, ours = getattr(confluent_aio, name), getattr(kqactors.aio, name)
    their_methods, our_methods = _public_methods(theirs), _public_methods(ours)
    missing = sorted(set(their_methods) - set(our_methods))
    assert not missing, f"{name} lacks {missing}"
    assert {m: our_methods[m] for m in their_methods} == their_methods
    if name.startswith("AIO"):
        assert list(inspect.signature(ours.__init__).parameters) == list(inspect.signature(theirs.__init__).parameters)


@pytest.fixture
def scenario_results(mock_cluster_factory) -> Callable[[ModuleType], dict[str, Any]]:
    def run_on_fresh_cluster(module: ModuleType) -> dict[str, Any]:
        cluster = mock_cluster_factory(1)
        cluster.create_topic(TOPIC, PARTITIONS)
        cluster.group_initial_rebalance_delay_ms(0)

        def push_error() -> None:  # the next Produce request fails with a non-retriable error
            cluster.push_request_errors(0, ["INVALID_RECORD"])

        produced = run(produce_scenario(module, cluster.bootstrap, push_error))
        consumed = run(consume_scenario(module, cluster.bootstrap, f"g-{module.__name__}"))
        return {"produced": produced, "consumed": consumed}

    return run_on_fresh_cluster


def test_same_scenario_same_outcomes(scenario_results):
    theirs = scenario_results(confluent_aio)
    ours = scenario_results(kqactors.aio)
    assert ours["produced"] == theirs["produced"]
    assert ours["consumed"] == theirs["consumed"]
    # and what they agree on is what the scenario expects
    produced = theirs["produced"]
    assert all(o[0] == "ok" for o in produced["keyed"])
    assert produced["immediate"] == [("error", "MSG_SIZE_TOO_LARGE"), ("error", "_UNKNOWN_PARTITION")]
    assert produced["refused"] == ("error", "INVALID_RECORD")
    assert produced["queue_full"][5:] == [("error", "_QUEUE_FULL")] * 3
    consumed = theirs["consumed"]
    assert consumed["assigned"] == [(True, [(TOPIC, p) for p in range(PARTITIONS)])]
    assert sum(len(v) for v in consumed["messages"].values()) == 30 + 1 + 5


@pytest.mark.xfail(strict=True, reason="the sync kqactors Consumer's group refuses a synchronous commit from "
                                       "on_revoke inside close() with _STATE; librdkafka commits it")
def test_commit_in_on_revoke_during_close(mock_cluster_factory):
    cluster = mock_cluster_factory(1)
    cluster.create_topic(TOPIC, 1)
    cluster.group_initial_rebalance_delay_ms(0)

    produce_numbered(cluster.bootstrap, TOPIC, 1, 1)

    async def scenario(module: ModuleType) -> list[Any]:
        events: list[Any] = []
        consumer = module.AIOConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{module.__name__}",
                                       "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                       **extra_for(module)})

        async def on_revoke(c: Any, partitions: list[Any]) -> None:
            try:
                done = await c.commit(asynchronous=False)
                events.append([(tp.partition, tp.offset) for tp in done])
            except Exception as exc:  # noqa: BLE001
                events.append(repr(exc))

        await consumer.subscribe([TOPIC], on_revoke=on_revoke)
        while not [m for m in await consumer.consume(10, 0.5) if m.error() is None]:
            pass
        await consumer.close()
        return events

    assert run(scenario(kqactors.aio)) == run(scenario(confluent_aio)) == [[(0, 1)]]


@pytest.mark.xfail(strict=True, reason="librdkafka keeps failing a topic's messages after a Produce answered "
                                       "TOPIC_AUTHORIZATION_FAILED; the sync kqactors Producer delivers the next one")
def test_topic_authorization_failure_sticks_to_the_topic(mock_cluster_factory):
    async def scenario(module: ModuleType) -> list[Any]:
        cluster = mock_cluster_factory(1)
        cluster.create_topic(TOPIC, 1)
        producer = module.AIOProducer({"bootstrap.servers": cluster.bootstrap, "retries": 0, **extra_for(module)})
        try:
            await (await producer.produce(TOPIC, value=b"ok"))
            cluster.push_request_errors(0, ["TOPIC_AUTHORIZATION_FAILED"])
            outcomes = []
            for value in (b"refused", b"after"):
                fut = await producer.produce(TOPIC, value=value)
                await producer.flush()
                outcomes.append(error_code((await asyncio.gather(fut, return_exceptions=True))[0]))
            return outcomes
        finally:
            await producer.close()

    assert run(scenario(kqactors.aio)) == run(scenario(confluent_aio))
