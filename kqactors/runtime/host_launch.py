"""Runs in: the app process (the supervisor's launcher thread). Owns how a host's interpreter is started: the
interpreter options before ``-m kqactors.runtime.host_process`` and the host's PYTHONPATH.

A host starts with ``-S`` (no ``site`` module) and the app's import path as its PYTHONPATH when that gives it
the same modules: ``site`` reads every .pth file of every site directory at each interpreter start and runs
their ``import`` lines (an editable install's finder, a distribution's patch hooks: 30–50 ms of a host's start
on the benchmark machine, before any kqactors code), though a host needs only the directories that put on
``sys.path``, which the app has already computed. That holds when the app's own start did nothing but add
paths. When it did more that a host could need — a ``sitecustomize`` or ``usercustomize`` ran, an import hook
other than Python's own, kqactors' editable-install finder, setuptools' distutils shim or pytest's assertion
rewriter is installed, or coverage measures subprocesses (COVERAGE_PROCESS_START) — hosts start with ``site``
as a plain interpreter does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

# modules of the import hooks a host can do without: Python's own, setuptools' distutils shim, kqactors'
# editable install (the package root is on the host's path anyway) and pytest's assertion rewriter (hosts
# never had it: they are not started by pytest's import machinery)
_KNOWN_HOOK_MODULES = ("_frozen_importlib", "_frozen_importlib_external", "_distutils_hack",
                       "_pytest.assertion.rewrite")
_KQACTORS_EDITABLE_FINDER = "__editable___kqactors_"


def _app_start_only_added_paths(env: Mapping[str, str]) -> bool:
    if "sitecustomize" in sys.modules or "usercustomize" in sys.modules or env.get("COVERAGE_PROCESS_START"):
        return False
    for hook in sys.meta_path:
        module = str(getattr(hook, "__module__", ""))
        if module not in _KNOWN_HOOK_MODULES and not module.startswith(_KQACTORS_EDITABLE_FINDER):
            return False
    return True


def host_interpreter(package_root: str, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The options before ``-m`` and the environment for a host; ``package_root`` (the directory holding the
    kqactors package) comes first on the host's path, so the host runs the app's kqactors."""
    host_env = dict(env)
    inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    if sys.flags.no_site or not _app_start_only_added_paths(env):
        host_env["PYTHONPATH"] = os.pathsep.join([package_root, *inherited])
        return [], host_env
    # sys.path[0] is the app's script directory (or the cwd), which a host never had, unless -P/PYTHONSAFEPATH
    # (Python 3.11+) left it out
    app_path = sys.path if getattr(sys.flags, "safe_path", False) else sys.path[1:]
    host_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([package_root, *(p for p in app_path if p)]))
    return ["-S"], host_env
