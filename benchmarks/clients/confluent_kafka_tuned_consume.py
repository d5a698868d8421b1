"""Benchmark runner: confluent-kafka (librdkafka) Consumer tuned for throughput: ``fetch.queue.backoff.ms=10``
(librdkafka's default 1000 ms idles a partition whose fetch queue passed queued.min.messages /
queued.max.messages.kbytes for a whole second). Runs in: a fresh runner process per run."""

from __future__ import annotations

from typing import Any

import confluent_kafka
from _rdkafka_consume import run

TUNED = {"fetch.queue.backoff.ms": 10}


def consumer(config: dict[str, Any]) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer({**config, **TUNED})


if __name__ == "__main__":
    run("confluent-kafka-tuned", consumer, confluent_kafka.TopicPartition, confluent_kafka.OFFSET_BEGINNING,
        confluent_kafka.Producer, confluent_kafka.OFFSET_END)
