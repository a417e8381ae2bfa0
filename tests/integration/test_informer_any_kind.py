"""Informers for any kind (built-in or CRD) with selectors, and failures they make visible:
``last_error``, the ``on_error`` hook, the errors metric, typed 401/403 from wait_for_sync."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from kdispatch.actors.model.errors import (
    ApiError,
    ForbiddenError,
    InvalidInputError,
    UnauthorizedError,
)
from kdispatch.actors.model.kinds import KindTable
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing import MemoryListWatch
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer

pytestmark = pytest.mark.timeout(60)
WAIT = 10.0


@pytest.fixture
def mem(kinds: KindTable) -> InMemoryApiServer:
    return InMemoryApiServer(kinds=kinds)


@pytest.fixture
def srv(mem: InMemoryApiServer, kinds: KindTable) -> Iterator[ApiServerHTTP]:
    with ApiServerHTTP(mem, kinds=kinds, watch_poll=0.05) as s:
        yield s


class Names:
    """Names currently in an informer's handlers' view. Informer thread writes, test reads."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.cond = threading.Condition()

    def add(self, obj: dict[str, Any]) -> None:
        with self.cond:
            self.names.add(obj["metadata"]["name"])
            self.cond.notify_all()

    def delete(self, obj: dict[str, Any]) -> None:
        with self.cond:
            self.names.discard(obj["metadata"]["name"])
            self.cond.notify_all()

    def wait(self, expected: set[str]) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.names == expected, WAIT)


def _deployment(name: str, team: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"team": team}},
        "spec": {"replicas": 1},
    }


@pytest.mark.parametrize("transport", ["lean", "client"])
def test_deployment_informer_with_a_label_selector(
    srv: ApiServerHTTP, mem: InMemoryApiServer, kinds: KindTable, transport: Any
) -> None:
    mem.create(_deployment("a1", "a"))
    mem.create(_deployment("b1", "b"))
    client = k8s.ApiClient(k8s.Configuration(host=srv.url))
    seen = Names()
    lw = ClientListWatch(client, "Deployment", label_selector="team=a", transport=transport,
                         kinds=kinds, page_size=1)  # fmt: skip
    inf = Informer(lw, name="deploys")
    inf.add_handler(seen.add, lambda _old, new: seen.add(new), seen.delete)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        assert seen.wait({"a1"})
        mem.create(_deployment("a2", "a"))
        mem.create(_deployment("b2", "b"))
        assert seen.wait({"a1", "a2"})
        relabel = mem.get_object("Deployment", "default", "a1")
        assert relabel is not None
        mem.update({**relabel, "metadata": {**relabel["metadata"], "labels": {"team": "b"}}})
        assert seen.wait({"a2"})  # left the selector: a delete
        assert all(o["kind"] == "Deployment" for o in inf.snapshot().values())
    finally:
        assert inf.stop()
        client.close()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("source", ["memory", "http"])
def test_crd_informer(
    srv: ApiServerHTTP, mem: InMemoryApiServer, kinds: KindTable, source: str
) -> None:
    backend = KubernetesBackend.for_url(srv.url, kinds=kinds)
    lw: Any = (
        MemoryListWatch(mem, "QuotaClaim", kinds=kinds)
        if source == "memory"
        else ClientListWatch(backend, "QuotaClaim", kinds=kinds)
    )
    seen = Names()
    inf = Informer(lw, name="quotas")
    inf.add_handler(seen.add, None, seen.delete)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        obj = backend.create("QuotaClaim", "default", {"metadata": {"name": "q1"}})
        assert seen.wait({"q1"})
        backend.delete("QuotaClaim", "default", "q1", uid=obj["metadata"]["uid"])
        assert seen.wait(set())
    finally:
        assert inf.stop()
        backend.close()


def test_unknown_kinds_and_bad_selectors_are_refused(srv: ApiServerHTTP) -> None:
    client = k8s.ApiClient(k8s.Configuration(host=srv.url))
    try:
        with pytest.raises(InvalidInputError):
            ClientListWatch(client, "Widget")
        with pytest.raises(InvalidInputError):
            ClientListWatch(client, "Node", "default")  # cluster-scoped
        with pytest.raises(InvalidInputError):
            ClientListWatch(client, "Pod", label_selector="")
        with pytest.raises(InvalidInputError):
            ClientListWatch(client, "Pod", transport="fast")  # type: ignore[arg-type]
    finally:
        client.close()  # type: ignore[no-untyped-call]


def _errors(registry: CollectorRegistry, reason: str) -> float:
    value = registry.get_sample_value(
        "kdispatch_informer_errors_total", {"informer": "pods", "kind": "Pod", "reason": reason}
    )
    return value or 0.0


@pytest.mark.parametrize(("code", "error"), [(401, UnauthorizedError), (403, ForbiddenError)])
def test_refused_lists_are_typed_hooked_and_counted(
    mem: InMemoryApiServer, code: int, error: type[ApiError]
) -> None:
    registry = CollectorRegistry()
    hooked: list[BaseException] = []
    with ApiServerHTTP(mem, token="right") as srv:
        cfg = k8s.Configuration(host=srv.url)
        cfg.api_key = {"authorization": "right" if code == 403 else "wrong"}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        client = k8s.ApiClient(cfg)
        lw: Any = ClientListWatch(client, "Pod")  # 401 over HTTP: the token is wrong
        if code == 403:  # RBAC refuses every list of pods (the 403 mapping over HTTP is
            lw = _Forbidden(lw)  # pinned in test_kubernetes_backend)
        inf = Informer(lw, name="pods", backoff_initial=0.01, backoff_max=0.05,
                       on_error=hooked.append, metrics_registry=registry)  # fmt: skip
        inf.start()
        try:
            with pytest.raises(error):
                inf.wait_for_sync(WAIT)
            assert isinstance(inf.last_error, error)
            assert not inf.has_synced()
        finally:
            assert inf.stop()
            client.close()  # type: ignore[no-untyped-call]
    assert hooked and all(isinstance(e, error) for e in hooked)
    assert _errors(registry, error.reason) == len(hooked)


class _Forbidden:
    """A source whose lists the server refuses with 403 (as RBAC would)."""

    def __init__(self, inner: ClientListWatch) -> None:
        self.kind = inner.kind

    def list(self) -> Any:
        raise ForbiddenError("list Pod: HTTP 403 Forbidden: pods is forbidden")

    def watch(self, resource_version: str, timeout_seconds: float) -> Any:
        raise AssertionError("never reached without a list")


def test_last_error_clears_after_a_good_list(mem: InMemoryApiServer) -> None:
    registry = CollectorRegistry()
    lw = MemoryListWatch(mem, "Pod")
    failures = [ApiError("boom")]

    class Flaky:
        kind = "Pod"

        def list(self) -> Any:
            if failures:
                raise failures.pop()
            return lw.list()

        def watch(self, resource_version: str, timeout_seconds: float) -> Any:
            return lw.watch(resource_version, timeout_seconds)

    seen: list[BaseException] = []
    inf = Informer(Flaky(), name="pods", backoff_initial=0.01, on_error=seen.append,
                   metrics_registry=registry)  # fmt: skip
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)  # a retryable failure: it recovers
        assert inf.last_error is None
        assert len(seen) == 1
        assert _errors(registry, "Unknown") == 1.0
    finally:
        assert inf.stop()
