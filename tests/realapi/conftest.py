"""Fixtures of the conformance suite: the real kube-apiserver + etcd, and the emulator.

Tests that take the ``target`` fixture run twice: against the real apiserver (marked
``realapi``) and against ``ApiServerHTTP`` over the in-memory apiserver. Tests that only a real
apiserver can answer (RBAC, API Priority and Fairness, etcd compaction) take ``real`` directly
and are marked ``realapi``.

Items marked ``realapi`` are deselected unless the ``-m`` expression names ``realapi``, so the
default ``pytest`` run needs no Go and stays fast (the emulator half still runs there)::

    python -m kdispatch.testing.envtest build
    python -m pytest -m realapi tests/realapi

The real cluster (:class:`kdispatch.testing.envtest.ControlPlane`) is one per session (starting
it takes a few seconds); each test gets its own namespace. There is no kubelet and no
controller-manager: pods stay Pending, a bound pod deleted gracefully stays Terminating (tests
delete with ``gracePeriodSeconds: 0``), and namespaces are made with their ``default``
ServiceAccount as the controller-manager would (``ControlPlane.create_namespace``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

from kdispatch.testing import make_node
from kdispatch.testing.envtest import Binaries, BinariesNotFound, find_binaries
from tests.realapi.cluster import Admin, EmulatorTarget, RealCluster, Target

REALAPI = "realapi"

PRIORITY_CLASSES = {"kd-low": 10, "kd-high": 1000}
SHARED_NODES = [f"kd-shared-{i}" for i in range(3)]
NOT_READY = "node.kubernetes.io/not-ready"
SHARED_TAINT = {"key": "kdispatch.test/shared", "value": "true", "effect": "NoSchedule"}

_ns_seq = itertools.count()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect ``realapi`` items unless the marker expression asks for them."""
    if REALAPI in (config.getoption("markexpr", "") or ""):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if item.get_closest_marker(REALAPI) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def node_body(
    name: str, *, cpu_m: int = 64_000, mem_mi: int = 262_144, **spec: Any
) -> dict[str, Any]:
    """:func:`kdispatch.testing.make_node` (Ready, 110 pods) with ``spec`` fields added; the
    real apiserver replaces the UID it carries."""
    body = make_node(name, cpu_m, mem_mi)
    body["spec"].update(spec)
    return body


def _bootstrap(admin: Admin) -> None:
    """What the session's tests share: PriorityClasses and a few (tainted) nodes."""
    for name, value in PRIORITY_CLASSES.items():
        admin.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    for name in SHARED_NODES:
        create_node(admin, node_body(name, taints=[SHARED_TAINT]), real=True)


def create_node(admin: Admin, body: dict[str, Any], *, real: bool) -> dict[str, Any]:
    """Create a Node. On the real apiserver the TaintNodesByCondition admission plugin adds
    ``node.kubernetes.io/not-ready:NoSchedule``, which the node lifecycle controller removes
    once the kubelet reports Ready; there is neither here, so the taint is removed as that
    controller would (keeping the body's own taints)."""
    node = admin.create("/api/v1/nodes", body)
    if real:
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != NOT_READY]
        node = admin.ok(
            "PATCH",
            f"/api/v1/nodes/{body['metadata']['name']}",
            {"spec": {"taints": taints or None}},
            content_type="application/merge-patch+json",
        )
    return node


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    """The built etcd + kube-apiserver. Asked for with ``-m realapi``, their absence is a
    failure, not a skip."""
    try:
        return find_binaries()
    except BinariesNotFound as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def scheduler_binaries() -> Binaries:
    """The built binaries with kube-scheduler; without it, the test is skipped."""
    try:
        return find_binaries(scheduler=True)
    except BinariesNotFound as exc:
        pytest.skip(f"kube-scheduler is not built: {exc}")


@pytest.fixture(scope="session")
def real(tmp_path_factory: pytest.TempPathFactory, binaries: Binaries) -> Iterator[RealCluster]:
    """The real etcd + kube-apiserver, for the whole session."""
    cluster = RealCluster(tmp_path_factory.mktemp("realapi"), binaries)
    try:
        cluster.start()
        with cluster.admin() as admin:
            _bootstrap(admin)
        yield cluster
    finally:
        cluster.stop()
        leaked = [
            f"{p.pid} {p.name()}"
            for p in psutil.Process().children(recursive=True)
            if p.name() in ("etcd", "kube-apiserver", "kube-scheduler")
        ]
        assert not leaked, f"leaked cluster processes: {leaked}"


@pytest.fixture(params=[pytest.param("real", marks=pytest.mark.realapi), "emulator"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """The apiserver under test: the real one, or the emulator (fresh per test)."""
    if request.param == "real":
        cluster: RealCluster = request.getfixturevalue("real")
        yield cluster
        return
    emulator = EmulatorTarget()
    try:
        yield emulator
    finally:
        emulator.close()


@pytest.fixture
def admin(target: Target) -> Iterator[Admin]:
    """Raw requests as the cluster admin."""
    with target.admin() as admin:
        yield admin


def create_namespace(target: Target, admin: Admin, name: str) -> str:
    """Create ``name`` with its ``default`` ServiceAccount (the controller-manager's job) on the
    real apiserver; the emulator has no namespaces to create."""
    if isinstance(target, RealCluster):
        target.create_namespace(name)
    return name


def clear_namespace(admin: Admin, name: str) -> None:
    """Delete the namespace's pods at once (as a kubelet would finish them) and its claims, so
    cluster-wide informers of later tests (the scheduler's) see nothing left over. The
    namespace itself stays: without a controller-manager nothing would finalize it."""
    for path in (admin.pod_path(name), admin.claim_path(name)):
        reply = admin.request("DELETE", path, {"gracePeriodSeconds": 0})
        assert reply.status == 200, reply


@pytest.fixture
def ns(request: pytest.FixtureRequest, target: Target, admin: Admin) -> Iterator[str]:
    """A namespace of the test's own, emptied afterwards on the real apiserver."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = create_namespace(target, admin, f"t{next(_ns_seq)}-{slug}")
    yield name
    if target.real:
        clear_namespace(admin, name)


@pytest.fixture
def kubeconfig(target: Target, tmp_path: Path) -> Path:
    """A kubeconfig for the admin."""
    return target.write_kubeconfig(tmp_path / "kubeconfig")
