"""The transactional producer end to end: kqactors' Producer with transactional.id against the librdkafka mock
cluster (full transaction support, faults injected) and Tansu (commit and abort paths, real fencing).

Results are checked in the log itself (test_transactions_log.read_log): neither broker lists aborted
transactions in Fetch responses, so a read_committed consumer would deliver aborted data too; each batch is
resolved by its producer id/epoch against the COMMIT/ABORT control records that follow it.

What the brokers do (probed with confluent-kafka as well): the mock cluster does not fence an older producer
when a newer one with the same transactional.id initialises (each InitProducerId gets a new producer id), and
neither broker enforces transaction.timeout.ms; Tansu fences (Produce answers PRODUCER_FENCED). Fencing is
therefore tested on Tansu, and with injected errors on the mock.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from integration_helpers import make_topic
from test_transactions_log import ABORT, COMMIT, OPEN, PLAIN, markers, read_log, values_by_outcome

from kqactors import Consumer, Producer
from kqactors.client.consumer.group import GroupMetadata
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PARTITIONS = 3
API = {"AddPartitionsToTxn": 24, "EndTxn": 26, "Produce": 0, "InitProducerId": 22, "AddOffsetsToTxn": 25,
       "TxnOffsetCommit": 28}


class Reports:
    def __init__(self) -> None:
        self.items: list[tuple[KafkaError | None, bytes]] = []
        self.lock = threading.Lock()

    def __call__(self, err, msg) -> None:
        with self.lock:
            self.items.append((err, msg.value()))

    def errors(self) -> list[KafkaError]:
        return [err for err, _ in self.items if err is not None]

    def delivered(self) -> list[bytes]:
        return [value for err, value in self.items if err is None]


def txn_producer(bootstrap: str, reports: Reports | None = None, txn_id: str | None = None, **conf) -> Producer:
    config = {"bootstrap.servers": bootstrap, "transactional.id": txn_id or f"tx-{uuid.uuid4().hex[:10]}",
              "linger.ms": 5, "kqactors.hosts": 1, **conf}
    if reports is not None:
        config["on_delivery"] = reports
    return Producer(config)


def produce(producer: Producer, topic: str, label: str, count: int) -> list[bytes]:
    values = [b"%s-%d" % (label.encode(), i) for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    return values


def raised(call, *args) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        call(*args)
    return info.value.args[0]


# ---- commit and abort -----------------------------------------------------------------------------------------

def test_commit_abort_commit_each_value_once_with_its_outcome(cluster, unique_topic):
    make_topic(cluster, unique_topic, PARTITIONS)
    reports = Reports()
    with txn_producer(cluster.bootstrap, reports) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        first = produce(producer, unique_topic, "first", 30)
        producer.commit_transaction(30)
        producer.begin_transaction()
        aborted = produce(producer, unique_topic, "aborted", 30)
        assert producer.flush(30) == 0  # the aborted data reaches the log before the abort
        producer.abort_transaction(30)
        producer.begin_transaction()
        last = produce(producer, unique_topic, "last", 30)
        producer.commit_transaction(30)
    assert not reports.errors()
    assert sorted(reports.delivered()) == sorted(first + aborted + last)
    got = values_by_outcome(cluster.bootstrap, unique_topic)
    assert sorted(got[COMMIT]) == sorted(first + last)
    assert sorted(got[ABORT]) == sorted(aborted)
    assert not got[OPEN] and not got[PLAIN]
    controls = markers(cluster.bootstrap, unique_topic)
    assert [m.control for m in controls].count(COMMIT) == 2 * PARTITIONS
    assert [m.control for m in controls].count(ABORT) == PARTITIONS
    assert len({m.producer_id for m in controls}) == 1


def test_a_read_committed_confluent_kafka_consumer_sees_the_data_only_after_the_commit(tansu, unique_topic):
    """Tansu keeps the last stable offset: an open transaction's data (flushed to the log) stays invisible to a
    read_committed reader until the commit, so the batches are transactional in the broker's eyes too."""
    ck = pytest.importorskip("confluent_kafka")
    make_topic(tansu, unique_topic, 1)
    consumer = ck.Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:8]}",
                            "isolation.level": "read_committed", "enable.partition.eof": True,
                            "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition(unique_topic, 0, 0)])

    def read(seconds: float) -> list[bytes]:
        out, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
        return out

    try:
        with txn_producer(tansu.bootstrap) as producer:
            producer.init_transactions(30)
            producer.begin_transaction()
            values = [b"v-%d" % i for i in range(5)]
            for value in values:
                producer.produce(unique_topic, value, partition=0)
            assert producer.flush(30) == 0
            assert read(2.0) == []  # in the log, not committed
            producer.commit_transaction(30)
            got = read(3.0)
        assert got == values
    finally:
        consumer.close()


def test_a_transaction_without_messages_commits_and_aborts_without_the_coordinator(mock_cluster, unique_topic):
    with txn_producer(mock_cluster.bootstrap) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.commit_transaction(10)
        producer.begin_transaction()
        producer.abort_transaction(10)


def test_abort_purges_queued_messages_and_waits_for_in_flight_ones(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, PARTITIONS)
    reports = Reports()
    with txn_producer(fresh_cluster.bootstrap, reports, **{"linger.ms": 30000}) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        queued = produce(producer, unique_topic, "queued", 9)
        producer.abort_transaction(30)
        assert len(producer) == 0
        assert sorted(v for e, v in reports.items if e == KafkaError._PURGE_QUEUE) == sorted(queued)
    reports.items.clear()
    with txn_producer(fresh_cluster.bootstrap, reports, **{"linger.ms": 0}) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        warm = produce(producer, unique_topic, "warm", 3)  # leaders known, toppars running
        producer.commit_transaction(30)
        for broker in (1, 2, 3):
            fresh_cluster.broker_set_rtt(broker, 2000)
        reports.items.clear()
        producer.begin_transaction()
        in_flight = [b"in-flight-%d" % i for i in range(3)]
        for value in in_flight:  # one partition: one AddPartitionsToTxn
            producer.produce(unique_topic, value, partition=1)
        time.sleep(3)  # added to the transaction after 2 s, then sent: answered after 4 s
        producer.abort_transaction(30)
        assert sorted(reports.delivered()) == sorted(in_flight)  # waited for, not purged
    got = values_by_outcome(fresh_cluster.bootstrap, unique_topic)
    assert sorted(got[ABORT]) == sorted(in_flight) and sorted(got[COMMIT]) == sorted(warm)


# ---- the order of calls -------------------------------------------------------------------------------------------

def test_calls_out_of_order_fail_with_state_errors(mock_cluster, unique_topic):
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 0}) as plain:
        error = raised(plain.init_transactions, 5)
        assert error.code() == KafkaError._NOT_CONFIGURED
        assert "transactional.id" in error.str()
    with txn_producer(mock_cluster.bootstrap) as producer:
        error = raised(producer.produce, unique_topic, b"x")
        assert error.code() == KafkaError._STATE and error.str() == "Producing not allowed in transactional state Init"
        error = raised(producer.begin_transaction)
        assert (error.code(), error.str()) == (KafkaError._STATE, "Operation not valid in state Init")
        assert not (error.fatal() or error.retriable() or error.txn_requires_abort())
        producer.init_transactions(30)
        assert raised(producer.init_transactions, 5).str() == "Operation not valid in state Ready"
        assert raised(producer.commit_transaction, 5).str() == "Operation not valid in state Ready"
        assert raised(producer.abort_transaction, 5).str() == "Operation not valid in state Ready"
        assert raised(producer.produce, unique_topic, b"x").str() == \
            "Producing not allowed in transactional state Ready"
        producer.begin_transaction()
        assert raised(producer.begin_transaction).str() == "Operation not valid in state InTransaction"
        producer.produce(unique_topic, b"in")
        producer.commit_transaction(30)
        assert raised(producer.produce, unique_topic, b"x").str() == \
            "Producing not allowed in transactional state Ready"
        error = raised(producer.send_offsets_to_transaction, [TopicPartition(unique_topic, 0, 1)],
                       GroupMetadata("g", 1, "member-1", None), 5)
        assert error.str() == "Operation not valid in state Ready"


def test_call_order_errors_are_confluent_kafkas(mock_cluster, unique_topic):
    """The same wrong calls on confluent-kafka and kqactors: the same codes, strings and error classes (produce()'s
    string differs: confluent-kafka says "Unable to produce message: Local: Erroneous state", kqactors keeps
    librdkafka's own "Producing not allowed in transactional state <State>")."""
    ck = pytest.importorskip("confluent_kafka")

    def outcomes(producer) -> list:
        out = []

        def attempt(call, *args):
            try:
                call(*args)
                out.append("ok")
            except Exception as exc:  # noqa: BLE001 - both clients' KafkaException
                err = exc.args[0]
                text = err.str() if call.__name__ != "produce" else ""
                out.append((err.code(), text, err.fatal(), err.retriable(), err.txn_requires_abort()))

        attempt(producer.produce, unique_topic, b"x")
        attempt(producer.begin_transaction)
        attempt(producer.commit_transaction, 1)
        attempt(producer.init_transactions, 30)
        attempt(producer.init_transactions, 1)
        attempt(producer.produce, unique_topic, b"x")
        attempt(producer.abort_transaction, 1)
        attempt(producer.begin_transaction)
        attempt(producer.begin_transaction)
        attempt(producer.abort_transaction, 10)
        return out

    config = {"bootstrap.servers": mock_cluster.bootstrap, "transactional.id": f"o-{uuid.uuid4().hex[:8]}"}
    theirs = outcomes(ck.Producer(config))
    with Producer({**config, "kqactors.hosts": 0}) as producer:
        mine = outcomes(producer)
    assert mine == theirs


# ---- fencing ------------------------------------------------------------------------------------------------------

def test_a_second_producer_with_the_same_transactional_id_fences_the_first(tansu, unique_topic):
    make_topic(tansu, unique_topic, PARTITIONS)
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"
    old_reports = Reports()
    with txn_producer(tansu.bootstrap, old_reports, txn_id) as old:
        old.init_transactions(30)
        old.begin_transaction()
        produce(old, unique_topic, "old", 3)
        assert old.flush(30) == 0
        with txn_producer(tansu.bootstrap, None, txn_id) as new:
            new.init_transactions(30)
            produce(old, unique_topic, "old-after", 3)
            error = raised(old.commit_transaction, 30)
            assert error.code() == KafkaError._FENCED and error.fatal()
            assert not error.txn_requires_abort() and not error.retriable()
            assert raised(old.abort_transaction, 5).fatal()
            assert raised(old.begin_transaction).fatal()
            assert raised(old.produce, unique_topic, b"x").code() == KafkaError._FATAL
            new.begin_transaction()
            mine = produce(new, unique_topic, "new", 3)
            new.commit_transaction(30)
    assert set(mine) <= set(values_by_outcome(tansu.bootstrap, unique_topic)[COMMIT])


@pytest.mark.parametrize("code", [KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.PRODUCER_FENCED])
def test_fenced_at_commit_is_fatal(fresh_cluster, unique_topic, code):
    fresh_cluster.create_topic(unique_topic, PARTITIONS)
    with txn_producer(fresh_cluster.bootstrap) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        produce(producer, unique_topic, "x", 3)
        fresh_cluster.push_request_errors(API["EndTxn"], [code])
        error = raised(producer.commit_transaction, 30)
        assert error.code() == KafkaError._FENCED and error.fatal()
        assert raised(producer.begin_transaction).code() == KafkaError._FENCED


def test_fenced_on_produce_is_fatal(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 1)
    reports = Reports()
    with txn_producer(fresh_cluster.bootstrap, reports) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        fresh_cluster.push_request_errors(API["Produce"], [KafkaError.INVALID_PRODUCER_EPOCH])
        producer.produce(unique_topic, b"x", partition=0)
        error = raised(producer.commit_transaction, 30)
        assert error.code() == KafkaError._FENCED and error.fatal()
    assert [e.code() for e in reports.errors()] == [KafkaError.INVALID_PRODUCER_EPOCH]


# ---- failures that abort the transaction ------------------------------------------------------------------------

def test_a_produce_error_makes_the_transaction_abortable_and_the_next_one_commits(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, PARTITIONS)
    reports = Reports()
    with txn_producer(fresh_cluster.bootstrap, reports) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        fresh_cluster.push_request_errors(API["Produce"], [KafkaError.TOPIC_AUTHORIZATION_FAILED])
        failed = produce(producer, unique_topic, "failed", 9)
        error = raised(producer.commit_transaction, 30)
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert error.txn_requires_abort() and not error.fatal() and not error.retriable()
        assert raised(producer.produce, unique_topic, b"x").code() == KafkaError._STATE
        assert raised(producer.commit_transaction, 5).txn_requires_abort()  # still: abort first
        producer.abort_transaction(30)
        producer.begin_transaction()
        good = produce(producer, unique_topic, "good", 9)
        producer.commit_transaction(30)
    assert {e.code() for e in reports.errors()} <= {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._PURGE_QUEUE}
    got = values_by_outcome(fresh_cluster.bootstrap, unique_topic)
    assert sorted(got[COMMIT]) == sorted(good)
    assert set(got[ABORT]) <= set(failed) and not got[OPEN]
    # the failed batch left a sequence gap: the abort bumped the epoch (KIP-360) before the next transaction
    epochs = {b.epoch for batches in read_log(fresh_cluster.bootstrap, unique_topic).values()
              for b in batches if b.control == COMMIT}
    data_epochs = {b.epoch for batches in read_log(fresh_cluster.bootstrap, unique_topic).values()
                   for b in batches if b.control is None and b.values and b.values[0].startswith(b"failed")}
    assert epochs and data_epochs and min(epochs) > max(data_epochs)


def test_messages_that_outlive_the_transaction_timeout_fail_it(fresh_cluster, unique_topic):
    """transaction.timeout.ms bounds message.timeout.ms: messages a broker cannot take in time fail, the commit
    is refused (abortable), the abort succeeds and the producer goes on once the broker is back."""
    fresh_cluster.create_topic(unique_topic, 1)
    txn_id = f"timeout-{uuid.uuid4().hex[:8]}"
    fresh_cluster.coordinator_set("transaction", txn_id, 1)
    fresh_cluster.partition_set_leader(unique_topic, 0, 2)
    reports = Reports()
    conf = {"transaction.timeout.ms": 1500, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100}
    with txn_producer(fresh_cluster.bootstrap, reports, txn_id, **conf) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        first = produce(producer, unique_topic, "first", 1)  # the partition's leader is known from now on
        producer.commit_transaction(30)
        reports.items.clear()
        producer.begin_transaction()
        fresh_cluster.broker_set_down(2)
        started = time.monotonic()
        produce(producer, unique_topic, "late", 1)
        error = raised(producer.commit_transaction, 30)
        assert time.monotonic() - started < 10
        assert error.txn_requires_abort() and not error.fatal()
        assert [e.code() for e in reports.errors()] == [KafkaError._MSG_TIMED_OUT]
        producer.abort_transaction(30)
        fresh_cluster.broker_set_up(2)
        producer.begin_transaction()
        good = produce(producer, unique_topic, "good", 1)
        producer.commit_transaction(30)
    assert values_by_outcome(fresh_cluster.bootstrap, unique_topic)[COMMIT] == first + good


def test_retriable_coordinator_errors_are_retried(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, PARTITIONS)
    with txn_producer(fresh_cluster.bootstrap) as producer:
        fresh_cluster.push_request_errors(API["InitProducerId"], [KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                                                  KafkaError.NOT_COORDINATOR])
        producer.init_transactions(30)
        producer.begin_transaction()
        fresh_cluster.push_request_errors(API["AddPartitionsToTxn"], [KafkaError.CONCURRENT_TRANSACTIONS,
                                                                      KafkaError.COORDINATOR_NOT_AVAILABLE])
        values = produce(producer, unique_topic, "v", 6)
        fresh_cluster.push_request_errors(API["EndTxn"], [KafkaError.CONCURRENT_TRANSACTIONS,
                                                          KafkaError.NOT_COORDINATOR])
        producer.commit_transaction(30)
    assert sorted(values_by_outcome(fresh_cluster.bootstrap, unique_topic)[COMMIT]) == sorted(values)


def test_a_timed_out_commit_resumes_when_called_again(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, PARTITIONS)
    with txn_producer(fresh_cluster.bootstrap) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        values = produce(producer, unique_topic, "v", 6)
        assert producer.flush(30) == 0
        fresh_cluster.push_request_errors(API["EndTxn"], [KafkaError.CONCURRENT_TRANSACTIONS] * 30)
        error = raised(producer.commit_transaction, 0.2)
        assert error.code() == KafkaError._TIMED_OUT and error.retriable()
        assert raised(producer.abort_transaction, 1).code() == KafkaError._CONFLICT  # the commit is in progress
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.commit_transaction(30)
    assert sorted(values_by_outcome(fresh_cluster.bootstrap, unique_topic)[COMMIT]) == sorted(values)


# ---- offsets in the transaction -----------------------------------------------------------------------------------

def test_send_offsets_to_transaction_commits_the_group_offsets_with_the_transaction(cluster, unique_topic):
    """The consumer's consumer_group_metadata() (group, generation, member id) goes with the offsets (KIP-447).
    Tansu stores transactional offsets at commit; the mock cluster checks TxnOffsetCommit but stores nothing."""
    ck = pytest.importorskip("confluent_kafka")
    source = f"{unique_topic}-in"
    make_topic(cluster, source, 1)
    make_topic(cluster, unique_topic, PARTITIONS)
    feeder = ck.Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        feeder.produce(source, b"in-%d" % i, partition=0)
    assert feeder.flush(15) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "kqactors.hosts": 0,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        consumer.subscribe([source])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 10 and time.monotonic() < deadline:
            seen += [m for m in consumer.consume(10, 0.5) if m.error() is None]
        assert len(seen) == 10
        metadata = consumer.consumer_group_metadata()
        assert metadata.group_id == group and metadata.generation_id >= 0 and metadata.member_id
        with txn_producer(cluster.bootstrap) as producer:
            producer.init_transactions(30)
            producer.begin_transaction()
            produce(producer, unique_topic, "out", 3)
            producer.send_offsets_to_transaction([TopicPartition(source, 0, 7)], metadata, 30)
            producer.commit_transaction(30)
            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(source, 0, 10)], metadata, 30)
            producer.abort_transaction(30)  # these offsets are not committed
            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(source, 0, -1001)], metadata, 30)  # nothing
            producer.commit_transaction(30)
        if hasattr(cluster, "create_topic"):
            return  # the mock keeps no transactional offsets
        (committed,) = consumer.committed([TopicPartition(source, 0)], 10)
        assert committed.offset == 7
    finally:
        consumer.close()
