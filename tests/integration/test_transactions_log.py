"""Reading a topic's log as it is, to tell committed from aborted transactional data on brokers that do not
list aborted transactions in Fetch responses (neither test broker does: see test_consumer_transactions.py), and
the reader's own check against transactions confluent-kafka writes.

``read_log`` fetches every partition from offset 0 to its high watermark under read_uncommitted (raw Fetch on a
blocking connection to each leader) and returns every record batch with its producer id, epoch, transactional
and control flags. ``resolve`` assigns each transactional data batch the outcome of the first control batch
(COMMIT or ABORT) that follows it on its partition from the same producer id, at an epoch at least its own (an
abort after a KIP-360 bump carries the bumped epoch); data without a marker yet is "open", plain data "plain".

Other transaction tests import these helpers (``from test_transactions_log import ...``).
"""

from __future__ import annotations

import time
import uuid
from typing import NamedTuple

import pytest

from kqactors.protocol.blocking import BlockingConnection
from kqactors.protocol.generated.fetch import FetchPartition, FetchRequest, FetchTopic
from kqactors.protocol.generated.metadata import MetadataRequest, MetadataRequestTopic
from kqactors.records import VALUE, decode_record_set

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

COMMIT, ABORT, OPEN, PLAIN = "commit", "abort", "open", "plain"


class LogBatch(NamedTuple):
    partition: int
    base_offset: int
    last_offset: int
    producer_id: int
    epoch: int
    transactional: bool
    control: str | None          # COMMIT / ABORT for a control batch, else None
    values: tuple[bytes | None, ...]


def _leaders(bootstrap: str, topic: str) -> tuple[dict[int, tuple[str, int]], int]:
    with BlockingConnection.from_bootstrap(bootstrap, timeout=10) as conn:
        response = conn.request("Metadata", MetadataRequest(topics=[MetadataRequestTopic(name=topic)]))
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    (meta,) = [t for t in response.topics if t.name == topic]
    assert meta.error_code == 0, f"metadata for {topic}: error {meta.error_code}"
    return {p.partition_index: brokers[p.leader_id] for p in meta.partitions}, len(meta.partitions)


def read_log(bootstrap: str, topic: str) -> dict[int, list[LogBatch]]:
    """Every batch of every partition of ``topic``, in offset order (read_uncommitted, up to the high watermark)."""
    leaders, _count = _leaders(bootstrap, topic)
    out: dict[int, list[LogBatch]] = {}
    for partition, (host, port) in sorted(leaders.items()):
        batches: list[LogBatch] = []
        offset = 0
        high_watermark: int | None = None
        with BlockingConnection(host, port, timeout=10) as conn:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (high_watermark is None or offset < high_watermark):
                # Tansu answers nothing to max_wait_ms=0; the mock answers one batch per Fetch
                request = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=64 << 20, isolation_level=0,
                                       topics=[FetchTopic(topic=topic, partitions=[FetchPartition(
                                           partition=partition, fetch_offset=offset,
                                           partition_max_bytes=32 << 20)])])
                response = conn.request("Fetch", request, version=11)  # v13+ names topics by id
                if not response.responses:
                    continue
                (part,) = response.responses[0].partitions
                assert part.error_code == 0, f"fetch {topic} [{partition}] @{offset}: error {part.error_code}"
                high_watermark = part.high_watermark
                headers = decode_record_set(bytes(part.records or b""), verify_crc=False)  # the mock: CRC 0
                for header in headers:
                    if header.last_offset < offset:
                        continue
                    control = None
                    if header.is_control:
                        control = COMMIT if header.control_type() == 1 else ABORT
                    batches.append(LogBatch(partition, header.base_offset, header.last_offset, header.producer_id,
                                            header.producer_epoch, header.is_transactional, control,
                                            tuple(r[VALUE] for r in header.records or ())))
                    offset = header.last_offset + 1
        out[partition] = batches
    return out


def resolve(log: dict[int, list[LogBatch]]) -> dict[int, list[tuple[LogBatch, str]]]:
    """Each data batch with its outcome: COMMIT, ABORT, OPEN (no marker yet) or PLAIN (not transactional)."""
    out: dict[int, list[tuple[LogBatch, str]]] = {}
    for partition, batches in log.items():
        rows = []
        for index, batch in enumerate(batches):
            if batch.control is not None:
                continue
            outcome = PLAIN
            if batch.transactional:
                outcome = OPEN
                for later in batches[index + 1:]:
                    if later.control is not None and later.producer_id == batch.producer_id \
                            and later.epoch >= batch.epoch:
                        outcome = later.control
                        break
            rows.append((batch, outcome))
        out[partition] = rows
    return out


def values_by_outcome(bootstrap: str, topic: str) -> dict[str, list[bytes]]:
    """All values of the topic grouped by outcome (in partition, offset order)."""
    grouped: dict[str, list[bytes]] = {COMMIT: [], ABORT: [], OPEN: [], PLAIN: []}
    for _partition, rows in sorted(resolve(read_log(bootstrap, topic)).items()):
        for batch, outcome in rows:
            grouped[outcome].extend(v for v in batch.values if v is not None)
    return grouped


def markers(bootstrap: str, topic: str) -> list[LogBatch]:
    return [b for batches in read_log(bootstrap, topic).values() for b in batches if b.control is not None]


# ---- the reader checked against the reference client -------------------------------------------------------

def test_reader_resolves_confluent_kafka_transactions(cluster, unique_topic):
    ck = pytest.importorskip("confluent_kafka")
    bootstrap = cluster.bootstrap
    if hasattr(cluster, "create_topic"):
        cluster.create_topic(unique_topic, 2)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"ref-{uuid.uuid4().hex[:8]}",
                            "linger.ms": 1})
    producer.init_transactions(20)
    expected: dict[str, list[bytes]] = {COMMIT: [], ABORT: []}
    for round_, outcome in enumerate([COMMIT, ABORT, COMMIT]):
        producer.begin_transaction()
        for i in range(4):
            value = b"%s-%d-%d" % (outcome.encode(), round_, i)
            producer.produce(unique_topic, value, partition=i % 2)
            expected[outcome].append(value)
        assert producer.flush(15) == 0  # the aborted data must really be in the log
        if outcome == COMMIT:
            producer.commit_transaction(15)
        else:
            producer.abort_transaction(15)
    got = values_by_outcome(bootstrap, unique_topic)
    assert sorted(got[COMMIT]) == sorted(expected[COMMIT])
    assert sorted(got[ABORT]) == sorted(expected[ABORT])
    assert not got[OPEN] and not got[PLAIN]
    assert len(markers(bootstrap, unique_topic)) == 6  # 3 transactions x 2 partitions
