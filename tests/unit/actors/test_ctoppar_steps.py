"""Runs in: unit tests (one HostCore in this process, no broker). The consumer toppar actor sends a large
fetched slice to the app in several frames, one per host turn: in fetch order, with a later error event behind
them, and nothing more once the partition is stopped or seeked."""

from __future__ import annotations

import pytest

from kqactors.actors import ctoppar
from kqactors.core.consumer.decoder import FetchedSlice
from kqactors.core.consumer.packing import MessageBatch
from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.ops import consumer as cops
from kqactors.ops import producer as pops
from kqactors.records import ZSTD, build_batch
from kqactors.runtime.host import DIRECTORY, HostCore
from kqactors.runtime.op import HOST_CONTROL, Op

NAME = "ctoppar/t/0"
BROKER = ops.broker_name(1)
FOLLOWER = ops.broker_name(2)


def _records(count: int, first: int = 0) -> bytes:
    """``count`` records from offset ``first``, in zstd batches of 10."""
    return b"".join(bytes(build_batch([(0, None, b"v%d" % (base + i), None) for i in range(10)],
                                      base_offset=base, codec=ZSTD)) for base in range(first, first + count, 10))


class _Harness:
    def __init__(self, **start: int) -> None:
        self.to_app: list[Op] = []
        self.flows: list[bool] = []  # FETCH_FLOW "open" values sent to the broker actor, in order
        self.to_brokers: list[Op] = []  # B_FETCH_START / B_FETCH_STOP, in order
        self.replica_asks: list[Op] = []  # C_REPLICA_KNOWN requests to main, not answered yet
        self.now = 1000.0  # the host's clock, moved on by hand to fire timers
        self.core = HostCore("h0", self._transmit, clock=lambda: self.now)
        self.core.deliver([Op(DIRECTORY, {"set": {BROKER: "h1", FOLLOWER: "h1", ops.broker_name(3): "h1", "main": "h1"}},
                              target=HOST_CONTROL)])
        self.core.spawn(NAME, "kqactors.actors.ctoppar:ConsumerTopparActor", {"topic": "t", "partition": 0}, "app")
        self.deliver(Op(cops.FETCH_START, {"version": 2, "offset": 0, **start}, sender="app"),
                     Op(pops.LEADER, {"broker_id": 1}, sender="main"))

    def _transmit(self, _key: str, batch: list[Op]) -> None:
        self.to_app.extend(op for op in batch if op.type == cops.CONSUMER_BATCH)
        self.flows.extend(op.payload["open"] for op in batch if op.type == cops.FETCH_FLOW)
        self.to_brokers.extend(op for op in batch if op.type in (cops.BROKER_FETCH_START, cops.BROKER_FETCH_STOP))
        self.replica_asks.extend(op for op in batch if op.type == cops.REPLICA_KNOWN)

    def answer_replicas(self, known: bool) -> None:
        """main's answer to the ctoppar's KIP-392 question: is the named replica a broker it knows?"""
        asks, self.replica_asks = self.replica_asks, []
        for ask in asks:
            self.core.reply(ask, Op(cops.REPLICA_KNOWN, {"broker_id": ask.payload["broker_id"], "known": known}),
                            sender="main")

    def deliver(self, *batch: Op) -> None:
        for op in batch:
            op.target = NAME
        self.core.deliver(list(batch))

    def fetched(self, records: bytes, fetch_offset: int, next_offset: int, version: int = 2) -> Op:
        sl = FetchedSlice("t", 0, version, fetch_offset, next_offset, records)
        return Op(cops.FETCHED, sl.payload(), [records], sender=BROKER)

    def run(self) -> int:
        turns = 0
        while self.core.has_work() and turns < 1000:
            self.core.run()
            turns += 1
        return turns

    def taken(self) -> list[tuple[int, bytes | None, bool]]:
        out = []
        for op in self.to_app:
            messages, _count, _nbytes = MessageBatch("t", 0, op.frames[0], op.payload["version"]).take()
            out += [(m.offset(), m.value(), m.error() is not None) for m in messages]
        return out


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctoppar, "DECODE_STEP_BYTES", 200)


def test_a_large_slice_goes_out_in_frames_and_an_error_after_it_stays_behind_them(small_steps: None) -> None:
    h = _Harness()
    h.run()
    h.deliver(h.fetched(_records(100), 0, 100),
              Op(cops.FETCH_ERROR, {"version": 2, "offset": 100, "code": 1, "reason": "out of range"},
                 sender=BROKER))
    turns = h.run()
    assert len(h.to_app) > 3 and turns >= len(h.to_app)
    taken = h.taken()
    assert [offset for offset, _, error in taken if not error] == list(range(100))
    assert [(offset, error) for offset, _, error in taken if error] == [(100, True)]
    assert taken[-1][0] == 100


def test_frames_not_yet_sent_are_dropped_when_the_partition_is_stopped(small_steps: None) -> None:
    h = _Harness()
    h.run()
    # The FETCHED turn decodes and sends the first frame; the stop, served in the same turn, comes before
    # the step that would have sent the second.
    h.deliver(h.fetched(_records(100), 0, 100), Op(cops.FETCH_STOP, {"version": 3}, sender="app"))
    h.run()
    assert [op.payload["messages"] for op in h.to_app] == [10]


def test_fetching_pauses_while_the_queue_has_no_room_for_what_waits_undecoded(small_steps: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Credit is charged as frames are decoded, so slices fetched meanwhile would pile up undecoded: the
    broker actor is told to stop fetching while more undecoded bytes wait than the prefetch queue has room
    for (at least MAX_UNDECODED_BYTES), and to go on once the app has consumed them."""
    first, second = _records(100), _records(50, first=100)
    monkeypatch.setattr(ctoppar, "MAX_UNDECODED_BYTES", len(first) + len(second))
    h = _Harness(max_bytes=len(first) + len(second))
    h.run()
    h.deliver(h.fetched(first, 0, 100), h.fetched(second, 100, 150))
    h.run()
    assert h.flows == [False]
    assert [offset for offset, _, error in h.taken() if not error] == list(range(150))
    sent = sum(len(op.frames[0]) for op in h.to_app)
    h.deliver(Op(cops.CREDIT, {"version": 2, "messages": 150, "nbytes": sent}, sender="app"))
    h.run()
    assert h.flows == [False, True]


def test_slices_arriving_faster_than_decoded_keep_fetching_open_while_the_queue_has_room(
        small_steps: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large slices (Tansu answers MBs per partition) arrive before the previous one is decoded: fetching
    goes on while the partition's prefetch queue has room for them, so the next Fetch overlaps the decode."""
    first, second = _records(100), _records(50, first=100)
    monkeypatch.setattr(ctoppar, "MAX_UNDECODED_BYTES", 16)
    h = _Harness(max_bytes=100 * (len(first) + len(second)))
    h.run()
    h.deliver(h.fetched(first, 0, 100), h.fetched(second, 100, 150))
    h.run()
    assert h.flows == []
    assert [offset for offset, _, error in h.taken() if not error] == list(range(150))


def test_small_slices_waiting_together_leave_fetching_open() -> None:
    """At low rates slices of a few messages can arrive faster than the host turns; below
    MAX_UNDECODED_BYTES they wait without a FETCH_FLOW round trip through the broker actor."""
    h = _Harness()
    h.run()
    h.deliver(*(h.fetched(_records(10, first=base), base, base + 10) for base in range(0, 50, 10)))
    h.run()
    assert h.flows == []
    assert [offset for offset, _, error in h.taken() if not error] == list(range(50))



def test_a_decoder_failure_mid_slice_reaches_the_app_as_an_error_and_later_slices_go_on(
        small_steps: None, caplog: pytest.LogCaptureFixture) -> None:
    h = _Harness()
    h.run()
    actor = h.core.actors[NAME].actor
    actor.decoder = _FailsAfterOneFrame(actor.decoder)
    h.deliver(h.fetched(_records(100), 0, 100), h.fetched(_records(20, first=100), 100, 120))
    h.run()
    taken = h.taken()
    delivered = [offset for offset, _, error in taken if not error]
    first_frame = delivered[:-20]
    assert first_frame == list(range(len(first_frame))) and 0 < len(first_frame) < 100
    assert delivered[-20:] == list(range(100, 120))
    # the error names the first offset the app did not get, and comes right after the first frame
    assert [(i, offset) for i, (offset, _, error) in enumerate(taken) if error] == [(len(first_frame),) * 2]
    assert f"decoding a slice at offset {len(first_frame)} failed" in caplog.text


class _FailsAfterOneFrame:
    """A decoder with a bug: the slice at offset 0 raises after its first frame."""

    def __init__(self, decoder) -> None:
        self._decoder = decoder

    def decode_chunks(self, sl, chunk_bytes):
        chunks = self._decoder.decode_chunks(sl, chunk_bytes)
        yield next(chunks)
        if sl.fetch_offset == 0:
            raise RuntimeError("decoder bug")
        yield from chunks


def test_a_slice_decoded_in_one_frame_costs_one_host_turn() -> None:
    """The last frame of a slice says so: no extra turn (a host loop wake-up per slice) just to find the
    job done."""
    h = _Harness()
    h.run()
    h.deliver(h.fetched(_records(20), 0, 20))
    assert h.run() == 1
    assert [offset for offset, _, error in h.taken() if not error] == list(range(20))


def _moves(h: _Harness) -> list[tuple[str, str, bool | None]]:
    out = [(op.type, op.target, op.payload.get("follower")) for op in h.to_brokers]
    h.to_brokers.clear()
    return out


def test_a_preferred_replica_takes_over_fetching_and_a_revert_or_the_lease_end_gives_it_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = _Harness()
    h.run()
    assert _moves(h) == [(cops.BROKER_FETCH_START, BROKER, False)]
    h.deliver(h.fetched(_records(10), 0, 10))
    h.deliver(Op(cops.FETCH_PREFERRED, {"version": 2, "broker_id": 2}, sender=BROKER))
    h.run()
    assert _moves(h) == [] and [ask.payload["broker_id"] for ask in h.replica_asks] == [2]  # main is asked first
    h.answer_replicas(True)
    h.run()
    moves = [op for op in h.to_brokers if op.type == cops.BROKER_FETCH_START]
    assert _moves(h) == [(cops.BROKER_FETCH_STOP, BROKER, None), (cops.BROKER_FETCH_START, FOLLOWER, True)]
    assert moves[0].payload["offset"] == 10  # where the leader left off
    # the leader's answers are no longer taken; the follower's are
    h.deliver(h.fetched(_records(10, first=10), 10, 20))
    h.run()
    assert len(h.taken()) == 10
    h.deliver(Op(cops.FETCHED, FetchedSlice("t", 0, 2, 10, 20, _records(10, first=10)).payload(),
                 [_records(10, first=10)], sender=FOLLOWER))
    h.run()
    assert [offset for offset, _, _ in h.taken()] == list(range(20))
    # the follower lags: back to the leader at the position reached
    h.deliver(Op(cops.FETCH_REVERT, {"version": 2, "code": 1}, sender=FOLLOWER))
    h.run()
    starts = [op for op in h.to_brokers if op.type == cops.BROKER_FETCH_START]
    assert _moves(h) == [(cops.BROKER_FETCH_STOP, FOLLOWER, None), (cops.BROKER_FETCH_START, BROKER, False)]
    assert starts[0].payload["offset"] == 20
    # named again within a minute: not followed at once (a timer of fetch.error.backoff.ms first)
    h.deliver(Op(cops.FETCH_PREFERRED, {"version": 2, "broker_id": 2}, sender=BROKER))
    h.run()
    assert _moves(h) == []
    actor = h.core.actors[NAME].actor
    actor._lease_started -= ctoppar.NEW_LEASE_INTERVAL_S  # a minute later
    h.deliver(Op(cops.FETCH_PREFERRED, {"version": 2, "broker_id": 2}, sender=BROKER))
    h.run()
    h.answer_replicas(True)
    h.run()
    assert _moves(h) == [(cops.BROKER_FETCH_STOP, BROKER, None), (cops.BROKER_FETCH_START, FOLLOWER, True)]
    # the lease ends: back to the leader; a lease-end of an older lease does nothing
    h.deliver(Op("CTOPPAR_LEASE_END", {"lease": actor._lease - 1}))
    h.run()
    assert _moves(h) == []
    h.deliver(Op("CTOPPAR_LEASE_END", {"lease": actor._lease}))
    h.run()
    assert _moves(h) == [(cops.BROKER_FETCH_STOP, FOLLOWER, None), (cops.BROKER_FETCH_START, BROKER, False)]
    # a new leader ends it too: from a follower straight to the new leader
    actor._lease_started -= ctoppar.NEW_LEASE_INTERVAL_S
    h.deliver(Op(cops.FETCH_PREFERRED, {"version": 2, "broker_id": 2}, sender=BROKER))
    h.run()
    h.answer_replicas(True)
    h.run()
    h.deliver(Op(pops.LEADER, {"broker_id": 3}, sender="main"))
    h.run()
    assert _moves(h)[-2:] == [(cops.BROKER_FETCH_STOP, FOLLOWER, None),
                              (cops.BROKER_FETCH_START, ops.broker_name(3), False)]
    # main's answer that comes after the partition moved on (a new leader) is not acted on
    actor._lease_started -= ctoppar.NEW_LEASE_INTERVAL_S
    h.deliver(Op(cops.FETCH_PREFERRED, {"version": 2, "broker_id": 2}, sender=ops.broker_name(3)))
    h.run()
    h.deliver(Op(pops.LEADER, {"broker_id": 1}, sender="main"))
    h.run()
    h.answer_replicas(True)
    h.run()
    assert _moves(h) == [(cops.BROKER_FETCH_STOP, ops.broker_name(3), None), (cops.BROKER_FETCH_START, BROKER, False)]


def test_a_preferred_replica_main_does_not_know_is_not_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """KIP-392: main has no broker for the named replica (it refreshes its metadata): fetching goes on at the
    leader after fetch.error.backoff.ms, never at a broker actor that does not exist."""
    h = _Harness()
    h.run()
    _moves(h)
    h.deliver(Op(cops.FETCH_PREFERRED, {"version": 2, "broker_id": 7}, sender=BROKER))
    h.run()
    h.answer_replicas(False)
    h.run()
    assert _moves(h) == []  # not yet: after the backoff
    h.now += 0.6  # fetch.error.backoff.ms (500) later
    h.core.run()  # fires the timer
    h.run()
    starts = [op for op in h.to_brokers if op.type == cops.BROKER_FETCH_START]
    assert _moves(h) == [(cops.BROKER_FETCH_START, BROKER, False)] and starts[0].payload["offset"] == 0


def test_a_follower_that_became_the_leader_is_restarted_as_the_leader_on_a_revert() -> None:
    h = _Harness()
    h.run()
    h.deliver(Op(cops.FETCH_PREFERRED, {"version": 2, "broker_id": 2}, sender=BROKER))
    h.run()
    h.answer_replicas(True)
    h.run()
    _moves(h)
    h.deliver(Op(pops.LEADER, {"broker_id": 2}, sender="main"))  # the replica it fetches from now leads
    h.run()
    assert _moves(h) == []
    h.deliver(Op(cops.FETCH_REVERT, {"version": 2, "code": KafkaError.NOT_LEADER_FOR_PARTITION}, sender=FOLLOWER))
    h.run()
    assert _moves(h) == [(cops.BROKER_FETCH_START, FOLLOWER, False)]
