"""The dispatcher end to end (``Dispatcher`` + ``KubernetesBackend`` + informers) against the
real apiserver and the emulator: the server's final state must be the callers' intents.

Synchronisation is by futures and polling the server with a deadline, never by sleeping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.claim_calls import ClaimStatusPatch
from kdispatch.actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RetryConfig,
)
from kdispatch.actors.model.errors import CallCancelled, CallConflict, CallStale, Outcome
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.adapters.kubernetes import KubernetesBackend
from tests.realapi.cluster import Admin, Target, condition, wait_for
from tests.realapi.objects import allocation, consumer, new_claim, new_pod, remove_pod
from tests.stacks import run_teardown, start_with_informers

pytestmark = pytest.mark.timeout(120)

WAIT = 60.0
SUCCESS, SKIPPED, OVERWRITTEN = Outcome.SUCCESS, Outcome.SKIPPED, Outcome.OVERWRITTEN


@dataclass
class Stack:
    backend: KubernetesBackend
    dispatcher: Dispatcher
    informers: dict[str, Informer] = field(default_factory=dict)


@pytest.fixture
def make_stack(target: Target) -> Iterator[Callable[..., Stack]]:
    """Dispatcher over a backend for ``target``, optionally fed by namespaced informers; torn
    down in order (dispatcher, informers, clients) so the leak check sees nothing left."""
    teardown: list[Callable[[], None]] = []

    def build(
        ns: str,
        *,
        kinds: tuple[str, ...] = ("Pod", "ResourceClaim"),
        token: str | None = None,
        config: DispatcherConfig | None = None,
        registry: CollectorRegistry | None = None,
    ) -> Stack:
        config = config or DispatcherConfig(executor=ExecutorConfig(workers=8))
        backend = target.backend(token=token, workers=config.executor.workers)
        teardown.append(backend.close)
        informer_client = k8s.ApiClient(backend.api_client.configuration)
        teardown.append(informer_client.close)
        dispatcher = Dispatcher(backend, config, metrics_registry=registry or CollectorRegistry())
        stack = Stack(backend, dispatcher)
        for kind in kinds:
            lw = ClientListWatch(informer_client, kind, ns, request_timeout=10.0)
            inf = Informer(lw, name=f"conf-{kind.lower()}", backoff_initial=0.01, backoff_max=0.5)
            inf.attach(dispatcher)
            stack.informers[kind] = inf

        start_with_informers(dispatcher, list(stack.informers.values()), teardown, WAIT)
        return stack

    yield build
    run_teardown(teardown)


def resolved(fut: Future[Any]) -> Outcome | type[BaseException]:
    exc = fut.exception(timeout=0)
    if exc is not None:
        return type(exc)
    out = fut.result(timeout=0)
    assert isinstance(out, Outcome)
    return out


def unschedulable(message: str) -> dict[str, str]:
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }


# --------------------------------------------------------------------------- end to end

GROUPS = ("bind", "patch", "patch+bind", "bind+preempt", "preempt", "claim")


Tracked = list[tuple[str, str, "Future[Any]"]]
"""(pod name, what was asked, its future)."""


def submit_intents(
    d: Dispatcher, admin: Admin, ns: str, pods: dict[str, dict[str, Any]]
) -> Tracked:
    futures: Tracked = []
    for i, (name, pod) in enumerate(pods.items()):
        group = GROUPS[i % len(GROUPS)]
        node = f"node-{i % 7}"
        if group in ("patch", "patch+bind"):
            for r in range(3):
                patch = PodStatusPatch.for_pod(
                    pod,
                    conditions=[unschedulable(f"round {r}")],
                    nominated_node_name=node if r < 2 else None,
                )
                futures.append((name, "patch", d.submit(patch)))
        if group in ("bind", "patch+bind", "bind+preempt"):
            futures.append((name, "bind", d.submit(PodBinding.for_pod(pod, node))))
        if group == "bind+preempt":
            preempt = d.preempt(pod, preemptor=f"{ns}/big", grace_period_seconds=0)
            futures.append((name, "preempt", preempt))
        if group == "preempt":
            futures.append((name, "preempt", d.preempt(pod, preemptor=f"{ns}/big")))
        if group == "claim":
            claim = admin.get_claim(ns, f"c{i}")
            alloc = ClaimStatusPatch.for_claim(
                claim, allocate=allocation(node), reserve=[consumer(pod)]
            )
            futures.append((name, "claim", d.submit(alloc)))
            futures.append((name, "bind", d.submit(PodBinding.for_pod(pod, node))))
    return futures


def check_outcomes(futures: Tracked) -> None:
    _, pending = wait([f for _, _, f in futures], timeout=WAIT)
    assert not pending, f"{len(pending)} futures unresolved"
    preempted = {n for n, w, _ in futures if w == "preempt"}
    for name, what, fut in futures:
        got = resolved(fut)
        if what == "patch":
            assert got in (SUCCESS, OVERWRITTEN, SKIPPED), (name, what, got)
        elif what == "bind" and name in preempted:
            assert got in (SUCCESS, CallCancelled), (name, what, got)
        else:
            assert got is SUCCESS, (name, what, got)


def check_server_state(admin: Admin, ns: str, pods: dict[str, dict[str, Any]]) -> None:
    for i, name in enumerate(pods):
        group = GROUPS[i % len(GROUPS)]
        node = f"node-{i % 7}"
        if group in ("bind+preempt", "preempt"):
            assert not admin.pod_exists(ns, name), name
            continue
        stored = admin.get_pod(ns, name)
        sched = condition(stored, "PodScheduled")
        if group == "patch":
            assert stored["spec"].get("nodeName") is None
            assert sched is not None and sched["status"] == "False"
            assert sched["message"] == "round 2"
            assert "nominatedNodeName" not in stored["status"]
        else:
            assert stored["spec"]["nodeName"] == node, name
            assert sched is not None and sched["status"] == "True", (name, sched)
        if group == "claim":
            claim = admin.get_claim(ns, f"c{i}")
            assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == node
            assert claim["status"]["reservedFor"] == [consumer(pods[name])]


def test_workload_end_to_end(make_stack: Callable[..., Stack], admin: Admin, ns: str) -> None:
    """60 pods and 10 claims, six kinds of intent; every future resolves and the server ends
    in the intended state."""
    stack = make_stack(ns)
    pods: dict[str, dict[str, Any]] = {}
    for i in range(60):
        name = f"p{i}"
        claims = (f"c{i}",) if GROUPS[i % len(GROUPS)] == "claim" else ()
        if claims:
            new_claim(admin, ns, claims[0])
        pods[name] = new_pod(admin, ns, name, claims=claims)
    futures = submit_intents(stack.dispatcher, admin, ns, pods)
    check_outcomes(futures)
    check_server_state(admin, ns, pods)


# --------------------------------------------------------------------------- staleness


def test_stale_unschedulable_never_lands_on_a_bound_pod(
    make_stack: Callable[..., Stack], admin: Admin, ns: str
) -> None:
    """kubernetes#139602: a PodScheduled=False decided on an older object must not overwrite
    the PodScheduled=True a binding wrote."""
    stack = make_stack(ns, kinds=())
    d = stack.dispatcher
    pod = new_pod(admin, ns, "p1")
    assert d.submit(PodBinding.for_pod(pod, "n1")).result(WAIT) is SUCCESS
    stale = d.submit(PodStatusPatch.for_pod(pod, conditions=[unschedulable("too late")]))
    got = stale.exception(WAIT) or stale.result(WAIT)
    stored = admin.get_pod(ns, "p1")
    sched = condition(stored, "PodScheduled")
    assert stored["spec"]["nodeName"] == "n1"
    assert sched is not None and sched["status"] == "True", sched
    assert got in (SKIPPED, OVERWRITTEN) or isinstance(got, CallStale | CallConflict), got


def test_stale_unschedulable_with_informer_never_lands(
    make_stack: Callable[..., Stack], admin: Admin, ns: str
) -> None:
    stack = make_stack(ns, kinds=("Pod",))
    d = stack.dispatcher
    pod = new_pod(admin, ns, "p1")
    backend = stack.backend
    backend.bind(ns, "p1", uid=pod["metadata"]["uid"], node="n1")  # bound behind its back
    stale = d.submit(PodStatusPatch.for_pod(pod, conditions=[unschedulable("too late")]))
    got = stale.exception(WAIT) or stale.result(WAIT)
    sched = condition(admin.get_pod(ns, "p1"), "PodScheduled")
    assert sched is not None and sched["status"] == "True", sched
    assert got in (SKIPPED, OVERWRITTEN) or isinstance(got, CallStale | CallConflict), got


# --------------------------------------------------------------------------- preemption


def test_preemption_marks_disruption_target_then_deletes(
    make_stack: Callable[..., Stack], target: Target, admin: Admin, ns: str
) -> None:
    """A bound victim: DisruptionTarget=True lands, then the deletion (default grace period)
    leaves it Terminating until the kubelet — here the test — removes it."""
    stack = make_stack(ns, kinds=("Pod",))
    d = stack.dispatcher
    victim = new_pod(admin, ns, "victim")
    assert d.submit(PodBinding.for_pod(victim, "n1")).result(WAIT) is SUCCESS
    pending = d.submit(PodStatusPatch.for_pod(victim, conditions=[unschedulable("x")]))
    assert d.preempt(victim, preemptor=f"{ns}/big").result(WAIT) is SUCCESS
    assert resolved(pending) in (CallCancelled, CallStale, SKIPPED, SUCCESS)
    if not target.real:  # the emulator is its own kubelet: the pod is gone at once
        assert not admin.pod_exists(ns, "victim")
        return
    stored = admin.get_pod(ns, "victim")
    assert stored["metadata"]["deletionTimestamp"]
    disruption = condition(stored, "DisruptionTarget")
    assert disruption is not None and disruption["status"] == "True"
    assert disruption["reason"] == "PreemptionByScheduler"
    assert f"{ns}/big" in disruption["message"]
    remove_pod(admin, ns, "victim")
    wait_for(lambda: not admin.pod_exists(ns, "victim"), WAIT, "the victim to be gone")


def test_preemption_of_a_recreated_pod_leaves_the_new_one_alone(
    make_stack: Callable[..., Stack], admin: Admin, ns: str
) -> None:
    stack = make_stack(ns, kinds=())
    old = new_pod(admin, ns, "p1")
    remove_pod(admin, ns, "p1")
    new = new_pod(admin, ns, "p1")
    fut = stack.dispatcher.preempt(old, preemptor=f"{ns}/big", grace_period_seconds=0)
    got = fut.exception(WAIT) or fut.result(WAIT)
    assert got is not None
    stored = admin.get_pod(ns, "p1")
    assert stored["metadata"]["uid"] == new["metadata"]["uid"]
    assert not stored["metadata"].get("deletionTimestamp")
    assert condition(stored, "DisruptionTarget") is None


def test_binding_a_gated_pod_fails_without_retrying(
    make_stack: Callable[..., Stack], admin: Admin, ns: str
) -> None:
    registry = CollectorRegistry()
    stack = make_stack(ns, kinds=(), registry=registry)
    pod = new_pod(admin, ns, "gated", gates=("example.com/wait",))
    fut = stack.dispatcher.submit(PodBinding.for_pod(pod, "n1"))
    exc = fut.exception(WAIT)
    assert exc is not None
    assert admin.get_pod(ns, "gated")["spec"].get("nodeName") is None


# --------------------------------------------------------------------------- retries


def test_conflict_rebases_and_retries(
    make_stack: Callable[..., Stack], admin: Admin, ns: str
) -> None:
    """The pod changes behind the dispatcher's back (its rv goes stale): the status patch gets
    409, is rebased on a fresh read and lands, merged with the other writer's condition."""
    config = DispatcherConfig(
        executor=ExecutorConfig(workers=2),
        rate_limit=RateLimitConfig(qps=1000, burst=1000),
        retry=RetryConfig(max_attempts=6),
    )
    stack = make_stack(ns, kinds=(), config=config)
    pod = new_pod(admin, ns, "p1")
    admin.ok(
        "PATCH",
        admin.pod_path(ns, "p1") + "/status",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    fut = stack.dispatcher.submit(PodStatusPatch.for_pod(pod, conditions=[unschedulable("m")]))
    assert fut.result(WAIT) in (SUCCESS, SKIPPED)
    stored = admin.get_pod(ns, "p1")
    types = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert types == {"Ready": "False", "PodScheduled": "False"}
