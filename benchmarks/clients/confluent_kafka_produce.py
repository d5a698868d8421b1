"""Benchmark runner: confluent-kafka (librdkafka) Producer. Runs in: a fresh runner process per run."""

from __future__ import annotations

import confluent_kafka
from _rdkafka_style import run

if __name__ == "__main__":
    run("confluent-kafka", confluent_kafka.Producer)
