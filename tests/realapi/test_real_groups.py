"""Call groups against the real apiserver and the emulator: a DRA binding cycle (claim
allocations and reservations, then the binding held on them) and a preemption (the
preemptor's nomination, then every victim's deletion held on it).

The order is read from the servers' resourceVersions, which both take from one global counter
(etcd's revision): a write that came after another has the higher resourceVersion. Nothing else
writes these objects (no kubelet, no controllers). Synchronisation is by futures and, for the
informer's events, by polling with a deadline, never by sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.claim_calls import ClaimStatusPatch
from kdispatch.actors.model.config import DispatcherConfig, ExecutorConfig
from kdispatch.actors.model.errors import CallCancelled, GroupFailed, Outcome
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.actors.model.podgroup_calls import PodGroupStatusPatch
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.testing import make_podgroup
from tests.realapi.cluster import Admin, Target, condition, wait_for
from tests.realapi.objects import allocation, consumer, new_claim, new_pod

pytestmark = pytest.mark.timeout(120)

WAIT = 60.0
NODE = "kd-shared-0"


@pytest.fixture
def dispatcher(target: Target) -> Iterator[Dispatcher]:
    backend = target.backend(workers=4)
    d = Dispatcher(
        backend,
        DispatcherConfig(executor=ExecutorConfig(workers=4)),
        metrics_registry=CollectorRegistry(),
    ).start()
    try:
        yield d
    finally:
        d.stop(timeout=10.0)
        backend.close()


@pytest.fixture
def pod_events(target: Target) -> Iterator[Callable[[str], list[tuple[str, str, int]]]]:
    """Start a pod informer on a namespace; returns its events so far as
    (type, name, resourceVersion)."""
    clients: list[k8s.ApiClient] = []
    informers: list[Informer] = []
    events: list[tuple[str, str, int]] = []
    lock = threading.Lock()

    def record(kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with lock:
            events.append((kind, meta["name"], int(meta["resourceVersion"])))

    def start(ns: str) -> list[tuple[str, str, int]]:
        if not informers:
            client = target.api_client()
            clients.append(client)
            inf = Informer(ClientListWatch(client, "Pod", ns, request_timeout=10.0), name="grp")
            inf.add_handler(
                lambda o: record("ADDED", o),
                lambda _old, new: record("MODIFIED", new),
                lambda o: record("DELETED", o),
            )
            informers.append(inf)
            inf.start()
            assert inf.wait_for_sync(WAIT)
        with lock:
            return list(events)

    yield start
    for inf in informers:
        assert inf.stop(timeout=10.0)
    for client in clients:
        client.close()  # type: ignore[no-untyped-call]


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def test_dra_binding_cycle_group(admin: Admin, ns: str, dispatcher: Dispatcher) -> None:
    """Two claims allocated and reserved, then the binding: it lands after both."""
    claims = [new_claim(admin, ns, f"c{i}") for i in range(2)]
    pod = new_pod(admin, ns, "p", claims=("c0", "c1"))
    with dispatcher.group(owner=pod) as g:
        writes = [
            g.submit(
                ClaimStatusPatch.for_claim(
                    claim, allocate=allocation(NODE, f"gpu-{i}"), reserve=[consumer(pod)]
                )
            )
            for i, claim in enumerate(claims)
        ]
        bind = g.submit(PodBinding.for_pod(pod, NODE), after=writes)
    assert g.future.result(timeout=WAIT) == [Outcome.SUCCESS] * 3
    assert bind.result(timeout=0) is Outcome.SUCCESS
    bound = admin.get_pod(ns, "p")
    assert bound["spec"]["nodeName"] == NODE
    for i in range(2):
        claim = admin.get_claim(ns, f"c{i}")
        assert claim["status"]["reservedFor"] == [consumer(pod)]
        assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == f"gpu-{i}"
        assert rv(claim) < rv(bound), "the binding landed before a claim write"
    assert dispatcher.open_groups == 0


def test_dra_binding_cycle_group_dies_with_its_pod(
    admin: Admin, ns: str, dispatcher: Dispatcher
) -> None:
    """The pod is deleted before its group runs: the held steps are never sent."""
    claim = new_claim(admin, ns, "c0")
    pod = new_pod(admin, ns, "p", claims=("c0",))
    blocker = new_pod(admin, ns, "blocker")
    # a prerequisite that is still pending when the owner goes: the blocker's nomination,
    # held on a call that only resolves when the test says so
    gate = dispatcher.group(owner=blocker)
    held_back = gate.submit(PodStatusPatch.for_pod(blocker, nominated_node_name=NODE))
    assert held_back.result(timeout=WAIT) is Outcome.SUCCESS
    g = dispatcher.group(owner=pod)
    write = g.submit(
        ClaimStatusPatch.for_claim(claim, allocate=allocation(NODE), reserve=[consumer(pod)]),
        after=[gate.future],  # the blocker's group is open: held
    )
    bind = g.submit(PodBinding.for_pod(pod, NODE), after=[write])
    admin.request("DELETE", admin.pod_path(ns, "p"), {"gracePeriodSeconds": 0})
    dispatcher.on_delete(pod)
    assert isinstance(write.exception(timeout=WAIT), CallCancelled)
    assert isinstance(bind.exception(timeout=WAIT), CallCancelled)
    gate.seal()
    assert gate.future.result(timeout=WAIT) == [Outcome.SUCCESS]
    after = admin.get_claim(ns, "c0")
    assert not (after.get("status") or {}).get("reservedFor")
    assert rv(after) == rv(claim)  # never written


def test_preemption_group(
    admin: Admin,
    ns: str,
    dispatcher: Dispatcher,
    pod_events: Callable[[str], list[tuple[str, str, int]]],
) -> None:
    """The preemptor's nomination lands before every victim is touched."""
    pod_events(ns)
    victims = [new_pod(admin, ns, f"v{i}", node=NODE) for i in range(3)]
    preemptor = new_pod(admin, ns, "pre")
    with dispatcher.group(owner=preemptor) as g:
        nomination = g.submit(PodStatusPatch.for_pod(preemptor, nominated_node_name=NODE))
        for victim in victims:
            g.preempt(victim, preemptor=f"{ns}/pre", after=[nomination])
    assert g.future.result(timeout=WAIT) == [Outcome.SUCCESS] * 4
    nominated = admin.get_pod(ns, "pre")
    assert nominated["status"]["nominatedNodeName"] == NODE
    for i in range(3):
        if admin.pod_exists(ns, f"v{i}"):  # the real apiserver: terminating, marked
            left = admin.get_pod(ns, f"v{i}")
            assert left["metadata"].get("deletionTimestamp")
            target_cond = condition(left, "DisruptionTarget")
            assert target_cond is not None and target_cond["status"] == "True"

    def victim_events() -> list[tuple[str, str, int]] | None:
        events = pod_events(ns)
        touched = [e for e in events if e[1].startswith("v") and e[0] != "ADDED"]
        names = {e[1] for e in touched}
        return touched if names == {"v0", "v1", "v2"} else None

    touched = wait_for(victim_events, WAIT, "the victims' updates and deletions")
    assert min(e[2] for e in touched) > rv(nominated), "a victim was touched before the nomination"


def test_preemption_chain_ends_with_the_binding(
    admin: Admin, ns: str, dispatcher: Dispatcher
) -> None:
    """Nomination, then the victims, then the preemptor's binding, in one group with no
    blocking call: the binding lands after every victim was deleted."""
    victims = [new_pod(admin, ns, f"v{i}", node=NODE) for i in range(2)]
    preemptor = new_pod(admin, ns, "pre")
    with dispatcher.group(owner=preemptor) as g:
        nomination = g.submit(PodStatusPatch.for_pod(preemptor, nominated_node_name=NODE))
        evictions = [g.preempt(v, preemptor=f"{ns}/pre", after=[nomination]) for v in victims]
        g.submit(PodBinding.for_pod(preemptor, NODE), after=evictions)
    assert g.future.result(timeout=WAIT) == [Outcome.SUCCESS] * 4
    bound = admin.get_pod(ns, "pre")
    assert bound["spec"]["nodeName"] == NODE
    for i in range(2):
        if admin.pod_exists(ns, f"v{i}"):  # the real apiserver: terminating
            assert rv(admin.get_pod(ns, f"v{i}")) < rv(bound), "bound before a victim went"


def podgroup(admin: Admin, ns: str, name: str, min_count: int) -> dict[str, Any]:
    body = make_podgroup(name, min_count=min_count)
    del body["metadata"]["uid"], body["metadata"]["namespace"]
    created = admin.create(admin.podgroup_path(ns), body)
    created.setdefault("kind", "PodGroup")
    created.setdefault("apiVersion", "scheduling.k8s.io/v1beta1")
    return created


def test_a_gang_is_bound_whole_then_its_podgroup_is_scheduled(
    admin: Admin, ns: str, dispatcher: Dispatcher
) -> None:
    group = podgroup(admin, ns, "trainers", 3)
    pods = [new_pod(admin, ns, f"w{i}") for i in range(3)]
    with dispatcher.group(owner=group, gang=3) as gang:
        for pod in pods:
            gang.submit(PodBinding.for_pod(pod, NODE))
    status = dispatcher.submit(
        PodGroupStatusPatch.initially_scheduled(group, True, reason="Scheduled"),
        after=[gang.future],
    )
    assert status.result(timeout=WAIT) is Outcome.SUCCESS
    assert gang.future.result(timeout=0) == [Outcome.SUCCESS] * 3
    bound = [admin.get_pod(ns, f"w{i}") for i in range(3)]
    assert all(p["spec"]["nodeName"] == NODE for p in bound)
    stored = admin.ok("GET", admin.podgroup_path(ns, "trainers"))
    scheduled = condition(stored, "PodGroupInitiallyScheduled")
    assert scheduled is not None and scheduled["status"] == "True"
    assert rv(stored) > max(rv(p) for p in bound), "the status landed before a member"


def test_a_gang_whose_member_goes_before_the_release_binds_nothing(
    admin: Admin, ns: str, dispatcher: Dispatcher
) -> None:
    group = podgroup(admin, ns, "trainers", 3)
    pods = [new_pod(admin, ns, f"w{i}") for i in range(3)]
    gang = dispatcher.group(owner=group, gang=3)
    held = [gang.submit(PodBinding.for_pod(pod, NODE)) for pod in pods[:2]]
    admin.request("DELETE", admin.pod_path(ns, "w1"), {"gracePeriodSeconds": 0})
    dispatcher.on_delete(pods[1])  # the informer's event
    wait_for(lambda: gang.cancelled == "member_failed", WAIT, "the gang withdrawn")
    gang.submit(PodBinding.for_pod(pods[2], NODE))  # too late: refused
    gang.seal()
    assert isinstance(gang.future.exception(timeout=WAIT), GroupFailed)
    assert all(isinstance(f.exception(timeout=WAIT), CallCancelled) for f in held)
    for name, before in (("w0", pods[0]), ("w2", pods[2])):
        after = admin.get_pod(ns, name)
        assert not after["spec"].get("nodeName") and rv(after) == rv(before)
