"""AIOConsumer: confluent-kafka's ``confluent_kafka.aio.AIOConsumer`` on kqactors, driven by the asyncio event loop.

Runs in: the app process, on the event loop's thread, plus one worker thread per client for the calls that wait
for an actor's answer (subscribe, assign, synchronous commit, committed, offsets, metadata, close) and for
serving the group's ops, whose rebalance and commit callbacks may be coroutines the worker waits for. Owns
the asyncio face of the Consumer: poll()/consume() take what has been fetched without blocking and, when
nothing is there, wait on the loop until the app's inbox brings something (kqactors.aio._loop.LoopDriver), so
no thread waits for messages.

Calls are serialised per consumer, as in confluent-kafka: an asyncio lock admits one call at a time (a
consume() gives it up while it waits for data). A call made from inside one of this consumer's own
callbacks (``await consumer.assign(partitions)`` in on_assign, a commit in on_revoke) is re-entrant: it
runs at once, on the loop thread, while the worker waits for the callback to finish.

The group's ops (rebalances, start offsets, commit results) reach a queue of their own, through the
Consumer's ``_app_queue`` hook (see kqactors/client/consumer/group.py), instead of being served inside the
sync consume(): the AIOConsumer serves them on the worker before it takes messages. A callback served on the
loop thread itself (error_cb and stats_cb while the loop pumps; on_lost when a host died) cannot be waited
for there and runs as a task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from kqactors.aio._loop import LoopDriver, loop_callback
from kqactors.client.consumer.consumer import Consumer
from kqactors.client.handle import ClusterMetadata
from kqactors.message import Message, TopicPartition
from kqactors.runtime.runtime import AppQueue

__all__ = ["AIOConsumer"]

T = TypeVar("T")

#: callbacks in the configuration that may be coroutine functions
CONFIG_CALLBACKS = ("error_cb", "stats_cb", "throttle_cb", "on_commit")

#: the AIOConsumer whose callback the current task runs (its calls are then re-entrant)
_IN_CALLBACK: contextvars.ContextVar[Any] = contextvars.ContextVar("kqactors_aio_in_callback", default=None)


def _seconds(timeout: float | None) -> float:
    if timeout is None:
        return float("inf")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number, not {type(timeout).__name__}")
    return float("inf") if timeout < 0 else float(timeout)


class _LoopConsumer(Consumer):
    """The sync Consumer under an AIOConsumer. Its group client forwards the group's ops to ``_app_queue``, a
    queue of this consumer's runtime that the AIOConsumer serves, instead of the events queue consume() serves."""

    @property
    def _app_queue(self) -> AppQueue:
        queue = self.__dict__.get("_aio_group_queue")
        if queue is None:
            queue = self.__dict__["_aio_group_queue"] = self._rt.new_queue()
        return queue

    @_app_queue.setter
    def _app_queue(self, queue: AppQueue) -> None:
        self.__dict__["_aio_group_queue"] = queue

    @property
    def group_queue(self) -> AppQueue | None:
        """The group's op queue (None without group.id, or before the group client asked for it)."""
        return self.__dict__.get("_aio_group_queue")

    def flush_credit(self) -> None:
        """Return the prefetch credit a dry queue made due, as the sync consume() does before it waits."""
        self._flush_credit()


class AIOConsumer:
    """Asyncio Kafka consumer, a drop-in for ``confluent_kafka.aio.AIOConsumer``.

    ``consumer_conf`` is a kqactors Consumer configuration; ``error_cb``, ``stats_cb``, ``throttle_cb`` and
    ``on_commit`` may be coroutine functions, as may the on_assign / on_revoke / on_lost callbacks given to
    subscribe(), which get this AIOConsumer as their first argument. Construct it inside a running event loop;
    the constructor starts the client's processes (a few hundred milliseconds) before it returns.
    ``executor`` runs the blocking calls instead of the consumer's own worker thread; ``max_workers`` is
    checked as confluent-kafka checks it and otherwise unused (one worker is all a consumer needs)::

        async with AIOConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g"}) as consumer:
            await consumer.subscribe(["topic"])
            messages = await consumer.consume(100, 1.0)
    """

    def __init__(self, consumer_conf: Mapping[str, Any], max_workers: int = 100,
                 executor: concurrent.futures.Executor | None = None) -> None:
        if executor is None and max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        loop = asyncio.get_running_loop()
        self._closed = False
        self._lock = asyncio.Lock()
        conf = dict(consumer_conf)
        self._driver_ref = self._make_driver_ref()
        for name in CONFIG_CALLBACKS:
            if callable(conf.get(name)):
                conf[name] = loop_callback(self._driver_ref, conf[name], around=self._as_callback)
        self._driver: LoopDriver | None = None
        self._consumer = consumer = _LoopConsumer(conf)
        runtime = consumer._handle.rt
        assert runtime is not None, "the consumer's runtime was not started"
        self._group_queue = consumer.group_queue
        queues = [runtime.events] + ([self._group_queue] if self._group_queue is not None else [])
        self._driver = LoopDriver(loop, runtime, _nothing, queues, executor=executor)
        weakref.finalize(self, self._driver.abandon)

    def _make_driver_ref(self) -> Callable[[], LoopDriver | None]:
        self_ref = weakref.ref(self)

        def driver() -> LoopDriver | None:
            me = self_ref()
            return None if me is None else me._driver

        return driver

    async def _as_callback(self, awaitable: Awaitable[T]) -> T:
        """Run one of this consumer's callbacks; the calls it makes on the consumer are re-entrant."""
        token = _IN_CALLBACK.set(self)
        try:
            return await awaitable
        finally:
            _IN_CALLBACK.reset(token)

    def _wrap(self, callback: Any) -> Any:
        if callback is None or not callable(callback):
            return callback  # the sync consumer raises TypeError for a non-callable
        return loop_callback(self._driver_ref, callback, replace_first=self, around=self._as_callback)

    # ---- dispatch ---------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    async def _inline(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A call that never waits (it only sends ops): made on the loop thread."""
        self._check_open()
        if _IN_CALLBACK.get() is self:
            return fn(*args, **kwargs)
        async with self._lock:
            return fn(*args, **kwargs)

    async def _blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A call that waits for an answer: made on the worker (re-entrant ones on the loop thread, while
        the worker waits for the callback that made them)."""
        self._check_open()
        if _IN_CALLBACK.get() is self:
            return fn(*args, **kwargs)
        async with self._lock:
            return await self._driver.run_blocking(fn, *args, **kwargs)  # type: ignore[union-attr]

    def _serve_group_ops(self) -> None:
        """On the worker: the group's ops in order (rebalance callbacks, start offsets, commit results)."""
        queue = self._group_queue
        if queue is None:
            return
        op = queue.pop()
        while op is not None:
            queue.dispatch(op)
            op = queue.pop()

    # ---- consuming ----------------------------------------------------------------------------------------------
    async def _take(self, take: Callable[[], T], timeout: float | None, empty: Callable[[T], bool]) -> T:
        wait_s = _seconds(timeout)
        deadline = time.monotonic() + wait_s
        consumer = self._consumer
        driver = self._driver
        assert driver is not None
        reentrant = _IN_CALLBACK.get() is self
        while True:
            self._check_open()
            if reentrant:
                result = take()
            else:
                async with self._lock:
                    self._check_open()
                    queue = self._group_queue
                    if queue is not None and len(queue):
                        await driver.run_blocking(self._serve_group_ops)
                    result = take()
                    if empty(result):
                        consumer.flush_credit()
            if not empty(result):
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0 or driver.closed:
                return result
            await driver.wait(remaining)

    async def poll(self, timeout: float | None = None) -> Message | None:
        """One message, or an error/EOF event, waiting up to ``timeout`` seconds (None/-1: forever); None if
        nothing came. Prefer consume() for throughput: it amortises the awaits over a batch."""
        consumer = self._consumer
        return await self._take(lambda: consumer.poll(0), timeout, _is_none)

    async def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Up to ``num_messages`` messages (and events), waiting up to ``timeout`` seconds (None/-1: forever)
        for the first ones; an empty list if none came."""
        consumer = self._consumer
        return await self._take(lambda: consumer.consume(num_messages, 0), timeout, _is_empty)

    # ---- group -------------------------------------------------------------------------------------------------
    async def subscribe(self, topics: list[str], on_assign: Callable[..., Any] | None = None,
                        on_revoke: Callable[..., Any] | None = None,
                        on_lost: Callable[..., Any] | None = None) -> None:
        """Join the group for ``topics`` (``^`` prefix: a regular expression). The callbacks, plain or
        coroutine functions, get (this AIOConsumer, partitions) and run inside poll()/consume()."""
        await self._blocking(self._consumer.subscribe, topics, on_assign=self._wrap(on_assign),
                             on_revoke=self._wrap(on_revoke), on_lost=self._wrap(on_lost))

    async def unsubscribe(self) -> None:
        """Leave the group (revoke callbacks run in the next poll()/consume())."""
        await self._blocking(self._consumer.unsubscribe)

    async def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
                     asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit ``message``'s offset + 1, or ``offsets``, or the stored offsets. Asynchronous (the default):
        returns None, on_commit gets the outcome. Synchronous: the committed partitions, or KafkaException."""
        if asynchronous:
            return await self._inline(self._consumer.commit, message=message, offsets=offsets, asynchronous=True)
        return await self._blocking(self._consumer.commit, message=message, offsets=offsets, asynchronous=False)

    async def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """The group's committed offsets for ``partitions``."""
        return await self._blocking(self._consumer.committed, partitions, timeout)

    async def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        """Store ``message``'s offset + 1 (or ``offsets``) for the next commit."""
        await self._inline(self._consumer.store_offsets, message=message, offsets=offsets)

    async def consumer_group_metadata(self) -> Any:
        """The group metadata send_offsets_to_transaction() needs."""
        return await self._inline(self._consumer.consumer_group_metadata)

    # ---- assignment -------------------------------------------------------------------------------------------
    async def assign(self, partitions: list[TopicPartition]) -> None:
        """Replace the assignment and start fetching each partition at its offset."""
        await self._blocking(self._consumer.assign, partitions)

    async def unassign(self) -> None:
        """Drop the whole assignment."""
        await self._inline(self._consumer.unassign)

    async def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        """Add ``partitions`` to the assignment."""
        await self._blocking(self._consumer.incremental_assign, partitions)

    async def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        """Remove ``partitions`` from the assignment."""
        await self._inline(self._consumer.incremental_unassign, partitions)

    async def assignment(self) -> list[TopicPartition]:
        """The current assignment."""
        return await self._inline(self._consumer.assignment)

    async def seek(self, partition: TopicPartition) -> None:
        """Move an assigned partition's fetch position."""
        await self._inline(self._consumer.seek, partition)

    async def pause(self, partitions: list[TopicPartition]) -> None:
        """Stop fetching ``partitions``."""
        await self._inline(self._consumer.pause, partitions)

    async def resume(self, partitions: list[TopicPartition]) -> None:
        """Fetch paused ``partitions`` again."""
        await self._inline(self._consumer.resume, partitions)

    async def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The next offset to consume per partition."""
        return await self._inline(self._consumer.position, partitions)

    # ---- offsets and metadata ------------------------------------------------------------------------------------
    async def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                                    cached: bool = False) -> tuple[int, int]:
        """(low, high) watermarks; ``cached`` answers from the last fetch without asking the broker."""
        if cached:
            return await self._inline(self._consumer.get_watermark_offsets, partition, timeout, True)
        return await self._blocking(self._consumer.get_watermark_offsets, partition, timeout, False)

    async def offsets_for_times(self, partitions: list[TopicPartition],
                                timeout: float | None = None) -> list[TopicPartition]:
        """Per partition, the earliest offset whose timestamp is at least the ``offset`` field (ms)."""
        return await self._blocking(self._consumer.offsets_for_times, partitions, timeout)

    async def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Cluster metadata (all topics, or just ``topic``)."""
        return await self._blocking(self._consumer.list_topics, topic, timeout)

    async def cluster_id(self, timeout: float = -1) -> str | None:
        """The id of the cluster this consumer is connected to (None if the brokers do not say)."""
        metadata = await self.list_topics(None, timeout)
        return metadata.cluster_id

    async def set_sasl_credentials(self, username: str, password: str) -> None:
        """Change the SASL credentials of every later authentication (the sync Consumer's call)."""
        await self._blocking(self._consumer.set_sasl_credentials, username, password)

    # ---- lifecycle -------------------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Leave the group (final commit, revoke callbacks), stop every process and the worker thread. Safe to
        call twice; every call after it raises RuntimeError("Consumer closed")."""
        if self._closed:
            return
        driver = self._driver
        assert driver is not None
        try:
            if _IN_CALLBACK.get() is self:
                raise RuntimeError("close() cannot be called from the consumer's own callback")
            async with self._lock:
                if self._closed:
                    return
                driver.detach()  # stop watching the inbox before the runtime closes its socket
                await driver.run_blocking(self._consumer.close)
        finally:
            self._closed = True
            driver.detach()
            await driver.shutdown_executor()

    async def __aenter__(self) -> AIOConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _nothing() -> None:
    """A consumer serves what was routed inside poll()/consume() itself."""


def _is_none(result: Any) -> bool:
    return result is None


def _is_empty(result: Any) -> bool:
    return not result
