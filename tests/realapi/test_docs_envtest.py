"""The documentation's snippets that need the real control plane (``# requires: envtest``),
run as written against the built binaries: the Python ones in this process, the shell ones
with ``bash`` and this interpreter first on ``PATH`` as ``python``. The default test run skips
them (tests/e2e/test_docs_snippets.py); a snippet that stops running fails here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.snippets import Snippet, all_snippets, run
from tests.subprocesses import run_command

pytestmark = [pytest.mark.realapi, pytest.mark.timeout(300), pytest.mark.usefixtures("binaries")]

PYTHON = [s for s in all_snippets("python") if s.requires == "envtest"]
SHELL = [s for s in all_snippets("sh") if s.requires == "envtest"]


def test_the_docs_have_envtest_snippets() -> None:
    assert len(PYTHON) >= 2 and len(SHELL) >= 3, (PYTHON, SHELL)


@pytest.mark.parametrize("snippet", PYTHON, ids=[s.name for s in PYTHON])
def test_python_snippet_runs(snippet: Snippet) -> None:
    run(snippet)


@pytest.mark.parametrize("snippet", SHELL, ids=[s.name for s in SHELL])
def test_shell_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    python = tmp_path / "bin" / "python"  # this interpreter (its venv too) as `python`
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"}
    done = run_command(
        ["bash", "-euo", "pipefail", "-c", snippet.code], cwd=tmp_path, env=env, timeout=240
    )
    assert done.returncode == 0, f"{snippet.name}:\n{done.stdout}\n{done.stderr[-4000:]}"
