"""Runs in: a child interpreter per test (freezing the GC of pytest's own process would outlive the test). A host
started with the GC off (host_launch.py) turns it on, with its start-up objects frozen, once it has settled:
the first wait with an actor running, or after the limit (kqactors.runtime.host_process.StartupGc)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import gc, json, types
    from kqactors.runtime.host_process import StartupGc

    gc.disable()
    now = [100.0]
    core = types.SimpleNamespace(actors={})
    startup = StartupGc(core, limit=5.0, clock=lambda: now[0])
    seen = []

    def look():
        seen.append([gc.isenabled(), gc.get_freeze_count() > 0])

    startup.before_wait()
    look()  # no actor yet, within the limit: still starting
    if MODE == "actor":
        core.actors["main"] = object()
    else:
        now[0] += 5.0
    startup.before_wait()
    look()
    kept = gc.get_freeze_count()
    garbage = [[] for _ in range(1000)]
    startup.before_wait()  # once settled, later waits change nothing
    look()
    seen.append(gc.get_freeze_count() == kept)
    print(json.dumps(seen))
""")


def _run(mode: str) -> list:
    done = subprocess.run([sys.executable, "-c", f"MODE = {mode!r}\n" + _SCRIPT], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_gc_comes_on_frozen_at_the_first_wait_with_an_actor() -> None:
    assert _run("actor") == [[False, False], [True, True], [True, True], True]


def test_a_host_without_actors_turns_it_on_after_the_limit() -> None:
    assert _run("limit") == [[False, False], [True, True], [True, True], True]
