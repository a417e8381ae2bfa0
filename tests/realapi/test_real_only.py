"""Checks only a real apiserver can answer: RBAC with the example's ServiceAccount, API
Priority and Fairness, and the server's own view of what kdispatch sent."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from kubernetes.aio import client as aclient
from loguru import logger
from prometheus_client import CollectorRegistry

from examples.scheduler.ha import LeaderElect
from examples.scheduler.runner import RunConfig, run
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RetryConfig,
)
from kdispatch.actors.model.errors import (
    CallFailed,
    InvalidRequestError,
    Outcome,
    TooManyRequestsError,
)
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.actors.model.podgroup_calls import PodGroupStatusPatch
from kdispatch.adapters.aio_informer import AioInformer
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing import make_podgroup
from tests.backends import T, WrappedBackend
from tests.e2e.test_scheduler_example import check_clean
from tests.realapi.cluster import REPO, Admin, RealCluster, condition, wait_for
from tests.realapi.conftest import clear_namespace, create_namespace, create_node, node_body
from tests.realapi.objects import new_pod, remove_pod, uid_rv
from tests.realapi.test_real_dispatcher import unschedulable
from tests.realapi.test_real_scheduler import schedule_namespace

pytestmark = [pytest.mark.realapi, pytest.mark.timeout(180)]

WAIT = 60.0
SA_NAMESPACE = "kdispatch"


@pytest.fixture
def radmin(real: RealCluster) -> Iterator[Admin]:
    with real.admin() as admin:
        yield admin


_seq = iter(range(1_000_000))


@pytest.fixture
def rns(real: RealCluster, radmin: Admin) -> Iterator[str]:
    name = create_namespace(real, radmin, f"r{next(_seq)}-real-only")
    yield name
    clear_namespace(radmin, name)


def metric_value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    total = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


@pytest.fixture
def rbackend(real: RealCluster) -> Iterator[KubernetesBackend]:
    with real.backend() as b:
        yield b


# --------------------------------------------------------------------------- no kubelet
# The emulator acts as apiserver and kubelet in one: it removes a deleted pod that no finalizer
# holds at once, whatever its grace period (docs/apiserver-differences.md).


def test_graceful_delete_of_a_bound_pod_leaves_it_terminating(
    rbackend: KubernetesBackend, radmin: Admin, rns: str
) -> None:
    """No kubelet: a bound pod deleted with the default grace period stays until removed."""
    uid, _ = uid_rv(new_pod(radmin, rns, "p1"))
    rbackend.bind(rns, "p1", uid=uid, node="n1")
    rbackend.delete("Pod", rns, "p1", uid=uid)
    stored = radmin.get_pod(rns, "p1")
    assert stored["metadata"]["deletionTimestamp"]
    assert stored["metadata"]["deletionGracePeriodSeconds"] == 30
    remove_pod(radmin, rns, "p1")
    assert not radmin.pod_exists(rns, "p1")


# --------------------------------------------------------------------------- RBAC


def apply_rbac(admin: Admin, *, name: str = "kdispatch", drop: str | None = None) -> None:
    """Apply ``examples/rbac.yaml`` (optionally renamed, and without the rule for resource
    ``drop``). Idempotent: 409 AlreadyExists is fine."""
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "rbac.yaml").read_text()) if d]
    paths = {
        "Namespace": "/api/v1/namespaces",
        "ServiceAccount": f"/api/v1/namespaces/{SA_NAMESPACE}/serviceaccounts",
        "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    }
    docs.insert(0, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SA_NAMESPACE}})
    for doc in docs:
        if doc["kind"] != "Namespace":
            doc["metadata"]["name"] = name
        if doc["kind"] == "ClusterRole" and drop is not None:
            doc["rules"] = [r for r in doc["rules"] if drop not in r["resources"]]
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] = name
            doc["subjects"][0]["name"] = name
        reply = admin.request("POST", paths[doc["kind"]], doc)
        assert reply.status in (201, 409), reply


def sa_token(admin: Admin, name: str) -> str:
    """A token for the ServiceAccount through the TokenRequest API."""
    body = admin.ok(
        "POST",
        f"/api/v1/namespaces/{SA_NAMESPACE}/serviceaccounts/{name}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    token: str = body["status"]["token"]
    return token


def can(admin: Admin, user: str, verb: str, resource: str, sub: str = "") -> bool:
    review = admin.ok(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "resourceAttributes": {
                    "verb": verb,
                    "resource": resource,
                    "subresource": sub,
                    "group": "",
                    "namespace": "default",
                },
            },
        },
    )
    return bool(review["status"].get("allowed"))


def test_main_job_runs_with_the_example_rbac(
    real: RealCluster, radmin: Admin, rns: str, tmp_path: Path
) -> None:
    apply_rbac(radmin)
    user = f"system:serviceaccount:{SA_NAMESPACE}:kdispatch"
    wait_for(lambda: can(radmin, user, "create", "pods", "binding"), WAIT, "RBAC to apply")
    token = sa_token(radmin, "kdispatch")
    kubeconfig = real.write_kubeconfig(tmp_path / "kubeconfig", token=token)
    schedule_namespace(real, radmin, rns, kubeconfig, f"kd-rbac-{rns}"[:63])


def test_a_removed_verb_is_a_typed_forbidden_error_and_never_retried(
    real: RealCluster, radmin: Admin, rns: str
) -> None:
    apply_rbac(radmin, name="kdispatch-nobind", drop="pods/binding")
    user = f"system:serviceaccount:{SA_NAMESPACE}:kdispatch-nobind"
    wait_for(lambda: can(radmin, user, "patch", "pods", "status"), WAIT, "RBAC to apply")
    assert not can(radmin, user, "create", "pods", "binding")
    token = sa_token(radmin, "kdispatch-nobind")
    pod = new_pod(radmin, rns, "p1")
    registry = CollectorRegistry()
    backend = real.backend(token=token)
    d = Dispatcher(backend, DispatcherConfig(), metrics_registry=registry).start()
    try:
        started = time.monotonic()
        fut = d.submit(PodBinding.for_pod(pod, "n1"))
        exc = fut.exception(WAIT)
        elapsed = time.monotonic() - started
        # the verb that is still granted works with the same token
        patch = PodStatusPatch.for_pod(pod, nominated_node_name="n1")
        assert d.submit(patch).result(WAIT) is Outcome.SUCCESS
    finally:
        d.stop(timeout=10.0)
        backend.close()
    assert isinstance(exc, CallFailed), exc
    cause = exc.cause
    assert isinstance(cause, InvalidRequestError) and cause.status == 403, cause
    assert "Forbidden" in str(cause) and "pods/binding" in str(cause)
    assert not cause.retryable
    assert elapsed < 5.0
    assert metric_value(registry, "kdispatch_retries_total") == 0
    assert (
        metric_value(
            registry,
            "scheduler_async_api_call_execution_total",
            call_type="pod_binding",
        )
        == 1
    )
    stored = radmin.get_pod(rns, "p1")
    assert stored["spec"].get("nodeName") is None
    assert stored["status"]["nominatedNodeName"] == "n1"


def optional_rules(heading: str) -> list[dict[str, Any]]:
    """The rules commented out in ``examples/rbac.yaml`` under the comment line holding
    ``heading`` (its YAML lines are the comment lines indented five spaces or more)."""
    lines = (REPO / "examples" / "rbac.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if heading in line)
    block: list[str] = []
    for line in lines[start + 1 :]:
        if not line.startswith("#") or not line[1:].strip():
            break
        if line[1:].startswith(" " * 5):
            block.append(line[1:])
    rules: list[dict[str, Any]] = yaml.safe_load(textwrap.dedent("\n".join(block)))
    return rules


def test_the_optional_podgroup_rules_are_enough_for_podgroup_status(
    real: RealCluster, radmin: Admin, rns: str
) -> None:
    """A ServiceAccount with only the commented-out PodGroup rules of ``examples/rbac.yaml``
    watches PodGroups and writes their status through the dispatcher."""
    rules = optional_rules("only if you submit podgroup_status_patch")
    assert sorted(r for rule in rules for r in rule["resources"]) == [
        "podgroups",
        "podgroups/status",
    ]
    name = "kdispatch-podgroups"
    for path, doc in (
        (f"/api/v1/namespaces/{rns}/serviceaccounts", {"metadata": {"name": name}}),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {"metadata": {"name": name}, "rules": rules},
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": f"{name}-{rns}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": rns}],
            },
        ),
    ):
        reply = radmin.request("POST", path, doc)
        assert reply.status in (201, 409), reply
    token = radmin.ok(
        "POST",
        f"/api/v1/namespaces/{rns}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    body = make_podgroup("g1", rns, min_count=2)
    del body["metadata"]["uid"]
    pg = radmin.create(radmin.podgroup_path(rns), body)
    user_client = real.api_client(token)
    backend = real.backend(token=token)
    d = Dispatcher(backend, DispatcherConfig(executor=ExecutorConfig(workers=2)))
    lw = ClientListWatch(user_client, "PodGroup", rns, request_timeout=10.0)
    informer = Informer(lw, name="rbac-podgroup", backoff_initial=0.01, backoff_max=0.5)
    informer.attach(d)
    try:
        d.start()
        informer.start()
        wait_for(lambda: informer.wait_for_sync(1.0), WAIT, "RBAC to apply and a sync")
        call = PodGroupStatusPatch.initially_scheduled(pg, False, message="no room")
        assert d.submit(call).result(WAIT) is Outcome.SUCCESS
    finally:
        assert informer.stop(timeout=10.0)
        d.stop(timeout=10.0)
        backend.close()
        user_client.close()  # type: ignore[no-untyped-call]
    stored = condition(
        radmin.ok("GET", radmin.podgroup_path(rns, "g1")), "PodGroupInitiallyScheduled"
    )
    assert stored is not None and (stored["status"], stored["message"]) == ("False", "no room")


# --------------------------------------------------------------------------- APF


@dataclass
class Attempt:
    name: str
    t: float
    retry_after: float | None  # set when the server answered 429


class AttemptRecorder(WrappedBackend):
    """Delegates to a ``KubernetesBackend`` and records when every read and status patch went
    out, and any 429's Retry-After. Executor worker threads."""

    def __init__(self, inner: KubernetesBackend) -> None:
        super().__init__(inner)
        self.attempts: list[Attempt] = []
        self._lock = threading.Lock()

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        if op not in ("get", "patch_status"):
            return send()
        t = time.monotonic()
        try:
            out = send()
        except TooManyRequestsError as exc:
            with self._lock:
                self.attempts.append(Attempt(request["name"], t, exc.retry_after))
            raise
        with self._lock:
            self.attempts.append(Attempt(request["name"], t, None))
        return out


def setup_flow_control(admin: Admin) -> str:
    """A one-share PriorityLevelConfiguration that rejects what it cannot seat at once, and a
    FlowSchema sending user ``kd-flood`` to it. Returns the FlowSchema's uid."""
    base = "/apis/flowcontrol.apiserver.k8s.io/v1"
    admin.create(
        f"{base}/prioritylevelconfigurations",
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "kd-tiny"},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 1,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"},
                },
            },
        },
    )
    schema = admin.create(
        f"{base}/flowschemas",
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": "kd-flood"},
            "spec": {
                "priorityLevelConfiguration": {"name": "kd-tiny"},
                "matchingPrecedence": 200,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": "kd-flood"}}],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": ["*"],
                                "resources": ["*"],
                                "namespaces": ["*"],
                            }
                        ],
                    }
                ],
            },
        },
    )
    admin.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "kd-flood"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kd-flood"}
            ],
        },
    )
    uid: str = schema["metadata"]["uid"]
    return uid


def server_rejections(admin: Admin) -> float:
    reply = admin.request("GET", "/metrics")
    text = reply.body.get("_raw", "")
    total = 0.0
    for line in str(text).splitlines():
        if line.startswith("apiserver_flowcontrol_rejected_requests_total{") and (
            'priority_level="kd-tiny"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.timeout(300)
def test_apf_429s_are_ridden_out_honouring_retry_after(
    real: RealCluster, radmin: Admin, rns: str
) -> None:
    schema_uid = setup_flow_control(radmin)
    flood_client = real.api_client(token=real.flood_token)
    try:
        flood = Admin(flood_client)

        def classified() -> bool:
            reply = flood.request("GET", flood.pod_path(rns))
            return (
                reply.status == 200
                and reply.headers.get("X-Kubernetes-PF-FlowSchema-UID") == schema_uid
            )

        wait_for(classified, WAIT, "the FlowSchema to classify kd-flood")
    finally:
        flood_client.close()  # type: ignore[no-untyped-call]
    n = 24
    pods = [new_pod(radmin, rns, f"p{i}") for i in range(n)]
    before = server_rejections(radmin)
    registry = CollectorRegistry()
    inner = real.backend(token=real.flood_token, workers=12)
    backend = AttemptRecorder(inner)
    # APF's Retry-After starts at 1 s and doubles (up to 32 s) while a priority level keeps
    # dropping requests: give the calls a budget that outlasts a few doublings
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=10_000, burst=10_000),
        executor=ExecutorConfig(workers=12),
        retry=RetryConfig(budget=200.0, max_retry_after=32.0),
    )
    d = Dispatcher(backend, config, metrics_registry=registry).start()
    try:
        futures = [
            d.submit(PodStatusPatch.for_pod(p, nominated_node_name=f"n{i}"))
            for i, p in enumerate(pods)
        ]
        outcomes = [f.result(240.0) for f in futures]
    finally:
        d.stop(timeout=10.0)
        inner.close()
    assert outcomes == [Outcome.SUCCESS] * n  # nothing lost
    for i in range(n):
        assert radmin.get_pod(rns, f"p{i}")["status"]["nominatedNodeName"] == f"n{i}"
    rejected = [a for a in backend.attempts if a.retry_after is not None]
    assert rejected, "APF rejected nothing: the burst never exceeded the priority level's seats"
    assert server_rejections(radmin) - before >= len(rejected)
    assert all(a.retry_after is not None and a.retry_after >= 1 for a in rejected)
    # every retry of an object waited at least the Retry-After its 429 carried
    by_name: dict[str, list[Attempt]] = {}
    for a in sorted(backend.attempts, key=lambda a: a.t):
        by_name.setdefault(a.name, []).append(a)
    for attempts in by_name.values():
        for prev, nxt in itertools.pairwise(attempts):
            if prev.retry_after is not None:
                assert nxt.t - prev.t >= prev.retry_after * 0.99, (prev, nxt)
    assert metric_value(registry, "kdispatch_retries_total") >= len(rejected)
    assert condition(radmin.get_pod(rns, "p0"), "PodScheduled") is None


# --------------------------------------------------------------------------- outages


def test_bindings_ride_out_a_frozen_apiserver(real: RealCluster, radmin: Admin, rns: str) -> None:
    """kube-apiserver is frozen (SIGSTOP) while bindings are in flight: requests time out and
    are retried within the retry budget; after SIGCONT every binding lands, once."""
    pods = [new_pod(radmin, rns, f"p{i}") for i in range(20)]
    apiserver = next(p for p in real.processes if p.name == "kube-apiserver")
    config = DispatcherConfig(
        executor=ExecutorConfig(workers=8),
        retry=RetryConfig(max_attempts=30, max_backoff=1.0),
    )
    backend = real.backend(request_timeout=1.0)
    registry = CollectorRegistry()
    d = Dispatcher(backend, config, metrics_registry=registry).start()
    frozen = False
    try:
        os.kill(apiserver.pid, signal.SIGSTOP)
        frozen = True
        futures = [d.submit(PodBinding.for_pod(p, f"n{i % 3}")) for i, p in enumerate(pods)]
        # the outage lasts until every worker has had a request time out and be retried
        wait_for(
            lambda: metric_value(registry, "kdispatch_retries_total") >= 8,
            WAIT,
            "the executor to retry timed-out bindings",
        )
        os.kill(apiserver.pid, signal.SIGCONT)
        frozen = False
        outcomes = [f.result(WAIT) for f in futures]
    finally:
        if frozen:
            os.kill(apiserver.pid, signal.SIGCONT)
        d.stop(timeout=10.0)
        backend.close()
    assert outcomes == [Outcome.SUCCESS] * len(pods)
    for i in range(len(pods)):
        pod = radmin.get_pod(rns, f"p{i}")
        assert pod["spec"]["nodeName"] == f"n{i % 3}"
        sched = condition(pod, "PodScheduled")
        assert sched is not None and sched["status"] == "True"


def test_an_apiserver_crash_is_ridden_out(real: RealCluster, radmin: Admin, rns: str) -> None:
    """kube-apiserver crashes (SIGKILL) and comes back at the same address: the bindings and
    status patches submitted while it is down land once it is back, each once, and the
    informer that feeds the dispatcher carries on (it sees those bindings and a pod created
    after the restart) without being restarted itself."""
    pods = [new_pod(radmin, rns, f"p{i}") for i in range(6)]
    seen: dict[str, str | None] = {}  # pod name -> the node the informer last saw it on
    cond = threading.Condition()

    def record(obj: dict[str, Any]) -> None:
        with cond:
            seen[obj["metadata"]["name"]] = obj["spec"].get("nodeName")
            cond.notify_all()

    def informer_sees(expected: dict[str, str | None]) -> bool:
        with cond:
            return cond.wait_for(lambda: expected.items() <= seen.items(), WAIT)

    client = real.api_client()
    backend = real.backend(request_timeout=2.0)
    registry = CollectorRegistry()
    d = Dispatcher(
        backend, DispatcherConfig(retry=RetryConfig(budget=90.0)), metrics_registry=registry
    ).start()
    informer = Informer(
        ClientListWatch(client, "Pod", rns, request_timeout=5.0),
        name="crash",
        backoff_initial=0.05,
        backoff_max=1.0,
    )
    informer.attach(d)
    informer.add_handler(record, lambda _old, new: record(new), None)
    try:
        informer.start()
        assert informer.wait_for_sync(WAIT)
        assert informer_sees({f"p{i}": None for i in range(6)})
        with real.plane.apiserver_down():
            bindings = [d.submit(PodBinding.for_pod(p, "n1")) for p in pods[:3]]
            patches = [
                d.submit(PodStatusPatch.for_pod(p, conditions=[unschedulable("no fit")]))
                for p in pods[3:]
            ]
            wait_for(
                lambda: metric_value(registry, "kdispatch_retries_total") >= 6,
                WAIT,
                "every call to fail once on the outage and wait for a retry",
            )
        assert [f.result(WAIT) for f in bindings + patches] == [Outcome.SUCCESS] * 6
        new_pod(radmin, rns, "after")
        assert informer_sees({"p0": "n1", "p1": "n1", "p2": "n1", "after": None})
    finally:
        informer.stop(10.0)
        d.stop(timeout=10.0)
        backend.close()
        client.close()  # type: ignore[no-untyped-call]
    for i in range(6):
        pod = radmin.get_pod(rns, f"p{i}")
        scheduled = condition(pod, "PodScheduled")
        assert scheduled is not None
        if i < 3:
            assert (pod["spec"]["nodeName"], scheduled["status"]) == ("n1", "True")
        else:
            assert (pod["spec"].get("nodeName"), scheduled["status"]) == (None, "False")


@contextmanager
def etcd_frozen(real: RealCluster, seconds: float) -> Iterator[None]:
    """etcd is frozen (SIGSTOP) for ``seconds`` after the body ran, then thawed: writes hang in
    kube-apiserver meanwhile (reads come from its watch cache)."""
    etcd = next(p for p in real.processes if p.name == "etcd")
    os.kill(etcd.pid, signal.SIGSTOP)
    try:
        yield
        time.sleep(seconds)  # the outage's length, not a synchronisation
    finally:
        os.kill(etcd.pid, signal.SIGCONT)


def run_through(
    real: RealCluster,
    radmin: Admin,
    rns: str,
    tmp_path: Path,
    outage: Callable[[], AbstractContextManager[None]],
    **settings: Any,
) -> dict[str, Any]:
    """Run the main job over ``rns``'s pods with ``outage`` (a context manager, entered and
    left on this thread) once it has bound some, and check that the outage cost retries and
    the run still ended clean: every pod bound once, nothing lost or left unresolved. Returns
    the run's figures."""
    n_pods = 160
    scheduler = f"kd-{rns}"[:63]
    nodes = [f"{rns}-n{i}" for i in range(4)]
    for name in nodes:
        create_node(radmin, node_body(name, cpu_m=64_000, mem_mi=262_144), real=True)
    for i in range(n_pods):
        new_pod(radmin, rns, f"p{i}", cpu="100m", scheduler=scheduler)
    config = RunConfig(
        kubeconfig=str(real.write_kubeconfig(tmp_path / "kubeconfig")),
        scheduler_name=scheduler,
        workers=4,
        qps=20.0,
        burst=10,
        max_seconds=120,
        **settings,
    )

    def bound() -> int:
        pods = radmin.ok("GET", radmin.pod_path(rns))["items"]
        return sum(1 for p in pods if p["spec"].get("nodeName"))

    # the run on a thread of its own, the outage on this one, which outlives the control
    # plane (a restarted kube-apiserver's parent-death signal follows the thread that starts it)
    with ThreadPoolExecutor(1, thread_name_prefix="main-job") as pool:
        running = pool.submit(run, config, stream=None)
        try:
            wait_for(lambda: bound() >= 20, WAIT, "the main job to bind its first pods")
            bound_before = bound()
            with outage():
                pass
            fig = running.result(WAIT * 2)
        finally:
            for name in nodes:
                assert radmin.request("DELETE", f"/api/v1/nodes/{name}").status in (200, 404)
    assert bound_before < n_pods and fig["retries"] > 0  # the outage came mid-run, and told
    check_clean(fig)
    assert (fig["pods_total"], fig["pods_bound"]) == (n_pods, n_pods)
    assert bound() == n_pods
    return fig


@pytest.mark.parametrize("mode", ["thread", "process", "leader"])
def test_the_main_job_rides_out_an_apiserver_crash(
    real: RealCluster, radmin: Admin, rns: str, tmp_path: Path, mode: str
) -> None:
    """kube-apiserver crashes (SIGKILL) while the main job is binding, and comes back at the
    same address a few seconds later (``apiserver_down``): the run still ends clean without
    being restarted itself, with the dispatcher in the scheduler's process, in a child, or
    behind ``--leader-elect`` (the outage is shorter than the renew deadline: the replica
    keeps its lease, as kube-scheduler does)."""
    settings: dict[str, Any] = {"dispatcher_process": mode == "process"}
    if mode == "leader":
        settings["leader_elect"] = LeaderElect(lease_name="crash", lease_namespace=rns)
    run_through(real, radmin, rns, tmp_path, real.plane.apiserver_down, **settings)


@contextmanager
def apiserver_down_until_a_call_failed(real: RealCluster) -> Iterator[None]:
    """kube-apiserver down (``apiserver_down``) until the dispatcher has resolved a call
    failed, as its log says (at most ``WAIT`` s): longer than that call's eight attempts took,
    however the rate limiter spread them among the other calls waiting."""
    failed = threading.Event()

    def sink(message: Any) -> None:
        if message.record["extra"].get("result") == "failed":
            failed.set()

    sink_id = logger.add(sink, level="DEBUG", filter="kdispatch")
    logger.enable("kdispatch")
    try:
        with real.plane.apiserver_down():
            yield
            assert failed.wait(WAIT), f"no call failed in {WAIT:.0f} s of outage"
    finally:
        logger.disable("kdispatch")
        logger.remove(sink_id)


def test_the_main_job_rides_out_an_apiserver_outage_longer_than_its_retries(
    real: RealCluster, radmin: Admin, rns: str, tmp_path: Path
) -> None:
    """kube-apiserver stays down until a call has failed (``CallFailed``: the example
    scheduler's eight attempts all refused): the scheduler takes the pods of failed calls up
    again, and the run still ends clean once the server is back."""
    fig = run_through(real, radmin, rns, tmp_path, lambda: apiserver_down_until_a_call_failed(real))
    assert fig["calls_failed"] > 0


def test_the_main_job_rides_out_an_etcd_outage_longer_than_its_request_timeout(
    real: RealCluster, radmin: Admin, rns: str, tmp_path: Path
) -> None:
    """etcd freezes for 12 s while the main job is binding: the requests in flight outlast
    the backend's 10 s request timeout, and land (or not) only when etcd thaws, which the
    dispatcher cannot know. The run still ends clean: every binding resolves as what the
    server holds, none twice, none lost."""
    run_through(real, radmin, rns, tmp_path, lambda: etcd_frozen(real, 12.0))


def test_the_asyncio_informer_rides_out_an_apiserver_crash(
    real: RealCluster, radmin: Admin, rns: str
) -> None:
    """The asyncio informer (``kubernetes.aio``) on a loop of its own, through a kube-apiserver
    crash: afterwards it delivers the changes made after the crash, without being restarted,
    and its cache holds the objects as they are."""
    crashed = threading.Event()
    new_pod(radmin, rns, "before")

    async def watch_through_the_crash() -> list[str]:
        config = aclient.Configuration(host=real.url)
        config.api_key = {"authorization": real.admin_token}
        config.api_key_prefix = {"authorization": "Bearer"}
        config.ssl_ca_cert = real.ca_cert
        added = asyncio.Event()

        def on_add(pod: dict[str, Any]) -> None:
            if pod["metadata"]["name"] == "after":
                added.set()

        async with aclient.ApiClient(config) as api:
            informer = AioInformer(
                aclient.CoreV1Api(api).list_namespaced_pod,
                kind="Pod",
                list_kwargs={"namespace": rns},
                backoff_max=1.0,
            )
            informer.add_handler(on_add, None, None).start()
            try:
                assert await informer.wait_for_sync(WAIT)
                ready.set_result(None)  # the crash may start
                loop = asyncio.get_running_loop()
                assert await loop.run_in_executor(None, crashed.wait, WAIT)
                new_pod(radmin, rns, "after")
                await asyncio.wait_for(added.wait(), WAIT)
                return sorted(p["metadata"]["name"] for p in informer.cache.values())
            finally:
                await informer.stop()

    ready: Future[None] = Future()
    with ThreadPoolExecutor(1, thread_name_prefix="loop") as pool:
        watching = pool.submit(asyncio.run, watch_through_the_crash())
        ready.result(WAIT)
        with real.plane.apiserver_down():
            pass
        crashed.set()
        assert watching.result(WAIT) == ["after", "before"]
