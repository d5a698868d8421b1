"""Benchmark runner: kafka-python KafkaProducer. Runs in: a fresh runner process per run.

Config: acks=1, linger_ms=5 unless --linger-ms (same as librdkafka's default, so all clients wait equally for batches),
batch_size=BATCH_SIZE unless --batch-size (the harness passes its choice), compression as asked; everything else default.
Delivery is tracked with per-future callbacks (they run on kafka-python's sender thread).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from _common import (
    WARMUP_MESSAGES,
    announce_ready_and_wait,
    error_name,
    parse_args,
    payloads_for,
    report_and_wait,
)
from kafka import KafkaProducer

BATCH_SIZE = 1024 * 1024


def main() -> None:
    args = parse_args()
    payloads = payloads_for(args)
    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap, acks=1, linger_ms=args.linger_ms,
        batch_size=args.batch_size or BATCH_SIZE,
        compression_type=None if args.compression == "none" else args.compression,
    )
    for _ in range(WARMUP_MESSAGES):
        producer.send(args.topic, b"warm-up")
    producer.flush(30)

    lock = threading.Lock()
    errors: Counter = Counter()
    state = {"delivered": 0, "last": 0.0}

    def on_success(_metadata: object) -> None:
        with lock:
            state["delivered"] += 1
            state["last"] = time.perf_counter()

    def on_error(error: BaseException) -> None:
        with lock:
            errors[error_name(error)] += 1
            state["last"] = time.perf_counter()

    announce_ready_and_wait()
    send, topic, distinct = producer.send, args.topic, len(payloads)
    started = time.perf_counter()
    for index in range(args.count):
        future = send(topic, payloads[index % distinct])
        future.add_callback(on_success)
        future.add_errback(on_error)
    producer.flush(120)
    with lock:
        missing = args.count - state["delivered"] - sum(errors.values())
        if missing:
            errors["NO_DELIVERY_REPORT"] += missing
        report_and_wait("kafka-python", args, state["delivered"], dict(errors), state["last"] - started)
    producer.close(10)


if __name__ == "__main__":
    main()
