"""``docs/groups.md`` runs as written: every Python block, each in a fresh module."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

import kdispatch
from kdispatch.actors import errors, groups

DOC = Path(__file__).resolve().parent.parent / "docs" / "groups.md"

pytestmark = pytest.mark.timeout(60)

# The public names of call groups, until kdispatch/__init__.py re-exports them.
NEW_NAMES = {
    "CallGroup": groups.CallGroup,
    "DependencyCycleError": errors.DependencyCycleError,
    "DependencyFailed": errors.DependencyFailed,
    "GroupClosedError": errors.GroupClosedError,
    "GroupFailed": errors.GroupFailed,
    "GroupsNotSupported": errors.GroupsNotSupported,
    "InvalidPrerequisiteError": errors.InvalidPrerequisiteError,
}

BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_page_has_snippets() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_snippet_runs(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in NEW_NAMES.items():
        if not hasattr(kdispatch, name):
            monkeypatch.setattr(kdispatch, name, value, raising=False)
    module = types.ModuleType(f"groups_doc_{index}")
    sys.modules[module.__name__] = module
    try:
        exec(compile(BLOCKS[index], f"docs/groups.md#{index}", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
