"""Host crash recovery beyond the fault table's steady rows: the issue's flat-out run on Tansu, SIGSTOP of a host
for 10 s, and a host crash in the middle of a transaction.

Runs in: the pytest process (clients' hosts, Tansu and the librdkafka mock cluster are child processes). Rows go
to ``KQ_FAULT_TABLE`` as in test_host_crash.py (docs/reliability.md, "Fault table").
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from support.kafka_io import produce_round_robin
from support.waiting import wait_until
from test_host_crash import (
    PARTITIONS,
    STALL_LIMIT_S,
    ProducerRun,
    numbered,
    parse,
    read_log,
    record_row,
    stall_after,
)

from kqactors import Consumer, KafkaError, KafkaException, Producer, TopicPartition

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(180)]


def create_topic(cluster, topic: str, partitions: int = PARTITIONS) -> None:
    if hasattr(cluster, "create_topic"):
        cluster.create_topic(topic, partitions)
        return
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(15)


def produce_flat_out(producer: Producer, topic: str, count: int, at: dict[int, object]) -> list[int]:
    """``count`` numbered messages round-robin as fast as produce() takes them; ``at[i]()`` runs before message i."""
    def before(i: int) -> None:
        if i in at:
            at[i]()

    return produce_round_robin(producer, topic, count, PARTITIONS, numbered, before=before, backoff=0.01)


def check_log(bootstrap: str, topic: str, run: ProducerRun, sent: list[int]) -> dict:
    log = read_log(bootstrap, topic, run.max_offset)
    acked = sum(len(s) for s in run.acked.values())
    return {"acked": acked, "lost": sum(len(run.acked[p] - set(log[p])) for p in range(PARTITIONS)),
            "duplicated": sum(len(log[p]) - len(set(log[p])) for p in range(PARTITIONS)),
            "failed": len(run.failed), "unresolved": sum(sent) - acked - len(run.failed)}


# ---- the scenario ------------------------------------------------------------------------------------

FLAT_OUT = 150_000


def test_flat_out_idempotent_producer_survives_a_main_host_kill_on_tansu(tansu, unique_topic):
    """Issue #21: 150,000 messages flat out, idempotent, SIGKILL of the main host a third of the way in. Before
    the recovery it met PRODUCER_FENCED and _MSG_TIMED_OUT; now every message is delivered once."""
    create_topic(tansu, unique_topic)
    run = ProducerRun()
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "enable.idempotence": True, "kqactors.hosts": 2,
                         "linger.ms": 5, "on_delivery": run})
    rt = producer._rt
    kill_time = [0.0]

    def kill() -> None:
        kill_time[0] = time.monotonic()
        os.kill(rt.host_pid(rt.host_of("main")), signal.SIGKILL)

    try:
        sent = produce_flat_out(producer, unique_topic, FLAT_OUT, {FLAT_OUT // 3: kill})
        left = producer.flush(60)
    finally:
        producer.close(timeout=5)
    counts = check_log(tansu.bootstrap, unique_topic, run, sent)
    row = {"kind": "producer", "config": "idempotent, flat out (Tansu)", "victim": "main host", "sent": sum(sent),
           **counts, "skips": "-", "repeats": "-", "stall_s": round(stall_after(run.ok_times, kill_time[0]), 2)}
    record_row(row)
    assert left == 0, row
    assert row["failed"] == 0, (row, run.failed[:5])
    assert row["lost"] == 0 and row["duplicated"] == 0 and row["unresolved"] == 0, row
    assert row["stall_s"] < STALL_LIMIT_S, row


# ---- a host that dies before its toppars start ---------------------------------------------------------------

@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_toppars_whose_host_dies_before_they_start_are_started_after_its_restart(mock_cluster, unique_topic,
                                                                                   idempotent):
    """The toppar host is killed before any toppar runs there: the first spawns meet a dead or restarting host.
    That is an internal fault too: the messages wait (in order) and go out once the restarted host takes the
    toppars; none fails. (They used to fail with _TRANSPORT: 'could not start toppar ...: DEAD_ACTOR'.)"""
    create_topic(mock_cluster, unique_topic)
    reports: list[tuple[int, int, object]] = []
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 2, "linger.ms": 5,
                         "enable.idempotence": idempotent,
                         "on_delivery": lambda err, msg: reports.append((msg.partition(), int(msg.value()), err))})
    rt = producer._rt
    try:
        victim = rt.host_keys[1]
        pid = wait_until(lambda: rt.host_pid(victim), 10, "the toppar host to be launched")
        os.kill(pid, signal.SIGKILL)
        for i in range(600):
            producer.produce(unique_topic, b"%d" % i, partition=i % PARTITIONS)
            producer.poll(0)
        assert producer.flush(30) == 0
    finally:
        producer.close(timeout=5)
    assert [err for _p, _v, err in reports if err is not None] == []
    assert sorted(v for _p, v, _err in reports) == list(range(600))
    for partition in range(PARTITIONS):  # delivered in produce order per partition
        values = [v for p, v, _err in reports if p == partition]
        assert values == sorted(values), partition
    assert rt.host_restarts(victim) >= 1, "the host was not restarted: the test did not test anything"


# ---- a host crash in the middle of a transaction -------------------------------------------------------------

def outcomes(bootstrap: str, topic: str) -> dict[str, list[bytes]]:
    """The topic's values by transaction outcome, read from the log itself (test_transactions_log: neither test
    broker filters aborted data for a read_committed consumer)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
    from test_transactions_log import values_by_outcome

    return values_by_outcome(bootstrap, topic)


def transactional_producer(cluster, topic: str) -> tuple[Producer, list[tuple[bytes, object]]]:
    """A topic, and a transactional producer on two hosts, initialized, whose reports (value, error) are kept."""
    create_topic(cluster, topic)
    reports: list[tuple[bytes, object]] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"tx-{topic}",
                         "kqactors.hosts": 2, "linger.ms": 5,
                         "on_delivery": lambda err, msg: reports.append((msg.value(), err))})
    try:
        producer.init_transactions(30)
    except BaseException:
        producer.close(timeout=5)
        raise
    return producer, reports


@pytest.mark.parametrize("victim", ["main", "toppar"])
def test_host_crash_mid_transaction_fails_it_abortably(mock_cluster, unique_topic, victim):
    """A host that dies mid-transaction takes what it held (a toppar's messages, or main's transaction state):
    the transaction cannot commit. commit_transaction() raises an abortable error (never hangs, never commits
    a transaction with a hole); the app aborts and the next transaction commits."""
    producer, reports = transactional_producer(mock_cluster, unique_topic)
    rt = producer._rt
    try:
        producer.begin_transaction()
        for i in range(3000):
            if i == 1500:
                name = "main" if victim == "main" else f"toppar/{unique_topic}/0"
                os.kill(rt.host_pid(wait_until(lambda name=name: rt.host_of(name), 10, f"{name} to run")),
                        signal.SIGKILL)
            try:
                producer.produce(unique_topic, b"doomed-%d" % i, partition=i % PARTITIONS)
            except KafkaException as exc:  # the transaction already failed: produce() is refused
                assert exc.args[0].code() == KafkaError._STATE, exc
                break
            producer.poll(0)
        with pytest.raises(KafkaException) as failed:
            producer.commit_transaction(30)
        assert failed.value.args[0].txn_requires_abort(), failed.value.args[0]
        assert not failed.value.args[0].fatal(), failed.value.args[0]
        started = time.monotonic()
        producer.abort_transaction(30)
        abort_s = time.monotonic() - started
        producer.begin_transaction()
        for i in range(300):
            producer.produce(unique_topic, b"kept-%d" % i, partition=i % PARTITIONS)
        producer.commit_transaction(30)
    finally:
        producer.close(timeout=5)
    got = outcomes(mock_cluster.bootstrap, unique_topic)
    doomed = [err for value, err in reports if value.startswith(b"doomed")]
    record_row({"kind": "producer", "config": "transactional", "victim": f"{victim} host (mid-transaction)",
                "sent": len(reports), "acked": len(got["commit"]), "lost": "-", "duplicated": "-",
                "failed": sum(err is not None for err in doomed), "unresolved": "-", "skips": "-", "repeats": "-",
                "stall_s": f"abort {abort_s:.2f}"})
    assert sorted(got["commit"]) == sorted(b"kept-%d" % i for i in range(300)), \
        f"{len(got['commit'])} committed, {sum(v.startswith(b'doomed') for v in got['commit'])} of the failed one"
    # the failed transaction's data is aborted, or (main's kill: the mock gives the restarted main a new producer id
    # and does not end the dead one's transaction) left open, which a real broker aborts at its timeout
    assert all(v.startswith(b"doomed") for v in got["abort"] + got["open"]) and not got["plain"], got
    assert abort_s < 30
    # every message has its report: the aborted transaction's as failures, the committed one's as delivered
    kept = [err for value, err in reports if value.startswith(b"kept")]
    assert len(kept) == 300 and all(err is None for err in kept)


def test_toppar_host_crash_between_transactions_does_not_fail_the_next(mock_cluster, unique_topic):
    """A toppar host that dies between two transactions loses only sequences of an ended transaction: the epoch is
    bumped before the next one, which commits. (The restarted toppar used to ask for that bump itself, when it
    first ran inside the next transaction, and so failed it.)"""
    producer, reports = transactional_producer(mock_cluster, unique_topic)
    rt = producer._rt
    try:
        for round_ in range(2):
            producer.begin_transaction()
            for i in range(300):
                producer.produce(unique_topic, b"r%d-%d" % (round_, i), partition=i % PARTITIONS)
            producer.commit_transaction(30)
            if round_ == 0:
                host = wait_until(lambda: rt.host_of(f"toppar/{unique_topic}/0"), 10, "toppar/0 to run")
                pid = rt.host_pid(host)
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda h=host, p=pid: rt.host_pid(h) not in (None, p) and rt.host_ready(h), 20,
                           "the toppar host to restart")
    finally:
        producer.close(timeout=5)
    got = outcomes(mock_cluster.bootstrap, unique_topic)
    expected = sorted(b"r%d-%d" % (r, i) for r in range(2) for i in range(300))
    assert sorted(got["commit"]) == expected and not got["abort"] and not got["open"], got
    assert len(reports) == 600 and all(err is None for _value, err in reports), \
        [err for _value, err in reports if err is not None][:3]


# ---- SIGSTOP: a host that stops answering for 10 s -----------------------------------------------------------

STOP_S = 10.0
STOP_RUN_S = 13.5       # the steady run: the stop starts 1.5 s in (what follows the SIGCONT runs on in flush)
STOP_RATE = 800         # messages per second, produced and consumed


def test_sigstop_of_a_host_for_10_s_is_only_a_pause(mock_cluster, unique_topic):
    """SIGSTOP for 10 s, then SIGCONT, of each kind of host while a producer (idempotent) writes at a steady pace
    and a consumer (assign()) reads what it writes: the main host of both clients together, then later their
    toppar hosts (partition 0's).
    Nothing times out at librdkafka's defaults (message.timeout.ms 300 s, request.timeout.ms 30 s,
    socket.timeout.ms 60 s), so all the app may see is a pause: no error, nothing lost, duplicated, skipped or
    repeated, and delivery / consumption resume within the stall limit of the SIGCONT."""
    ptopic = ctopic = unique_topic
    create_topic(mock_cluster, ptopic)
    run = ProducerRun()
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, "enable.idempotence": True,
                         "kqactors.hosts": 2, "linger.ms": 5, "on_delivery": run})
    consumer = Consumer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 2, "group.id": ctopic,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "queued.min.messages": 300, "queued.max.messages.kbytes": 64})
    consumer.assign([TopicPartition(ctopic, p, 0) for p in range(PARTITIONS)])
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    seen_times: list[tuple[float, int]] = []  # (when, partition) of every record consume() returned
    errors: list[object] = []
    stops: list[tuple[str, float, float]] = []  # (victim, SIGSTOP time, SIGCONT time)
    sent = [0] * PARTITIONS

    def pids(victim: str) -> list[int]:
        names = ["main", "main"] if victim == "main" else [f"toppar/{ptopic}/0", f"ctoppar/{ctopic}/0"]
        return [client._rt.host_pid(wait_until(lambda c=client, n=name: c._rt.host_of(n), 10, f"{name} to run"))
                for client, name in zip((producer, consumer), names, strict=True)]

    def consume(timeout: float) -> None:
        for msg in consumer.consume(500, timeout):
            if msg.error() is not None:
                errors.append(msg.error())
                continue
            partition, seq = parse(msg.value())
            seen[partition].append(seq)
            seen_times.append((time.monotonic(), partition))

    try:
        for victim, at in (("main", 1.5), ("toppar", 1.5)):
            start = time.monotonic()
            stopped: list[int] = []
            stop_time = 0.0
            produced = 0
            while time.monotonic() - start < STOP_RUN_S:
                now = time.monotonic()
                if not stop_time and now - start >= at:
                    stopped = pids(victim)
                    for pid in stopped:
                        os.kill(pid, signal.SIGSTOP)
                    stop_time = time.monotonic()
                if stopped and now - stop_time >= STOP_S:
                    for pid in stopped:
                        os.kill(pid, signal.SIGCONT)
                    stops.append((victim, stop_time, time.monotonic()))
                    stopped = []
                while produced < (now - start) * STOP_RATE:
                    partition = produced % PARTITIONS
                    producer.produce(ptopic, numbered(partition, sent[partition]), partition=partition)
                    sent[partition] += 1
                    produced += 1
                producer.poll(0)
                consume(0)
                time.sleep(0.01)
            assert not stopped
        assert producer.flush(30) == 0
        acked = sum(len(s) for s in run.acked.values())
        deadline = time.monotonic() + 30
        while sum(len(v) for v in seen.values()) < acked and time.monotonic() < deadline:
            consume(0.2)
    finally:
        producer.close(timeout=5)
        consumer.close()
    counts = check_log(mock_cluster.bootstrap, ptopic, run, sent)
    for victim, stop_time, cont_time in stops:
        after = [t for t in run.ok_times if t >= cont_time]
        resumed = round(after[0] - cont_time, 2) if after else float("inf")
        consumed_after = [t for t, p in seen_times if t >= cont_time and p == 0]
        consumer_resumed = round(consumed_after[0] - cont_time, 2) if consumed_after else float("inf")
        record_row({"kind": "producer", "config": "idempotent", "victim": f"{victim} host (SIGSTOP {STOP_S:.0f} s)",
                    "sent": sum(sent), **counts, "skips": "-", "repeats": "-",
                    "stall_s": f"{round(stall_after(run.ok_times, stop_time), 2)} (resumed {resumed})"})
        record_row({"kind": "consumer", "config": "assign", "victim": f"{victim} host (SIGSTOP {STOP_S:.0f} s)",
                    "sent": "-", "acked": "-", "lost": "-", "duplicated": "-", "failed": len(errors),
                    "unresolved": "-", "skips": "-", "repeats": "-",
                    "stall_s": f"(resumed {consumer_resumed})"})
        assert resumed < STALL_LIMIT_S and consumer_resumed < STALL_LIMIT_S, (victim, resumed, consumer_resumed)
    assert counts["failed"] == 0 and counts["lost"] == 0 and counts["duplicated"] == 0, (counts, run.failed[:3])
    assert counts["unresolved"] == 0, counts
    assert not errors, errors[:3]
    for partition in range(PARTITIONS):  # what consume() returned: in order, each record once, all of them
        assert seen[partition] == list(range(sent[partition])), f"partition {partition}: skipped or repeated"
