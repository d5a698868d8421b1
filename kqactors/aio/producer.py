"""AIOProducer: confluent-kafka's ``confluent_kafka.aio.AIOProducer`` on kqactors, driven by the asyncio event loop.

Runs in: the app process, on the event loop's thread; the sync Producer underneath keeps its flusher thread,
and blocking calls (list_topics, a blocking purge, close) run on one worker thread per client. Owns the
awaitable produce(): each message carries a delivery callback that settles its future, and delivery reports
are served on the loop as they arrive (kqactors.aio._loop.LoopDriver watches the app's inbox), so no thread
waits for a message and nobody has to call poll() for futures to resolve.

Where it differs from confluent-kafka 2.16's AIOProducer (whose produce() queues messages in a Python buffer
that a thread pool hands to librdkafka by batches of ``batch_size``, or after ``buffer_timeout`` seconds):
messages go straight to kqactors' own per-partition buffers, which hand them on every linger.ms, so
``batch_size`` and ``buffer_timeout`` are accepted and have no effect, and a lone message is not held back
for up to a second. produce() also accepts ``headers`` (confluent's batch mode raises NotImplementedError) and a
per-message ``on_delivery``/``callback`` (confluent's ignores it), and rejects a wrong argument type at once
with TypeError (confluent's raises it later, from the flush that hands the batch on). Delivery failures,
queue-full and size errors are the same: the future raises KafkaException.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from kqactors.aio._loop import LoopDriver, loop_callback
from kqactors.client.handle import ClusterMetadata
from kqactors.client.producer.producer import Producer
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import Message

__all__ = ["AIOProducer"]

#: callbacks in the configuration that may be coroutine functions
CONFIG_CALLBACKS = ("error_cb", "stats_cb", "throttle_cb")
#: a burst of at least this many produce() calls in one turn of the loop is handed to the toppars when the turn
#: ends, rather than by the flusher thread (which waits for the GIL, then a tick); smaller ones stay the flusher's
BURST_HAND_OVER = 16
#: while flush() waits, the toppars are told again to ignore linger.ms this often (messages handed over
#: after a FLUSH op would otherwise wait for linger.ms)
FLUSH_NUDGE_S = 0.005

_get_ident = threading.get_ident


def _seconds(timeout: float | None) -> float:
    if timeout is None:
        return float("inf")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number, not {type(timeout).__name__}")
    return float("inf") if timeout < 0 else float(timeout)


class AIOProducer:
    """Asyncio Kafka producer, a drop-in for ``confluent_kafka.aio.AIOProducer``.

    ``producer_conf`` is a kqactors Producer configuration (librdkafka property names); ``error_cb``,
    ``stats_cb`` and ``throttle_cb`` may be coroutine functions. Construct it inside a running event loop;
    the constructor starts the client's processes (a few hundred milliseconds) before it returns.
    ``executor`` runs the blocking calls instead of the producer's own worker thread; ``max_workers``,
    ``batch_size`` and ``buffer_timeout`` are accepted for compatibility and unused (see the module
    docstring)::

        async with AIOProducer({"bootstrap.servers": "localhost:9092"}) as producer:
            delivered = await (await producer.produce("topic", value=b"v"))   # the delivered Message
    """

    def __init__(self, producer_conf: Mapping[str, Any], max_workers: int = 4,
                 executor: concurrent.futures.Executor | None = None, batch_size: int = 1000,
                 buffer_timeout: float = 1.0) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._loop_thread = _get_ident()
        self._closed = False
        self._served = 0
        self._burst = 0  # produce() calls since the last end-of-burst hand-over was scheduled
        conf = dict(producer_conf)
        self_ref = weakref.ref(self)

        def driver() -> LoopDriver | None:
            me = self_ref()
            return None if me is None else me._driver

        for name in CONFIG_CALLBACKS:
            if callable(conf.get(name)):
                conf[name] = loop_callback(driver, conf[name])
        self._driver: LoopDriver | None = None
        self._producer = producer = Producer(conf)
        self._produce = producer.produce
        runtime = producer._handle.rt
        assert runtime is not None, "the producer's runtime was not started"

        def serve() -> None:
            me = self_ref()
            if me is not None:
                me._serve_reports()

        self._driver = LoopDriver(loop, runtime, serve, [runtime.events], executor=executor,
                                  active=lambda: len(producer) > 0)
        weakref.finalize(self, self._driver.abandon)

    # ---- producing -------------------------------------------------------------------------------------------
    async def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                      on_delivery: Callable[..., Any] | None = None, callback: Callable[..., Any] | None = None,
                      timestamp: int = 0, headers: Any = None) -> asyncio.Future[Message]:
        """Queue one message and return a future that resolves to the delivered Message (topic, partition,
        offset set) or raises KafkaException with the delivery error. Errors known at once (message too
        large, unknown partition, queue full, a fatal producer) fail the future too; wrong argument types
        raise TypeError here, and a closed producer RuntimeError. ``on_delivery(err, msg)`` (or
        ``callback``), if given, runs on the loop just before the future is settled."""
        fut: asyncio.Future[Message] = self._loop.create_future()
        if self._closed:
            raise RuntimeError("Producer has been closed")
        cb = on_delivery if on_delivery is not None else callback
        if cb is not None and not callable(cb):
            raise TypeError("on_delivery must be callable")
        settle = functools.partial(self._settle, fut, cb)
        try:
            self._produce(topic, value, key, partition, settle, None, timestamp, headers)
        except KafkaException as exc:
            fut.set_exception(exc)
        except BufferError as exc:
            fut.set_exception(KafkaException(KafkaError(KafkaError._QUEUE_FULL, str(exc) or "Local: Queue full")))
        burst = self._burst
        self._burst = burst + 1
        if not burst:
            self._loop.call_soon(self._end_of_burst)
            self._driver.ensure_ticking()  # type: ignore[union-attr]
        return fut

    def _end_of_burst(self) -> None:
        """The loop turn that produced has ended (the application awaits something): hand a large burst on
        now. Messages still wait linger.ms from their produce() in the toppar, as in librdkafka."""
        burst, self._burst = self._burst, 0
        if burst >= BURST_HAND_OVER and not self._closed:
            self._producer.hand_over_burst()

    def _settle(self, fut: asyncio.Future[Message], cb: Callable[..., Any] | None, err: KafkaError | None,
                msg: Message) -> None:
        """The delivery callback of one message: run the application's callback, then settle the future.
        Reports served off the loop (close() on the worker) are handed to the loop."""
        if _get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self._settle, fut, cb, err, msg)
            return
        if cb is not None:
            try:
                cb(err, msg)
            except Exception as exc:  # noqa: BLE001 - the future must be settled whatever the callback does
                self._loop.call_exception_handler({"message": "kqactors.aio: on_delivery raised", "exception": exc})
        if fut.done():  # cancelled by the application
            return
        if err is None:
            fut.set_result(msg)
        else:
            fut.set_exception(KafkaException(err))

    def _serve_reports(self) -> int:
        """Serve every delivery report and client event that has arrived (non-blocking)."""
        poll = self._producer.poll
        total = 0
        while True:
            served = poll(0)
            if not served:
                break
            total += served
        self._served += total
        return total

    # ---- delivery reports ------------------------------------------------------------------------------------
    async def poll(self, timeout: float = 0) -> int:
        """Serve delivery reports and events, waiting up to ``timeout`` seconds (-1/None: forever) for at least
        one. Reports are also served by the loop as they arrive, so this counts every report served since it
        was called, whoever served it. Returns that number."""
        wait_s = _seconds(timeout)
        self._check_open()
        driver = self._driver
        assert driver is not None
        start = self._served
        driver.drain()
        deadline = time.monotonic() + wait_s
        while self._served == start:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or driver.closed:
                break
            await driver.wait(remaining)
            driver.drain()
        return self._served - start

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything now (ignoring linger.ms) and wait until every message has its delivery report, or
        ``timeout`` seconds (None/-1: no limit). Returns the number of messages still outstanding."""
        wait_s = _seconds(timeout)
        driver = self._driver
        assert driver is not None
        producer = self._producer
        deadline = time.monotonic() + wait_s
        while True:
            producer.flush(0)  # FLUSH to every toppar with messages: no waiting for linger.ms (never blocks)
            driver.drain()
            left = len(producer)
            remaining = deadline - time.monotonic()
            if left == 0 or remaining <= 0 or driver.closed:
                return left
            await driver.wait(min(remaining, FLUSH_NUDGE_S))

    async def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Fail queued (_PURGE_QUEUE) and/or in-flight (_PURGE_INFLIGHT) messages: their futures raise
        KafkaException with that code. ``blocking`` waits (on the worker) until the partitions confirmed."""
        self._check_open()
        driver = self._driver
        assert driver is not None
        if blocking:
            await driver.run_blocking(self._producer.purge, in_queue, in_flight, True)
        else:
            self._producer.purge(in_queue, in_flight, False)
            driver.drain()

    def __len__(self) -> int:
        """Messages not yet delivered (their futures are pending); 0 once closed."""
        return 0 if self._closed else len(self._producer)

    # ---- metadata ---------------------------------------------------------------------------------------------
    async def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Cluster metadata (all topics, or just ``topic``); raises KafkaException on timeout or error."""
        self._check_open()
        return await self._driver.run_blocking(self._producer.list_topics, topic, timeout)  # type: ignore[union-attr]

    async def cluster_id(self, timeout: float = -1) -> str | None:
        """The id of the cluster this producer is connected to (None if the brokers do not say)."""
        metadata = await self.list_topics(None, timeout)
        return metadata.cluster_id

    # ---- transactions and credentials: the sync Producer's, run on the worker thread ----------------------------
    async def _delegate(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self._check_open()
        method = getattr(self._producer, name, None)
        if method is None:
            raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED, f"{name}() is not supported by kqactors yet"))
        return await self._driver.run_blocking(method, *args, **kwargs)  # type: ignore[union-attr]

    async def init_transactions(self, *args: Any, **kwargs: Any) -> Any:
        """Initialise transactions: find the coordinator, get the producer id, fence older epochs."""
        return await self._delegate("init_transactions", *args, **kwargs)

    async def begin_transaction(self, *args: Any, **kwargs: Any) -> Any:
        """Flush, then begin a transaction."""
        await self.flush()
        return await self._delegate("begin_transaction", *args, **kwargs)

    async def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> Any:
        """Add the consumer's offsets to the transaction (committed with it)."""
        return await self._delegate("send_offsets_to_transaction", *args, **kwargs)

    async def commit_transaction(self, *args: Any, **kwargs: Any) -> Any:
        """Flush, then commit the transaction."""
        await self.flush()
        return await self._delegate("commit_transaction", *args, **kwargs)

    async def abort_transaction(self, *args: Any, **kwargs: Any) -> Any:
        """Abort the transaction: what is unsent is purged, what is in flight is waited for."""
        return await self._delegate("abort_transaction", *args, **kwargs)

    async def set_sasl_credentials(self, *args: Any, **kwargs: Any) -> Any:
        """Change the SASL credentials (KafkaException _NOT_IMPLEMENTED while kqactors has no such call)."""
        return await self._delegate("set_sasl_credentials", *args, **kwargs)

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Producer has been closed")

    async def close(self) -> None:
        """Flush (no time limit, as confluent-kafka's: message.timeout.ms bounds it), then stop the client's
        processes and its worker thread. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        driver = self._driver
        assert driver is not None
        try:
            await self.flush()
        finally:
            driver.detach()
            try:
                await driver.run_blocking(self._producer.close)
            finally:
                await driver.shutdown_executor()

    async def __aenter__(self) -> AIOProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
