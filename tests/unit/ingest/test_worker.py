"""A worker in-process with a fake producer: --once to the end, a drain on stop (and its deadline when nothing
can be delivered), the reports it sends, and its exit statuses for a bad producer config and a taken port."""

from __future__ import annotations

import asyncio
import socket

from kqactors.ingest.checkpoint import StateStore
from kqactors.ingest.config import parse_config, worker_groups
from kqactors.ingest.worker import EXIT_BIND, EXIT_CONFIG, EXIT_OK, Worker

from .fakes import FakeProducer


def spec_for(tmp_path, paths, **settings):
    config = parse_config(settings, {"bootstrap": "b:1", "topic": "t", "state_dir": str(tmp_path / "state"),
                                     "paths": paths})
    return worker_groups(config)[0]


def test_once_reads_to_the_end_and_checkpoints(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"".join(b"%d\n" % i for i in range(5000)) + b"last")
    producer, reports = FakeProducer(limit=300), []
    worker = Worker(spec_for(tmp_path, [str(log)], once=True, metrics_interval_s=0.05), reports.append,
                    lambda conf: producer)
    assert asyncio.run(worker.run()) == EXIT_OK
    assert producer.values() == [b"%d" % i for i in range(5000)] + [b"last"]
    assert StateStore(str(tmp_path / "state")).load(str(log))[0].pos == log.stat().st_size
    assert reports[0]["type"] == "ready"
    final = reports[-1]
    assert final["final"] and final["sources"][str(log)]["lines_out"] == 5001
    assert final["sources"][str(log)]["lag_bytes"] == 0


def test_stop_drains_and_a_dead_broker_ends_at_the_deadline(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"x\n" * 10)
    producer = FakeProducer()

    async def scenario(worker):
        task = asyncio.ensure_future(worker.run())
        while worker.emitter is None or worker.runtimes[0].stats.lines_in < 10:
            await asyncio.sleep(0.01)
        worker.stop.set()
        return await task

    worker = Worker(spec_for(tmp_path, [str(log)], drain_timeout_s=5), None, lambda conf: producer)
    assert asyncio.run(scenario(worker)) == EXIT_OK
    assert len(producer.values()) == 10
    log2 = tmp_path / "b.log"
    log2.write_bytes(b"y\n" * 10)
    down = FakeProducer()
    down.up = False
    worker = Worker(spec_for(tmp_path, [str(log2)], drain_timeout_s=0.2), None, lambda conf: down)
    assert asyncio.run(scenario(worker)) == EXIT_OK
    assert down.purged == 10 and not down.values()
    assert StateStore(str(tmp_path / "state")).load(str(log2))[0].pos == 0, "nothing delivered, nothing saved"


def test_exit_statuses(tmp_path):
    def bad(conf):
        raise ValueError("No such configuration property: \"nope\"")

    assert asyncio.run(Worker(spec_for(tmp_path, ["-"]), None, bad).run()) == EXIT_CONFIG
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = parse_config({"source": [{"type": "tcp", "listen": f"127.0.0.1:{port}"}]},
                              {"bootstrap": "b:1", "topic": "t"})
        worker = Worker(worker_groups(config)[0], None, lambda conf: FakeProducer())
        assert asyncio.run(worker.run()) == EXIT_BIND


def test_a_fatal_producer_error_ends_the_worker_for_a_restart(tmp_path):
    from kqactors.errors import KafkaError
    from kqactors.ingest.worker import EXIT_FAILED

    log = tmp_path / "a.log"
    log.write_bytes(b"x\n")
    producer = FakeProducer()
    producer.up = False

    async def scenario(worker):
        task = asyncio.ensure_future(worker.run())
        while worker.emitter is None or worker.runtimes[0].stats.lines_in < 1:
            await asyncio.sleep(0.01)
        worker._on_error(KafkaError(KafkaError._FATAL, "fenced", fatal=True))
        return await task

    worker = Worker(spec_for(tmp_path, [str(log)], drain_timeout_s=30), None, lambda conf: producer)
    assert asyncio.run(asyncio.wait_for(scenario(worker), 10)) == EXIT_FAILED
