"""Argument types shared by the ``kqactors`` subcommands (argparse ``type=`` callables).

Runs in: the CLI process. Each turns the text into a number or raises ``argparse.ArgumentTypeError``, which
argparse reports as a usage error (exit 2) naming the option.
"""

from __future__ import annotations

import argparse

__all__ = ["positive_int", "non_negative_int", "positive_float", "non_negative_float"]


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value
