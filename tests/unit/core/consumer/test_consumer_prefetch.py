"""Runs in: unit tests. Prefetch credit: flow transitions, stale credit, per-partition limits, and a
simulation showing the app/toppar pair never deadlocks and never exceeds limit + one fetch."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.consumer.prefetch import CreditReturner, PrefetchCredit, partition_limits
from kqactors.core.consumer.settings import FetchSettings


def test_flow_closes_at_either_limit_and_reopens_on_credit() -> None:
    credit = PrefetchCredit(max_messages=10, max_bytes=1000, version=1)
    assert credit.fetch_allowed
    assert credit.delivered(5, 400) is None
    assert credit.delivered(5, 100) is False  # 10 messages: closed
    assert credit.credited(1, 1, 0) is True
    assert credit.delivered(0, 500) is False  # 1000 bytes: closed
    assert credit.credited(1, 0, 1) is True
    assert (credit.outstanding_messages, credit.outstanding_bytes) == (9, 999)


def test_stale_credit_is_ignored_and_a_version_bump_forgets_outstanding() -> None:
    credit = PrefetchCredit(2, 100, version=1)
    credit.delivered(5, 500)
    assert credit.reset(2) is True
    assert (credit.outstanding_messages, credit.outstanding_bytes) == (0, 0)
    credit.delivered(1, 10)
    assert credit.credited(1, 1, 10) is None  # credit for a batch of version 1 (dropped by the app)
    assert credit.outstanding_messages == 1
    assert credit.reset(1) is None and credit.version == 2


def test_credit_never_goes_negative_and_limits_can_change() -> None:
    credit = PrefetchCredit(10, 100)
    credit.credited(0, 5, 50)
    assert (credit.outstanding_messages, credit.outstanding_bytes) == (0, 0)
    credit.delivered(3, 30)
    assert credit.set_limits(3, 100) is False
    assert credit.set_limits(4, 100) is True
    with pytest.raises(ValueError):
        credit.set_limits(0, 100)


def test_partition_limits_share_the_byte_budget() -> None:
    settings = FetchSettings(queued_min_messages=500, queued_max_messages_kbytes=1024)
    assert partition_limits(settings, 4) == (500, 262_144)
    assert partition_limits(settings, 0) == (500, 1_048_576)


def test_returner_sends_at_a_quarter_and_flushes_only_what_lowered_limits_made_due() -> None:
    returner = CreditReturner()
    returner.set_limits("p", 100, 10_000)
    assert returner.consumed("p", 1, 20, 100) is None
    assert returner.consumed("p", 1, 5, 100) == (1, 25, 200)
    assert returner.consumed("p", 1, 1, 10) is None
    assert returner.flush() == []  # below the threshold: it cannot keep fetching closed, so it waits
    returner.set_limits("p", 4, 10_000)  # more partitions assigned: the threshold drops to 1 message
    assert returner.flush() == [("p", 1, 1, 10)]
    assert returner.flush() == []


def test_returner_drops_older_versions_and_unknown_partitions() -> None:
    returner = CreditReturner()
    returner.set_limits("p", 100, 10_000)
    returner.consumed("p", 2, 3, 30)
    assert returner.consumed("p", 1, 50, 50) is None
    assert returner.consumed("p", 3, 1, 1) is None  # newer version: older remainder discarded
    assert returner.consumed("p", 3, 24, 1) == (3, 25, 2)
    assert returner.consumed("unknown", 1, 1000, 10**9) is None
    returner.forget("p")
    assert returner.consumed("p", 3, 1000, 10**9) is None
    with pytest.raises(ValueError):
        CreditReturner(0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.integers(100, 5000), st.integers(1, 40), st.integers(0, 2**32),
       st.one_of(st.none(), st.tuples(st.integers(0, 300), st.integers(1, 50), st.integers(1, 5000))))
def test_app_and_toppar_never_deadlock_and_stay_bounded(max_msgs, max_bytes, fetch_msgs, seed, lowered) -> None:
    """Fetch while allowed, the app consumes a random amount each round; all produced data gets consumed,
    also when both sides get new (e.g. lowered) limits at some round."""
    rng = random.Random(seed)
    credit = PrefetchCredit(max_msgs, max_bytes, version=1)
    returner = CreditReturner()
    returner.set_limits("p", max_msgs, max_bytes)
    queue: list[tuple[int, int]] = []  # (messages, bytes) batches in the app
    to_fetch = 400
    consumed = 0
    msg_size = 37
    for round_ in range(10_000):
        if lowered is not None and round_ == lowered[0]:
            max_msgs, max_bytes = lowered[1], lowered[2]
            credit.set_limits(max_msgs, max_bytes)
            returner.set_limits("p", max_msgs, max_bytes)
        if credit.fetch_allowed and to_fetch:
            n = min(fetch_msgs, to_fetch)
            to_fetch -= n
            queue.append((n, n * msg_size))
            credit.delivered(n, n * msg_size)
            if lowered is None:  # bounded: at most one fetch beyond a limit
                assert credit.outstanding_messages < max_msgs + fetch_msgs
                assert credit.outstanding_bytes < max_bytes + fetch_msgs * msg_size
        if queue and rng.random() < 0.7:
            n, nbytes = queue.pop(0)
            consumed += n
            back = returner.consumed("p", 1, n, nbytes)
            if back is not None:
                credit.credited(*back)
        if not queue:
            for _key, *back in returner.flush():  # the app's queue ran dry
                credit.credited(*back)
        if consumed == 400:
            break
    assert consumed == 400
