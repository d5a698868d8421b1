"""The transaction manager (kqactors.core.producer.txn) driven without processes: API steps in, broker requests
out, responses in; librdkafka's states, call-order errors, error classes and KIP-360 bumps."""

from __future__ import annotations

import pytest

from kqactors.core.producer.txn import (
    ApiResult,
    Fatal,
    Grant,
    PurgeQueued,
    Refuse,
    SendRequest,
    SetPid,
    StateChanged,
    TxnManager,
    TxnState,
)
from kqactors.errors import KafkaError

E = KafkaError
S = TxnState
PID, EPOCH = 4000, 0
COORD = 2


class Driver:
    """A TxnManager and the actions it asked for, with helpers answering its requests."""

    def __init__(self, **kwargs) -> None:
        self.now = 1000.0
        self.txn = TxnManager("tx-1", 60000, retry_backoff_ms=100, **kwargs)
        self.actions: list = []

    def run(self, actions: list) -> list:
        self.actions += actions
        return actions

    def api(self, step: str, **args) -> list:
        return self.run(self.txn.api(step, self.now, **args))

    def requests(self, kind: str | None = None) -> list[SendRequest]:
        """Requests sent and not answered yet (oldest first)."""
        out = [a for a in self.actions if isinstance(a, SendRequest) and (kind is None or a.kind == kind)]
        return [a for a in out if a.request_id in self.txn._requests]

    def answer(self, kind: str, code: int = 0, result: dict | None = None) -> list:
        (request,) = self.requests(kind)[:1]
        return self.run(self.txn.on_response(request.request_id, code, result or {}, self.now))

    def results(self, step: str) -> list[KafkaError | None]:
        return [a.error for a in self.actions if isinstance(a, ApiResult) and a.step == step]

    def tick(self, ms: float) -> list:
        self.now += ms
        return self.run(self.txn.tick(self.now))

    def of(self, kind: type) -> list:
        return [a for a in self.actions if isinstance(a, kind)]

    # -- common paths ----------------------------------------------------------------------------------
    def init(self) -> None:
        self.api("init")
        self.answer("txn:FindCoordinator", result={"error_code": 0, "node_id": COORD})
        self.answer("txn:InitProducerId", result={"error_code": 0, "producer_id": PID, "producer_epoch": EPOCH})
        self.api("ack_init")
        assert self.results("init") == [None] and self.results("ack_init") == [None]
        assert self.txn.state is S.READY

    def begin(self) -> None:
        self.api("begin")
        assert self.results("begin")[-1] is None

    def add(self, *partitions: int, code: int = 0) -> list:
        for p in partitions:
            self.run(self.txn.add_partition("t", p, self.now))
        self.run(self.txn.register_partitions(self.now))
        return self.answer("txn:AddPartitionsToTxn", result={"error_code": 0, "partitions": [
            ["t", p, code] for p in partitions]})


def test_init_finds_the_coordinator_then_takes_a_producer_id_with_the_transactional_id():
    d = Driver()
    d.api("init")
    assert d.txn.state is S.WAIT_PID and d.results("init") == []
    (find,) = d.requests()
    assert find.kind == "txn:FindCoordinator" and find.args == {"key_type": 1, "key": "tx-1"} and find.broker is None
    d.answer("txn:FindCoordinator", result={"error_code": 0, "node_id": COORD})
    (init_pid,) = d.requests()
    assert init_pid.broker == COORD
    assert init_pid.args == {"transactional_id": "tx-1", "transaction_timeout_ms": 60000, "producer_id": -1,
                             "producer_epoch": -1}
    d.answer("txn:InitProducerId", result={"error_code": 0, "producer_id": PID, "producer_epoch": 3})
    assert d.of(SetPid) == [SetPid(PID, 3)]
    assert d.txn.state is S.READY_NOT_ACKED and d.results("init") == [None]
    d.api("ack_init")
    assert d.txn.state is S.READY


def test_init_called_again_waits_for_the_same_result_or_gets_the_one_reached_meanwhile():
    d = Driver()
    d.api("init")
    d.api("init")  # resumed while the producer id is being acquired: no second lookup
    assert len(d.requests("txn:FindCoordinator")) == 1 and d.results("init") == []
    d.answer("txn:FindCoordinator", result={"node_id": COORD})
    d.answer("txn:InitProducerId", result={"producer_id": PID, "producer_epoch": EPOCH})
    assert d.results("init") == [None]
    d.api("init")  # ReadyNotAcked: done in the background after an earlier call timed out
    assert d.results("init") == [None, None]
    d.api("ack_init")
    assert d.results("init")[-1] is None and d.txn.state is S.READY


@pytest.mark.parametrize("code", [E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E._TRANSPORT])
def test_init_retries_after_coordinator_errors_and_remembers_the_error(code):
    d = Driver()
    d.init_err_seen = None
    d.api("init")
    d.answer("txn:FindCoordinator", result={"node_id": COORD})
    d.answer("txn:InitProducerId", code=code) if code == E._TRANSPORT else \
        d.answer("txn:InitProducerId", result={"error_code": code})
    assert d.txn.init_err == code and d.txn.state is S.WAIT_PID
    assert d.txn.coordinator is None  # looked up again
    d.tick(600)
    d.answer("txn:FindCoordinator", result={"node_id": 3})
    d.answer("txn:InitProducerId", result={"producer_id": PID, "producer_epoch": EPOCH})
    assert d.results("init") == [None] and d.txn.init_err == 0


@pytest.mark.parametrize("code,expected", [(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                                           (E.PRODUCER_FENCED, E._FENCED), (E.INVALID_TRANSACTION_TIMEOUT,
                                                                             E.INVALID_TRANSACTION_TIMEOUT)])
def test_init_fatal_errors(code, expected):
    d = Driver()
    d.api("init")
    d.answer("txn:FindCoordinator", result={"node_id": COORD})
    d.answer("txn:InitProducerId", result={"error_code": code})
    (error,) = d.results("init")
    assert error.code() == expected and error.fatal() and not error.txn_requires_abort()
    assert d.txn.state is S.FATAL_ERROR and d.of(Fatal)[0].error.code() == expected
    d.api("begin")
    assert d.results("begin")[0].fatal()


@pytest.mark.parametrize("state_steps,step,state_name", [
    ([], "begin", "Init"), ([], "commit", "Init"), (["init!"], "begin_commit", "Ready"),
    (["init!"], "begin_abort", "Ready"), (["init!"], "init", "Ready"), (["init!", "begin"], "begin", "InTransaction"),
    (["init!", "begin"], "ack_commit", "InTransaction"), (["init!", "begin"], "abort", "InTransaction"),
])
def test_calls_in_the_wrong_state_are_state_errors(state_steps, step, state_name):
    d = Driver()
    for s in state_steps:
        d.init() if s == "init!" else d.api(s)
    d.api(step)
    error = d.results(step)[-1]
    assert error.code() == E._STATE and error.str() == f"Operation not valid in state {state_name}"
    assert not (error.fatal() or error.retriable() or error.txn_requires_abort())


def test_partitions_are_registered_in_batches_one_request_at_a_time_and_granted():
    d = Driver()
    d.init()
    assert d.of(Refuse) == [] and d.run(d.txn.add_partition("t", 0, d.now)) == [
        Refuse((("t", 0),), E._STATE, "Producing not allowed in transactional state Ready")]
    d.begin()
    d.run(d.txn.add_partition("t", 0, d.now))
    d.run(d.txn.add_partition("t", 1, d.now))
    d.run(d.txn.register_partitions(d.now))
    (request,) = d.requests("txn:AddPartitionsToTxn")
    assert request.args == {"transactional_id": "tx-1", "producer_id": PID, "producer_epoch": EPOCH,
                            "topics": [["t", [0, 1]]]} and request.broker == COORD
    d.run(d.txn.add_partition("u", 5, d.now))
    d.run(d.txn.register_partitions(d.now))
    assert len(d.requests("txn:AddPartitionsToTxn")) == 1  # waits for the outstanding one
    d.answer("txn:AddPartitionsToTxn", result={"partitions": [["t", 0, 0], ["t", 1, 0]]})
    assert d.of(Grant) == [Grant((("t", 0), ("t", 1)), PID, EPOCH)]
    assert d.requests("txn:AddPartitionsToTxn")[0].args["topics"] == [["u", [5]]]
    assert d.run(d.txn.add_partition("t", 1, d.now)) == [Grant((("t", 1),), PID, EPOCH)]  # already in


@pytest.mark.parametrize("code", [E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR])
def test_retriable_add_partitions_errors_retry_after_a_backoff(code):
    d = Driver()
    d.init()
    d.begin()
    d.add(0, code=code)
    assert d.of(Grant) == [] and d.requests("txn:AddPartitionsToTxn") == []
    d.tick(600)
    if code == E.NOT_COORDINATOR:
        d.answer("txn:FindCoordinator", result={"node_id": COORD})
    d.answer("txn:AddPartitionsToTxn", result={"partitions": [["t", 0, 0]]})
    assert d.of(Grant) == [Grant((("t", 0),), PID, EPOCH)] and d.txn.state is S.IN_TRANSACTION


def test_an_add_partitions_failure_fails_the_transaction_and_its_queued_data():
    d = Driver()
    d.init()
    d.begin()
    d.run(d.txn.add_partition("t", 9, d.now))  # waits behind the next request
    d.add(0, 1, code=E.TOPIC_AUTHORIZATION_FAILED)
    assert d.txn.state is S.ABORTABLE_ERROR
    assert d.of(PurgeQueued) and d.of(StateChanged)[0].state is S.ABORTABLE_ERROR
    assert {p for r in d.of(Refuse) for p in r.partitions} == {("t", 0), ("t", 1), ("t", 9)}
    d.api("begin_commit")
    error = d.results("begin_commit")[0]
    assert error.code() == E.TOPIC_AUTHORIZATION_FAILED and error.txn_requires_abort() and not error.fatal()
    d.api("begin_abort")
    d.api("abort")
    assert d.requests("txn:EndTxn") == []  # the failed request opened nothing on the coordinator
    assert d.results("abort") == [None] and d.txn.state is S.ABORT_NOT_ACKED
    d.api("ack_abort")
    assert d.txn.state is S.READY


def test_fencing_while_adding_partitions_is_fatal():
    d = Driver()
    d.init()
    d.begin()
    d.add(0, code=E.INVALID_PRODUCER_EPOCH)
    assert d.txn.state is S.FATAL_ERROR and d.of(Fatal)[0].error.code() == E._FENCED


def test_commit_sends_end_txn_only_when_the_coordinator_knows_the_transaction():
    d = Driver()
    d.init()
    d.begin()
    d.api("begin_commit")
    d.api("commit", dr_fails=0)
    assert d.results("commit") == [None] and d.requests("txn:EndTxn") == []
    d.api("ack_commit")
    d.begin()
    d.add(0)
    d.api("begin_commit")
    d.api("commit", dr_fails=0)
    (end,) = d.requests("txn:EndTxn")
    assert end.args == {"transactional_id": "tx-1", "producer_id": PID, "producer_epoch": EPOCH, "committed": True}
    assert d.txn.state is S.COMMITTING
    d.api("commit", dr_fails=0)  # resumed: the same EndTxn answers it
    assert len(d.requests("txn:EndTxn")) == 1
    d.answer("txn:EndTxn", result={"error_code": 0, "producer_id": -1, "producer_epoch": -1})
    assert d.results("commit") == [None, None] and d.txn.state is S.COMMIT_NOT_ACKED
    d.api("ack_commit")
    assert d.txn.state is S.READY and d.txn.registered == set()


def test_a_commit_with_failed_deliveries_is_refused_abortable():
    d = Driver()
    d.init()
    d.begin()
    d.add(0)
    d.api("begin_commit")
    d.api("commit", dr_fails=3)
    (error,) = d.results("commit")
    assert error.code() == E._INCONSISTENT and error.txn_requires_abort()
    assert error.str() == "3 message(s) failed delivery (see individual delivery reports)"
    assert d.txn.state is S.ABORTABLE_ERROR and d.requests("txn:EndTxn") == []


@pytest.mark.parametrize("code", [E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR,
                                  E._TRANSPORT])
def test_end_txn_retries_retriable_errors(code):
    d = Driver()
    d.init()
    d.begin()
    d.add(0)
    d.api("begin_commit")
    d.api("commit")
    d.answer("txn:EndTxn", code=code) if code < 0 else d.answer("txn:EndTxn", result={"error_code": code})
    assert d.results("commit") == [] and d.txn.state is S.COMMITTING
    d.tick(600)
    if d.requests("txn:FindCoordinator"):
        d.answer("txn:FindCoordinator", result={"node_id": COORD})
        d.tick(200)
    d.answer("txn:EndTxn", result={"error_code": 0})
    assert d.results("commit") == [None]


@pytest.mark.parametrize("code", [E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED, E.INVALID_TXN_STATE])
def test_end_txn_fatal_errors(code):
    d = Driver()
    d.init()
    d.begin()
    d.add(0)
    d.api("begin_commit")
    d.api("commit")
    d.answer("txn:EndTxn", result={"error_code": code})
    (error,) = d.results("commit")
    assert error.fatal() and d.txn.state is S.FATAL_ERROR
    assert error.code() == (E._FENCED if code != E.INVALID_TXN_STATE else code)


def test_transaction_abortable_from_end_txn_fails_the_transaction_not_the_producer():
    d = Driver()
    d.init()
    d.begin()
    d.add(0)
    d.api("begin_commit")
    d.api("commit")
    d.answer("txn:EndTxn", result={"error_code": E.TRANSACTION_ABORTABLE})
    (error,) = d.results("commit")
    assert error.code() == E.TRANSACTION_ABORTABLE and error.txn_requires_abort() and not error.fatal()
    d.api("begin_abort")
    d.api("abort")
    d.answer("txn:EndTxn", result={"error_code": 0})
    assert d.results("abort") == [None]


def test_an_abort_after_a_sequence_gap_bumps_the_epoch_through_the_coordinator():
    d = Driver()
    d.init()
    d.begin()
    d.add(0)
    d.run(d.txn.on_produce_failed(E._MSG_TIMED_OUT, "1 message(s) failed", d.now))
    d.run(d.txn.on_bump_request(PID, EPOCH, "in-flight batch timed out", d.now))
    assert d.txn.state is S.ABORTABLE_ERROR and d.txn.requires_bump
    d.api("begin_abort")
    d.api("abort")
    d.answer("txn:EndTxn", result={"error_code": 0})
    assert d.results("abort") == [] and d.of(SetPid)[-1] == SetPid(-1, -1)  # toppars hold during the bump
    (bump,) = d.requests("txn:InitProducerId")
    assert (bump.args["producer_id"], bump.args["producer_epoch"]) == (PID, EPOCH)
    d.answer("txn:InitProducerId", result={"producer_id": PID, "producer_epoch": EPOCH + 1})
    assert d.results("abort") == [None] and d.of(SetPid)[-1] == SetPid(PID, EPOCH + 1)
    d.api("ack_abort")
    d.begin()
    d.add(0)
    assert d.of(Grant)[-1] == Grant((("t", 0),), PID, EPOCH + 1)


def test_unknown_producer_id_at_abort_bumps_then_completes():
    d = Driver()
    d.init()
    d.begin()
    d.add(0)
    d.api("begin_abort")
    d.api("abort")
    d.answer("txn:EndTxn", result={"error_code": E.UNKNOWN_PRODUCER_ID})
    d.answer("txn:InitProducerId", result={"producer_id": PID, "producer_epoch": EPOCH + 1})
    assert d.results("abort") == [None] and d.txn.state is S.ABORT_NOT_ACKED


def test_a_bump_asked_for_between_transactions_is_done_at_once():
    d = Driver()
    d.init()
    d.run(d.txn.on_bump_request(PID, EPOCH, "purged batches", d.now))
    assert d.of(SetPid)[-1] == SetPid(-1, -1)
    d.begin()
    d.run(d.txn.add_partition("t", 0, d.now))
    d.run(d.txn.register_partitions(d.now))
    assert d.requests("txn:AddPartitionsToTxn") == []  # waits for the new epoch
    d.answer("txn:InitProducerId", result={"producer_id": PID, "producer_epoch": EPOCH + 1})
    assert d.requests("txn:AddPartitionsToTxn")[0].args["producer_epoch"] == EPOCH + 1
    d.run(d.txn.on_bump_request(PID, EPOCH, "stale", d.now))  # the old epoch's request: ignored
    assert d.txn.state is S.IN_TRANSACTION


@pytest.mark.parametrize("code,fatal", [(E.PRODUCER_FENCED, True), (E.INVALID_PRODUCER_EPOCH, True),
                                        (E.TOPIC_AUTHORIZATION_FAILED, False), (E.TRANSACTION_ABORTABLE, False),
                                        (E.INVALID_TXN_STATE, False)])
def test_produce_failures_fail_the_transaction_or_fence_the_producer(code, fatal):
    d = Driver()
    d.init()
    d.begin()
    d.run(d.txn.on_produce_failed(code, "Produce to t [0] failed", d.now))
    assert d.txn.state is (S.FATAL_ERROR if fatal else S.ABORTABLE_ERROR)
    error = d.txn.error()
    assert error.fatal() is fatal and error.txn_requires_abort() is not fatal
    assert error.code() == (E._FENCED if fatal else code)


def test_fatal_answers_every_waiting_step():
    d = Driver()
    d.init()
    d.begin()
    d.add(0)
    d.api("begin_commit")
    d.api("commit")
    d.run(d.txn.on_fatal(E._INCONSISTENT, "idempotence desync"))
    (error,) = d.results("commit")
    assert error.fatal() and d.of(Fatal) == []  # raised elsewhere: not announced again


def test_end_txn_v5_producer_epoch_is_taken_for_the_next_transaction():
    d = Driver()
    d.init()
    d.begin()
    d.add(0)
    d.api("begin_commit")
    d.api("commit")
    d.answer("txn:EndTxn", result={"error_code": 0, "producer_id": PID, "producer_epoch": EPOCH + 1})
    assert d.of(SetPid)[-1] == SetPid(PID, EPOCH + 1) and d.txn.epoch == EPOCH + 1


# ---- send_offsets_to_transaction --------------------------------------------------------------------------

GROUP = {"group_id": "g", "generation_id": 7, "member_id": "m-1", "group_instance_id": None}
OFFSETS = [["in", 1, 42, 3, ""], ["in", 0, 10, -1, None]]


def test_send_offsets_adds_the_group_then_commits_with_generation_and_member_id():
    d = Driver()
    d.init()
    d.begin()
    d.api("send_offsets", offsets=OFFSETS, group=GROUP, deadline=d.now + 5000)
    (add,) = d.requests("txn:AddOffsetsToTxn")
    assert add.args == {"transactional_id": "tx-1", "producer_id": PID, "producer_epoch": EPOCH, "group_id": "g"}
    assert add.broker == COORD
    d.answer("txn:AddOffsetsToTxn", result={"error_code": 0})
    (find,) = d.requests("txn:FindCoordinator")
    assert find.args == {"key_type": 0, "key": "g"}
    d.answer("txn:FindCoordinator", result={"node_id": 3})
    (commit,) = d.requests("txn:TxnOffsetCommit")
    assert commit.broker == 3
    assert commit.args == {"transactional_id": "tx-1", "group_id": "g", "producer_id": PID, "producer_epoch": EPOCH,
                           "generation_id": 7, "member_id": "m-1", "group_instance_id": None,
                           "topics": [["in", [[0, 10, -1, None], [1, 42, 3, ""]]]]}
    d.answer("txn:TxnOffsetCommit", result={"partitions": [["in", 0, 0], ["in", 1, 0]]})
    assert d.results("send_offsets") == [None]
    d.api("begin_commit")
    d.api("commit")
    assert d.requests("txn:EndTxn")  # the offsets opened the transaction on the coordinator


@pytest.mark.parametrize("code", [E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID,
                                  E.GROUP_AUTHORIZATION_FAILED])
def test_a_fenced_group_member_makes_the_transaction_abortable(code):
    d = Driver()
    d.init()
    d.begin()
    d.api("send_offsets", offsets=OFFSETS, group=GROUP, deadline=d.now + 5000)
    d.answer("txn:AddOffsetsToTxn", result={"error_code": 0})
    d.answer("txn:FindCoordinator", result={"node_id": 3})
    d.answer("txn:TxnOffsetCommit", result={"partitions": [["in", 0, code], ["in", 1, code]]})
    (error,) = d.results("send_offsets")
    assert error.code() == code and error.txn_requires_abort() and d.txn.state is S.ABORTABLE_ERROR


def test_send_offsets_retries_within_its_deadline_then_fails_the_transaction():
    d = Driver()
    d.init()
    d.begin()
    d.api("send_offsets", offsets=OFFSETS, group=GROUP, deadline=d.now + 1200)
    d.answer("txn:AddOffsetsToTxn", result={"error_code": E.CONCURRENT_TRANSACTIONS})
    assert d.results("send_offsets") == []
    d.tick(100)
    d.answer("txn:AddOffsetsToTxn", result={"error_code": 0})
    d.answer("txn:FindCoordinator", result={"node_id": 3})
    d.answer("txn:TxnOffsetCommit", result={"partitions": [["in", 0, E.COORDINATOR_LOAD_IN_PROGRESS]]})
    d.tick(600)
    d.answer("txn:TxnOffsetCommit", result={"partitions": [["in", 0, E.REQUEST_TIMED_OUT]]})
    d.tick(600)
    d.answer("txn:FindCoordinator", result={"node_id": 3})
    d.answer("txn:TxnOffsetCommit", result={"partitions": [["in", 0, E.COORDINATOR_LOAD_IN_PROGRESS]]})
    (error,) = d.results("send_offsets")  # out of time after AddOffsetsToTxn: the transaction failed
    assert error.code() == E.COORDINATOR_LOAD_IN_PROGRESS and error.txn_requires_abort()


def test_add_offsets_out_of_time_is_retriable():
    d = Driver()
    d.init()
    d.begin()
    d.api("send_offsets", offsets=OFFSETS, group=GROUP, deadline=d.now + 50)
    d.now += 100
    d.answer("txn:AddOffsetsToTxn", result={"error_code": E.COORDINATOR_LOAD_IN_PROGRESS})
    (error,) = d.results("send_offsets")
    assert error.retriable() and not error.txn_requires_abort() and d.txn.state is S.IN_TRANSACTION


def test_state_transitions_follow_librdkafka():
    d = Driver()
    with pytest.raises(AssertionError, match="Init -> InTransaction"):
        d.txn._set_state(S.IN_TRANSACTION)
