"""The transaction manager's request kinds (kqactors.protocol.requests, txn:*) at every version they speak, and
the error tables the manager reads (kqactors.core.producer.txn_errors)."""

from __future__ import annotations

import pytest

from kqactors.core.producer.txn_errors import ABORTABLE, BUMP, COORDINATOR, FATAL, RETRY, classify, normalize
from kqactors.errors import KafkaError
from kqactors.protocol.generated.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from kqactors.protocol.generated.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from kqactors.protocol.generated.end_txn import EndTxnRequest, EndTxnResponse
from kqactors.protocol.generated.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kqactors.protocol.generated.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from kqactors.protocol.requests import REQUEST_KINDS

E = KafkaError


def _versions(name: str) -> range:
    kind = REQUEST_KINDS[name]
    return range(kind.min_version, kind.max_version + 1)


def _encoded(name: str, version: int, args: dict) -> bytes:
    return b"".join(bytes(part) for part in REQUEST_KINDS[name].encode(version, args, []))


@pytest.mark.parametrize("version", _versions("txn:FindCoordinator"))
def test_find_coordinator_by_key_type(version):
    request = FindCoordinatorRequest.decode(_encoded("txn:FindCoordinator", version, {"key_type": 1, "key": "tx"}),
                                            version)
    assert request.key_type == 1
    assert (request.coordinator_keys if version >= 4 else [request.key]) == ["tx"]
    if version >= 4:
        response = FindCoordinatorResponse(coordinators=[Coordinator(key="tx", node_id=2, host="h", port=9)])
    else:
        response = FindCoordinatorResponse(node_id=2, host="h", port=9)
    result = REQUEST_KINDS["txn:FindCoordinator"].decode(version, response.encode(version))
    assert result["node_id"] == 2 and result["error_code"] == 0


@pytest.mark.parametrize("version", _versions("txn:AddPartitionsToTxn"))
def test_add_partitions_to_txn(version):
    args = {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "topics": [["a", [0, 2]], ["b", [1]]]}
    request = AddPartitionsToTxnRequest.decode(_encoded("txn:AddPartitionsToTxn", version, args), version)
    assert (request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch) == ("tx", 7, 2)
    assert [(t.name, t.partitions) for t in request.v3_and_below_topics] == [("a", [0, 2]), ("b", [1])]
    response = AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[AddPartitionsToTxnTopicResult(
        name="a", results_by_partition=[AddPartitionsToTxnPartitionResult(partition_index=0),
                                        AddPartitionsToTxnPartitionResult(partition_index=2,
                                                                          partition_error_code=29)])])
    result = REQUEST_KINDS["txn:AddPartitionsToTxn"].decode(version, response.encode(version))
    assert result == {"error_code": 0, "partitions": [["a", 0, 0], ["a", 2, 29]]}


@pytest.mark.parametrize("version", _versions("txn:AddOffsetsToTxn"))
def test_add_offsets_to_txn(version):
    args = {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "group_id": "g"}
    request = AddOffsetsToTxnRequest.decode(_encoded("txn:AddOffsetsToTxn", version, args), version)
    assert (request.transactional_id, request.producer_id, request.producer_epoch, request.group_id) == \
        ("tx", 7, 2, "g")
    assert REQUEST_KINDS["txn:AddOffsetsToTxn"].decode(
        version, AddOffsetsToTxnResponse(error_code=51).encode(version)) == {"error_code": 51}


@pytest.mark.parametrize("version", _versions("txn:TxnOffsetCommit"))
def test_txn_offset_commit_carries_the_group_generation_and_member_from_v3(version):
    args = {"transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 2, "generation_id": 5,
            "member_id": "m-1", "group_instance_id": "i-1", "topics": [["in", [[0, 42, 3, "meta"], [1, 7, -1, None]]]]}
    request = TxnOffsetCommitRequest.decode(_encoded("txn:TxnOffsetCommit", version, args), version)
    if version >= 3:
        assert (request.generation_id, request.member_id, request.group_instance_id) == (5, "m-1", "i-1")
    else:
        assert (request.generation_id, request.member_id, request.group_instance_id) == (-1, "", None)
    (topic,) = request.topics
    assert [(p.partition_index, p.committed_offset) for p in topic.partitions] == [(0, 42), (1, 7)]
    assert topic.partitions[0].committed_leader_epoch == (3 if version >= 2 else -1)
    response = TxnOffsetCommitResponse(topics=[TxnOffsetCommitResponseTopic(name="in", partitions=[
        TxnOffsetCommitResponsePartition(partition_index=0, error_code=22)])])
    assert REQUEST_KINDS["txn:TxnOffsetCommit"].decode(version, response.encode(version)) == \
        {"partitions": [["in", 0, 22]]}


@pytest.mark.parametrize("version", _versions("txn:EndTxn"))
def test_end_txn(version):
    args = {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "committed": True}
    request = EndTxnRequest.decode(_encoded("txn:EndTxn", version, args), version)
    assert (request.transactional_id, request.producer_id, request.producer_epoch, request.committed) == \
        ("tx", 7, 2, True)
    result = REQUEST_KINDS["txn:EndTxn"].decode(version, EndTxnResponse(error_code=0).encode(version))
    assert result == {"error_code": 0, "producer_id": -1, "producer_epoch": -1}


def test_the_kinds_ask_for_transaction_abortable_but_not_kip_890_part_2():
    assert REQUEST_KINDS["txn:InitProducerId"].max_version == 5
    assert REQUEST_KINDS["txn:AddOffsetsToTxn"].max_version == 4
    assert REQUEST_KINDS["txn:TxnOffsetCommit"].max_version == 4
    assert REQUEST_KINDS["txn:EndTxn"].max_version == 4
    assert REQUEST_KINDS["txn:AddPartitionsToTxn"].max_version == 3  # v4+ are the brokers'


@pytest.mark.parametrize("request_name,code,actions", [
    ("FindCoordinator", E.COORDINATOR_NOT_AVAILABLE, RETRY | COORDINATOR),
    ("FindCoordinator", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, FATAL),
    ("InitProducerId", E.CONCURRENT_TRANSACTIONS, RETRY),
    ("InitProducerId", E.PRODUCER_FENCED, FATAL),
    ("InitProducerId", E._TRANSPORT, RETRY | COORDINATOR),
    ("AddPartitionsToTxn", E.CONCURRENT_TRANSACTIONS, RETRY),
    ("AddPartitionsToTxn", E.UNKNOWN_PRODUCER_ID, ABORTABLE | BUMP),
    ("AddPartitionsToTxn", E.TOPIC_AUTHORIZATION_FAILED, ABORTABLE),
    ("AddPartitionsToTxn", E.OPERATION_NOT_ATTEMPTED, ABORTABLE),
    ("AddPartitionsToTxn", E.INVALID_TXN_STATE, FATAL),
    ("AddOffsetsToTxn", E.REQUEST_TIMED_OUT, RETRY | COORDINATOR),
    ("AddOffsetsToTxn", E.GROUP_AUTHORIZATION_FAILED, ABORTABLE),
    ("TxnOffsetCommit", E.ILLEGAL_GENERATION, ABORTABLE),
    ("TxnOffsetCommit", E.NOT_COORDINATOR, RETRY | COORDINATOR),
    ("TxnOffsetCommit", E.INVALID_PRODUCER_ID_MAPPING, FATAL),
    ("EndTxn", E.TRANSACTION_ABORTABLE, ABORTABLE),
    ("EndTxn", E.INVALID_PRODUCER_EPOCH, FATAL),
    ("EndTxn", E._TIMED_OUT, RETRY | COORDINATOR),
    ("Produce", E.PRODUCER_FENCED, FATAL),
    ("Produce", E._MSG_TIMED_OUT, ABORTABLE),
    ("Produce", E.TRANSACTION_ABORTABLE, ABORTABLE),
])
def test_error_tables(request_name, code, actions):
    assert classify(request_name, code) == actions


def test_normalized_errors():
    assert normalize(E.PRODUCER_FENCED) == normalize(E.INVALID_PRODUCER_EPOCH) == E._FENCED
    assert normalize(E._TIMED_OUT_QUEUE) == E._TIMED_OUT
    assert normalize(E.TOPIC_AUTHORIZATION_FAILED) == E.TOPIC_AUTHORIZATION_FAILED
