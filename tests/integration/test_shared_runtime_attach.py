"""Attaching to a shared runtime (kqactors/runtime/shared.py) without waits a running runtime can spare: the app
and the hosts are connected both ways before the app's first op, a member of a group whose actors exist asks the
server nothing beyond the attach (and no metadata for a topic the group serves), a spawn not waited for is answered before the host has made the actor, the
hosts hold every request kind's tables before the first client, and an attach the server never answers fails
with TIMED_OUT."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import pytest
import zmq
from shared_runtime_helpers import ROOT, start_runtime, stop_runtime
from support.waiting import wait_until
from zmq.utils.monitor import recv_monitor_message

from kqactors import Producer
from kqactors.client.handle import handle as handle_module
from kqactors.runtime import shared
from kqactors.runtime.op import ActorError, ErrorCode, Op
from kqactors.runtime.shared import AttachedRuntime, runtime_status

pytestmark = pytest.mark.integration

ECHO = "support.sample_actors:EchoActor"


@pytest.fixture(scope="module")
def runtime() -> Iterator[tuple[str, subprocess.Popen]]:
    """One runtime (main's host + 1 toppar host) whose hosts can load the tests' sample actors."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        directory = os.path.join(tmp, "rt")
        previous = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, "tests"), previous) if p)
        try:
            proc = start_runtime(directory, 1)
        finally:
            if previous is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = previous
        try:
            yield directory, proc
        finally:
            stop_runtime(proc)


def _accepted(monitor: zmq.Socket) -> int:
    count = 0
    while monitor.poll(0):
        if recv_monitor_message(monitor)["event"] == zmq.EVENT_ACCEPTED:
            count += 1
    return count


def test_the_app_and_the_hosts_are_connected_before_its_first_op(runtime, monkeypatch) -> None:
    directory, _ = runtime
    monitors: list[zmq.Socket] = []
    bind = shared.ZmqInbox.__init__

    def watched_bind(self, *args, **kwargs) -> None:  # watch who connects to the app's inbox from its bind on
        bind(self, *args, **kwargs)
        monitors.append(self.socket.get_monitor_socket(zmq.EVENT_ACCEPTED))

    monkeypatch.setattr(shared.ZmqInbox, "__init__", watched_bind)
    rt = AttachedRuntime(directory)
    try:
        outbox = rt._plumbing.outbox
        assert sorted(outbox.connected()) == sorted(rt.host_keys)  # to every host, before anything was sent
        (monitor,) = monitors
        accepted = [0]

        def everyone_connected() -> bool:
            accepted[0] += _accepted(monitor)
            return accepted[0] >= len(rt.host_keys) + 1  # every host and the server, unasked

        wait_until(everyone_connected, 30, "the hosts and the server to connect to the app's inbox")
        for index, key in enumerate(rt.host_keys):  # a request to each host and its reply: no new connection
            rt.spawn(f"echo{index}", ECHO, host=key)
            assert rt.request(f"echo{index}", Op("ECHO", index), timeout=30).payload == index
        assert sorted(outbox.connected()) == sorted(rt.host_keys)
        assert accepted[0] + _accepted(monitor) == len(rt.host_keys) + 1
        monitor.close(linger=0)
    finally:
        rt.close()


def test_the_hosts_hold_every_request_kinds_tables_before_the_first_client(runtime) -> None:
    directory, _ = runtime
    rt = AttachedRuntime(directory)
    try:
        main_host, toppar_host = rt.host_keys
        wanted = {main_host: ["kqactors.protocol.generated.produce", "kqactors.protocol.generated.fetch",
                              "kqactors.protocol.generated.list_offsets", "kqactors.actors.consumer_main",
                              "kqactors.actors.cgrp"],
                  toppar_host: ["kqactors.actors.shared_toppar", "kqactors.actors.ctoppar"]}
        for key, modules in wanted.items():
            rt.spawn(f"echo-{key}", ECHO, host=key)
            wait_until(lambda k=key, m=modules: all(rt.request(f"echo-{k}", Op("LOADED", m), timeout=30)
                                                    .payload.values()), 30, f"host {key} to load {modules}")
    finally:
        rt.close()


def test_a_spawn_not_waited_for_is_answered_before_the_host_made_the_actor(runtime) -> None:
    directory, _ = runtime
    rt = AttachedRuntime(directory)
    host_pid = runtime_status(directory)["pids"][rt.host_keys[1]]
    os.kill(host_pid, signal.SIGSTOP)  # the host serves nothing, the server still answers
    try:
        assert rt.spawn("late", ECHO, host=1, timeout=2.0, wait=False) == rt.host_keys[1]
        with pytest.raises(ActorError) as raised:  # a spawn that waits for the host does wait
            rt.spawn("waited", ECHO, host=1, timeout=1.0)
        assert raised.value.code in (ErrorCode.TIMED_OUT, ErrorCode.SPAWN_FAILED)
    finally:
        os.kill(host_pid, signal.SIGCONT)
    try:
        assert rt.request("late", Op("ECHO", "back"), timeout=30).payload == "back"  # made once the host ran
    finally:
        rt.close()


def test_a_group_member_whose_actors_and_topic_exist_asks_nothing_but_the_attach(runtime, mock_cluster, unique_topic,
                                                                        monkeypatch) -> None:
    directory, _ = runtime
    conf = {"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": directory, "linger.ms": 0}
    first = Producer(conf)
    try:
        first.produce(unique_topic, b"first", partition=0)
        assert first.flush(30) == 0  # the group has its main and the partition's toppar now
        asked: list[str] = []
        call = shared.RemoteControl.call

        def recorded(self, request, *args, **kwargs):
            asked.append(request.get("op"))
            return call(self, request, *args, **kwargs)

        monkeypatch.setattr(shared.RemoteControl, "call", recorded)
        lookups: list = []
        lookup = handle_module.request_metadata

        def recorded_lookup(runtime, topics, *args, **kwargs):
            lookups.append(topics)
            return lookup(runtime, topics, *args, **kwargs)

        monkeypatch.setattr(handle_module, "request_metadata", recorded_lookup)
        second = Producer(conf)
        try:
            reports: list = []
            second.produce(unique_topic, b"second", partition=0, on_delivery=lambda err, msg: reports.append(err))
            assert second.flush(30) == 0
            assert reports == [None]
            assert asked == ["attach"]  # its main and its toppar are the group's: nothing to spawn
            assert lookups == []  # the group's partition count for the topic came with the attach
        finally:
            second.close()
    finally:
        first.close()


def test_an_attach_the_server_does_not_answer_fails_with_timed_out(runtime) -> None:
    directory, server = runtime
    os.kill(server.pid, signal.SIGSTOP)
    try:
        with pytest.raises(ActorError) as raised:
            AttachedRuntime(directory, timeout=0.5)
        assert raised.value.code == ErrorCode.TIMED_OUT
    finally:
        os.kill(server.pid, signal.SIGCONT)


def test_an_app_proposes_its_namespace_and_gets_another_if_it_is_not_its_own_or_taken(runtime) -> None:
    directory, _ = runtime
    first = AttachedRuntime(directory)
    second = AttachedRuntime(directory)  # the same process: another proposal
    try:
        pid = os.getpid()
        assert first.ns.startswith(f"_ns{pid}x") and second.ns.startswith(f"_ns{pid}x") and first.ns != second.ns
        assert set(runtime_status(directory)["clients"]) >= {first.ns, second.ns}
        control = shared.RemoteControl(directory)
        try:
            taken = control.call({"op": "attach", "pid": pid, "ns": first.ns})["ns"]  # a dead namesake's, say
            foreign = control.call({"op": "attach", "pid": pid, "ns": f"_ns{pid + 1}x1"})["ns"]  # not its pid's
            assert taken not in (first.ns, second.ns) and not taken.startswith(f"_ns{pid}x")
            assert not foreign.startswith(f"_ns{pid + 1}x")
            for ns in (taken, foreign):
                control.call({"op": "detach", "ns": ns})
        finally:
            control.close()
        first.spawn("echo", ECHO, host=0)  # the proposed inbox works: the reply reaches it
        assert first.request("echo", Op("ECHO", "x"), timeout=30).payload == "x"
    finally:
        second.close()
        first.close()
