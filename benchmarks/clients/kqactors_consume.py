"""Benchmark runner: kqactors Consumer (and Producer for the latency mode). Runs in: a fresh runner process
per run."""

from __future__ import annotations

from _rdkafka_consume import run

from kqactors import Consumer, Producer
from kqactors.message import OFFSET_BEGINNING, OFFSET_END, TopicPartition

if __name__ == "__main__":
    run("kqactors", Consumer, TopicPartition, OFFSET_BEGINNING, Producer, OFFSET_END)
