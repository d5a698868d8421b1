"""Runs in: developer tool. Entry point for ``python -m kqactors.protocol.codegen``."""

from kqactors.protocol.codegen import main

raise SystemExit(main())
