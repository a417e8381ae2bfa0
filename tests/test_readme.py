"""The README's custom call type example runs as written (on the in-memory apiserver)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

from kdispatch.actors.errors import Outcome
from kdispatch.adapters.memory import InMemoryApiServer

README = Path(__file__).resolve().parent.parent / "README.md"


def _block(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None
    return match.group(1)


def test_custom_call_type_example_works() -> None:
    backend = InMemoryApiServer()
    module = types.ModuleType("readme_example")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    scope: dict[str, Any] = module.__dict__
    scope["backend"] = backend
    try:
        exec(compile(_block("### Your own call types"), "README.md", "exec"), scope)
    finally:
        del sys.modules[module.__name__]
    hold, ref_cls, dispatcher = scope["QuotaHold"], scope["ObjectRef"], scope["dispatcher"]
    obj = backend.create(
        {
            "apiVersion": "example.io/v1",
            "kind": "QuotaClaim",
            "metadata": {"name": "q1", "namespace": "default"},
            "status": {},
        }
    )
    dispatcher.start()
    try:
        first = dispatcher.submit(hold(ref_cls.of(obj), 500, basis=obj))
        assert first.result(timeout=10) is Outcome.SUCCESS
        again = dispatcher.submit(hold(ref_cls.of(obj), 500, basis=obj))
        assert again.result(timeout=10) is Outcome.SKIPPED  # the first one's reply was observed
    finally:
        dispatcher.stop(timeout=10)
    stored = backend.get_object("QuotaClaim", "default", "q1")
    assert stored is not None and stored["status"] == {"heldCpuM": 500}
