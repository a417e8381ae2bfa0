"""Any resource through ``KubernetesBackend`` over real HTTP, on both transports: built-in
kinds, a CRD, cluster-scoped kinds, selectors, pagination, watches, the three patch flavours,
subresources, delete preconditions and PDB-blocked evictions. What is checked is the state on
the (emulated) server."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kdispatch import register_from_discovery
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import DispatcherConfig, ExecutorConfig, RateLimitConfig
from kdispatch.actors.model.errors import (
    ConflictError,
    DisruptionBudgetError,
    InvalidInputError,
    InvalidRequestError,
    NotFoundError,
    Outcome,
    UnknownKindError,
)
from kdispatch.actors.model.kinds import DEFAULT_KINDS, KindInfo, KindTable
from kdispatch.actors.model.pod_calls import PodStatusPatch
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.adapters.transport import TransportName
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_pdb, make_pod
from tests.factories import ready_pod

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def mem(kinds: KindTable) -> InMemoryApiServer:
    return InMemoryApiServer(kinds=kinds)


@pytest.fixture(params=["lean", "client"])
def backend(
    request: pytest.FixtureRequest, mem: InMemoryApiServer, kinds: KindTable
) -> Iterator[KubernetesBackend]:
    transport: TransportName = request.param
    with (
        ApiServerHTTP(mem, kinds=kinds) as srv,
        KubernetesBackend.for_url(srv.url, transport=transport, kinds=kinds) as b,
    ):
        yield b


def _quota(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.io/v1",
        "kind": "QuotaClaim",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"cpuM": 100},
    }


# --------------------------------------------------------------------------- the kind table


def test_kind_table_lookup_register_and_clash() -> None:
    table = KindTable()
    for kind in ("Pod", "Node", "ResourceClaim", "Lease", "PodDisruptionBudget", "Deployment"):
        assert kind in table
    assert table.lookup("ResourceClaim").api_version == "resource.k8s.io/v1"
    assert table.lookup("Lease").path("ns", "l1") == (
        "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l1"
    )
    assert table.lookup("Node").path("", "n1", "status") == "/api/v1/nodes/n1/status"
    assert table.lookup("Deployment").patch == "strategic"
    info = table.register("Widget", "example.io", "v1alpha1", "widgets")
    assert (info.patch, info.namespaced, info.status) == ("merge", True, True)
    assert table.register("Widget", "example.io", "v1alpha1", "widgets") == info  # idempotent
    with pytest.raises(InvalidInputError, match="already registered"):
        table.register("Widget", "example.io", "v1", "widgets")
    with pytest.raises(UnknownKindError):
        table.lookup("Gadget")
    for bad in (
        ("widget", "example.io", "v1", "widgets"),
        ("Widget", "Example.IO", "v1", "widgets"),
        ("Widget", "example.io", "1", "widgets"),
        ("Widget", "example.io", "v1", "Widgets"),
    ):
        with pytest.raises(InvalidInputError):
            KindInfo(*bad)
    assert "Widget" not in DEFAULT_KINDS  # a private table never leaks into the default one


def test_discovery_fills_a_table(backend: KubernetesBackend) -> None:
    table = KindTable(())
    added = register_from_discovery(backend, table)
    assert {i.kind for i in added} >= {"Pod", "Node", "Deployment", "QuotaClaim", "Lease"}
    quota = table.lookup("QuotaClaim")
    assert (quota.api_version, quota.plural, quota.namespaced, quota.patch) == (
        "example.io/v1",
        "quotaclaims",
        True,
        "merge",
    )
    assert table.lookup("Node").namespaced is False
    assert table.lookup("Pod").status and table.lookup("Pod").patch == "strategic"
    # the Kubernetes project's groups: the core one, unsuffixed ones, every *.k8s.io one
    assert table.lookup("Deployment").api_version == "apps/v1"
    assert table.lookup("Deployment").patch == "strategic"
    assert table.lookup("Lease").api_version == "coordination.k8s.io/v1"
    assert table.lookup("Lease").patch == "strategic"
    assert not table.lookup("ConfigMap").status
    assert register_from_discovery(backend, table) == []  # known kinds are left alone


# --------------------------------------------------------------------------- CRD objects


def test_crd_create_get_list_with_selectors_and_pages(
    backend: KubernetesBackend, mem: InMemoryApiServer
) -> None:
    for i in range(5):
        backend.create("QuotaClaim", "default", _quota(f"q{i}", team="a" if i < 3 else "b"))
    got = backend.get("QuotaClaim", "default", "q1")
    assert got["kind"] == "QuotaClaim" and got["spec"] == {"cpuM": 100}
    stored = mem.get_object("QuotaClaim", "default", "q1")
    assert stored is not None and stored["metadata"]["uid"] == got["metadata"]["uid"]
    page = backend.list("QuotaClaim", "default", label_selector="team=a", limit=2)
    assert [o["metadata"]["name"] for o in page.items] == ["q0", "q1"]
    assert page.continue_token is not None
    rest = backend.list("QuotaClaim", "default", label_selector="team=a", limit=2,
                        continue_token=page.continue_token)  # fmt: skip
    assert [o["metadata"]["name"] for o in rest.items] == ["q2"]
    assert rest.continue_token is None
    items, rv = backend.list_all("QuotaClaim", label_selector="team in (b)", page_size=1)
    assert [o["metadata"]["name"] for o in items] == ["q3", "q4"]
    assert all(o["apiVersion"] == "example.io/v1" for o in items)
    assert int(rv) >= 5
    names = backend.list_all("QuotaClaim", field_selector="metadata.name!=q0")[0]
    assert len(names) == 4


def test_crd_patches_merge_json_and_status(
    backend: KubernetesBackend, mem: InMemoryApiServer
) -> None:
    obj = backend.create("QuotaClaim", "default", _quota("q1"))
    uid, rv = obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]
    out = backend.patch(
        "QuotaClaim", "default", "q1", {"spec": {"cpuM": 200}, "status": {"x": 1}}, uid=uid
    )
    assert out["spec"]["cpuM"] == 200
    assert "status" not in out  # the main resource never writes status (status subresource)
    out = backend.patch_status(
        "QuotaClaim", "default", "q1", {"status": {"heldCpuM": 200}}, uid=uid,
        resource_version=out["metadata"]["resourceVersion"], patch_type="merge",
    )  # fmt: skip
    assert out["status"] == {"heldCpuM": 200}
    with pytest.raises(ConflictError):  # stale resourceVersion
        backend.patch("QuotaClaim", "default", "q1", {"spec": {"cpuM": 1}}, resource_version=rv)
    with pytest.raises(ConflictError) as conflict:  # a 422 "metadata.uid: field is immutable"
        backend.patch("QuotaClaim", "default", "q1", {"spec": {"cpuM": 1}}, uid="other")
    assert "HTTP 422" in str(conflict.value) and "field is immutable" in str(conflict.value)
    ops = [{"op": "replace", "path": "/spec/cpuM", "value": 300}]
    out = backend.patch("QuotaClaim", "default", "q1", ops, uid=uid, patch_type="json")
    assert out["spec"]["cpuM"] == 300
    with pytest.raises(InvalidRequestError) as info:  # the uid test op fails: 422, like upstream
        backend.patch("QuotaClaim", "default", "q1", ops, uid="other", patch_type="json")
    assert info.value.status == 422
    with pytest.raises(InvalidRequestError) as info:  # CRDs take no strategic merge patch
        backend.patch("QuotaClaim", "default", "q1", {"spec": {}}, patch_type="strategic")
    assert info.value.status == 415
    stored = mem.get_object("QuotaClaim", "default", "q1")
    assert stored is not None
    assert (stored["spec"]["cpuM"], stored["status"]) == (300, {"heldCpuM": 200})


def test_cluster_scoped_crd_and_delete_preconditions(
    backend: KubernetesBackend, mem: InMemoryApiServer
) -> None:
    body = {"metadata": {"name": "global"}, "spec": {"cpuM": 1}}
    obj = backend.create("ClusterQuota", "", body)
    assert "namespace" not in obj["metadata"]
    with pytest.raises(InvalidRequestError):
        backend.get("ClusterQuota", "default", "global")
    uid, rv = obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]
    backend.patch("ClusterQuota", "", "global", {"spec": {"cpuM": 2}}, uid=uid)
    with pytest.raises(ConflictError):
        backend.delete("ClusterQuota", "", "global", uid=uid, resource_version=rv)
    with pytest.raises(ConflictError):
        backend.delete("ClusterQuota", "", "global", uid="someone-else")
    assert mem.get_object("ClusterQuota", "", "global") is not None
    backend.delete("ClusterQuota", "", "global", uid=uid)
    assert mem.get_object("ClusterQuota", "", "global") is None
    with pytest.raises(NotFoundError):
        backend.get("ClusterQuota", "", "global")


def test_watch_any_kind_with_a_selector(backend: KubernetesBackend) -> None:
    backend.create("QuotaClaim", "default", _quota("q0", team="a"))
    rv = backend.list("QuotaClaim").resource_version
    resp = backend.watch("QuotaClaim", "default", resource_version=rv, timeout_seconds=2,
                         label_selector="team=a")  # fmt: skip
    try:
        backend.create("QuotaClaim", "default", _quota("q1", team="b"))  # never seen
        backend.create("QuotaClaim", "default", _quota("q2", team="a"))
        line = b""
        for chunk in resp.stream(None):
            line += chunk
            if b"\n" in line:
                break
        event = json.loads(line.split(b"\n")[0])
    finally:
        resp.release_conn()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "q2")


# --------------------------------------------------------------------------- built-ins


def test_builtin_kinds_strategic_patch_and_namespaces(
    backend: KubernetesBackend, mem: InMemoryApiServer
) -> None:
    deploy = mem.create(
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 1}}
    )  # fmt: skip
    out = backend.patch("Deployment", "default", "web", {"spec": {"replicas": 3}},
                        uid=deploy["metadata"]["uid"])  # fmt: skip
    assert out["apiVersion"] == "apps/v1" and out["spec"]["replicas"] == 3
    backend.create("Namespace", "", {"metadata": {"name": "team-a"}})
    backend.create("ConfigMap", "team-a", {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    assert [n["metadata"]["name"] for n in backend.list_all("Namespace")[0]] == ["team-a"]
    cm = backend.get("ConfigMap", "team-a", "cfg")
    assert cm["data"] == {"k": "v"}
    with pytest.raises(InvalidRequestError, match="no status subresource"):
        backend.patch("ConfigMap", "team-a", "cfg", {}, subresource="status")
    stored = mem.get_object("Deployment", "default", "web")
    assert stored is not None and stored["spec"]["replicas"] == 3


def test_eviction_blocked_by_a_pdb_then_allowed(
    backend: KubernetesBackend, mem: InMemoryApiServer
) -> None:
    a, b = ready_pod(mem, "a"), ready_pod(mem, "b")
    mem.create(make_pdb("web", match_labels={"app": "web"}, min_available=1))
    backend.evict("default", "a", uid=a["metadata"]["uid"])  # 2 healthy, 1 needed: allowed
    assert mem.get_object("Pod", "default", "a") is None
    with pytest.raises(DisruptionBudgetError) as info:  # 1 healthy, 1 needed: 429
        backend.evict("default", "b", uid=b["metadata"]["uid"])
    assert info.value.status == 429 and info.value.retryable
    assert "disruption budget" in str(info.value)
    assert mem.get_object("Pod", "default", "b") is not None
    assert mem.pdb_status("default", "web")["disruptionsAllowed"] == 0
    with pytest.raises(ConflictError):  # the UID precondition is checked first
        backend.evict("default", "b", uid="not-b")
    ready_pod(mem, "c")
    backend.evict("default", "b", uid=b["metadata"]["uid"], grace_period_seconds=0)
    assert mem.get_object("Pod", "default", "b") is None
    with pytest.raises(NotFoundError):
        backend.evict("default", "b", uid=b["metadata"]["uid"])


def test_pool_sized_from_the_executor_workers(
    mem: InMemoryApiServer, kinds: KindTable, caplog: pytest.LogCaptureFixture
) -> None:
    workers = 32
    pods = [mem.create(make_pod(f"p{i}")) for i in range(workers * 3)]
    caplog.set_level(logging.WARNING, logger="urllib3")
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=100_000, burst=100_000),
        executor=ExecutorConfig(workers=workers),
    )
    with (
        ApiServerHTTP(mem, kinds=kinds) as srv,
        KubernetesBackend.for_url(srv.url, kinds=kinds) as b,  # default workers=8
        Dispatcher(b, config) as d,
    ):
        assert b.api_client.configuration.connection_pool_maxsize >= workers
        barrier = threading.Barrier(4)
        futures: list[Any] = []
        lock = threading.Lock()

        def submit(chunk: list[dict[str, Any]]) -> None:
            barrier.wait(10)
            for pod in chunk:
                call = PodStatusPatch.for_pod(pod, nominated_node_name="n1")
                with lock:
                    futures.append(d.submit(call))

        threads = [threading.Thread(target=submit, args=(pods[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert all(f.result(timeout=30) is Outcome.SUCCESS for f in futures)
    for pod in pods:
        stored = mem.get_object("Pod", "default", pod["metadata"]["name"])
        assert stored is not None and stored["status"]["nominatedNodeName"] == "n1"
    assert "Connection pool is full" not in caplog.text


CORE_KINDS = {
    "v1": ("ServiceAccount", "ConfigMap", "Secret", "Namespace"),
    "events.k8s.io/v1": ("Event",),
    "coordination.k8s.io/v1": ("Lease",),
    "policy/v1": ("PodDisruptionBudget",),
    "apps/v1": ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"),
    "batch/v1": ("Job",),
}
"""The kinds a controller meets, by apiVersion; each one's plural is its name in lower case
with an ``s``."""


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [
        pytest.param(kind, version, id=kind)
        for version, kinds in CORE_KINDS.items()
        for kind in kinds
    ],
)
def test_the_kinds_a_controller_meets_are_built_in(kind: str, api_version: str) -> None:
    info = KindTable().lookup(kind)
    assert (info.api_version, info.plural, info.patch) == (
        api_version,
        f"{kind.lower()}s",
        "strategic",
    )


def test_unknown_kind_error_names_the_public_register_function() -> None:
    with pytest.raises(UnknownKindError, match=r"kdispatch\.register_kind\(") as caught:
        KindTable().lookup("Gadget")
    assert "kdispatch.actors" not in str(caught.value)
