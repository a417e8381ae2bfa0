"""A command run in a child process, as the tests run one: to its end, its output captured."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_command(
    args: Sequence[str],
    *,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in ``cwd`` (the project's root unless given) with ``env`` (this process's
    environment unless given), stdout and stderr captured as text. The exit status is not
    checked: the caller asserts it (with stderr as the message). Raises
    :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
