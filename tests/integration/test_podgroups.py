"""PodGroups end to end in memory: the status patch through the Dispatcher (merged, never
regressing, visible in ``view``), what the in-memory apiserver stores and refuses for
PodGroups on its own request paths, and the factories. The HTTP paths run against both
apiservers in ``tests/realapi/test_real_podgroups.py``."""

from __future__ import annotations

import pytest

from kdispatch import (
    CallStale,
    Dispatcher,
    InvalidObjectError,
    InvalidRequestError,
    Outcome,
    PodGroupStatusPatch,
)
from kdispatch.actors.model.podgroup_calls import POD_GROUP_INITIALLY_SCHEDULED
from kdispatch.testing import InMemoryApiServer, make_pod, make_podgroup
from tests.backends import GatedBackend
from tests.configs import FAST

pytestmark = pytest.mark.timeout(60)

PIS = POD_GROUP_INITIALLY_SCHEDULED
DT = "DisruptionTarget"


def conditions(server: InMemoryApiServer, name: str = "g") -> dict[str, dict[str, object]]:
    stored = server.get_object("PodGroup", "default", name)
    assert stored is not None
    return {c["type"]: c for c in stored["status"].get("conditions", [])}


def status_and_message(server: InMemoryApiServer, ctype: str) -> tuple[object, object]:
    """The status and message of the stored PodGroup's condition ``ctype``."""
    condition = conditions(server)[ctype]
    return condition["status"], condition["message"]


def patches(server: InMemoryApiServer) -> int:
    return sum(1 for r in server.request_log if r.op == "patch_status" and r.outcome == "ok")


def gated_group(server: InMemoryApiServer) -> tuple[GatedBackend, dict[str, object]]:
    """A backend holding PodGroup g's requests at its gate (closed), and g (a gang of 3)."""
    return GatedBackend(server, hold="g"), server.create(make_podgroup("g", min_count=3))


# --------------------------------------------------------------------------- the dispatcher


def test_the_condition_lands_with_its_generation_and_a_transition_time(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pg = server.create(make_podgroup("g", min_count=3, generation=2))
    call = PodGroupStatusPatch.initially_scheduled(pg, False, message="0/3 nodes fit")
    assert dispatcher.submit(call).result(timeout=10) is Outcome.SUCCESS
    stored = conditions(server)[PIS]
    assert {k: v for k, v in stored.items() if k != "lastTransitionTime"} == {
        "type": PIS,
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes fit",
        "observedGeneration": 2,
    }
    assert stored["lastTransitionTime"]
    after = server.get_object("PodGroup", "default", "g")
    assert after is not None and after["spec"] == pg["spec"]
    # the same condition again: elided, no request
    again = PodGroupStatusPatch.initially_scheduled(after, False, message="0/3 nodes fit")
    assert dispatcher.submit(again).result(timeout=10) is Outcome.SKIPPED
    assert patches(server) == 1


def test_pending_calls_merge_by_type_into_one_request(server: InMemoryApiServer) -> None:
    gated, pg = gated_group(server)
    with Dispatcher(gated, FAST) as d:
        first = d.submit(PodGroupStatusPatch.initially_scheduled(pg, False, message="try 0"))
        gated.wait_calls(1)  # in flight, held at the gate
        futs = [
            d.submit(PodGroupStatusPatch.initially_scheduled(pg, False, message=f"try {i}"))
            for i in range(1, 5)
        ]
        futs.append(d.submit(PodGroupStatusPatch.disruption_target(pg, preemptor="pod ns/big")))
        gated.gate.set()
        assert first.result(timeout=10) is Outcome.SUCCESS
        outcomes = [f.result(timeout=10) for f in futs]
    assert outcomes == [Outcome.OVERWRITTEN] * 4 + [Outcome.SUCCESS]
    assert patches(server) == 2
    assert status_and_message(server, PIS) == ("False", "try 4")
    assert conditions(server)[DT]["message"] == "preempted to make room for pod ns/big"


def test_a_false_decided_before_a_true_landed_is_stale_and_never_sent(
    server: InMemoryApiServer,
) -> None:
    """The gang was placed (True in flight) while an older cycle still reports it
    unschedulable: the False is pending behind the True and resolves CallStale once the True
    is the newest state; the server keeps True."""
    gated, pg = gated_group(server)
    with Dispatcher(gated, FAST) as d:
        placed = d.submit(PodGroupStatusPatch.initially_scheduled(pg, True))
        gated.wait_calls(1)
        late = d.submit(PodGroupStatusPatch.initially_scheduled(pg, False, message="late"))
        gated.gate.set()
        assert placed.result(timeout=10) is Outcome.SUCCESS
        assert isinstance(late.exception(timeout=10), CallStale)
        current = server.get_object("PodGroup", "default", "g")
        assert current is not None
        # decided on the newest object (which has True), the False is still refused
        refused = d.submit(PodGroupStatusPatch.initially_scheduled(current, False))
        assert isinstance(refused.exception(timeout=10), CallStale)
    assert conditions(server)[PIS]["status"] == "True"
    assert patches(server) == 1


def test_a_false_merged_into_a_pending_true_never_replaces_it(server: InMemoryApiServer) -> None:
    """The True waits unsent (behind a request in flight) when an older cycle's False arrives:
    they merge as if sent in order, so the True is sent and the False is dropped."""
    gated, pg = gated_group(server)
    uid = str(pg["metadata"]["uid"])  # type: ignore[index]
    with Dispatcher(gated, FAST) as d:
        first = d.submit(PodGroupStatusPatch.disruption_target(pg, preemptor="pod ns/big"))
        gated.wait_calls(1)  # in flight, held at the gate
        placed = d.submit(PodGroupStatusPatch.initially_scheduled(pg, True))
        late = d.submit(PodGroupStatusPatch.initially_scheduled(pg, False, message="late"))
        view = d.view(uid)
        assert view is not None
        shown = {c["type"]: c["status"] for c in view["status"]["conditions"]}
        assert shown[PIS] == "True"
        gated.gate.set()
        assert first.result(timeout=10) is Outcome.SUCCESS
        assert placed.result(timeout=10) is Outcome.OVERWRITTEN
        assert late.result(timeout=10) is Outcome.SUCCESS
    assert status_and_message(server, PIS) == ("True", "")
    assert patches(server) == 2


def test_an_informer_update_with_true_makes_a_pending_false_stale(
    server: InMemoryApiServer,
) -> None:
    """The True arrived by another writer (kube-scheduler, another leader), seen through the
    informer: the False never goes out."""
    gated, pg = gated_group(server)
    with Dispatcher(gated, FAST) as d:
        d.on_add(pg)
        first = d.submit(PodGroupStatusPatch.disruption_target(pg))
        gated.wait_calls(1)  # DisruptionTarget in flight: the False waits behind it
        late = d.submit(PodGroupStatusPatch.initially_scheduled(pg, False))
        other = PodGroupStatusPatch.initially_scheduled(pg, True, message="by another writer")
        assert other.send(server, pg) is not None  # straight to the server
        newest = server.get_object("PodGroup", "default", "g")
        assert newest is not None
        d.on_update(newest)
        assert isinstance(late.exception(timeout=10), CallStale)
        gated.gate.set()
        first.result(timeout=10)  # its resourceVersion is outdated: rebased and sent again
    assert status_and_message(server, PIS) == ("True", "by another writer")
    assert conditions(server)[DT]["status"] == "True"


def test_view_shows_the_pending_conditions_but_never_a_regression(
    server: InMemoryApiServer,
) -> None:
    gated = GatedBackend(server, hold="g")
    pg = server.create(
        make_podgroup(
            "g",
            min_count=3,
            conditions=[{"type": PIS, "status": "True", "reason": "Scheduled"}],
        )
    )
    uid = pg["metadata"]["uid"]
    with Dispatcher(gated, FAST) as d:
        d.on_add(pg)
        preempted = d.submit(
            PodGroupStatusPatch.for_podgroup(
                pg,
                conditions=[
                    {"type": DT, "status": "True", "reason": "PreemptionByScheduler"},
                    {"type": PIS, "status": "False", "reason": "Unschedulable"},
                ],
            )
        )
        gated.wait_calls(1)
        view = d.view(uid)
        assert view is not None
        shown = {c["type"]: c["status"] for c in view["status"]["conditions"]}
        assert shown == {PIS: "True", DT: "True"}
        gated.gate.set()
        assert preempted.result(timeout=10) is Outcome.SUCCESS
    stored = conditions(server)
    assert (stored[PIS]["status"], stored[DT]["status"]) == ("True", "True")


# --------------------------------------------------------------------------- the apiserver


def test_a_create_request_resets_the_status_and_defaults_the_spec() -> None:
    server = InMemoryApiServer()
    body = make_podgroup(
        "g",
        min_count=2,
        generation=4,
        conditions=[{"type": PIS, "status": "True", "reason": "Scheduled"}],
    )
    del body["spec"]["disruptionMode"], body["spec"]["priority"]
    created = server.create("PodGroup", "default", body)
    assert created["status"] == {}
    assert created["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "disruptionMode": {"single": {}},
        "priority": 0,
    }
    assert created["metadata"]["generation"] == 4  # the client's, kept
    assert created["metadata"]["uid"] != body["metadata"]["uid"]  # the server's
    plain = server.create("PodGroup", "default", make_podgroup("h", basic=True))
    assert "generation" not in plain["metadata"]


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({}, 'spec.schedulingPolicy: Invalid value: "": must specify one of: `basic`, `gang`'),
        (
            {"basic": {}, "gang": {"minCount": 2}},
            "must specify exactly one of: `basic`, `gang`",
        ),
        ({"gang": {"minCount": 0}}, "spec.schedulingPolicy.gang.minCount: Required value"),
        ({"gang": {}}, "spec.schedulingPolicy.gang.minCount: Required value"),
        ({"gang": {"minCount": -1}}, "must be greater than or equal to 1"),
    ],
)
def test_a_malformed_policy_is_refused_on_every_create_path(
    policy: dict[str, object], message: str
) -> None:
    server = InMemoryApiServer()
    body = make_podgroup("g", basic=True)
    body["spec"]["schedulingPolicy"] = policy
    for request in (True, False):  # the API request, and the admin surface
        with pytest.raises(InvalidRequestError, match=r"PodGroup\.scheduling\.k8s\.io") as caught:
            if request:
                server.create("PodGroup", "default", body)
            else:
                server.create(body)
        assert caught.value.status == 422
        assert message in str(caught.value)
    assert server.list("PodGroup")[0] == []


def test_the_policy_kind_is_fixed_min_count_and_not_the_generation_may_change() -> None:
    server = InMemoryApiServer()
    pg = server.create(make_podgroup("g", min_count=2, generation=3))
    grown = server.patch(
        "PodGroup",
        "default",
        "g",
        {"metadata": {"generation": 9}, "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}},
        patch_type="merge",
    )
    assert grown["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}
    assert grown["metadata"]["generation"] == 3
    to_basic: dict[str, object] = {"spec": {"schedulingPolicy": {"gang": None, "basic": {}}}}
    with pytest.raises(InvalidRequestError) as caught:
        server.patch("PodGroup", "default", "g", to_basic, patch_type="merge")
    assert str(caught.value) == (
        'PodGroup.scheduling.k8s.io "g" is invalid: [spec.schedulingPolicy.basic: Invalid '
        "value: null: field is immutable, spec.schedulingPolicy.gang: Invalid value: null: "
        "field cannot be cleared once set]"
    )
    replaced = server.update({**grown, "metadata": {**grown["metadata"], "generation": 1}})
    assert replaced["metadata"]["generation"] == 3 == pg["metadata"]["generation"]
    basic = server.create(make_podgroup("b", basic=True))
    with pytest.raises(InvalidRequestError, match="field cannot be set once created"):
        server.patch(
            "PodGroup",
            "default",
            "b",
            {"spec": {"schedulingPolicy": {"basic": None, "gang": {"minCount": 1}}}},
            patch_type="merge",
        )
    assert server.get_object("PodGroup", "default", "b") == basic


def test_status_conditions_are_validated_as_metav1_conditions() -> None:
    server = InMemoryApiServer()
    pg = server.create(make_podgroup("g", min_count=2))
    uid = pg["metadata"]["uid"]
    missing = {"status": {"conditions": [{"type": "Foo", "status": "True"}]}}
    with pytest.raises(InvalidRequestError) as caught:
        server.patch_status("PodGroup", "default", "g", missing, uid=uid, resource_version=None)
    assert str(caught.value) == (
        'PodGroup.scheduling.k8s.io "g" is invalid: [status.conditions[0].lastTransitionTime: '
        "Required value, status.conditions[0].reason: Required value]"
    )
    bad_reason = {
        "status": {
            "conditions": [
                {
                    "type": "Foo",
                    "status": "True",
                    "reason": "bad reason!",
                    "lastTransitionTime": "t",
                }
            ]
        }
    }
    with pytest.raises(InvalidRequestError, match=r"status.conditions\[0\].reason: Invalid"):
        server.patch("PodGroup", "default", "g", bad_reason, subresource="status")
    with pytest.raises(InvalidRequestError, match="lastTransitionTime: Required value"):
        server.create(
            make_podgroup(
                "h",
                min_count=1,
                conditions=[
                    {"type": "A", "status": "True", "reason": "R", "lastTransitionTime": ""}
                ],
            )
        )
    assert server.get_object("PodGroup", "default", "g") == pg


# --------------------------------------------------------------------------- factories


def test_make_podgroup_and_a_member_pod() -> None:
    gang = make_podgroup("g", "ns", min_count=3, uid="uid-g", rv=5, labels={"app": "a"})
    assert gang == {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "g",
            "namespace": "ns",
            "uid": "uid-g",
            "labels": {"app": "a"},
            "resourceVersion": "5",
        },
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 3}},
            "disruptionMode": {"single": {}},
            "priority": 0,
        },
        "status": {},
    }
    basic = make_podgroup(
        "b", basic=True, conditions=[{"type": PIS, "status": "True", "reason": "Scheduled"}]
    )
    assert basic["spec"]["schedulingPolicy"] == {"basic": {}}
    assert basic["status"]["conditions"] == [
        {
            "type": PIS,
            "status": "True",
            "reason": "Scheduled",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    member = make_pod("m-0", "ns", pod_group="g")
    assert member["spec"]["schedulingGroup"] == {"podGroupName": "g"}
    assert "schedulingGroup" not in make_pod("solo")["spec"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "min_count must be an int >= 1"),
        ({"min_count": 0}, "min_count must be an int >= 1"),
        ({"min_count": True}, "min_count must be an int >= 1"),
        ({"min_count": 2, "basic": True}, "a basic PodGroup has no min_count"),
        ({"basic": "yes"}, "basic must be a bool"),
        ({"min_count": 1, "generation": -1}, "generation must be an int >= 0"),
    ],
)
def test_make_podgroup_refuses_what_the_apiserver_would(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(InvalidObjectError, match=match):
        make_podgroup("g", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidObjectError, match="pod_group"):
        make_pod("m-0", pod_group="Not_A_Name")


def test_a_false_computed_on_an_outdated_group_is_refused_by_the_server_then_stale(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """Another writer set True; this dispatcher has no informer and knows only the group the
    call was built from. Its request carries that group's resourceVersion: the server refuses
    it (409), the call re-reads the group, finds True and resolves CallStale. Nothing lands."""
    pg = server.create(make_podgroup("g", min_count=3))
    assert PodGroupStatusPatch.initially_scheduled(pg, True).send(server, pg) is not None
    late = dispatcher.submit(PodGroupStatusPatch.initially_scheduled(pg, False))
    assert isinstance(late.exception(timeout=10), CallStale)
    assert [(r.op, r.outcome) for r in server.request_log] == [
        ("patch_status", "ok"),  # the other writer's
        ("patch_status", "Conflict"),  # the resourceVersion guard
        ("get", "ok"),  # the re-read that shows True
    ]
    assert conditions(server)[PIS]["status"] == "True"
