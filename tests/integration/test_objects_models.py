"""Objects as users hold them: plain dicts, any Mapping (kopf's Body), official-client models."""

from __future__ import annotations

import datetime
from collections import UserDict
from types import MappingProxyType
from typing import Any, cast

import kopf
import pytest
from kubernetes import client as k8s

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import DispatcherConfig, RateLimitConfig
from kdispatch.actors.model.errors import CallCancelled, InvalidObjectError, Outcome
from kdispatch.actors.model.objects import ObjectRef, as_object
from kdispatch.actors.model.pod_calls import PodStatusPatch
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.configs import FAST
from tests.factories import cond

pytestmark = pytest.mark.timeout(60)

CLIENT: Any = k8s.ApiClient()
T0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def v1_pod(name: str = "p1", uid: str = "uid-p1", rv: str = "7") -> k8s.V1Pod:
    return k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=k8s.V1ObjectMeta(
            name=name,
            namespace="default",
            uid=uid,
            resource_version=rv,
            creation_timestamp=T0,
            labels={"app": "web", "tier": "front"},
            annotations={"example.com/note": "a: b"},
            owner_references=[
                k8s.V1OwnerReference(
                    api_version="apps/v1",
                    kind="ReplicaSet",
                    name="web-1",
                    uid="uid-rs",
                    controller=True,
                )
            ],
        ),
        spec=k8s.V1PodSpec(
            scheduler_name="kdispatch",
            containers=[
                k8s.V1Container(
                    name="c",
                    image="i",
                    resources=k8s.V1ResourceRequirements(requests={"cpu": "100m", "memory": "1Gi"}),
                    ports=[k8s.V1ContainerPort(container_port=80, protocol="TCP")],
                )
            ],
            tolerations=[k8s.V1Toleration(key="k", operator="Exists", effect="NoSchedule")],
        ),
        status=k8s.V1PodStatus(
            phase="Pending",
            conditions=[
                k8s.V1PodCondition(
                    type="PodScheduled",
                    status="False",
                    reason="Unschedulable",
                    last_transition_time=T0,
                )
            ],
        ),
    )


def v1_node() -> k8s.V1Node:
    return k8s.V1Node(
        api_version="v1",
        kind="Node",
        metadata=k8s.V1ObjectMeta(name="n1", uid="uid-n1", labels={"zone": "a"}),
        spec=k8s.V1NodeSpec(taints=[k8s.V1Taint(key="gpu", effect="NoSchedule", value="yes")]),
        status=k8s.V1NodeStatus(
            allocatable={"cpu": "4", "memory": "16Gi", "example.com/gpu": "2"},
            conditions=[
                k8s.V1NodeCondition(
                    type="Ready", status="True", last_heartbeat_time=T0, last_transition_time=T0
                )
            ],
            addresses=[k8s.V1NodeAddress(type="InternalIP", address="10.0.0.1")],
        ),
    )


def v1_claim() -> k8s.ResourceV1ResourceClaim:
    return k8s.ResourceV1ResourceClaim(
        api_version="resource.k8s.io/v1",
        kind="ResourceClaim",
        metadata=k8s.V1ObjectMeta(name="c1", namespace="default", uid="uid-c1"),
        spec=k8s.V1ResourceClaimSpec(
            devices=k8s.V1DeviceClaim(
                requests=[
                    k8s.V1DeviceRequest(
                        name="gpu",
                        exactly=k8s.V1ExactDeviceRequest(device_class_name="gpu.example.com"),
                    )
                ]
            )
        ),
        status=k8s.V1ResourceClaimStatus(
            allocation=k8s.V1AllocationResult(
                allocation_timestamp=T0,
                devices=k8s.V1DeviceAllocationResult(
                    results=[
                        k8s.V1DeviceRequestAllocationResult(
                            request="gpu", driver="gpu.example.com", pool="n1", device="gpu-0"
                        )
                    ]
                ),
            ),
            reserved_for=[
                k8s.V1ResourceClaimConsumerReference(resource="pods", name="p1", uid="uid-p1")
            ],
        ),
    )


@pytest.mark.parametrize("build", [v1_pod, v1_node, v1_claim], ids=["V1Pod", "V1Node", "Claim"])
def test_models_convert_exactly_as_the_client_serialises_them(build: Any) -> None:
    model = build()
    expected = CLIENT.sanitize_for_serialization(model)
    got = as_object(model)
    assert got == expected
    assert type(got) is dict


def test_converted_pod_has_the_wire_names_and_iso_datetimes() -> None:
    pod = as_object(v1_pod())
    assert pod["metadata"]["resourceVersion"] == "7"
    assert pod["metadata"]["creationTimestamp"] == T0.isoformat()
    assert pod["metadata"]["ownerReferences"][0]["apiVersion"] == "apps/v1"
    assert pod["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert "nodeName" not in pod["spec"]  # unset fields are left out, not None


def test_a_model_deserialised_from_server_json_round_trips() -> None:
    """What the client returns from a GET (a model built from JSON) converts back to the JSON."""
    wire = make_pod("p1")
    wire["metadata"].update(uid="uid-p1", resourceVersion="3")
    model = k8s.ApiClient()._ApiClient__deserialize(wire, "V1Pod")  # type: ignore[attr-defined]
    assert as_object(model) == CLIENT.sanitize_for_serialization(model)
    assert as_object(model)["metadata"]["uid"] == "uid-p1"


def test_plain_dicts_pass_as_they_are_and_other_mappings_become_dicts() -> None:
    pod = make_pod("p1")
    assert as_object(pod) is pod
    proxy = MappingProxyType(
        {"kind": "Pod", "metadata": MappingProxyType({"name": "p", "uid": "u"}), "l": ((1,),)}
    )
    out = as_object(proxy)
    assert out == {"kind": "Pod", "metadata": {"name": "p", "uid": "u"}, "l": [[1]]}
    assert type(out["metadata"]) is dict


def test_kopf_body_becomes_a_plain_dict() -> None:
    raw = make_pod("p1")
    raw["metadata"]["uid"] = "uid-p1"
    body = kopf.Body(cast("kopf.RawBody", raw))
    out = as_object(body)
    assert out == raw
    assert type(out) is dict and type(out["metadata"]) is dict
    assert ObjectRef.of(body) == ObjectRef("Pod", "default", "p1", "uid-p1")


def test_object_ref_reads_any_metadata_mapping_in_a_plain_dict() -> None:
    """Exact dicts skip the check against the ``Mapping`` ABC; other metadata is judged by it."""
    meta = {"namespace": "ns", "name": "p", "uid": "u"}
    for given in (MappingProxyType(meta), UserDict(meta)):
        assert ObjectRef.of({"kind": "Pod", "metadata": given}) == ObjectRef("Pod", "ns", "p", "u")
    for bad in (None, [("name", "p")], "p"):
        with pytest.raises(InvalidObjectError, match="no metadata"):
            ObjectRef.of({"kind": "Pod", "metadata": bad})


def test_object_ref_of_a_model() -> None:
    assert ObjectRef.of(v1_pod()) == ObjectRef("Pod", "default", "p1", "uid-p1")
    assert ObjectRef.of(v1_claim(), "ResourceClaim").uid == "uid-c1"
    with pytest.raises(InvalidObjectError, match="expected a Pod"):
        ObjectRef.of(v1_claim(), "Pod")


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ("pod", "must be a mapping"),
        (42, "must be a mapping"),
        (None, "must be a mapping"),
        ([("kind", "Pod")], "must be a mapping"),
        (MappingProxyType({"metadata": {"when": object()}}), r"object\.metadata\.when"),
    ],
)
def test_anything_else_is_a_typed_error(bad: object, match: str) -> None:
    with pytest.raises(InvalidObjectError, match=match):
        as_object(bad)


# ------------------------------------------------------------------ at the dispatcher

SLOW = DispatcherConfig(rate_limit=RateLimitConfig(qps=0.001, burst=1))
"""One token, then none for 1000 s: every call after the first stays pending."""


def model_of(obj: dict[str, Any]) -> k8s.V1Pod:
    return k8s.ApiClient()._ApiClient__deserialize(obj, "V1Pod")  # type: ignore[attr-defined,no-any-return]


def test_preempt_takes_a_v1_pod(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("victim"))
    with Dispatcher(server, FAST) as d:
        outcome = d.preempt(model_of(pod), preemptor="default/important").result(timeout=10)
    assert outcome is Outcome.SUCCESS
    assert server.get_object("Pod", "default", "victim") is None


def test_informer_events_may_be_models_or_kopf_bodies(server: InMemoryApiServer) -> None:
    """An update given as a kopf Body makes a pending patch a no-op (skipped, never sent); a
    delete given as a V1Pod cancels the pod's pending call."""
    first, p1, p2 = (server.create(make_pod(name)) for name in ("p0", "p1", "p2"))
    with Dispatcher(server, SLOW) as d:
        assert d.submit(PodStatusPatch.for_pod(first, conditions=[cond()])).result(10)
        later = d.submit(PodStatusPatch.for_pod(p1, conditions=[cond(reason="Later")]))
        doomed = d.submit(PodStatusPatch.for_pod(p2, conditions=[cond(reason="Doomed")]))
        # p1 got the condition from elsewhere; the informer reports it as a kopf Body
        seen = server.patch_status(
            "Pod",
            "default",
            "p1",
            {"status": {"conditions": [cond(reason="Later")]}},
            uid=p1["metadata"]["uid"],
            resource_version=None,
        )
        d.on_update(kopf.Body(cast("kopf.RawBody", seen)))
        assert later.result(timeout=10) is Outcome.SKIPPED
        server.remove("Pod", "default", "p2")
        d.on_delete(model_of(p2))
        with pytest.raises(CallCancelled):
            doomed.result(timeout=10)
        assert d.outstanding == 0
    sent = [r for r in server.request_log if r.op == "patch_status"]
    assert [r.name for r in sent] == ["p0", "p1"]  # p0 by the dispatcher, p1 by the test


def test_a_mapping_basis_is_snapshotted_at_submit(server: InMemoryApiServer) -> None:
    """kopf may update a Body in place; the dispatcher keeps the state the caller decided on."""
    p0, p1 = server.create(make_pod("p0")), server.create(make_pod("p1"))
    raw = dict(p1)
    raw["spec"] = dict(p1["spec"])
    with Dispatcher(server, SLOW) as d:
        d.submit(PodStatusPatch.for_pod(p0, conditions=[cond()])).result(timeout=10)
        pending = d.submit(
            PodStatusPatch.for_pod(kopf.Body(cast("kopf.RawBody", raw)), conditions=[cond()])
        )
        raw["spec"]["nodeName"] = "changed-later"  # the live view moves on
        view = d.view(p1["metadata"]["uid"])
        assert view is not None and "nodeName" not in view["spec"]
        assert view["status"]["conditions"][0]["reason"] == "Unschedulable"
        d.cancel(p1["metadata"]["uid"])
        with pytest.raises(CallCancelled):
            pending.result(timeout=10)
