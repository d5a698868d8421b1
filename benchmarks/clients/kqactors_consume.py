"""Benchmark runner: kqactors Consumer (and Producer for the latency mode). Runs in: a fresh runner process
per run."""

from __future__ import annotations

from _rdkafka_consume import run

from kqactors.consumer import Consumer
from kqactors.message import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from kqactors.producer import Producer

if __name__ == "__main__":
    run("kqactors", Consumer, TopicPartition, OFFSET_BEGINNING, Producer, OFFSET_END)
