"""Build of the optional C extensions (everything else is in pyproject.toml): kqactors._native (the
app-side hot paths of the producer and consumer; four files sharing kqactors/_native.h) and
kqactors._native_records (the record codec's per-record loops in the toppar hosts).

The extensions are optional: when one cannot be compiled (no C compiler, no Python headers) the install
goes on without it and kqactors runs its pure-Python twins (see kqactors/native.py).
"""

from setuptools import Extension, setup

WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
# Only PyInit_* is exported (PyMODINIT_FUNC); what the files of one module share stays inside it.
COMPILE_ARGS = [*WARNINGS, "-fvisibility=hidden"]
NATIVE_SOURCES = ["kqactors/_native.c", "kqactors/_native_buffers.c", "kqactors/_native_produce.c",
                  "kqactors/_native_take.c"]

setup(
    ext_modules=[
        Extension(
            "kqactors._native",
            sources=NATIVE_SOURCES,
            depends=["kqactors/_native.h"],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
        Extension(
            "kqactors._native_records",
            sources=["kqactors/_native_records.c"],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
    ]
)
