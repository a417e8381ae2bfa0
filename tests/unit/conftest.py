"""The unit layer: pure rules and data. A test here starts no thread and no child process.

The autouse fixture :func:`pure` fails a test that starts a ``threading.Thread`` (a pykka or
pooled actor, an executor worker, an informer, a ``ThreadPoolExecutor``, an HTTP server all
start one), a ``subprocess`` or a ``multiprocessing`` process. Such a test belongs in
``tests/integration`` or ``tests/e2e``; keeping this layer free of them keeps ``pytest tests/unit``
the fast, deterministic inner loop.
"""

from __future__ import annotations

import multiprocessing.process
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def pure(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fail the test if it started a thread or a child process (each start is refused and
    noted in the list this fixture yields)."""
    started: list[str] = []
    thread_start = threading.Thread.start
    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def start_thread(self: threading.Thread) -> None:
        started.append(f"thread {self.name}")
        raise RuntimeError(f"a unit test starts no thread ({self.name}); move it to integration")

    def popen(self: subprocess.Popen[Any], args: Any, *a: Any, **kw: Any) -> None:
        started.append(f"process {args!r}")
        raise RuntimeError("a unit test starts no process; move it to integration or e2e")

    def start_process(self: multiprocessing.process.BaseProcess) -> None:
        started.append(f"process {self.name}")
        raise RuntimeError("a unit test starts no process; move it to integration or e2e")

    monkeypatch.setattr(threading.Thread, "start", start_thread)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start_process)
    yield started
    monkeypatch.setattr(threading.Thread, "start", thread_start)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen_init)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", process_start)
    assert not started, f"a unit test started {started}: it belongs in tests/integration"
