"""Runs in: pytest. Adaptive placement's decisions (kqactors/client/handle/placement.py) on a fake clock: when a
toppar host joins, where partitions go, and the simulated core count."""

from __future__ import annotations

import pytest
from support.clock import FakeClock

from kqactors.client.handle.placement import (
    PAYOFF_S,
    SETTLE_S,
    WINDOW_S,
    AdaptivePlacement,
    core_count,
    fixed_host_for,
)


def _run(placement: AdaptivePlacement, clock: FakeClock, rate: float, seconds: float) -> int:
    """Hand over at ``rate`` msgs/s in 10 ms steps for ``seconds``; returns how many joins were asked for."""
    asked = 0
    for _ in range(int(seconds / 0.01)):
        clock.advance(0.01)
        if placement.note(int(rate * 0.01)):
            asked += 1
            placement.grew()
    return asked


def test_a_quiet_client_stays_on_the_main_host_and_hosts_join_as_the_rate_climbs() -> None:
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=3, rate=1_000, clock=clock)
    assert _run(placement, clock, 500, 5) == 0
    assert placement.toppar_hosts == 0 and placement.host_for("t", 7) == 0
    assert _run(placement, clock, 1_500, PAYOFF_S + WINDOW_S * 2) == 1  # > 1,000 with main alone: one host
    assert placement.toppar_hosts == 1
    assert _run(placement, clock, 1_500, SETTLE_S * 2) == 0  # 1,500 < 2 x 1,000: enough
    assert _run(placement, clock, 10_000, SETTLE_S * 10) == 2  # up to max_hosts, one per settle period
    assert placement.toppar_hosts == 3
    assert {placement.host_for("t", p) for p in range(6)} == {1, 2, 3}
    assert [placement.host_for("t", p) for p in range(6)] == [fixed_host_for("t", p, 3) for p in range(6)]


def test_a_producers_burst_shorter_than_the_payoff_time_starts_no_host() -> None:
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=3, rate=1_000, clock=clock)
    assert _run(placement, clock, 50_000, PAYOFF_S - WINDOW_S) == 0  # flat out, but over before a host pays off
    assert _run(placement, clock, 100, 1) == 0  # the burst ended
    assert _run(placement, clock, 50_000, PAYOFF_S - WINDOW_S) == 0  # a new burst counts from its own start
    assert _run(placement, clock, 50_000, WINDOW_S * 3) == 1  # it lasted PAYOFF_S: a stream, one host joins
    assert placement.toppar_hosts == 1


def test_one_slow_window_in_a_producers_stream_does_not_restart_the_payoff_time() -> None:
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=3, rate=1_000, clock=clock)
    assert _run(placement, clock, 50_000, 1.0) == 0
    assert _run(placement, clock, 100, WINDOW_S) == 0  # one window with a full queue, say
    assert _run(placement, clock, 50_000, PAYOFF_S - 1.0 + WINDOW_S) == 1  # the stream counts from its start


def test_a_window_closed_by_retire_due_is_still_judged_for_a_join() -> None:
    """The producer's hand-over asks retire_due() before note(): whichever closes a window, it is judged once."""
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=3, rate=1_000, clock=clock, retire_s=30)
    joins = 0
    for _ in range(int((PAYOFF_S + 2 * WINDOW_S) / 0.01)):
        clock.advance(0.01)
        placement.retire_due()
        if placement.note(500):  # 50k/s
            joins += 1
            placement.grew()
    assert joins == 1


def test_core_count_can_be_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KQACTORS_CPU_COUNT", "64")
    assert core_count() == 64
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv("KQACTORS_CPU_COUNT", bad)
        with pytest.raises(ValueError):
            core_count()
    with pytest.raises(ValueError):
        AdaptivePlacement(max_hosts=2, rate=0)


def _idle(placement: AdaptivePlacement, clock: FakeClock, rate: float, seconds: float) -> int:
    """Hand over at ``rate`` msgs/s (0: nothing at all) for ``seconds``, asking ``retire_due`` as a hand-over
    thread does every tick; returns how many retirements were asked for (each one done at once)."""
    retired = 0
    for _ in range(int(seconds / 0.01)):
        clock.advance(0.01)
        if rate:
            placement.note(int(rate * 0.01))
        if placement.retire_due():
            retired += 1
            placement.retire()
    return retired


def test_hosts_retire_one_by_one_after_the_rate_stays_low_for_retire_s() -> None:
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=3, rate=1_000, clock=clock, retire_s=10)
    for index in (4, 6, 7):  # runtime indexes: a retired host's index is never reused
        placement.grew(index)
    assert placement.hosts == [4, 6, 7] and {placement.host_for("t", p) for p in range(6)} == {4, 6, 7}
    assert _idle(placement, clock, 2_000, 30) == 0  # 2,000 >= half of 3 x 1,000: all three stay
    assert _idle(placement, clock, 1_000, 9) == 0  # low, but not for retire_s yet
    assert _idle(placement, clock, 1_000, 2) == 1  # low for 10 s: the last host to join leaves
    assert placement.hosts == [4, 6] and {placement.host_for("t", p) for p in range(6)} == {4, 6}
    assert _idle(placement, clock, 1_100, 30) == 0  # 1,100 >= half of 2 x 1,000: no flapping
    assert _idle(placement, clock, 0, 10 + SETTLE_S + 1) == 1  # nothing flows at all: the rate is 0
    assert _idle(placement, clock, 0, 11) == 1
    assert placement.hosts == [] and placement.host_for("t", 3) == 0
    assert not placement.retire_due()


def test_retire_s_zero_keeps_the_hosts() -> None:
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=2, rate=1_000, clock=clock)
    placement.grew(1)
    assert _idle(placement, clock, 0, 120) == 0 and placement.hosts == [1]
    with pytest.raises(ValueError):
        AdaptivePlacement(max_hosts=2, rate=10, retire_s=-1)


def _consume(placement: AdaptivePlacement, clock: FakeClock, rate: float, seconds: float,
             backlog: list[int]) -> list[float]:
    """A consumer taking ``rate`` records/s in 10 ms steps for ``seconds`` from ``backlog[0]`` records known to be
    there (each step consumes from it; it never goes below 0): the times a join was asked for (each done at once)."""
    joins = []
    started = clock()
    for _ in range(int(seconds / 0.01)):
        clock.advance(0.01)
        taken = min(int(rate * 0.01), backlog[0])
        backlog[0] -= taken
        if placement.note(taken, lambda: backlog[0]):
            joins.append(round(clock() - started, 2))
            placement.grew()
    return joins


def test_a_consumer_reads_a_burst_that_ends_before_a_host_pays_off_where_it_is() -> None:
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=3, rate=1_000, clock=clock)
    # 1M records at 1M/s: over in 1 s, less than PAYOFF_S: read where they are.
    assert _consume(placement, clock, 1_000_000, 1.5, [1_000_000]) == []
    assert placement.toppar_hosts == 0


def test_a_consumer_with_a_long_backlog_gets_a_host_after_two_busy_windows() -> None:
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=3, rate=1_000, clock=clock)
    backlog = [10_000_000]  # 10 s at 1M/s
    joins = _consume(placement, clock, 1_000_000, 1.2, backlog)
    assert len(joins) == 1 and 2 * WINDOW_S <= joins[0] < 3 * WINDOW_S, joins


def test_a_consumer_keeping_up_with_a_stream_gets_a_host_once_the_rate_has_lasted() -> None:
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=3, rate=1_000, clock=clock)
    started = clock()
    asked: list[float] = []
    joins: list[float] = []
    for _ in range(int((PAYOFF_S + 3 * WINDOW_S) / 0.01)):  # 50k/s, never more than 100 records waiting: no backlog to speak of
        clock.advance(0.01)
        if placement.note(500, lambda: asked.append(clock() - started) or 100):
            joins.append(clock() - started)
            placement.grew()
    assert len(joins) == 1 and PAYOFF_S <= joins[0] < PAYOFF_S + 2 * WINDOW_S, joins
    assert asked and all(at < joins[0] for at in asked)  # the small backlog held it off until then


def test_the_backlog_is_not_asked_while_the_rate_is_low() -> None:
    clock = FakeClock()
    placement = AdaptivePlacement(max_hosts=3, rate=1_000, clock=clock)

    def backlog() -> int:
        raise AssertionError("asked for the backlog at a rate that calls for no host")

    for _ in range(500):
        clock.advance(0.01)
        assert not placement.note(5, backlog)  # 500/s
