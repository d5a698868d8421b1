"""Build of the optional C extensions (everything else is in pyproject.toml): kqactors.native._native (the
app-side hot paths of the producer and consumer; four files sharing kqactors/native/_native.h) and
kqactors.native._native_records (the record codec's per-record loops in the toppar hosts).

The extensions are optional: when one cannot be compiled (no C compiler, no Python headers) the install
goes on without it and kqactors runs its pure-Python twins (see kqactors/native/__init__.py).
"""

from setuptools import Extension, setup

WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
# Only PyInit_* is exported (PyMODINIT_FUNC); what the files of one module share stays inside it.
COMPILE_ARGS = [*WARNINGS, "-fvisibility=hidden"]
NATIVE_SOURCES = ["kqactors/native/_native.c", "kqactors/native/_native_buffers.c", "kqactors/native/_native_produce.c",
                  "kqactors/native/_native_take.c"]

setup(
    ext_modules=[
        Extension(
            "kqactors.native._native",
            sources=NATIVE_SOURCES,
            depends=["kqactors/native/_native.h"],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
        Extension(
            "kqactors.native._native_records",
            sources=["kqactors/native/_native_records.c"],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
    ]
)
