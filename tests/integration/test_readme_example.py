"""The README's Python example, run as written against an embedded broker, prints what the README says.

The example names 127.0.0.1:9092 (``kqactors broker --port 9092``); the test gives it a broker of its own on a
free port (a fresh one, so the offsets start at 0) by rewriting only that address.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kqactors.testing.tansu import TansuBroker

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.timeout(120)


def _blocks(language: str) -> list[str]:
    """The fenced blocks of the README opened with ```<language> (an empty language: plain ```)."""
    blocks, current, opened = [], [], None
    for line in README.read_text().splitlines(keepends=True):
        if line.startswith("```"):
            if opened is None:
                opened, current = line[3:].strip(), []
            else:
                if opened == language:
                    blocks.append("".join(current))
                opened = None
        elif opened is not None:
            current.append(line)
    return blocks


def test_the_readme_example_prints_what_the_readme_shows(tansu):  # the fixture: skips when Tansu is missing
    (example,) = [b for b in _blocks("python") if "Consumer" in b and "Producer" in b]
    shown = next(b for b in _blocks("") if b.startswith("delivered:"))
    assert "kqactors broker --port 9092" in README.read_text() and "127.0.0.1:9092" in example
    with TansuBroker() as broker:
        code = example.replace("127.0.0.1:9092", broker.bootstrap)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == shown
