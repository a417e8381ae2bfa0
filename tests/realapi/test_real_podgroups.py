"""PodGroups (``scheduling.k8s.io/v1beta1``, feature gate ``GenericWorkload``) against the real
kube-apiserver v1.37.2 and the emulator: what a create, a spec update and a status update
store or refuse, and the ``podgroup_status_patch`` call end to end (its strategic-merge patch
of ``podgroups/status`` accepted, merged by type, never taking ``PodGroupInitiallyScheduled``
back from True, through an informer too). What the server stores is read back with GETs."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s

from kdispatch import (
    CallStale,
    ConflictError,
    Dispatcher,
    DispatcherConfig,
    ExecutorConfig,
    Outcome,
    PodGroupStatusPatch,
)
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.testing import make_pod, make_podgroup
from tests.backends import GatedBackend
from tests.realapi.cluster import Admin, Target, condition
from tests.recorders import Recorder
from tests.stacks import run_teardown, start_with_informers

pytestmark = pytest.mark.timeout(120)

PIS = "PodGroupInitiallyScheduled"
DT = "DisruptionTarget"
LTT = "lastTransitionTime"
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
WAIT = 30.0
T = TypeVar("T")


def body(name: str, **kw: Any) -> dict[str, Any]:
    """A PodGroup as a client would send it: no UID, no resourceVersion."""
    out = make_podgroup(name, **kw)
    del out["metadata"]["uid"], out["metadata"]["namespace"]
    return out


def create(admin: Admin, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
    return admin.create(admin.podgroup_path(ns), obj)


@pytest.fixture
def dispatcher(target: Target) -> Iterator[Dispatcher]:
    backend = target.backend(workers=4)
    with backend, Dispatcher(backend, DispatcherConfig(executor=ExecutorConfig(workers=4))) as d:
        yield d


# --------------------------------------------------------------------------- the apiserver


def test_create_resets_the_status_defaults_the_spec_and_keeps_the_generation(
    target: Target, admin: Admin, ns: str
) -> None:
    sent = body(
        "g1",
        min_count=3,
        generation=4,
        conditions=[{"type": PIS, "status": "True", "reason": "Scheduled"}],
    )
    sent["metadata"]["uid"] = "0f0f0f0f-0000-4000-8000-000000000000"
    del sent["spec"]["disruptionMode"], sent["spec"]["priority"]
    created = create(admin, ns, sent)
    assert created["status"] == {}
    assert created["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "disruptionMode": {"single": {}},
        "priority": 0,
    }
    assert created["metadata"]["generation"] == 4
    assert created["metadata"]["uid"] != sent["metadata"]["uid"]
    # the real server's deletion guard; the emulator has none (docs/apiserver-differences.md)
    expected = ["scheduling.k8s.io/podgroup-protection"] if target.real else None
    assert created["metadata"].get("finalizers") == expected
    assert admin.ok("GET", admin.podgroup_path(ns, "g1"))["status"] == {}
    basic = create(admin, ns, body("g2", basic=True))
    assert basic["spec"]["schedulingPolicy"] == {"basic": {}}
    assert "generation" not in basic["metadata"]  # neither set nor bumped for PodGroups


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({}, 'spec.schedulingPolicy: Invalid value: "": must specify one of: `basic`, `gang`'),
        (
            {"basic": {}, "gang": {"minCount": 2}},
            'spec.schedulingPolicy: Invalid value: "{basic, gang}": must specify exactly one '
            "of: `basic`, `gang`",
        ),
        ({"gang": {"minCount": 0}}, "spec.schedulingPolicy.gang.minCount: Required value"),
    ],
)
def test_a_malformed_policy_is_refused(
    admin: Admin, ns: str, policy: dict[str, Any], message: str
) -> None:
    sent = body("bad", basic=True)
    sent["spec"]["schedulingPolicy"] = policy
    reply = admin.request("POST", admin.podgroup_path(ns), sent)
    assert (reply.status, reply.reason) == (422, "Invalid"), reply
    assert reply.body["message"] == f'PodGroup.scheduling.k8s.io "bad" is invalid: {message}'


def test_min_count_may_change_the_policy_kind_and_the_generation_may_not(
    admin: Admin, ns: str
) -> None:
    create(admin, ns, body("g1", min_count=2, generation=3))
    path = admin.podgroup_path(ns, "g1")
    change = {
        "metadata": {"generation": 9},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}},
    }
    grown = admin.ok("PATCH", path, change, content_type=MERGE)
    assert grown["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}
    assert grown["metadata"]["generation"] == 3
    to_basic: dict[str, Any] = {"spec": {"schedulingPolicy": {"gang": None, "basic": {}}}}
    reply = admin.request("PATCH", path, to_basic, content_type=MERGE)
    assert (reply.status, reply.reason) == (422, "Invalid"), reply
    assert reply.body["message"] == (
        'PodGroup.scheduling.k8s.io "g1" is invalid: [spec.schedulingPolicy.basic: Invalid '
        "value: null: field is immutable, spec.schedulingPolicy.gang: Invalid value: null: "
        "field cannot be cleared once set]"
    )
    assert admin.ok("GET", path)["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}
    create(admin, ns, body("b1", basic=True))
    to_gang = {"spec": {"schedulingPolicy": {"basic": None, "gang": {"minCount": 1}}}}
    reply = admin.request("PATCH", admin.podgroup_path(ns, "b1"), to_gang, content_type=MERGE)
    assert (reply.status, reply.reason) == (422, "Invalid"), reply
    assert reply.body["message"] == (
        'PodGroup.scheduling.k8s.io "b1" is invalid: [spec.schedulingPolicy.basic: Invalid '
        "value: null: field is immutable, spec.schedulingPolicy.gang: Invalid value: null: "
        "field cannot be set once created]"
    )


def test_status_conditions_are_validated_and_merged_by_type(admin: Admin, ns: str) -> None:
    create(admin, ns, body("g1", min_count=2))
    path = admin.podgroup_path(ns, "g1", "status")
    reply = admin.request(
        "PATCH",
        path,
        {"status": {"conditions": [{"type": "Foo", "status": "True"}]}},
        content_type=STRATEGIC,
    )
    assert (reply.status, reply.reason) == (422, "Invalid"), reply
    assert reply.body["message"] == (
        'PodGroup.scheduling.k8s.io "g1" is invalid: [status.conditions[0].lastTransitionTime: '
        "Required value, status.conditions[0].reason: Required value]"
    )
    bad = {"type": "Foo", "status": "True", "reason": "bad reason!", LTT: "2030-01-01T00:00:00Z"}
    reply = admin.request("PATCH", path, {"status": {"conditions": [bad]}}, content_type=STRATEGIC)
    assert reply.status == 422
    assert reply.body["message"].startswith(
        'PodGroup.scheduling.k8s.io "g1" is invalid: status.conditions[0].reason: Invalid value: '
        '"bad reason!": a condition reason must start with'
    )
    first = {
        "type": PIS,
        "status": "False",
        "reason": "Unschedulable",
        "observedGeneration": 0,  # omitted when served, as the zero value
        LTT: "2030-01-01T00:00:00Z",
    }
    second = {
        "type": DT,
        "status": "True",
        "reason": "PreemptionByScheduler",
        LTT: "2030-01-01T00:00:00Z",
    }
    admin.ok("PATCH", path, {"status": {"conditions": [first]}}, content_type=STRATEGIC)
    stored = admin.ok("PATCH", path, {"status": {"conditions": [second]}}, content_type=STRATEGIC)
    # a list map keyed by type: merged, the new entry first (the apiserver's order)
    assert [(c["type"], c["status"], c["message"]) for c in stored["status"]["conditions"]] == [
        (DT, "True", ""),
        (PIS, "False", ""),
    ]
    assert "observedGeneration" not in stored["status"]["conditions"][1]


def test_a_pod_joins_a_group_by_name(admin: Admin, ns: str) -> None:
    pod = make_pod("m-0", ns, pod_group="g1")
    del pod["metadata"]["uid"]
    created = admin.create(admin.pod_path(ns), pod)
    assert created["spec"]["schedulingGroup"] == {"podGroupName": "g1"}


# --------------------------------------------------------------------------- the call


def test_the_call_is_accepted_merged_and_never_regresses(
    admin: Admin, ns: str, dispatcher: Dispatcher
) -> None:
    pg = create(admin, ns, body("g1", min_count=3, generation=2))
    path = admin.podgroup_path(ns, "g1")

    refused = PodGroupStatusPatch.initially_scheduled(pg, False, message="0/3 nodes fit")
    assert dispatcher.submit(refused).result(timeout=WAIT) is Outcome.SUCCESS
    stored = condition(admin.ok("GET", path), PIS)
    assert stored is not None
    assert {k: v for k, v in stored.items() if k != LTT} == {
        "type": PIS,
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes fit",
        "observedGeneration": 2,
    }
    assert stored[LTT]

    placed = PodGroupStatusPatch.initially_scheduled(admin.ok("GET", path), True)
    marked = PodGroupStatusPatch.disruption_target(pg, preemptor="pod ns/big")
    futures = [dispatcher.submit(placed), dispatcher.submit(marked)]
    assert [f.result(timeout=WAIT) for f in futures] == [Outcome.SUCCESS] * 2
    # decided on the first object, which had no condition: the newest has True
    late = dispatcher.submit(PodGroupStatusPatch.initially_scheduled(pg, False))
    assert isinstance(late.exception(timeout=WAIT), CallStale)

    final = admin.ok("GET", path)
    by_type = {c["type"]: c for c in final["status"]["conditions"]}
    assert (by_type[PIS]["status"], by_type[PIS]["reason"], by_type[PIS]["message"]) == (
        "True",
        "Scheduled",
        "",
    )
    assert by_type[PIS][LTT] >= stored[LTT]
    assert (by_type[DT]["status"], by_type[DT]["message"]) == (
        "True",
        "preempted to make room for pod ns/big",
    )
    assert final["spec"] == pg["spec"]


def test_the_patch_is_guarded_by_the_resource_version(
    target: Target, admin: Admin, ns: str
) -> None:
    pg = create(admin, ns, body("g1", min_count=2))
    call = PodGroupStatusPatch.initially_scheduled(pg, True)
    with target.backend(workers=1) as backend:
        landed = call.send(backend, pg)
        assert landed is not None and condition(landed, PIS) is not None
        with pytest.raises(ConflictError):  # computed against the outdated object
            PodGroupStatusPatch.disruption_target(pg).send(backend, pg)
    assert condition(admin.ok("GET", admin.podgroup_path(ns, "g1")), DT) is None


class RecordingGate(GatedBackend):
    """Holds requests for the object named ``hold`` at the gate, and keeps every status patch
    body sent. Request methods run on executor worker threads."""

    def __init__(self, inner: Any, *, hold: str) -> None:
        super().__init__(inner, hold=hold)
        self.patches: list[dict[str, Any]] = []

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        if op == "patch_status":
            with self._cond:
                self.patches.append(copy.deepcopy(request["patch"]))
        return super().around(op, request, send)


def test_an_informer_brings_another_writers_true_and_the_false_is_stale(
    target: Target, admin: Admin, ns: str
) -> None:
    """While the group's DisruptionTarget is in flight, kube-scheduler (here: a raw PATCH) sets
    True; the dispatcher learns it from its PodGroup informer and refuses a False decided on
    the older object: it is never sent, and the DisruptionTarget still lands."""
    pg = create(admin, ns, body("g1", min_count=2))
    recorder = Recorder(timeout=WAIT)
    teardown: list[Callable[[], None]] = []
    try:
        backend = target.backend(workers=2)
        teardown.append(backend.close)
        gated = RecordingGate(backend, hold="g1")
        informer_client = k8s.ApiClient(backend.api_client.configuration)
        teardown.append(informer_client.close)
        d = Dispatcher(gated, DispatcherConfig(executor=ExecutorConfig(workers=2)))
        lw = ClientListWatch(informer_client, "PodGroup", ns, request_timeout=10.0)
        informer = Informer(lw, name="conf-podgroup", backoff_initial=0.01, backoff_max=0.5)
        informer.attach(d)  # first: the dispatcher is told before the recorder wakes the test
        informer.add_handler(recorder.on_add, recorder.on_update, recorder.on_delete)
        start_with_informers(d, [informer], teardown, WAIT)

        marked = d.submit(PodGroupStatusPatch.disruption_target(pg))
        gated.wait_calls(1)  # in flight, held at the gate
        by_scheduler = {
            "type": PIS,
            "status": "True",
            "reason": "Scheduled",
            LTT: "2030-01-01T00:00:00Z",
        }
        admin.ok(
            "PATCH",
            admin.podgroup_path(ns, "g1", "status"),
            {"status": {"conditions": [by_scheduler]}},
            content_type=STRATEGIC,
        )
        assert recorder.wait(lambda events: any(e[0] == "update" for e in events))
        late = d.submit(PodGroupStatusPatch.initially_scheduled(pg, False, message="late"))
        assert isinstance(late.exception(timeout=WAIT), CallStale)
        gated.gate.set()
        assert marked.result(timeout=WAIT) is Outcome.SUCCESS  # rebased past the 409
    finally:
        run_teardown(teardown)
    sent = [c for p in gated.patches for c in p["status"]["conditions"]]
    assert sent and {c["type"] for c in sent} == {DT}
    final = admin.ok("GET", admin.podgroup_path(ns, "g1"))
    by_type = {c["type"]: c for c in final["status"]["conditions"]}
    assert (by_type[PIS]["status"], by_type[PIS]["message"]) == ("True", "")
    assert by_type[DT]["status"] == "True"
