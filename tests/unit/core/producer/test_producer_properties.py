"""Property tests of the partition producer and its idempotence rules (like brod's buffer properties).

A random script of events — appends, sends, acks, retriable and permanent errors (with the request sent or
not), late answers for batches already settled, clock steps with ``expire``, flush, purge and, for the
idempotent producer, epoch bumps after a drain — drives one ``PartitionProducer`` on a fake clock. A model
beside it checks, after every event:

- every message gets at most one delivery report, and after a final clock step past every timeout, exactly
  one; no report names a msgid that was never appended;
- nothing is sent twice unless retried: a message goes out in one batch only, that batch goes out again
  only after a retriable error (oldest retry first), and nothing already reported is sent;
- answers in send order (as one broker connection gives them) with idempotence or one request in flight:
  successful reports come in msgid order — except a batch that got an error response while a later one was
  then acknowledged (this model's broker accepts a sequence gap, as the librdkafka mock cluster does; a real one
  refuses it): it is resent, not acknowledged implicitly, so its success comes after the later one's;
- idempotence: a retry carries the same sequence range within an epoch; per producer epoch the batches
  sent, in msgid order, hold contiguous sequence ranges starting at 0 (an epoch bump renumbers what waits
  to be retried from 0); at most ``max.in.flight`` batches are out at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.clock import FakeClock

from kqactors.core.producer.batch import Batch, wrap_seq
from kqactors.core.producer.idempotence import IdempotenceState
from kqactors.core.producer.partition import INFLIGHT_GRACE_S, PartitionProducer
from kqactors.core.producer.settings import ProducerSettings
from kqactors.errors import ERROR_CODES, KafkaError

PRODUCER_ID = 7
TIMEOUT_MS = 1000

RETRIABLE = [ERROR_CODES[name] for name in (
    "REQUEST_TIMED_OUT", "NOT_LEADER_FOR_PARTITION", "_TRANSPORT", "NOT_ENOUGH_REPLICAS", "_TIMED_OUT")]
OTHER_ERRORS = [ERROR_CODES[name] for name in (
    "MSG_SIZE_TOO_LARGE", "TOPIC_AUTHORIZATION_FAILED", "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "DUPLICATE_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID")]
# Mostly retriable: permanent and idempotence errors often end a script (fatal), retries pile up state.
ERRORS = st.sampled_from(RETRIABLE * 3 + OTHER_ERRORS)

_EVENT_ARGS = {
    "append": st.tuples(st.integers(1, 6)),
    "send": st.just(()),
    "ack": st.tuples(st.integers(0, 7)),
    "fail": st.tuples(st.integers(0, 7), ERRORS, st.booleans()),
    "late": st.tuples(st.integers(0, 63)),
    "advance": st.tuples(st.sampled_from([0.001, 0.01, 0.01, 0.05, 0.05, 0.2, 0.7])),
    "flush": st.just(()),
    "purge": st.tuples(st.booleans(), st.booleans()),
    "bump": st.just(()),
}
# Appends, sends and answers repeated: they are what most scripts should be made of.
_KINDS = ["append"] * 3 + ["send"] * 4 + ["ack"] * 2 + ["fail"] * 3 + ["advance"] * 3 + ["bump"] * 2 + [
    "late", "flush", "purge"]
EVENTS = st.sampled_from(_KINDS).flatmap(lambda kind: _EVENT_ARGS[kind].map(lambda args: (kind, *args)))
SCRIPTS = st.lists(EVENTS, min_size=10, max_size=80)

SETTINGS = st.builds(
    dict,
    linger_ms=st.sampled_from([0, 5]),
    batch_num_messages=st.integers(1, 5),
    max_in_flight=st.integers(1, 5),
    retries=st.sampled_from([0, 1, 3, 10]),
    retry_backoff_ms=st.sampled_from([1, 10]),
    retry_backoff_max_ms=st.just(40),
    message_timeout_ms=st.just(TIMEOUT_MS),
)


@dataclass
class Model:
    """What the test saw: appended msgids, reports, and every send of every batch."""

    appended: int = 0
    reported: dict[int, int] = field(default_factory=dict)      # msgid → error code of its one report
    successes: list[int] = field(default_factory=list)          # first msgids of success rows, in order
    batches: dict[int, tuple[int, int]] = field(default_factory=dict)  # batch id → (first msgid, count)
    sent_msgids: set[int] = field(default_factory=set)
    may_resend: set[int] = field(default_factory=set)           # batch ids given a retriable error
    overtaken: set[int] = field(default_factory=set)            # first msgids acked behind (see module doc)
    seqs: dict[int, dict[int, tuple[int, int, int]]] = field(default_factory=dict)
    # epoch → batch id → (first msgid, base sequence, count)


class Driver:
    def __init__(self, overrides: dict, idempotence: bool, answers_in_order: bool) -> None:
        self.clock = FakeClock(1000.0)
        self.settings = ProducerSettings(idempotence=idempotence, **overrides)
        self.core = PartitionProducer("t", 0, self.settings, clock=self.clock, rand=lambda: 0.5)
        self.core.set_leader(1)
        self.epoch = 0
        if idempotence:
            self.core.set_pid(PRODUCER_ID, self.epoch)
        self.idempotence = idempotence
        self.answers_in_order = answers_in_order
        self.model = Model()

    # -- events ---------------------------------------------------------------------------------------
    def run(self, event: tuple) -> None:
        core, model = self.core, self.model
        kind = event[0]
        if kind == "append":
            count = event[1]
            core.enqueue(model.appended + 1, [(0, None, b"v", None)] * count, self.clock())
            model.appended += count
        elif kind == "send":
            batch = core.next_batch()
            if batch is not None:
                self.sent(batch)
        elif kind in ("ack", "fail"):
            batch_id = self.pick_in_flight(event[1])
            if batch_id is not None:
                if kind == "ack":
                    first = core.inflight[batch_id].first_msgid
                    model.overtaken |= {b.first_msgid for b in core.retry
                                        if b.first_msgid < first and not b.possibly_persisted}
                    assert core.on_result(batch_id, 0, base_offset=batch_id)
                else:
                    self.failed(batch_id, event[2], event[3])
        elif kind == "late":
            settled = [b for b in model.batches if b not in core.inflight]
            if settled:
                assert not core.on_result(settled[event[1] % len(settled)], 0), "a settled batch was answered"
        elif kind == "advance":
            core.expire(self.clock.advance(event[1]))
        elif kind == "flush":
            core.request_flush()
        elif kind == "purge":
            core.purge(in_queue=event[1], in_flight=event[2])
        elif kind == "bump":
            if self.idempotence and core.bump_requested and not core.inflight and core.fatal_error is None:
                self.epoch += 1
                core.set_pid(PRODUCER_ID, self.epoch)
        self.collect()
        assert core.in_flight_count <= self.settings.in_flight_limit

    def pick_in_flight(self, index: int) -> int | None:
        ids = list(self.core.inflight)  # send order
        if not ids:
            return None
        return ids[0] if self.answers_in_order else ids[index % len(ids)]

    def failed(self, batch_id: int, error: int, request_sent: bool) -> None:
        assert self.core.on_result(batch_id, error, request_sent=request_sent)
        if any(batch.batch_id == batch_id for batch in self.core.retry):
            self.model.may_resend.add(batch_id)

    def sent(self, batch) -> None:
        model = self.model
        msgids = set(range(batch.first_msgid, batch.first_msgid + batch.count))
        assert batch.count > 0 and msgids <= set(range(1, model.appended + 1))
        assert not msgids & model.reported.keys(), f"{batch} sent after its messages were reported"
        if batch.batch_id in model.batches:
            assert batch.batch_id in model.may_resend, f"{batch} sent again without a retriable error"
            assert model.batches[batch.batch_id] == (batch.first_msgid, batch.count), "a retry changed its messages"
            model.may_resend.discard(batch.batch_id)
            waiting = [b.first_msgid for b in self.core.retry]
            assert all(batch.first_msgid < first for first in waiting), "retries must go out oldest first"
        else:
            assert not msgids & model.sent_msgids, f"{batch} holds messages already sent in another batch"
            model.batches[batch.batch_id] = (batch.first_msgid, batch.count)
            model.sent_msgids |= msgids
        if self.idempotence:
            assert (batch.producer_id, batch.epoch) == (PRODUCER_ID, self.epoch)
            stamped = model.seqs.setdefault(batch.epoch, {})
            previous = stamped.get(batch.batch_id)
            assert previous is None or previous[1] == batch.base_seq, "a retry moved its sequence range"
            stamped[batch.batch_id] = (batch.first_msgid, batch.base_seq, batch.count)

    def collect(self) -> None:
        model = self.model
        for first, count, error, _offset, _ts in self.core.take_effects().reports:
            assert count > 0 and 1 <= first and first + count - 1 <= model.appended, "report of unknown msgids"
            for msgid in range(first, first + count):
                assert msgid not in model.reported, f"msgid {msgid} reported twice"
                model.reported[msgid] = error
            if error == 0:
                model.successes.append(first)

    def settle(self) -> None:
        """Step past every message timeout and in-flight grace: everything must be reported by then."""
        self.core.expire(self.clock.advance(TIMEOUT_MS / 1000.0 + INFLIGHT_GRACE_S + 1.0))
        self.collect()


def check_final(driver: Driver) -> None:
    model = driver.model
    assert driver.core.pending_count == 0
    assert sorted(model.reported) == list(range(1, model.appended + 1)), "a message got no delivery report"
    if driver.answers_in_order and (driver.idempotence or driver.settings.in_flight_limit == 1):
        in_order = [first for first in model.successes if first not in model.overtaken]
        assert in_order == sorted(in_order), "successes reported out of msgid order"
    if driver.idempotence:
        assert model.seqs or not model.batches
        for epoch, stamped in model.seqs.items():
            expected = 0
            for first, base_seq, count in sorted(stamped.values()):
                assert base_seq == expected, f"epoch {epoch}: sequence gap or overlap at msgid {first}"
                expected = wrap_seq(base_seq + count)


# Two batches fail in the opposite order to the one they were sent in: the older must still go out first.
_REVERSED_FAILURES = (dict(linger_ms=0, batch_num_messages=1, max_in_flight=2, retries=3, retry_backoff_ms=1,
                           retry_backoff_max_ms=1, message_timeout_ms=TIMEOUT_MS),
                      [("append", 2), ("send",), ("send",), ("fail", 1, KafkaError.NOT_ENOUGH_REPLICAS, True),
                       ("fail", 0, KafkaError.NOT_ENOUGH_REPLICAS, True), ("advance", 0.05), ("send",), ("send",)],
                      False)


@settings(max_examples=300, deadline=None)
@given(SETTINGS, SCRIPTS, st.booleans())
@example(*_REVERSED_FAILURES)
def test_every_message_gets_exactly_one_report_and_is_sent_once_unless_retried(overrides, events, in_order):
    driver = Driver(overrides, idempotence=False, answers_in_order=in_order)
    for event in events:
        driver.run(event)
    driver.settle()
    check_final(driver)


@settings(max_examples=300, deadline=None)
@given(SETTINGS, SCRIPTS, st.booleans())
def test_idempotent_sequences_are_contiguous_per_epoch_and_reports_exactly_once(overrides, events, in_order):
    driver = Driver(overrides, idempotence=True, answers_in_order=in_order)
    for event in events:
        driver.run(event)
    driver.settle()
    check_final(driver)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.lists(st.integers(1, 10_000), min_size=1, max_size=20),
       st.integers(0, 3), st.integers(0, 3))
def test_idempotence_state_stamps_contiguous_wrapping_sequences_and_restarts_on_a_new_identity(
        below_wrap, counts, pid, epoch):
    state = IdempotenceState()
    assert not state.valid
    assert state.reset(pid, epoch)
    assert not state.reset(pid, epoch), "the same identity must not restart the sequences"
    state.next_seq = wrap_seq(-below_wrap)  # close to 2**31 so the range wraps
    expected = state.next_seq
    stamped = []
    for index, count in enumerate(counts):
        batch = Batch(index, [], index * 10_000, count, 0, 0.0)
        state.stamp(batch)
        assert (batch.producer_id, batch.epoch, batch.base_seq) == (pid, epoch, expected)
        assert 0 <= batch.next_seq < 2**31
        expected = wrap_seq(expected + count)
        stamped.append(batch)
    assert len(stamped) == len(counts) and state.next_seq == expected
    assert state.reset(pid, epoch + 1) and state.next_seq == state.next_ack_seq == state.next_err_seq == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5), st.integers(1, 3),
       st.lists(st.sampled_from([0, *RETRIABLE, KafkaError.UNKNOWN_PRODUCER_ID, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER]),
                min_size=5, max_size=5))
def test_an_epoch_bump_renumbers_the_waiting_retries_from_zero_in_msgid_order(appends, per_batch, answers):
    """Up to five batches in flight get answers in send order, the partition drains and bumps its epoch; what
    waits to be retried goes out under the new epoch with sequences from 0, and everything is reported once."""
    driver = Driver(dict(linger_ms=0, batch_num_messages=per_batch, max_in_flight=5, retry_backoff_ms=1,
                         retry_backoff_max_ms=1, message_timeout_ms=TIMEOUT_MS), idempotence=True,
                    answers_in_order=True)
    for count in appends:
        driver.run(("append", count))
    for _ in range(5):
        driver.run(("send",))
    sent_before = len(driver.model.batches)
    assert sent_before >= 1
    for error in answers[:sent_before]:
        driver.run(("ack", 0) if error == 0 else ("fail", 0, error, True))
    assert not driver.core.inflight
    if driver.core.fatal_error is None:
        driver.core.request_bump("test: drained, bump the epoch")
        driver.run(("bump",))
        assert driver.epoch == 1
        waiting = len(driver.core.retry)
        for _ in range(20):  # resend and acknowledge everything left
            driver.run(("advance", 0.01))
            driver.run(("send",))
            driver.run(("ack", 0))
        assert len(driver.model.seqs.get(1, {})) >= waiting, "the retries did not go out under the new epoch"
    driver.settle()
    check_final(driver)
