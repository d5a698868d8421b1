"""The supervisor's decisions without processes: which workers a reload restarts, adds or removes, what a bad
file changes (nothing), restarts with back-off after an unasked exit, and the exit status."""

from __future__ import annotations

import io

from kqactors.ingest.config import ConfigError, parse_config
from kqactors.ingest.supervisor import Supervisor, _Worker

from .fakes import Clock


def config(sources, **top):
    return parse_config({"source": sources, **top}, {"bootstrap": "b:1", "topic": "t", "state_dir": "/tmp/s"})


class FakeProc:
    def __init__(self) -> None:
        self.returncode = None
        self.exit = None            # set by the test: the status the next poll() reaps
        self.pid = 4242
        self.stderr = None

    def poll(self):
        if self.exit is not None:
            self.returncode = self.exit
        return self.returncode

    def send_signal(self, sig):
        self.signalled = sig


class Recording(Supervisor):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, stderr=io.StringIO(), **kwargs)
        self.started: list[str] = []
        self.terminated: list[str] = []

    def _start(self, w: _Worker) -> None:
        w.proc = FakeProc()
        w.started = self.clock()
        w.exit_code = None
        w.stopping = False
        self.workers[w.group] = w
        self.started.append(w.group)

    def _terminate(self, w: _Worker) -> None:
        w.stopping = True
        self.terminated.append(w.group)


A = {"name": "a", "paths": ["/a"], "group": "ga"}
B = {"name": "b", "paths": ["/b"], "group": "gb"}


def test_reload_restarts_only_what_changed():
    configs = [config([A, B])]
    sup = Recording(configs[0], reload=lambda: configs[-1], clock=Clock())
    for spec in __import__("kqactors.ingest.config", fromlist=["worker_groups"]).worker_groups(configs[0]):
        sup._start(_Worker(spec))
    assert sup.started == ["ga", "gb"]
    configs.append(config([A, {**B, "topic": "other"}, {"name": "c", "paths": ["/c"], "group": "gc"}]))
    sup._reload()
    assert sup.terminated == ["gb"] and sup.started[-1] == "gc"
    # gb's replacement starts once the old one has exited (after its drain)
    sup.workers["gb"].proc.exit = 0
    sup._reap()
    assert sup.started[-1] == "gb" and sup.workers["gb"].spec.sources[0].topic == "other"
    configs.append(config([A, {**B, "topic": "other"}]))
    sup._reload()
    assert sup.terminated[-1] == "gc"
    sup.workers["gc"].proc.exit = 0
    sup._reap()
    assert "gc" not in sup.workers


def test_a_bad_reload_keeps_the_running_configuration():
    def broken():
        raise ConfigError("nope")

    sup = Recording(config([A]), reload=broken, clock=Clock())
    sup._reload()
    assert not sup.terminated and not sup.started


def test_unasked_exits_restart_with_back_off_and_finished_workers_do_not():
    clock = Clock()
    sup = Recording(config([A, B]), clock=clock)
    for group in ("ga", "gb"):
        sup._start(_Worker(next(s for s in __import__("kqactors.ingest.config", fromlist=["worker_groups"])
                                .worker_groups(sup.config) if s.group == group)))
    sup.workers["ga"].proc.exit = -9
    sup.workers["gb"].proc.exit = 0
    sup._reap()
    ga, gb = sup.workers["ga"], sup.workers["gb"]
    assert ga.restart_at == clock.now + 1.0 and ga.backoff == 2.0 and sup.board.restarts == {"ga": 1}
    assert gb.done and gb.restart_at is None
    ga.restart_at = None      # as the loop does when the back-off is over
    sup._start(ga)
    ga.proc.exit = 2          # unusable configuration: not restarted, and the daemon's status says so
    sup._reap()
    assert ga.done and ga.restart_at is None
    assert sup._exit_code() == 2
