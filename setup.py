"""Build hook: ``KDISPATCH_COMPILE=1 pip install .`` compiles the pure core modules with mypyc.

Without the variable (the default) this is a plain setuptools build and kdispatch is pure
Python. With it, the modules in :data:`COMPILED` become C extensions beside their ``.py``
sources; a module that is not compiled stays Python, and an interpreter without the extensions
imports the sources. Metadata lives in setup.cfg.
"""

from __future__ import annotations

import os

from setuptools import setup

COMPILED = (
    "objects",
    "kinds",
    "lazy_condition",
    "ratelimit",
    "calls",
    "pod_calls",
    "claim_calls",
    "object_state",
)
"""The modules of ``kdispatch.actors`` compiled under ``KDISPATCH_COMPILE=1``: the pure ones,
where the instructions per call go (docs/performance-notes.md)."""

MYPYC_REQUIREMENT = "mypy>=1.10"


def compile_requested() -> bool:
    """Whether ``KDISPATCH_COMPILE`` asks for the compiled build (1, true, yes or on)."""
    return os.environ.get("KDISPATCH_COMPILE", "").strip().lower() in {"1", "true", "yes", "on"}


def main() -> None:
    if not compile_requested():
        setup()
        return
    try:
        from mypyc.build import mypycify
    except ImportError:
        # setuptools' build backend asks first which build requirements to install
        # (setup_requires), then runs this again with mypy there.
        setup(setup_requires=[MYPYC_REQUIREMENT])
        return
    # Through the kdispatch/actors link, so that the extensions are kdispatch.actors.*.
    paths = [os.path.join("kdispatch", "actors", f"{name}.py") for name in COMPILED]
    options = ["--config-file=setup.cfg", "--ignore-missing-imports"]
    # separate: each module on its own, with no whole-program view of the class hierarchy. With
    # one, mypyc takes the call classes (Python classes, which users subclass) to have no
    # subclasses, and its isinstance checks and casts refuse users' own call types.
    extensions = mypycify([*options, *paths], separate=True)
    setup(setup_requires=[MYPYC_REQUIREMENT], ext_modules=extensions)


main()
