"""Informers for any kind (built-in or CRD) with selectors, and failures they make visible:
``last_error``, the ``on_error`` hook, the errors metric, typed 401/403 from wait_for_sync."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from kdispatch.actors.model.errors import (
    ApiError,
    ForbiddenError,
    InformerSyncTimeout,
    InvalidInputError,
    UnauthorizedError,
)
from kdispatch.actors.model.kinds import KindTable
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.adapters.kubernetes import KubernetesBackend, prepare_configuration
from kdispatch.testing import MemoryListWatch
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from kdispatch.testing.waiting import wait_for
from tests.memory_server import SwitchableStore
from tests.recorders import Recorder

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


def test_a_list_watch_over_a_backend_takes_its_kind_table(
    srv: ApiServerHTTP, mem: InMemoryApiServer, kinds: KindTable
) -> None:
    """docs/informers.md: given a ``KubernetesBackend``, ``ClientListWatch`` uses its client
    and its kind table, so a custom resource the backend knows needs no ``kinds=`` again."""
    mem.create({"kind": "QuotaClaim", "metadata": {"name": "q1", "namespace": "default"}})
    with KubernetesBackend.for_url(srv.url, kinds=kinds) as backend:
        items, _rv = ClientListWatch(backend, "QuotaClaim").list()
    assert [o["metadata"]["name"] for o in items] == ["q1"]


def test_a_field_selector_informer_over_http_follows_pods_in_and_out_of_it(
    srv: ApiServerHTTP, mem: InMemoryApiServer
) -> None:
    """``field_selector``: the informer lists and watches only the matching objects, here
    the pending pods (``spec.nodeName=``); a pod bound leaves the selection: a delete."""
    a = mem.create(make_pod("a"))
    mem.create(make_pod("bound", node="n0"))
    client = k8s.ApiClient(k8s.Configuration(host=srv.url))
    rec = Recorder()
    lw = ClientListWatch(client, "Pod", field_selector="spec.nodeName=", request_timeout=5.0)
    inf = Informer(lw, name="pending")
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        assert rec.names() == [("add", "a")]
        mem.create(make_pod("b"))
        mem.bind("default", "a", uid=a["metadata"]["uid"], node="n1")
        assert rec.wait_count(3)
        assert rec.names() == [("add", "a"), ("add", "b"), ("delete", "a")]
        assert [p["metadata"]["name"] for p in inf.cache.values()] == ["b"]
    finally:
        assert inf.stop()
        client.close()  # type: ignore[no-untyped-call]


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


def _client(url: str, token: str | None = None) -> k8s.ApiClient:
    """An ApiClient for ``url``, with a bearer token when given."""
    cfg = prepare_configuration(k8s.Configuration(host=url), 2)
    if token is not None:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    return k8s.ApiClient(cfg)


def test_a_refreshed_token_heals_a_refused_informer(mem: InMemoryApiServer) -> None:
    """The informer keeps retrying a 401 with backoff, so a token refreshed in its client's
    ``Configuration`` heals it: it syncs, and ``last_error`` clears."""
    mem.create(make_pod("a"))
    with (
        ApiServerHTTP(mem, token="right", watch_poll=0.05) as http,
        _client(http.url, "wrong") as api,
    ):
        inf = Informer(ClientListWatch(api, "Pod", request_timeout=5.0), name="token",
                       backoff_initial=0.01, backoff_max=0.05)  # fmt: skip
        inf.start()
        try:
            with pytest.raises(UnauthorizedError):
                inf.wait_for_sync(WAIT)
            api.configuration.api_key["authorization"] = "right"
            assert inf.wait_for_sync(WAIT)
            assert len(inf.cache) == 1 and inf.last_error is None
        finally:
            assert inf.stop(timeout=5.0)


def test_a_new_role_binding_heals_a_forbidden_informer(mem: InMemoryApiServer) -> None:
    """Refused with 403 (RBAC) while ``wait_for_sync`` waits, it raises ``ForbiddenError``; the
    informer keeps retrying, so a new RoleBinding heals it."""
    mem.create(make_pod("a"))
    store = SwitchableStore(mem)
    store.forbidden = True
    with (
        ApiServerHTTP(mem, stores={"Pod": store}, watch_poll=0.05) as http,
        _client(http.url) as api,
    ):
        inf = Informer(ClientListWatch(api, "Pod", request_timeout=5.0), name="rbac",
                       backoff_initial=0.01, backoff_max=0.05)  # fmt: skip
        inf.start()
        try:
            with pytest.raises(ForbiddenError):
                inf.wait_for_sync(WAIT)
            store.forbidden = False  # the RoleBinding is created
            assert inf.wait_for_sync(WAIT)
            assert len(inf.cache) == 1 and inf.last_error is None
        finally:
            assert inf.stop(timeout=5.0)


def test_an_rbac_rule_removed_at_run_time_is_reported_until_a_role_binding_heals_it(
    mem: InMemoryApiServer,
) -> None:
    """docs/security.md: an RBAC rule removed at run time shows up as ``ForbiddenError``; a
    synced informer keeps retrying and reports it (``last_error``, ``on_error``, its errors
    metric), while ``wait_for_sync``, which raises it only while waiting for the first sync,
    answers True. A new RoleBinding heals it: the cache follows the server again, and
    ``last_error`` clears with the watch's first event."""
    registry = CollectorRegistry()
    hooked: list[BaseException] = []
    mem.create(make_pod("a"))
    store = SwitchableStore(mem)
    with (
        ApiServerHTTP(mem, stores={"Pod": store}, watch_poll=0.05) as http,
        _client(http.url) as api,
    ):
        inf = Informer(ClientListWatch(api, "Pod", request_timeout=5.0), name="pods",
                       backoff_initial=0.01, backoff_max=0.05, on_error=hooked.append,
                       metrics_registry=registry)  # fmt: skip
        inf.start()
        try:
            assert inf.wait_for_sync(WAIT)
            store.forbidden = True  # the ClusterRoleBinding is deleted
            mem.drop_watches()  # the informer's next watch is refused
            wait_for(lambda: isinstance(inf.last_error, ForbiddenError), WAIT, "a 403")
            assert inf.wait_for_sync(timeout=1.0) is True  # synced before: no raise
            assert any(isinstance(e, ForbiddenError) for e in hooked)
            assert _errors(registry, ForbiddenError.reason) >= 1
            mem.create(make_pod("b"))  # unseen while refused
            store.forbidden = False  # a RoleBinding gives the rule back
            wait_for(lambda: len(inf.cache) == 2, WAIT, "the cache to follow the server")
            # healed: the error clears as the watch delivers, not when it ends minutes later
            wait_for(lambda: inf.last_error is None, WAIT, "last_error cleared")
        finally:
            assert inf.stop(timeout=5.0)


def test_a_refusal_before_the_wait_is_named_when_the_wait_times_out(
    mem: InMemoryApiServer,
) -> None:
    """``wait_for_sync`` raises a 401/403 at once only when the list is refused while it
    waits. Refused before, and now in a long backoff, the informer makes it wait out its
    timeout and raise ``InformerSyncTimeout`` naming the refusal."""
    with ApiServerHTTP(mem, token="right") as http, _client(http.url, "wrong") as api:
        inf = Informer(ClientListWatch(api, "Pod", request_timeout=5.0), name="late-wait",
                       backoff_initial=30.0, backoff_max=30.0)  # fmt: skip
        inf.start()
        try:
            wait_for(lambda: isinstance(inf.last_error, UnauthorizedError), WAIT, "a 401")
            started = time.monotonic()
            with pytest.raises(InformerSyncTimeout, match="UnauthorizedError") as caught:
                inf.wait_for_sync(timeout=1.0)
            assert time.monotonic() - started >= 1.0
            assert isinstance(caught.value.last_error, UnauthorizedError)
        finally:
            assert inf.stop(timeout=5.0)
