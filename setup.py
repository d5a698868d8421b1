"""Build of the optional C extensions (everything else is in pyproject.toml): kqactors._native (the
producer's app-side hot path) and kqactors._native_records (the record codec's per-record loops).

The extensions are optional: when one cannot be compiled (no C compiler, no Python headers) the install
goes on without it and kqactors runs its pure-Python twins (see kqactors/native.py).
"""

from setuptools import Extension, setup

WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(
    ext_modules=[
        Extension("kqactors._native", sources=["kqactors/_native.c"], extra_compile_args=WARNINGS, optional=True),
        Extension(
            "kqactors._native_records",
            sources=["kqactors/_native_records.c"],
            extra_compile_args=WARNINGS,
            optional=True,
        ),
    ]
)
