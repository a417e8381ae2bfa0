"""The unit layer's own rule (``tests/unit/conftest.py``): a thread or a child process started
here is refused and noted, so the test that started it fails."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading

import pytest


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
