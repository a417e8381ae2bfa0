"""One house: one import identity per module, production free of test doubles, one public face."""

from __future__ import annotations

import configparser
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import kdispatch
import kdispatch.testing
from kdispatch import Dispatcher, DispatcherLike, ProcessDispatcher
from kdispatch.testing import InMemoryApiServer
from tests.subprocesses import run_command


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return run_command([sys.executable, "-c", code])


@pytest.mark.parametrize("folder", ["actors", "adapters"])
def test_source_folders_refuse_a_second_import_name(folder: str) -> None:
    for name in (folder, f"{folder}.errors" if folder == "actors" else f"{folder}.informer"):
        proc = _run(f"import {name}")
        assert proc.returncode != 0
        assert "ImportError" in proc.stderr
        assert "import kdispatch instead" in proc.stderr


def test_the_one_identity_is_the_kdispatch_one() -> None:
    proc = _run(
        "import kdispatch.actors.model.errors as e, kdispatch; "
        "assert kdispatch.CallFailed is e.CallFailed; "
        "assert issubclass(e.CallFailed, kdispatch.KdispatchError); print('ok')"
    )
    assert proc.stdout.strip() == "ok", proc.stderr


def test_production_loads_no_test_double() -> None:
    proc = _run(
        "import sys, pkgutil, importlib, kdispatch, kdispatch.adapters as a\n"
        "for m in pkgutil.iter_modules(a.__path__):\n"
        "    importlib.import_module('kdispatch.adapters.' + m.name)\n"
        "bad = [n for n in sys.modules if n.startswith('kdispatch.testing')\n"
        "       or 'memory' in n.rsplit('.', 1)[-1] or 'httpserver' in n.rsplit('.', 1)[-1]]\n"
        "print(bad)"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_public_face_holds_what_a_first_program_needs() -> None:
    needed = {
        "Dispatcher",
        "DispatcherLike",
        "ProcessDispatcher",
        "KubernetesBackend",
        "Informer",
        "AioInformer",
        "ClientListWatch",
        "LeaseElector",
        "ElectionConfig",
        "CallTypeRegistrationError",
        "AlreadyExistsError",
        "NotFoundError",
        "ConflictError",
        "TooManyRequestsError",
        "ServerError",
        "ApiBackend",
        "register_kind",
        "PodBinding",
        "PodStatusPatch",
        "ClaimStatusPatch",
    }
    assert needed <= set(kdispatch.__all__)
    for name in kdispatch.__all__:
        assert getattr(kdispatch, name) is not None
    assert len(kdispatch.__all__) == len(set(kdispatch.__all__))
    assert kdispatch.testing.InMemoryApiServer is InMemoryApiServer
    for name in kdispatch.testing.__all__:
        assert getattr(kdispatch.testing, name) is not None


def test_both_dispatchers_are_dispatcher_like() -> None:
    assert isinstance(Dispatcher(InMemoryApiServer()), DispatcherLike)
    members = [name for name in vars(DispatcherLike) if not name.startswith("_")]
    assert "submit" in members
    for cls in (Dispatcher, ProcessDispatcher):
        missing = [name for name in members if not hasattr(cls, name)]
        assert not missing, f"{cls.__name__} lacks {missing}"


def _typed(d: Dispatcher, p: ProcessDispatcher) -> tuple[DispatcherLike, DispatcherLike]:
    """mypy (strict, in CI) checks that both satisfy the protocol's signatures."""
    return d, p


TESTING_FACE = {"oracle", "waiting", "envtest"}
"""The modules of ``kdispatch.testing`` the examples and benchmarks may import besides the
package itself; every other one is the emulator's inside."""


@pytest.mark.parametrize("contract", ["examples-public-face", "benchmarks-public-face"])
def test_the_public_face_contracts_list_every_module_of_the_emulator(contract: str) -> None:
    """import-linter forbids only the modules it names: a new module of the emulator left out
    of a contract could be imported past the public face unnoticed."""
    config = configparser.ConfigParser()
    config.read(Path(__file__).parents[2] / ".importlinter")
    forbidden = set(config[f"importlinter:contract:{contract}"]["forbidden_modules"].split())
    inside = {
        f"kdispatch.testing.{m.name}"
        for m in pkgutil.iter_modules(kdispatch.testing.__path__)
        if m.name not in TESTING_FACE
    }
    assert inside - forbidden == set()
