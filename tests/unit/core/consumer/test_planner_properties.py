"""Property tests of the fetch planner: a random script of starts, seeks (fresh and stale), stops, pause and
flow changes, builds, answers (records, a batch that began before the position, truncated entries, empty
answers, partition errors, partitions left out or not asked for), whole-request failures and clock steps.

After every event a model checks:
- at most one request in flight; a built request names each partition once, only partitions that may be
  fetched now (active, flow open, not paused, not backing off) and all of them, each at its position, and
  carries the configured limits (no partition asked for more than max.partition.fetch.bytes unless it grew
  past a truncated entry, never past 1 GB);
- positions only move forward for a version, and every slice handed on chains onto the previous one of its
  version (starts where the last ended) and is stamped with the version it was asked at;
- an answer for a partition that was seeked, restarted or stopped since the request was built hands on
  nothing for it; a seek with an older version changes nothing.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.clock import FakeClock

from kqactors.core.consumer.planner import ACTIVE, HELD_WAIT_MS, RESTART_WINDOW_S, FetchPlanner
from kqactors.core.consumer.settings import FetchSettings
from kqactors.errors import ERROR_CODES, KafkaError
from kqactors.protocol.generated.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from kqactors.records import build_batch

TS = 1_700_000_000_000
KEYS = [("a", 0), ("a", 1), ("b", 0)]
PARTITION_ERRORS = [ERROR_CODES[name] for name in ("NOT_LEADER_FOR_PARTITION", "OFFSET_OUT_OF_RANGE", "UNKNOWN_TOPIC_OR_PART",
                                         "FENCED_LEADER_EPOCH", "TOPIC_AUTHORIZATION_FAILED")]

KEY = st.integers(0, len(KEYS) - 1)
OFFSET = st.integers(0, 50)
ANSWER = st.one_of(
    st.tuples(st.just("records"), st.integers(0, 3), st.integers(1, 5), st.integers(0, 4)),  # back, count, beyond
    st.tuples(st.just("truncated"), st.integers(1, 40)),
    st.tuples(st.just("empty"), st.integers(0, 3)),
    st.tuples(st.just("error"), st.sampled_from(PARTITION_ERRORS)),
    st.tuples(st.just("missing")),
)
_EVENT_ARGS = {
    "start": st.tuples(KEY, OFFSET),
    "seek": st.tuples(KEY, OFFSET),
    "stale_seek": st.tuples(KEY, OFFSET),
    "stop": st.tuples(KEY),
    "flow": st.tuples(KEY, st.booleans()),
    "pause": st.tuples(KEY, st.booleans()),
    "build": st.just(()),
    "answer": st.tuples(st.lists(ANSWER, min_size=len(KEYS), max_size=len(KEYS)), st.booleans()),
    "fail": st.just(()),
    "advance": st.tuples(st.sampled_from([0.01, 0.1, 0.6])),
}
_KINDS = ["start"] * 2 + ["build"] * 3 + ["answer"] * 3 + ["seek", "stale_seek", "stop", "flow", "pause", "fail",
                                                            "advance"]
EVENTS = st.sampled_from(_KINDS).flatmap(lambda kind: _EVENT_ARGS[kind].map(lambda args: (kind, *args)))
SETTINGS = st.builds(
    FetchSettings,
    fetch_max_bytes=st.sampled_from([1, 1000, 52_428_800]),
    max_partition_fetch_bytes=st.sampled_from([100, 4096]),
    fetch_error_backoff_ms=st.sampled_from([0, 500]),
    enable_partition_eof=st.booleans(),
    auto_offset_reset=st.sampled_from(["earliest", "error"]),
)


def batch(base: int, count: int) -> bytes:
    return bytes(build_batch([(TS, None, b"x" * 10, None)] * count, base_offset=base))


class Driver:
    def __init__(self, fetch_settings: FetchSettings) -> None:
        self.clock = FakeClock()
        self.settings = fetch_settings
        self.planner = FetchPlanner(fetch_settings, clock=self.clock)
        self.versions = dict.fromkeys(KEYS, 0)        # the toppar's version counter per partition
        self.seen: dict[tuple, int] = {}              # (key, version) → highest position observed
        self.slice_ends: dict[tuple, int] = {}        # (key, version) → next_offset of the last slice
        self.changed_since_build: set = set()         # keys seeked/restarted/stopped while a request is out
        self.departed: dict[tuple, float] = {}         # keys stopped while fetching, not started since → when
        self.requests = 0
        self.slices = 0

    def run(self, event: tuple) -> None:
        planner, kind = self.planner, event[0]
        if kind in ("start", "seek"):
            key, offset = KEYS[event[1]], event[2]
            self.versions[key] += 1
            if kind == "start":
                planner.start(*key, offset, self.versions[key])
                self.departed.pop(key, None)
            elif not planner.seek(*key, offset, self.versions[key]):
                assert planner.target(*key) is None, "a seek with a newer version was refused"
            self.changed_since_build.add(key)
        elif kind == "stale_seek":
            key, offset = KEYS[event[1]], event[2]
            target = planner.target(*key)
            if target is not None and target.version > 0:
                before = (target.offset, target.version, target.state)
                assert not planner.seek(*key, offset, target.version - 1)
                assert (target.offset, target.version, target.state) == before, "a stale seek moved the position"
        elif kind == "stop":
            target = planner.target(*KEYS[event[1]])
            if target is not None and target.state == ACTIVE and not target.paused:
                self.departed[KEYS[event[1]]] = self.clock()
            planner.stop(*KEYS[event[1]])
            self.changed_since_build.add(KEYS[event[1]])
        elif kind == "flow":
            planner.set_flow(*KEYS[event[1]], event[2])
        elif kind == "pause":
            planner.set_paused(*KEYS[event[1]], event[2])
        elif kind == "build":
            self.build()
        elif kind == "answer":
            if planner.in_flight is not None:
                self.answer(planner.in_flight, event[1], event[2])
        elif kind == "fail":
            if planner.in_flight is not None:
                plan = planner.in_flight
                assert not planner.handle_failure(plan, KafkaError._TRANSPORT).slices
                assert planner.in_flight is None
        elif kind == "advance":
            self.clock.advance(event[1])
        self.check_positions()

    def build(self) -> None:
        planner = self.planner
        was_in_flight = planner.in_flight is not None
        now = self.clock()
        expected = {(t.topic, t.partition): t.offset for t in planner.targets() if t.state == ACTIVE
                    and t.flow_open and not t.paused and t.backoff_until <= now}
        plan = planner.build()
        if was_in_flight or not expected:
            assert plan is None, "a request was built while one was in flight, or with nothing to fetch"
            return
        assert plan is not None and planner.in_flight is plan
        self.requests += 1
        request = plan.request
        names = [t.topic for t in request.topics]
        assert len(names) == len(set(names)), "a topic appears twice in one request"
        asked = [((t.topic, p.partition), p.fetch_offset, p.partition_max_bytes)
                 for t in request.topics for p in t.partitions]
        keys = [key for key, _offset, _max in asked]
        assert len(keys) == len(set(keys)), "a partition is fetched twice in one request"
        assert {key: offset for key, offset, _max in asked} == expected
        assert set(plan.partitions) == set(keys)
        for key, offset, max_bytes in asked:
            target = planner.target(*key)
            # max.partition.fetch.bytes, or more only after a truncated entry asked for it (capped at 1 GB)
            assert self.settings.max_partition_fetch_bytes <= max_bytes == target.max_bytes <= 1_000_000_000
            assert plan.partitions[key] == (target.version, offset, max_bytes)
        assert (request.max_bytes, request.min_bytes) == (self.settings.fetch_max_bytes, self.settings.fetch_min_bytes)
        # the long-poll is shortened only while a flow-closed partition has data waiting on the broker, or a
        # partition stopped while fetching may start again (RESTART_WINDOW_S)
        held = any(t.state == ACTIVE and not t.flow_open and not t.paused and 0 <= t.offset < t.high_watermark
                   for t in planner.targets())
        held = held or any(now - when < RESTART_WINDOW_S for when in self.departed.values())
        wait = self.settings.fetch_wait_max_ms
        assert request.max_wait_ms == (min(wait, HELD_WAIT_MS) if held else wait)
        self.changed_since_build = set()

    def answer(self, plan, answers: list[tuple], add_unasked: bool) -> None:
        topics: dict[str, FetchableTopicResponse] = {}
        for key, choice in zip(KEYS, answers, strict=True):
            if key not in plan.partitions and not add_unasked:
                continue
            _version, offset, _max_bytes = plan.partitions.get(key, (0, 0, 0))
            fields = dict(partition_index=key[1], high_watermark=offset, last_stable_offset=-1, log_start_offset=0)
            kind = choice[0]
            if kind == "missing":
                continue
            if kind == "records":
                back, count, beyond = choice[1:]
                base = max(0, offset - back)
                fields.update(records=batch(base, count), high_watermark=base + count + beyond)
            elif kind == "truncated":
                fields.update(records=batch(offset, 3)[:-choice[1]], high_watermark=offset + 3)
            elif kind == "empty":
                fields.update(records=b"", high_watermark=offset + choice[1])
            else:
                fields.update(error_code=choice[1])
            topics.setdefault(key[0], FetchableTopicResponse(topic=key[0], partitions=[])).partitions.append(
                PartitionData(**fields))
        changed = self.changed_since_build
        outcome = self.planner.handle_response(plan, FetchResponse(error_code=0, responses=list(topics.values())))
        assert self.planner.in_flight is None
        for item in (*outcome.slices, *outcome.errors):
            key = (item.topic, item.partition)
            assert key in plan.partitions, f"{item} for a partition that was not asked for"
            assert key not in changed, f"{item} handed on for a partition changed after the request was built"
            assert item.version == plan.partitions[key][0] == self.planner.target(*key).version
        for fetched in outcome.slices:
            key = (fetched.topic, fetched.partition)
            self.slices += 1
            assert fetched.fetch_offset == plan.partitions[key][1]
            assert fetched.next_offset >= fetched.fetch_offset, "a slice moved the position back"
            previous = self.slice_ends.get((key, fetched.version))
            assert previous is None or previous == fetched.fetch_offset, "slices of one version do not chain"
            self.slice_ends[(key, fetched.version)] = fetched.next_offset

    def check_positions(self) -> None:
        for target in self.planner.targets():
            key = ((target.topic, target.partition), target.version)
            assert target.offset >= self.seen.get(key, 0), f"{target}: position moved back within a version"
            self.seen[key] = target.offset


@settings(max_examples=300, deadline=None)
@given(SETTINGS, st.lists(EVENTS, min_size=10, max_size=60))
def test_fetch_planner_positions_only_move_forward_and_requests_respect_the_rules(fetch_settings, events):
    driver = Driver(fetch_settings)
    for event in events:
        driver.run(event)
