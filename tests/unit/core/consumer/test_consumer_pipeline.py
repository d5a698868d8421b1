"""Runs in: pytest. The pure fetch pipeline end to end: planner → slice → decoder → app batch → positions and
credit, first against synthetic responses (seek makes in-flight data stale), then against a real Tansu
broker (``tansu`` fixture): batches produced with kqactors.records are fetched through the planner's own
requests, decoded, and a seek into the middle of a compressed batch starts exactly at the sought offset."""

from __future__ import annotations

import pytest

from kqactors.core.consumer.decoder import SliceDecoder
from kqactors.core.consumer.packing import MessageBatch
from kqactors.core.consumer.planner import FetchPlanner
from kqactors.core.consumer.position import PositionTable, VersionGate
from kqactors.core.consumer.prefetch import CreditReturner, PrefetchCredit
from kqactors.core.consumer.settings import FetchSettings
from kqactors.errors import KafkaError
from kqactors.protocol.generated.fetch import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from kqactors.records import ZSTD, build_batch, build_control_batch

TS = 1_700_000_000_000


def batch(base: int, count: int, codec: int = 0) -> bytes:
    messages = [(TS + i, None, b"v%d" % (base + i), None) for i in range(count)]
    return bytes(build_batch(messages, base_offset=base, codec=codec))


def response_for(topic: str, records: bytes, hwm: int, aborted=()) -> FetchResponse:
    part = PartitionData(partition_index=0, high_watermark=hwm, last_stable_offset=hwm, records=records,
                         aborted_transactions=[AbortedTransaction(producer_id=pid, first_offset=first)
                                               for pid, first in aborted])
    response = FetchResponse(responses=[FetchableTopicResponse(topic=topic, partitions=[part])])
    return FetchResponse.decode(response.encode(11), 11)


class Pipeline:
    """The three sides wired by hand the way the actors will wire them with ops."""

    def __init__(self, settings: FetchSettings, topic: str = "t") -> None:
        self.topic = topic
        self.positions = PositionTable()
        self.planner = FetchPlanner(settings)
        self.decoder = SliceDecoder(settings)
        self.gate = VersionGate()
        self.credit = PrefetchCredit(1000, 1 << 20)
        self.returner = CreditReturner()
        self.returner.set_limits((topic, 0), 1000, 1 << 20)
        self.app_queue: list[MessageBatch] = []

    def assign(self, offset: int) -> None:
        [part] = self.positions.assign([(self.topic, 0, offset)])
        self.gate.advance(part.version)
        self.credit.reset(part.version)
        self.planner.start(self.topic, 0, offset, part.version)

    def seek(self, offset: int) -> None:
        version = self.positions.seek(self.topic, 0, offset)
        self.gate.advance(version)
        self.credit.reset(version)
        self.planner.seek(self.topic, 0, offset, version)

    def deliver(self, outcome) -> None:
        for sl in outcome.slices:
            if not self.gate.accepts(sl.version):
                continue
            decoded = self.decoder.decode(sl)
            if decoded.is_empty:
                continue
            flow = self.credit.delivered(decoded.messages, decoded.nbytes)
            if flow is not None:
                self.planner.set_flow(self.topic, 0, flow)
            self.app_queue.append(MessageBatch(self.topic, 0, decoded.frame, decoded.version))

    def poll(self) -> list:
        out = []
        while self.app_queue:
            batch = self.app_queue.pop(0)
            if not self.positions.accepts(self.topic, 0, batch.version):
                continue
            messages, count, nbytes = batch.take()
            for message in messages:
                if message.error() is None:
                    self.positions.consumed(self.topic, 0, message.offset(), message.leader_epoch())
            if batch.skipped is not None and batch.skipped[0] >= self.positions.position(self.topic, 0)[0]:
                self.positions.consumed(self.topic, 0, *batch.skipped)  # as Consumer._take does
            out += messages
            back = self.returner.consumed((self.topic, 0), batch.version, count, nbytes)
            if back is not None:
                flow = self.credit.credited(*back)
                if flow is not None:
                    self.planner.set_flow(self.topic, 0, flow)
        return out


def test_seek_while_a_fetch_is_in_flight_never_delivers_the_old_data() -> None:
    pipe = Pipeline(FetchSettings(enable_partition_eof=True))
    pipe.assign(0)
    plan = pipe.planner.build()
    pipe.seek(5)  # the app seeks while the fetch for offset 0 is on the wire
    pipe.deliver(pipe.planner.handle_response(plan, response_for("t", batch(0, 5), hwm=10)))
    assert pipe.poll() == []
    plan = pipe.planner.build()
    assert plan.partitions[("t", 0)][1] == 5
    pipe.deliver(pipe.planner.handle_response(plan, response_for("t", batch(5, 5, ZSTD), hwm=10)))
    messages = pipe.poll()
    assert [m.offset() for m in messages] == [5, 6, 7, 8, 9, 10]
    assert messages[-1].error() == KafkaError._PARTITION_EOF
    assert pipe.positions.position("t", 0) == (10, -1)


def test_data_queued_in_the_app_before_a_seek_is_dropped_there() -> None:
    pipe = Pipeline(FetchSettings())
    pipe.assign(0)
    pipe.deliver(pipe.planner.handle_response(pipe.planner.build(), response_for("t", batch(0, 3), hwm=3)))
    pipe.seek(1)
    assert pipe.poll() == []
    pipe.deliver(pipe.planner.handle_response(pipe.planner.build(), response_for("t", batch(0, 3), hwm=3)))
    assert [m.offset() for m in pipe.poll()] == [1, 2]


def test_flow_closes_when_the_app_does_not_consume_and_reopens_when_it_does() -> None:
    pipe = Pipeline(FetchSettings())
    pipe.credit = PrefetchCredit(4, 1 << 20)
    pipe.returner.set_limits(("t", 0), 4, 1 << 20)
    pipe.assign(0)
    pipe.deliver(pipe.planner.handle_response(pipe.planner.build(), response_for("t", batch(0, 5), hwm=20)))
    assert pipe.planner.build() is None  # 5 messages outstanding >= 4: no more fetching
    assert len(pipe.poll()) == 5
    assert pipe.planner.build() is not None


def test_position_and_stored_offset_move_past_trailing_transaction_markers() -> None:
    pipe = Pipeline(FetchSettings(read_committed=True))
    pipe.assign(0)
    txn = dict(producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)
    records = (bytes(build_batch([(TS, None, b"c0", None), (TS, None, b"c1", None)], base_offset=0, **txn))
               + bytes(build_control_batch(True, producer_id=8, producer_epoch=0, base_offset=2))
               + bytes(build_batch([(TS, None, b"a3", None)], base_offset=3, **txn)))
    pipe.deliver(pipe.planner.handle_response(pipe.planner.build(),
                                              response_for("t", records, hwm=5, aborted=[(8, 3)])))
    assert [m.value() for m in pipe.poll()] == [b"c0", b"c1"]
    assert pipe.positions.position("t", 0) == (4, -1)  # past the commit marker and the aborted record
    # The abort marker alone (the mock cluster answers one batch per Fetch): no message, the position moves.
    marker = bytes(build_control_batch(False, producer_id=8, producer_epoch=0, base_offset=4))
    pipe.deliver(pipe.planner.handle_response(pipe.planner.build(),
                                              response_for("t", marker, hwm=5, aborted=[(8, 3)])))
    assert pipe.poll() == []
    assert pipe.positions.position("t", 0) == (5, -1)
    assert pipe.positions.uncommitted() == [("t", 0, 5, -1, None)]


@pytest.mark.integration
def test_fetch_through_the_planner_from_tansu(tansu, unique_topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from kqactors.protocol.blocking import BlockingConnection
    from kqactors.protocol.generated.produce import PartitionProduceData, ProduceRequest, TopicProduceData

    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for future in admin.create_topics([NewTopic(unique_topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=15)
    pipe = Pipeline(FetchSettings(fetch_wait_max_ms=100, enable_partition_eof=True), unique_topic)
    with BlockingConnection.from_bootstrap(tansu.bootstrap) as conn:
        for records in (batch(0, 4), batch(0, 6, ZSTD), batch(0, 3)):
            produce = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(
                name=unique_topic, partition_data=[PartitionProduceData(index=0, records=records)])])
            [result] = conn.request_at(0, 3, produce).responses[0].partition_responses
            assert result.error_code == 0

        def fetch_until_eof() -> list:
            got = []
            for _ in range(10):
                plan = pipe.planner.build()
                response = conn.request_at(1, 11, plan.request)
                outcome = pipe.planner.handle_response(plan, response)
                assert outcome.errors == [] and outcome.resets == []
                pipe.deliver(outcome)
                got += pipe.poll()
                if got and got[-1].error() == KafkaError._PARTITION_EOF:
                    return got
            raise AssertionError(f"no EOF after 10 fetches: {got}")

        pipe.assign(0)
        messages = fetch_until_eof()
        assert [m.offset() for m in messages] == list(range(14))
        assert [m.value() for m in messages[:13]] == [b"v%d" % i for i in (*range(4), *range(6), *range(3))]
        pipe.seek(6)  # inside the compressed batch at offsets 4..9
        messages = fetch_until_eof()
        assert [m.offset() for m in messages] == list(range(6, 14))
        assert pipe.positions.position(unique_topic, 0)[0] == 13
