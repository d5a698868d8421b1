"""The ``kqactors`` command line.

Runs in: the user's shell process. ``main.py`` parses arguments and dispatches to one module per
subcommand (``broker.py`` today).
"""
