"""Shared groups of a shared runtime (kqactors/runtime/shared.py, docs/runtime.md "Shared runtime"): producers
with the same settings attached to one runtime share main, the broker connections and the toppars (their
messages go in the same batches), yet each keeps its own delivery reports, ordering and errors; a member's crash
costs the others nothing; a fatal error reaches every member; consumers and admin clients keep actors of their
own and work beside them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from shared_runtime_helpers import ROOT, groups, start_runtime, stop_runtime
from support.waiting import wait_until

import kqactors.admin as ka
from kqactors import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kqactors.runtime.shared import runtime_status

pytestmark = pytest.mark.integration


@pytest.fixture
def runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = str(tmp_path_factory.mktemp("srg") / "rt")
    proc = start_runtime(directory)
    yield directory
    stop_runtime(proc)


def _reports(sink: list, tag: bytes):
    return lambda err, msg: sink.append((err, msg.value(), msg.offset()))


def test_same_settings_share_one_set_of_actors_each_member_keeps_its_reports(mock_cluster, unique_topic,
                                                                             runtime_dir) -> None:
    conf = {"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": runtime_dir, "linger.ms": 20}
    a = Producer(conf)
    b = Producer({**conf, "queue.buffering.max.messages": 50_000})  # app-side only: same group
    c = Producer({**conf, "linger.ms": 0})  # another linger: a group of its own
    try:
        ra: list = []
        rb: list = []
        for i in range(1000):  # interleaved, into the same partition
            a.produce(unique_topic, b"a%d" % i, partition=0, on_delivery=_reports(ra, b"a"))
            b.produce(unique_topic, b"b%d" % i, partition=0, on_delivery=_reports(rb, b"b"))
        c.produce(unique_topic, b"c", partition=0)
        assert a.flush(30) == 0 and b.flush(30) == 0 and c.flush(30) == 0
        assert [err for err, _, _ in ra + rb if err is not None] == []
        assert [v for _, v, _ in ra] == [b"a%d" % i for i in range(1000)]  # own reports, in produce order
        assert [v for _, v, _ in rb] == [b"b%d" % i for i in range(1000)]
        offsets_a, offsets_b = [o for _, _, o in ra], [o for _, _, o in rb]
        assert offsets_a == sorted(offsets_a) and offsets_b == sorted(offsets_b)
        assert len(set(offsets_a) | set(offsets_b)) == 2000  # every message its own offset in the one log
        state = groups(runtime_dir)
        assert len(state) == 2
        shared = next(g for g in state.values() if len(g["members"]) == 2)
        mains = [n for n in shared["actors"] if n.endswith("/main")]
        brokers = [n for n in shared["actors"] if "/broker/" in n]
        assert len(mains) == 1 and len(brokers) == 3  # one connection per broker for both producers
        assert len(runtime_status(runtime_dir)["clients"]) == 3
    finally:
        for p in (a, b, c):
            p.close()
    wait_until(lambda: groups(runtime_dir) == {}, 15, "the groups stop with their last member")


def test_a_member_crash_in_flight_costs_the_others_nothing(mock_cluster, unique_topic, runtime_dir) -> None:
    conf = {"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": runtime_dir, "linger.ms": 5}
    survivor = Producer(conf)
    try:
        reports: list = []
        for i in range(200):
            survivor.produce(unique_topic, b"s%d" % i, partition=0, on_delivery=_reports(reports, b"s"))
        script = textwrap.dedent(f"""
            import os, sys
            from kqactors import Producer
            p = Producer({conf!r})
            for i in range(20000):
                p.produce({unique_topic!r}, b"x" * 100, partition=i % 2)
                if i % 1000 == 0:
                    p.poll(0)
            print("produced", flush=True)
            os._exit(9)  # no flush, no close: its messages are queued and in flight in the shared toppars
        """)
        env = dict(os.environ, PYTHONPATH=ROOT)
        crashed = subprocess.run([sys.executable, "-c", script], env=env, timeout=120, capture_output=True, text=True)
        assert crashed.returncode == 9, crashed.stderr
        for i in range(200, 400):
            survivor.produce(unique_topic, b"s%d" % i, partition=0, on_delivery=_reports(reports, b"s"))
        assert survivor.flush(30) == 0
        assert [err for err, _, _ in reports if err is not None] == []
        assert [v for _, v, _ in reports] == [b"s%d" % i for i in range(400)]
        wait_until(lambda: [len(g["members"]) for g in groups(runtime_dir).values()] == [1], 15,
                   "the crashed member leaves the group")
        more: list = []
        survivor.produce(unique_topic, b"after", partition=1, on_delivery=_reports(more, b"s"))
        assert survivor.flush(30) == 0 and more[0][0] is None
    finally:
        survivor.close()


def test_a_fatal_error_reaches_every_member_and_the_next_client_starts_afresh(mock_cluster_factory,
                                                                              unique_topic, runtime_dir) -> None:
    cluster = mock_cluster_factory(num_brokers=1)
    errors: dict[str, list] = {"a": [], "b": []}
    conf = {"bootstrap.servers": cluster.bootstrap, "kqactors.runtime.dir": runtime_dir,
            "enable.idempotence": True, "enable.gapless.guarantee": True}
    a = Producer({**conf, "error_cb": errors["a"].append})
    b = Producer({**conf, "error_cb": errors["b"].append})
    try:
        assert len(groups(runtime_dir)) == 1
        for p in (a, b):
            p.produce(unique_topic, b"ok", partition=0)
            assert p.flush(30) == 0
        # A batch refused for good breaks the gap-less guarantee: a fatal error of the group's producer id.
        cluster.push_request_errors(0, [KafkaError.TOPIC_AUTHORIZATION_FAILED])
        a.produce(unique_topic, b"refused", partition=0)

        def both_fatal() -> bool:
            a.poll(0.05)
            b.poll(0.05)
            return all(any(e.fatal() for e in errs) for errs in errors.values())

        wait_until(both_fatal, 30, "the fatal error reaches both members")
        for p in (a, b):
            with pytest.raises(KafkaException) as raised:
                p.produce(unique_topic, b"x")
            assert raised.value.args[0].code() == KafkaError._FATAL
        cluster.clear_request_errors(0)
        fresh = Producer(conf)  # same settings: a new group, with a producer id of its own
        try:
            state = groups(runtime_dir)
            assert len(state) == 2 and sorted(g["retired"] for g in state.values()) == [False, True]
            delivered: list = []
            fresh.produce(unique_topic, b"y", on_delivery=lambda err, msg: delivered.append(err))
            assert fresh.flush(30) == 0 and delivered == [None]
        finally:
            fresh.close()
    finally:
        a.close()
        b.close()


def test_a_toppar_host_death_costs_the_members_nothing(mock_cluster, unique_topic, runtime_dir) -> None:
    conf = {"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": runtime_dir, "linger.ms": 50}
    a, b = Producer(conf), Producer(conf)
    try:
        ra: list = []
        rb: list = []
        for i in range(300):
            a.produce(unique_topic, b"a%d" % i, partition=0, on_delivery=_reports(ra, b"a"))
            b.produce(unique_topic, b"b%d" % i, partition=0, on_delivery=_reports(rb, b"b"))
        wait_until(lambda: a.poll(0.05) + b.poll(0.05) >= 0 and ra and rb, 30, "the toppar runs and reports")
        for i in range(300, 600):  # queued in the toppar (linger.ms) and in flight when its host dies
            a.produce(unique_topic, b"a%d" % i, partition=0, on_delivery=_reports(ra, b"a"))
            b.produce(unique_topic, b"b%d" % i, partition=0, on_delivery=_reports(rb, b"b"))
        status = runtime_status(runtime_dir)
        os.kill(status["pids"]["h1"], signal.SIGKILL)
        for i in range(600, 900):
            while True:
                try:
                    a.produce(unique_topic, b"a%d" % i, partition=0, on_delivery=_reports(ra, b"a"))
                    b.produce(unique_topic, b"b%d" % i, partition=0, on_delivery=_reports(rb, b"b"))
                    break
                except BufferError:
                    a.poll(0.01)
                    b.poll(0.01)
        assert a.flush(60) == 0 and b.flush(60) == 0
        for tag, reports in ((b"a", ra), (b"b", rb)):
            assert [err for err, _, _ in reports if err is not None] == []
            assert sorted(v for _, v, _ in reports) == sorted(tag + b"%d" % i for i in range(900))
    finally:
        a.close()
        b.close()


def test_a_consumer_and_an_admin_client_attach_and_work_beside_a_group(mock_cluster, unique_topic,
                                                                       runtime_dir) -> None:
    conf = {"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": runtime_dir}
    admin = ka.AdminClient(conf)
    producer = Producer(conf)
    consumer = Consumer({**conf, "group.id": unique_topic, "auto.offset.reset": "earliest"})
    try:
        for i in range(50):
            producer.produce(unique_topic, b"m%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        found = admin.list_offsets({TopicPartition(unique_topic, p): ka.OffsetSpec.latest() for p in (0, 1)})
        assert {tp.partition: f.result(30).offset for tp, f in found.items()} == {0: 25, 1: 25}
        assert unique_topic in admin.list_topics(unique_topic, 10).topics
        consumer.assign([TopicPartition(unique_topic, 0, 0), TopicPartition(unique_topic, 1, 0)])
        seen: list = []

        def read_all() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
            return len(seen) >= 50

        wait_until(read_all, 30, "the consumer reads what the producer wrote")
        assert sorted(seen) == sorted(b"m%d" % i for i in range(50))
        shown = subprocess.run([sys.executable, "-m", "kqactors.cli.main", "runtime", "--dir", runtime_dir, "--status"],
                               env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=60)
        status = json.loads(shown.stdout)
        assert len(status["clients"]) == 3
        assert [len(g["members"]) for g in status["groups"].values()] == [1]  # only the producer is in a group
    finally:
        consumer.close()
        producer.close()
        admin.close() if hasattr(admin, "close") else None


def test_a_lingering_group_serves_the_next_client_then_stops(mock_cluster, unique_topic, tmp_path) -> None:
    directory = str(tmp_path / "rt")
    server = start_runtime(directory, 1, "--group-linger", "2")
    conf = {"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": directory}
    try:
        first = Producer(conf)
        first.produce(unique_topic, b"1")
        assert first.flush(30) == 0
        first.close()
        kept = groups(directory)
        assert [g["members"] for g in kept.values()] == [[]]  # no member, still up
        second = Producer(conf)  # joins the kept group: its connections are up already
        try:
            assert list(groups(directory)) == list(kept)
            delivered: list = []
            second.produce(unique_topic, b"2", on_delivery=lambda err, msg: delivered.append(err))
            assert second.flush(30) == 0 and delivered == [None]
        finally:
            second.close()
        wait_until(lambda: groups(directory) == {}, 20, "the group stops once it lingered 2 s unused")
    finally:
        stop_runtime(server)


def test_every_member_gets_the_groups_statistics(mock_cluster, unique_topic, runtime_dir) -> None:
    stats: dict[str, list] = {"a": [], "b": []}
    conf = {"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": runtime_dir,
            "statistics.interval.ms": 100}
    a = Producer({**conf, "stats_cb": stats["a"].append})
    b = Producer({**conf, "stats_cb": stats["b"].append})
    try:
        assert len(groups(runtime_dir)) == 1  # the same statistics interval: one group
        a.produce(unique_topic, b"x", partition=0)
        b.produce(unique_topic, b"y", partition=0)
        assert a.flush(30) == 0 and b.flush(30) == 0

        def both_saw_the_partition() -> bool:
            a.poll(0.05)
            b.poll(0.05)
            return all(any(unique_topic in json.loads(s).get("topics", {}) for s in got) for got in stats.values())

        wait_until(both_saw_the_partition, 30, "both members' stats_cb get the group's statistics")
        last_a, last_b = json.loads(stats["a"][-1]), json.loads(stats["b"][-1])
        assert last_a["name"] != last_b["name"]  # each member names itself
    finally:
        a.close()
        b.close()
