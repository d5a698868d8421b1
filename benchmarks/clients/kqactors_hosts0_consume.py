"""Benchmark runner: kqactors Consumer and Producer with ``kqactors.hosts=0`` (toppar actors on the main host:
one process hop each way instead of two), the low-latency setting. Runs in: a fresh runner process per run."""

from __future__ import annotations

from typing import Any

from _rdkafka_consume import run

from kqactors import Consumer, Producer
from kqactors.message import OFFSET_BEGINNING, OFFSET_END, TopicPartition

HOSTS = {"kqactors.hosts": 0}


def consumer(config: dict[str, Any]) -> Consumer:
    return Consumer({**config, **HOSTS})


def producer(config: dict[str, Any]) -> Producer:
    return Producer({**config, **HOSTS})


if __name__ == "__main__":
    run("kqactors-hosts0", consumer, TopicPartition, OFFSET_BEGINNING, producer, OFFSET_END)
