"""The order of a consumer's broker actor after a Fetch response (kqactors.actors.broker.source): a small response
with records is handed to the ctoppars and the next Fetch waits until the host has sent that turn's output
(continue_later); an empty or a large response has the next Fetch written at once.

A real BrokerActor with its real connection state machine, a fake context (records sends and continue_later) and
a fake transport (records what is written) in place of the host and the socket.
"""

from __future__ import annotations

from typing import Any

from kqactors.actors.broker import source as source_module
from kqactors.actors.broker.actor import BrokerActor
from kqactors.core.connection import Connection, ConnState
from kqactors.ops import consumer as cops
from kqactors.protocol.api import API_VERSIONS_KEY
from kqactors.protocol.generated.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from kqactors.records import build_batch
from kqactors.runtime.op import Op
from tests.unit.core.test_connection import api_versions_body_v3, drain, parse_requests, response_frame

FETCH_KEY = 1
FETCH_VERSION = 6  # below fetch sessions: every request lists the partition
TOPIC = "t"


class FakeContext:
    name = "broker/1"

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def send(self, name: str, op: Op, *, qid: int = 0) -> None:
        op.sender = self.name
        self.events.append(("send", op))

    def continue_later(self, op: Op) -> None:
        self.events.append(("continue_later", op))

    def timer(self, interval: float, op: Op, *, repeat: bool = False) -> int:
        return 1

    def cancel_timer(self, timer_id: int) -> bool:
        return True

    def register_fd(self, fd: int, on_readable: Any, on_writable: Any) -> None:
        pass

    def unregister_fd(self, fd: int) -> None:
        pass


class FakeTransport:
    """Takes every byte; the test reads them back from ``written``."""

    def __init__(self, ctx: FakeContext) -> None:
        self.ctx = ctx
        self.written = b""

    def write(self, buffers: Any) -> int:
        data = b"".join(bytes(b) for b in buffers)
        self.written += data
        self.ctx.events.append(("write", len(data)))
        return len(data)

    def close(self) -> None:
        pass


def fetching_broker() -> tuple[BrokerActor, FakeContext, FakeTransport]:
    ctx = FakeContext()
    broker = BrokerActor(ctx, node_id=1, host="127.0.0.1", port=9, consumer=True,  # type: ignore[arg-type]
                         config={"fetch.wait.max.ms": 2})
    conn = Connection(client_id="tester", max_in_flight=5)
    conn.start_connect(0.0)
    conn.on_connected(0.0)
    (req,) = parse_requests(drain(conn))
    conn.feed(response_frame(req["corr_id"], api_versions_body_v3(
        {FETCH_KEY: (4, FETCH_VERSION), API_VERSIONS_KEY: (0, 3)})), 0.0)
    assert conn.state == ConnState.UP
    broker.conn = conn
    transport = FakeTransport(ctx)
    broker.transport = transport  # type: ignore[assignment]
    broker._fd = 99
    return broker, ctx, transport


def start_fetching(broker: BrokerActor, transport: FakeTransport) -> int:
    """A ctoppar starts the partition at offset 0: one Fetch goes out. Returns its correlation id."""
    broker.handle(Op(cops.BROKER_FETCH_START, {"topic": TOPIC, "partition": 0, "offset": 0, "version": 1},
                     sender="ctoppar/t/0"))
    return last_fetch(transport)


def last_fetch(transport: FakeTransport) -> int:
    requests = parse_requests(transport.written)
    transport.written = b""
    assert [r["api_key"] for r in requests] == [FETCH_KEY]
    return requests[0]["corr_id"]


def answer(broker: BrokerActor, corr_id: int, records: bytes, hwm: int) -> None:
    part = PartitionData(partition_index=0, high_watermark=hwm, last_stable_offset=hwm, log_start_offset=0,
                         records=records)
    body = FetchResponse(responses=[FetchableTopicResponse(topic=TOPIC, partitions=[part])]).encode(FETCH_VERSION)
    broker._dispatch(broker.conn.feed(response_frame(corr_id, body), 0.0))  # as _on_readable does


def records(count: int, size: int = 100) -> bytes:
    return bytes(build_batch([(1_700_000_000_000, None, b"v" * size, None)] * count, base_offset=0))


def test_a_small_response_with_records_goes_to_the_ctoppar_before_the_next_fetch_is_written() -> None:
    broker, ctx, transport = fetching_broker()
    corr_id = start_fetching(broker, transport)
    ctx.events.clear()
    answer(broker, corr_id, records(3), hwm=3)
    kinds = [(kind, item.type if isinstance(item, Op) else item) for kind, item in ctx.events]
    assert ("send", cops.FETCHED) in kinds
    assert not any(kind == "write" for kind, _ in kinds), "no Fetch written in the turn that got the records"
    posted = [op for kind, op in ctx.events if kind == "continue_later"]
    assert len(posted) == 1
    assert transport.written == b""
    broker.handle(posted[0])  # the host delivers it once this turn's output has left
    last_fetch(transport)  # now the next Fetch is written


def test_an_empty_response_has_the_next_fetch_written_at_once() -> None:
    broker, ctx, transport = fetching_broker()
    corr_id = start_fetching(broker, transport)
    ctx.events.clear()
    answer(broker, corr_id, b"", hwm=0)
    assert not any(kind == "continue_later" for kind, _ in ctx.events)
    last_fetch(transport)


def test_a_large_response_keeps_the_next_fetch_first(monkeypatch) -> None:
    monkeypatch.setattr(source_module, "RECORDS_FIRST_BYTES", 1000)
    broker, ctx, transport = fetching_broker()
    corr_id = start_fetching(broker, transport)
    ctx.events.clear()
    answer(broker, corr_id, records(20), hwm=20)  # about 2.5 KB of records
    kinds = [kind if kind != "send" else item.type for kind, item in ctx.events]
    assert cops.FETCHED in kinds and "write" in kinds
    assert "continue_later" not in kinds
    assert kinds.index("write") > kinds.index(cops.FETCHED)  # same turn: FETCHED queued, then the Fetch
    last_fetch(transport)
