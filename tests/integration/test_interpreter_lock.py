"""kdispatch needs CPython's global interpreter lock (see the docstring of
``kdispatch.actors``): an interpreter running without it (a free-threaded build, unless started
with ``PYTHON_GIL=1``) is refused at import, and so is ``actors/`` imported under a second
name.

The package's ``__init__`` is run here on a fresh module object (never put in
``sys.modules``) with the build's configuration and ``sys._is_gil_enabled`` faked; one test
does the whole ``import kdispatch`` in a child interpreter.
"""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import kdispatch.actors
from tests.subprocesses import run_command

pytestmark = pytest.mark.timeout(60)

INIT = Path(kdispatch.actors.__file__ or "")
"""The ``__init__`` of kdispatch's core package."""


def load_actors_init(name: str = "kdispatch.actors") -> ModuleType:
    """Run the core package's ``__init__`` as module ``name``, outside ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(
        name, INIT, submodule_search_locations=[str(INIT.parent)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(monkeypatch: pytest.MonkeyPatch, *, free_threaded: bool) -> None:
    """Make ``sysconfig`` report a free-threaded build (``Py_GIL_DISABLED``) or not."""
    real: Callable[[str], object] = sysconfig.get_config_var

    def config_var(name: str) -> object:
        return (1 if free_threaded else 0) if name == "Py_GIL_DISABLED" else real(name)

    monkeypatch.setattr(sysconfig, "get_config_var", config_var)


def test_this_interpreter_runs_with_the_lock() -> None:
    """The lock-free code of the runtime and the registry is only tested with the lock."""
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    assert not sysconfig.get_config_var("Py_GIL_DISABLED") or (
        gil_enabled is not None and gil_enabled()
    )
    assert load_actors_init().__name__ == "kdispatch.actors"


def test_a_free_threaded_build_without_the_lock_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build(monkeypatch, free_threaded=True)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    with pytest.raises(ImportError, match="free-threaded") as raised:
        load_actors_init()
    assert "PYTHON_GIL=1" in str(raised.value)  # the message says how to run it anyway


def test_a_free_threaded_build_that_cannot_say_whether_it_has_the_lock_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build(monkeypatch, free_threaded=True)
    monkeypatch.delattr(sys, "_is_gil_enabled", raising=False)
    with pytest.raises(ImportError, match="free-threaded"):
        load_actors_init()


def test_a_free_threaded_build_started_with_the_lock_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build(monkeypatch, free_threaded=True)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)  # PYTHON_GIL=1
    assert load_actors_init().__name__ == "kdispatch.actors"


def test_a_standard_build_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    build(monkeypatch, free_threaded=False)
    monkeypatch.delattr(sys, "_is_gil_enabled", raising=False)  # before Python 3.13
    assert load_actors_init().__name__ == "kdispatch.actors"


def test_the_core_package_under_a_second_name_is_refused() -> None:
    with pytest.raises(ImportError, match="second name"):
        load_actors_init("actors")


def test_import_kdispatch_fails_on_an_interpreter_without_the_lock() -> None:
    """The whole import, in a child interpreter that reports a free-threaded build running
    without the lock: ``import kdispatch`` raises the ImportError, nothing half-imported."""
    script = (
        "import sys, sysconfig\n"
        "real = sysconfig.get_config_var\n"
        "sysconfig.get_config_var = "
        "lambda name: 1 if name == 'Py_GIL_DISABLED' else real(name)\n"
        "sys._is_gil_enabled = lambda: False\n"
        "try:\n"
        "    import kdispatch\n"
        "except ImportError as exc:\n"
        "    print('refused:', exc)\n"
        "    print('core loaded:', 'kdispatch.actors.runtime.pool' in sys.modules)\n"
        "else:\n"
        "    print('imported')\n"
    )
    done = run_command([sys.executable, "-c", script], timeout=50)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused:") and "free-threaded" in lines[0], done.stdout
    assert lines[1] == "core loaded: False"
