"""The temporary folders control planes make for themselves, and the removal of those whose
owner died without removing them (killed by SIGKILL, which no cleanup survives).

A folder is ``kdispatch-envtest-*`` in the temporary directory and holds :data:`MARKER`, a file
its owner keeps locked (``flock``) from the moment the file has that name until the owner
removes the folder or dies: the kernel drops the lock with the owner's last descriptor, however
it ends, so a lock that can be taken means an owner that is gone (a pid could be reused; a lock
cannot outlive its process). :func:`remove_stale_dirs`, run by every start, removes such
folders; one without the marker (made by an older version, or being made right now) or of
another user is left alone. Runs on the caller's thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "kdispatch-envtest-"
MARKER = ".owner.lock"
"""The locked file in a folder a control plane made: it holds its owner's pid."""


class OwnedDir:
    """A temporary folder and the lock on its :data:`MARKER`, held until :meth:`remove`."""

    def __init__(self, parent: Path | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
        pending = self.path / (MARKER + ".new")
        self._lock: int | None = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX)  # a new file: nobody else holds it
            os.write(self._lock, f"{os.getpid()}\n".encode())
            os.rename(pending, self.path / MARKER)  # named once locked: never seen unlocked
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove the folder, then let the lock go. Idempotent."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def remove_stale_dirs(parent: Path | None = None) -> list[Path]:
    """Remove the folders of :class:`OwnedDir` s in ``parent`` (default: the temporary
    directory) whose owner is gone; return them. Errors (a folder removed meanwhile, one that
    cannot be read) skip the folder."""
    removed: list[Path] = []
    for path in Path(parent or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            if path.is_symlink() or path.lstat().st_uid != os.getuid():
                continue
            lock = os.open(path / MARKER, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # no marker: not a folder this can judge
            continue
        try:
            with contextlib.suppress(OSError):
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while the owner lives
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        finally:
            os.close(lock)
    return removed
