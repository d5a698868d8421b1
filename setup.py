"""Build of the optional C extension kqactors._native (everything else is in pyproject.toml).

The extension is optional: when it cannot be compiled (no C compiler, no Python headers) the install goes
on without it and kqactors runs its pure-Python twins (see kqactors/native.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kqactors._native",
            sources=["kqactors/_native.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
            optional=True,
        )
    ]
)
