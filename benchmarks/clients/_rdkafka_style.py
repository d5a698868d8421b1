"""The produce loop for clients with confluent-kafka's Producer API (confluent-kafka and kqactors).

Runs in: a benchmark runner process. Owns one measured run: produce ``count`` messages without keys (so the
default partitioner spreads them), serve delivery reports with poll(0) every 1000 messages and on
BufferError, then flush; elapsed time is first produce() → last delivery report.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from _common import (
    WARMUP_MESSAGES,
    announce_ready_and_wait,
    error_name,
    parse_args,
    payloads_for,
    report_and_wait,
)


def producer_config(args: Any) -> dict[str, Any]:
    """Both librdkafka-style clients get the same config: their defaults plus acks and compression.

    linger.ms=5 (librdkafka's default, written out so the benchmark does not depend on it) unless --linger-ms.
    """
    return {"bootstrap.servers": args.bootstrap, "acks": "1", "linger.ms": args.linger_ms,
            "compression.type": args.compression}


def run(client: str, producer_class: Any) -> None:
    args = parse_args()
    payloads = payloads_for(args)
    producer = producer_class(producer_config(args))
    for _ in range(WARMUP_MESSAGES):
        producer.produce(args.topic, b"warm-up")
    if producer.flush(30) != 0:
        raise SystemExit(f"{client}: warm-up messages were not delivered")

    errors: Counter = Counter()
    state = {"delivered": 0, "last": 0.0}

    def on_delivery(error: Any, message: Any) -> None:
        state["last"] = time.perf_counter()
        if error is None:
            state["delivered"] += 1
        else:
            errors[error_name(error)] += 1

    announce_ready_and_wait()
    produce, poll, topic, distinct = producer.produce, producer.poll, args.topic, len(payloads)
    started = time.perf_counter()
    for index in range(args.count):
        value = payloads[index % distinct]
        while True:
            try:
                produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.05)
        if index % 1000 == 999:
            poll(0)
    remaining = producer.flush(120)
    if remaining:
        errors["NO_DELIVERY_REPORT"] += remaining
    report_and_wait(client, args, state["delivered"], dict(errors), state["last"] - started)
    close = getattr(producer, "close", None)
    if callable(close):
        close()
