"""Child processes that cannot outlive their parent, and the polling that waits for them.

Every child runs in its own session (so its process group is its own and a signal to the
parent's group does not reach it), with a parent-death signal on Linux (the kernel sends
SIGKILL when the thread that started it dies, even by SIGKILL), and is stopped with SIGTERM and
then SIGKILL to its whole group. Runs on the caller's thread.

The parent-death signal is set by a few lines of Python run with this interpreter
(:data:`PDEATHSIG_SHIM`) between the fork and the component's ``exec``: ``prctl(PR_SET_PDEATHSIG,
SIGKILL)`` through ``ctypes``, then a check that the parent is still the one that started it
(a parent killed before the ``prctl`` would leave the child to run for good: it exits
instead), then ``exec`` (the setting survives it, so the pid is the component's own). It needs
no other program (``setpriv`` is not on every machine) and no ``preexec_fn``, which is unsafe
in a process with threads. Elsewhere than Linux, the owner's ``atexit`` hook is the only
fallback.

Why KILL on the parent's death: every component gets it at once, and a kube-apiserver told to
terminate while its etcd goes away waits on etcd for good (measured: still running minutes
later); with the parent gone nobody needs an orderly shutdown of throwaway test data.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from kdispatch.testing.waiting import wait_for

from .errors import ControlPlaneError


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def seconds(value: float) -> str:
    """``value`` as a message shows seconds: ``0.5``, ``120``, ``0.497`` (milliseconds at
    most)."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


PDEATHSIG_SHIM = """\
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG, SIGKILL
    sys.exit("cannot set the parent-death signal: errno %d" % ctypes.get_errno())
if os.getppid() != int(sys.argv[1]):  # the parent died before the prctl
    sys.exit(0)
try:
    os.execv(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.exit("cannot run %s: %s" % (sys.argv[2], exc))
"""
"""What runs between the fork and the component's ``exec`` (``argv``: the parent's pid, then
the component's command line)."""


def with_parent_death_signal(args: list[str]) -> list[str]:
    """``args`` behind :data:`PDEATHSIG_SHIM` on Linux (with this interpreter, isolated and
    without ``site``); unchanged elsewhere, or when the interpreter is unknown."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return args
    shim = [sys.executable, "-I", "-S", "-c", PDEATHSIG_SHIM, str(os.getpid())]
    return [*shim, *args]


class Process:
    """A child in its own session and process group, its output in ``log``."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                with_parent_death_signal(args),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        """The child's pid, which is also its process group and session id."""
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` of its log."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the group, SIGKILL to it after ``timeout``; always reaps the child.
        Idempotent."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        # the group may hold grandchildren even when the leader is gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5.0)

    def kill(self) -> None:
        """SIGKILL to the group (a crash: no shutdown of its own), and reap the child."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def wait_ready(
        self, ready: Callable[[], bool], timeout: float, what: str, *, interval: float
    ) -> None:
        """Poll ``ready`` until true; :class:`ControlPlaneError` with the tail of the log if
        the process exits first or ``timeout`` passes."""

        def alive_and_ready() -> bool:
            if not self.running():
                raise ControlPlaneError(
                    f"{self.name} exited with {self.popen.returncode} before {what} answered;"
                    f" its log ends:\n{self.tail()}"
                )
            return ready()

        try:
            wait_for(alive_and_ready, timeout, f"{self.name} {what}", interval=interval)
        except TimeoutError as exc:
            raise ControlPlaneError(f"{exc}; {self.name}'s log ends:\n{self.tail()}") from None
