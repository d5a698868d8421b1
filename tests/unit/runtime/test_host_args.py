"""Runs in: pytest (and one child interpreter). A host reads the supervisor's command line without argparse
(kqactors.runtime.host_process.parse_args) and hands everything else to argparse, with the same result."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import kqactors
from kqactors.runtime.host_launch import host_interpreter
from kqactors.runtime.host_process import _parse_with_argparse, parse_args

_FIELDS = ("key", "run_dir", "parent_pid", "log_level", "restarted")


@pytest.mark.parametrize("argv", [
    ["--key", "h0", "--run-dir", "/tmp/r", "--parent-pid", "42", "--log-level", "INFO"],
    ["--key", "h1", "--run-dir", "/tmp/r", "--parent-pid", "42", "--log-level", "WARNING", "--restarted"],
    ["--restarted", "--parent-pid", "7", "--key", "main host", "--run-dir", "/r"],
    ["--key=h2", "--run-dir", "/r", "--parent-pid", "007"],  # forms only argparse reads
    ["--key", "h3", "--run-dir", "/r", "--parent-pid", "12", "--log-level", "DEBUG"],
])
def test_same_result_as_argparse(argv: list[str]) -> None:
    ours, theirs = parse_args(argv), _parse_with_argparse(argv)
    assert [getattr(ours, f) for f in _FIELDS] == [getattr(theirs, f) for f in _FIELDS]


@pytest.mark.parametrize("argv", [
    ["--run-dir", "/r", "--parent-pid", "1"],  # no key
    ["--key", "h0", "--run-dir", "/r", "--parent-pid", "x"],
    ["--key", "h0", "--run-dir", "/r", "--parent-pid", "1", "--bogus"],
    ["--key", "h0", "--run-dir", "/r", "--parent-pid"],
])
def test_a_bad_command_line_is_refused_by_argparse(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_help_is_argparses() -> None:
    done = subprocess.run([sys.executable, "-m", "kqactors.runtime.host_process", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "--parent-pid" in done.stdout and "--restarted" in done.stdout


def test_the_supervisors_command_line_loads_no_argparse() -> None:
    probe = ("import sys; from kqactors.runtime.host_process import parse_args; "
             "args = parse_args(['--key', 'h0', '--run-dir', '/r', '--parent-pid', '5']); "
             "print(args.key, args.parent_pid, 'argparse' in sys.modules)")
    options, env = _host_interpreter()  # started as a host is (host_launch.py), site's imports not counted
    done = subprocess.run([sys.executable, *options, "-c", probe], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["h0", "5", "False"]


def _host_interpreter() -> tuple[list[str], dict[str, str]]:
    return host_interpreter(os.path.dirname(os.path.dirname(os.path.abspath(kqactors.__file__))), os.environ)
