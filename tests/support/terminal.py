"""Child processes that get Ctrl+C as in a terminal, however the test run itself was started.

A test runner started in the background (``cmd &`` in a script, nohup) passes SIGINT on ignored, and a Python
child then leaves it ignored: a test that sends SIGINT would fail for that alone. Runs in: the pytest process
(the command it builds runs in the child).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_PROLOGUE = (
    "import runpy, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "args = sys.argv[1:]\n"
    "if args[0] == '-m':\n"
    "    sys.argv = args[1:]\n"
    "    runpy.run_module(args[1], run_name='__main__', alter_sys=True)\n"
    "else:\n"
    "    sys.argv = args\n"
    "    runpy.run_path(args[0], run_name='__main__')\n"
)


def python_with_ctrl_c(*args: str) -> list[str]:
    """The command line of ``python *args`` (a script and its arguments, or ``-m module ...``) with Ctrl+C
    raising KeyboardInterrupt in it."""
    return [sys.executable, "-c", _PROLOGUE, *args]


@contextmanager
def ctrl_c_in_this_process() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt here while inside (the handler before is put back after)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
