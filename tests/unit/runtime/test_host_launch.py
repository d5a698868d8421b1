"""Runs in: pytest. How a host's interpreter is started (kqactors/runtime/host_launch.py): without ``site`` and
with the app's import path when the app's start only added paths, with ``site`` as before otherwise; and a host
started the first way imports what a host needs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import kqactors
from kqactors.runtime.host_launch import host_interpreter

ROOT = "/the/package/root"


class _ForeignHook:
    """An import hook kqactors does not know (e.g. one a .pth file installed)."""

    def find_spec(self, *_args: object) -> None:
        return None


def test_without_site_the_host_gets_the_apps_import_path() -> None:
    options, env = host_interpreter(ROOT, {"PYTHONPATH": "/user/dir", "HOME": "/h"})
    assert options == ["-S"]
    path = env["PYTHONPATH"].split(os.pathsep)
    assert path[0] == ROOT
    site_dirs = [p for p in sys.path if p.endswith("site-packages")]
    assert site_dirs and all(p in path for p in site_dirs)  # where zmq, msgpack and the codecs are
    assert env["HOME"] == "/h"


@pytest.mark.parametrize("why", ["hook", "sitecustomize", "coverage"])
def test_an_app_start_that_did_more_than_add_paths_keeps_site(monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    env = {"PYTHONPATH": "/user/dir"}
    if why == "hook":
        monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, _ForeignHook()])
    elif why == "sitecustomize":
        monkeypatch.setitem(sys.modules, "sitecustomize", type(sys)("sitecustomize"))
    else:
        env["COVERAGE_PROCESS_START"] = "/x/.coveragerc"
    options, host_env = host_interpreter(ROOT, env)
    assert options == []
    assert host_env["PYTHONPATH"] == os.pathsep.join([ROOT, "/user/dir"])  # as before: site adds the rest


def test_a_host_started_without_site_imports_its_modules() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(kqactors.__file__)))
    options, env = host_interpreter(root, os.environ)
    assert options == ["-S"]
    probe = ("import sys, zmq, msgpack, kqactors.runtime.host_process, kqactors.actors.main, "
             "kqactors.actors.broker.actor, kqactors.actors.toppar, kqactors.records.compression as c; "
             "c.decompress(c.ZSTD, c.compress(c.ZSTD, b'x' * 100)); c.decompress(c.LZ4, c.compress(c.LZ4, b'y')); "
             "c.decompress(c.SNAPPY, c.compress(c.SNAPPY, b'z')); "
             "print(sys.flags.no_site, kqactors.__file__)")
    done = subprocess.run([sys.executable, *options, "-c", probe], env=env, capture_output=True, text=True,
                          timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    no_site, package = done.stdout.split()
    assert no_site == "1" and package.startswith(root)
