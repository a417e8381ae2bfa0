"""The layers' own rules: a thread or a child process started in a unit test is refused and
noted, so the test that started it fails (``tests/unit/conftest.py``), and every test module is
in a layer."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path

import pytest

LAYERS = {"unit", "integration", "e2e", "realapi"}


def test_a_thread_start_is_refused_and_noted(pure: list[str]) -> None:
    ran = threading.Event()
    thread = threading.Thread(target=ran.set, name="stray")
    with pytest.raises(RuntimeError, match="starts no thread"):
        thread.start()
    assert not ran.is_set()
    assert pure == ["thread stray"]
    pure.clear()  # this test wanted the refusal: it does not fail


def test_a_child_process_is_refused_and_noted(pure: list[str]) -> None:
    with pytest.raises(RuntimeError, match="starts no process"):
        subprocess.Popen([sys.executable, "-c", "pass"])
    process = multiprocessing.get_context("spawn").Process(target=print, name="stray")
    with pytest.raises(RuntimeError, match="starts no process"):
        process.start()
    assert pure == [f"process {[sys.executable, '-c', 'pass']!r}", "process stray"]
    pure.clear()


def test_every_test_module_is_in_a_layer() -> None:
    """A test module left directly in tests/ (say, from a branch made before the layers) would
    run in no layer's loop: it must move to one."""
    tests = Path(__file__).resolve().parents[1]
    assert sorted(p.name for p in tests.glob("test_*.py")) == []
    assert {p.parent.name for p in tests.glob("*/test_*.py")} <= LAYERS
