"""The README's snippets run as written: the custom call type over HTTP with the official
client against ``ApiServerHTTP``, and every section that documents a public name."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
from loguru import logger

from kdispatch import Dispatcher
from kdispatch.actors.errors import Outcome, UnauthorizedError
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_pod

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
    with ApiServerHTTP(mem, watch_poll=0.02) as srv:
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


def test_objects_as_you_hold_them() -> None:
    with Dispatcher(InMemoryApiServer()) as dispatcher:
        scope = _run("### Objects as you hold them", dispatcher=dispatcher)
    assert scope["binding"].ref.uid == "uid-web-0"
    assert scope["binding"].basis == scope["plain"]


def test_asyncio_section(http: ApiServerHTTP) -> None:
    pod = http.server.create(make_pod("web-0"))
    backend = KubernetesBackend.for_url(http.url)
    try:
        scope = _run("### asyncio", backend=backend, url=http.url)
    finally:
        backend.close()
    assert scope["outcome"] is Outcome.SUCCESS
    assert scope["seen"]["metadata"]["uid"] == pod["metadata"]["uid"]
    assert scope["seen"]["spec"]["nodeName"] == "node-1"
    stored = http.server.get_object("Pod", "default", "web-0")
    assert stored is not None and stored["spec"]["nodeName"] == "node-1"


def test_kopf_recipe(http: ApiServerHTTP, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe's handlers, called as kopf calls them, bind the pod through the dispatcher."""
    backends: list[KubernetesBackend] = []

    def from_kubeconfig(*_: Any, **__: Any) -> KubernetesBackend:
        backends.append(KubernetesBackend.for_url(http.url))
        return backends[-1]

    monkeypatch.setattr(KubernetesBackend, "from_kubeconfig", from_kubeconfig)
    scope = _run("### A kopf recipe")
    raw = make_pod("web-0")
    raw["spec"]["schedulerName"] = "my-scheduler"
    pod = http.server.create(raw)
    gone = http.server.create(make_pod("gone"))
    memo = kopf.Memo()

    async def operator() -> None:
        await scope["start_dispatcher"](memo=memo)
        body = kopf.Body(cast("kopf.RawBody", pod))
        await scope["on_pod"](event={"type": None, "object": pod}, body=body, memo=memo)
        gone_body = kopf.Body(cast("kopf.RawBody", gone))
        await scope["on_pod"](event={"type": "DELETED"}, body=gone_body, memo=memo)
        await scope["stop_dispatcher"](memo=memo)

    try:
        asyncio.run(operator())
    finally:
        for backend in backends:
            backend.close()
    stored = http.server.get_object("Pod", "default", "web-0")
    assert stored is not None and stored["spec"]["nodeName"] == "node-1"
    assert memo.dispatcher.outstanding == 0


def test_configuration_from_files_and_the_environment() -> None:
    scope = _run("### Configuration from files and the environment")
    assert scope["config"].rate_limit.qps == math.inf
    assert scope["config"].registry.max_live is None


def test_metrics_section() -> None:
    backend = InMemoryApiServer()
    scope = _run("### Metrics: prefix, labels, one registry", backend=backend)
    names = {family.name for family in scope["registry"].collect()}
    assert "scheduler_pending_async_api_calls" in names  # the second dispatcher's, default prefix
    assert "quota_controller_pending_async_api_calls" not in names


def test_logs_section() -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), logging.getLogger("kdispatch").level
    try:
        _run("### Logs")
    finally:
        root.handlers[:] = handlers
        logging.getLogger("kdispatch").setLevel(level)
        logger.disable("kdispatch")
