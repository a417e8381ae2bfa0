"""The Python snippets of the README and the docs pages: found, and run as written.

A snippet is a fenced ```` ```python ```` block (or, for :func:`snippets` given ``"sh"``, a
```` ```sh ```` block). One whose first line is ``# requires: <what>`` (``envtest``,
``cluster``) needs something the default test run does not have and is skipped with that reason
(those needing ``envtest`` run in the realapi job: tests/realapi/test_docs_envtest.py).
Every other snippet runs in a module of its own, registered in
``sys.modules`` while it runs (dataclasses and pickling look their module up there).
"""

from __future__ import annotations

import linecache
import re
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kdispatch import KubernetesBackend

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCES = {
    language: re.compile(rf"^```{language}\n(.*?)^```", re.S | re.M)
    for language in ("python", "sh")
}
_REQUIRES = re.compile(r"#\s*requires:\s*(\S+)")
_MAIN_GUARD = re.compile(r"^if __name__ == .__main__.:", re.M)


@dataclass(frozen=True)
class Snippet:
    """One ```` ```python ```` block: where it is and what it says."""

    path: Path
    offset: int
    code: str

    @property
    def line(self) -> int:
        return self.path.read_text(encoding="utf-8").count("\n", 0, self.offset) + 2

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def requires(self) -> str | None:
        """What the snippet needs beyond the default test run (its ``# requires:`` line)."""
        first = self.code.split("\n", 1)[0]
        match = _REQUIRES.fullmatch(first.strip())
        return match.group(1) if match else None


def snippets(path: Path, language: str = "python") -> list[Snippet]:
    """The ```` ```python ```` (or ```` ```sh ````) blocks of ``path``."""
    text = path.read_text(encoding="utf-8")
    return [Snippet(path, m.start(), m.group(1)) for m in _FENCES[language].finditer(text)]


def all_snippets(language: str = "python") -> list[Snippet]:
    return [s for page in PAGES for s in snippets(page, language)]


def block(page: str, heading: str) -> Snippet:
    """The first snippet after ``heading`` in ``page`` (a path from the repository root)."""
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    start = text.index(heading)
    return next(s for s in snippets(path) if s.offset > start)


def run(snippet: Snippet, **scope: Any) -> dict[str, Any]:
    """Execute ``snippet`` in a fresh registered module holding ``scope``; its namespace.

    A snippet written as a script (one with an ``if __name__ == "__main__":`` guard, as a
    ``spawn`` child process needs) runs as ``__main__``, guarded part included; the module has no
    file, so a child process started with ``spawn`` does not run it again."""
    name = "__main__" if _MAIN_GUARD.search(snippet.code) else "docs_snippet"
    module = types.ModuleType(name)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    module.__dict__.update(scope)
    lines = snippet.code.splitlines(keepends=True)
    linecache.cache[snippet.name] = (len(snippet.code), None, lines, snippet.name)  # tracebacks
    try:
        exec(compile(snippet.code, snippet.name, "exec"), module.__dict__)
    finally:
        if previous is None:
            del sys.modules[name]
        else:
            sys.modules[name] = previous
    return module.__dict__


@contextmanager
def backends_reach(url: str, monkeypatch: pytest.MonkeyPatch, *factories: str) -> Iterator[None]:
    """While open, ``KubernetesBackend.<factory>()`` for each of ``factories`` (e.g.
    ``"from_kubeconfig"``, ``"in_cluster"``) returns a backend for ``url``, keeping the
    ``workers`` and ``request_timeout`` it was given; every backend made is closed on exit."""
    backends: list[KubernetesBackend] = []

    def connect(*_: Any, **kwargs: Any) -> KubernetesBackend:
        options = {k: v for k, v in kwargs.items() if k in ("workers", "request_timeout")}
        backends.append(KubernetesBackend.for_url(url, **options))
        return backends[-1]

    for factory in factories:
        monkeypatch.setattr(KubernetesBackend, factory, connect)
    try:
        yield
    finally:
        for backend in backends:
            backend.close()
