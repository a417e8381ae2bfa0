"""The README's snippets run as written: the custom call type over HTTP with the official
client against ``ApiServerHTTP``, and every section that documents a public name."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kdispatch.actors.errors import Outcome, UnauthorizedError
from kdispatch.adapters.httpserver import ApiServerHTTP
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.adapters.memory import InMemoryApiServer

README = Path(__file__).resolve().parent.parent / "README.md"

pytestmark = pytest.mark.timeout(60)


def _block(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None
    return match.group(1)


def _run(heading: str, **scope: Any) -> dict[str, Any]:
    """Execute the section's snippet in a registered module (dataclasses look it up)."""
    module = types.ModuleType("readme_example")
    sys.modules[module.__name__] = module
    module.__dict__.update(scope)
    try:
        exec(compile(_block(heading), "README.md", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


@pytest.fixture
def mem() -> InMemoryApiServer:
    return InMemoryApiServer()


@pytest.fixture
def http(mem: InMemoryApiServer) -> Iterator[ApiServerHTTP]:
    with ApiServerHTTP(mem) as srv:
        yield srv


def test_custom_call_type_example_runs_over_http(
    mem: InMemoryApiServer, http: ApiServerHTTP
) -> None:
    with KubernetesBackend.for_url(http.url) as backend:
        scope = _run("### Your own call types", backend=backend)
        hold, ref_cls, dispatcher = scope["QuotaHold"], scope["ObjectRef"], scope["dispatcher"]
        obj = mem.create(
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
            assert again.result(timeout=10) is Outcome.SKIPPED  # the first reply was observed
        finally:
            dispatcher.stop(timeout=10)
    stored = mem.get_object("QuotaClaim", "default", "q1")
    assert stored is not None and stored["status"] == {"heldCpuM": 500}
    patches = [r for r in mem.request_log if r.op == "patch_status"]
    assert [(r.kind, r.outcome) for r in patches] == [("QuotaClaim", "ok")]


def test_any_resource_example() -> None:
    scope = _run("### Any resource: the kind table")
    assert [o["metadata"]["name"] for o in scope["page"].items] == ["q1"]
    assert scope["held"]["spec"]["cpuM"] == 100  # the JSON patch landed
    assert scope["held"]["status"] == {"heldCpuM": 100}


def test_informer_errors_example(capsys: pytest.CaptureFixture[str]) -> None:
    scope = _run("### Informers for any kind, and their errors")
    assert scope["errors"] and isinstance(scope["errors"][0], UnauthorizedError)
    assert isinstance(scope["deployments"].last_error, UnauthorizedError)
    assert "informer refused: list Deployment: HTTP 401" in capsys.readouterr().out
    count = scope["registry"].get_sample_value(
        "kdispatch_informer_errors_total",
        {"informer": "deploys", "kind": "Deployment", "reason": "Unauthorized"},
    )
    assert count is not None and count >= 1


def test_transports_example() -> None:
    scope = _run("### Transports and the connection pool")
    assert scope["backend"].transport == "client"


def test_eviction_example() -> None:
    scope = _run("### Eviction")
    server = scope["server"]
    assert server.get_object("Pod", "default", "web-1") is not None  # the budget held
    assert {r.outcome for r in server.request_log if r.op == "evict"} == {"DisruptionBudget"}
