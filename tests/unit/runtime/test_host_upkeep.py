"""Runs in: the test process (and one child for the RSS check). What a host's loop does when it is about to
wait (kqactors.runtime.host_process): hand glibc's free heap pages back at most once per interval
(AllocatorTrim: the soak's hosts crept up in RSS with their live memory flat), and freeze its start-up objects
once spawning has settled (StartupFreeze: a full collection walking them was bench_latency's worst pause)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from support.clock import FakeClock

from kqactors.runtime.host_process import AllocatorTrim


def test_trims_at_most_once_per_interval_and_only_when_it_is_due() -> None:
    clock = FakeClock()
    trim = AllocatorTrim(interval=30.0, clock=clock)
    calls: list[int] = []
    trim._trim = calls.append  # the C call itself is exercised by the RSS test below
    trim.before_wait()
    clock.now += 29.9
    trim.before_wait()
    assert calls == []  # not before the first interval: a short-lived host never pays for it
    clock.now += 0.2
    trim.before_wait()
    trim.before_wait()
    assert calls == [0] and trim.trims == 1
    clock.now += 30.0
    trim.before_wait()
    assert calls == [0, 0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim and /proc are glibc/Linux")
def test_a_trim_returns_the_free_pages_between_live_blocks() -> None:
    # Fragment the C heap the way varied frames do: keep every 7th block, free the rest. glibc keeps the
    # freed pages (they sit below live blocks) until malloc_trim(0) releases them.
    script = textwrap.dedent("""
        import random
        from kqactors.runtime.host_process import AllocatorTrim

        def rss_kib():
            with open("/proc/self/status") as status:
                return int(status.read().split("VmRSS:")[1].split()[0])

        rng = random.Random(7)
        kept, passing = [], []
        for i in range(30000):
            block = bytearray(rng.randint(1000, 20000))
            (kept if i % 7 == 0 else passing).append(block)
            if len(passing) > 500:
                passing.clear()
        passing.clear()
        trim = AllocatorTrim(interval=0.0)
        before = rss_kib()
        trim.before_wait()
        print(before, rss_kib(), trim.trims)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    before, after, trims = map(int, out.split())
    assert trims == 1
    assert before - after > 2048, (before, after)  # at least 2 MiB of free pages handed back


def test_the_start_up_objects_are_frozen_once_spawning_has_settled() -> None:
    import gc

    from kqactors.runtime.host_process import StartupFreeze

    clock = FakeClock()
    freeze = StartupFreeze(settle=1.0, clock=clock)
    frozen_before = gc.get_freeze_count()
    try:
        freeze.before_wait(spawns=0)
        clock.now += 5
        freeze.before_wait(spawns=0)
        assert freeze.freezes == 0  # nothing spawned yet: nothing settled
        freeze.before_wait(spawns=2)  # main and a broker actor
        clock.now += 0.5
        freeze.before_wait(spawns=3)  # one more: the settle time starts again
        clock.now += 0.9
        freeze.before_wait(spawns=3)
        assert freeze.freezes == 0
        clock.now += 0.2
        freeze.before_wait(spawns=3)
        assert freeze.freezes == 1
        assert gc.get_freeze_count() > frozen_before  # the objects alive now are out of every collection
        clock.now += 10
        freeze.before_wait(spawns=3)
        assert freeze.freezes == 1  # once per burst of spawns
    finally:
        gc.unfreeze()
