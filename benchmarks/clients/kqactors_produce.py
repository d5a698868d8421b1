"""Benchmark runner: kqactors.Producer (same loop and config as confluent-kafka). Runs in: a fresh runner
process per run; kqactors spawns its host processes from here and the harness measures them all."""

from __future__ import annotations

from _rdkafka_style import run

from kqactors import Producer

if __name__ == "__main__":
    run("kqactors", Producer)
