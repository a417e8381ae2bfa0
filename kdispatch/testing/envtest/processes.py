"""Child processes that cannot outlive their parent, and the polling that waits for them.

Every child runs in its own session (so its process group is its own and a signal to the
parent's group does not reach it), under ``setpriv --pdeathsig KILL`` where util-linux has it
(the kernel sends SIGKILL when the thread that started it dies, even by SIGKILL), and is
stopped with SIGTERM and then SIGKILL to its whole group. Runs on the caller's thread.

Why KILL on the parent's death: every component gets it at once, and a kube-apiserver told to
terminate while its etcd goes away waits on etcd for good (measured: still running minutes
later); with the parent gone nobody needs an orderly shutdown of throwaway test data.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
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


def with_parent_death_signal(args: list[str]) -> list[str]:
    """``args`` under ``setpriv --pdeathsig KILL`` when available (the setting survives
    ``exec``, so the pid is the program's own). Without ``setpriv`` the owner's ``atexit``
    hook is the only fallback."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *args] if setpriv else args


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
