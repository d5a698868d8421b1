"""Benchmark runner: confluent-kafka (librdkafka) Consumer (and Producer for the latency mode). Runs in: a
fresh runner process per run."""

from __future__ import annotations

import confluent_kafka
from _rdkafka_consume import run

if __name__ == "__main__":
    run("confluent-kafka", confluent_kafka.Consumer, confluent_kafka.TopicPartition,
        confluent_kafka.OFFSET_BEGINNING, confluent_kafka.Producer, confluent_kafka.OFFSET_END)
