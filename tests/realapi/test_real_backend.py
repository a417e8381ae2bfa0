"""``KubernetesBackend`` against the real kube-apiserver and against the emulator.

The same assertions run against both targets (``target`` fixture): what the server stores,
the error types kdispatch maps the replies to, and the HTTP status and reason of the replies.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from kdispatch.actors.model.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
)
from kdispatch.actors.model.objects import Obj
from kdispatch.adapters.kubernetes import KubernetesBackend
from tests.concurrency import patch_from_threads
from tests.realapi.cluster import Admin, Target, condition
from tests.realapi.conftest import create_node, node_body
from tests.realapi.objects import (
    allocation,
    consumer,
    new_claim,
    new_pod,
    remove_pod,
    uid_rv,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def backend(target: Target) -> Iterator[KubernetesBackend]:
    with target.backend(request_timeout=10.0) as b:
        yield b


# --------------------------------------------------------------------------- reads


def test_get_pod_node_and_claim(
    target: Target, backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    pod = new_pod(admin, ns, "p1")
    claim = new_claim(admin, ns, "c1")
    node_name = f"{ns}-n"
    create_node(admin, node_body(node_name), real=target.real)
    got = backend.get("Pod", ns, "p1")
    assert got["kind"] == "Pod" and got["apiVersion"] == "v1"
    assert uid_rv(got) == uid_rv(pod)
    assert got["status"]["phase"] == "Pending"
    node = backend.get("Node", "", node_name)
    assert node["kind"] == "Node" and node["status"]["allocatable"]["cpu"] == "64"
    admin.ok("DELETE", f"/api/v1/nodes/{node_name}")
    got_claim = backend.get("ResourceClaim", ns, "c1")
    assert got_claim["apiVersion"] == "resource.k8s.io/v1"
    assert got_claim["metadata"]["uid"] == claim["metadata"]["uid"]


# --------------------------------------------------------------------------- status patches


def test_strategic_patch_merges_conditions_by_type_on_the_real_types(
    backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    uid, rv = uid_rv(new_pod(admin, ns, "p1"))
    first = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    out = backend.patch_status("Pod", ns, "p1", first, uid=uid, resource_version=rv)
    second = {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available",
                }
            ],
            "nominatedNodeName": "n1",
        }
    }
    out = backend.patch_status(
        "Pod", ns, "p1", second, uid=uid, resource_version=out["metadata"]["resourceVersion"]
    )
    assert {c["type"]: c["status"] for c in out["status"]["conditions"]} == {
        "Ready": "False",
        "PodScheduled": "False",
    }
    stored = admin.get_pod(ns, "p1")
    assert stored["status"]["nominatedNodeName"] == "n1"
    sched = condition(stored, "PodScheduled")
    assert sched is not None and sched["reason"] == "Unschedulable"
    assert sched["message"] == "0/3 nodes are available"
    # clearing nominatedNodeName with null, and replacing one condition by type
    third = {
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Other"}],
            "nominatedNodeName": None,
        }
    }
    backend.patch_status("Pod", ns, "p1", third, uid=uid, resource_version=None)
    stored = admin.get_pod(ns, "p1")
    assert "nominatedNodeName" not in stored["status"]
    # without $setElementOrder the patch's elements come first, then the others in their order
    assert [c["type"] for c in stored["status"]["conditions"]] == ["PodScheduled", "Ready"]
    sched = condition(stored, "PodScheduled")
    assert sched is not None and sched["reason"] == "Other"
    # the element is merged by type: a field the patch leaves out keeps its old value
    assert sched.get("message") == "0/3 nodes are available"


def test_empty_reason_and_message_of_a_pod_condition_are_left_out(
    backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    """core/v1 conditions' ``reason`` and ``message`` are ``omitempty``: patched as ``""``,
    they are not served; a stored message patched to ``""`` is gone."""
    uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    with_message = {"type": "example.com/Ready", "status": "True", "message": "m"}
    backend.patch_status(
        "Pod", ns, "p1", {"status": {"conditions": [with_message]}}, uid=uid, resource_version=None
    )
    empty = {"type": "example.com/Ready", "status": "True", "reason": "", "message": ""}
    backend.patch_status(
        "Pod", ns, "p1", {"status": {"conditions": [empty]}}, uid=uid, resource_version=None
    )
    stored = condition(admin.get_pod(ns, "p1"), "example.com/Ready")
    assert stored is not None and stored["status"] == "True"
    assert "reason" not in stored and "message" not in stored


def test_status_patch_cannot_change_the_spec(
    backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    reply = admin.request(
        "PATCH",
        admin.pod_path(ns, "p1") + "/status",
        {"metadata": {"uid": uid}, "spec": {"nodeName": "sneaky"}},
        content_type="application/strategic-merge-patch+json",
    )
    assert reply.status == 200  # the status subresource ignores spec changes
    assert admin.get_pod(ns, "p1")["spec"].get("nodeName") is None


def test_conflicts_on_uid_and_resource_version(
    backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    uid, rv = uid_rv(new_pod(admin, ns, "p1"))
    patch = {"status": {"nominatedNodeName": "n1"}}
    with pytest.raises(ConflictError) as info:
        backend.patch_status("Pod", ns, "p1", patch, uid="0000-other", resource_version=None)
    # a UID in a patch body is applied, not checked: 422 "metadata.uid: field is immutable"
    assert "metadata.uid" in str(info.value) and "field is immutable" in str(info.value)
    backend.patch_status("Pod", ns, "p1", patch, uid=uid, resource_version=rv)
    with pytest.raises(ConflictError) as info:  # rv is stale now
        backend.patch_status(
            "Pod", ns, "p1", {"status": {"nominatedNodeName": "n2"}}, uid=uid, resource_version=rv
        )
    assert "the object has been modified" in str(info.value)
    with pytest.raises(ConflictError):
        backend.bind(ns, "p1", uid="0000-other", node="n1")
    with pytest.raises(ConflictError):
        backend.delete("Pod", ns, "p1", uid="0000-other", grace_period_seconds=0)
    stored = admin.get_pod(ns, "p1")
    assert stored["status"]["nominatedNodeName"] == "n1"
    assert stored["spec"].get("nodeName") is None


def test_uid_in_an_object_patch_body_is_immutable_not_a_precondition(
    backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    """Patching the pod itself (not ``status``) with another UID in the body: 422 ``field is
    immutable`` too, which the backend reports as the failed UID precondition it is."""
    uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    reply = admin.request(
        "PATCH",
        admin.pod_path(ns, "p1"),
        {"metadata": {"uid": "0000-other", "labels": {"a": "b"}}},
        content_type="application/merge-patch+json",
    )
    assert (reply.status, reply.reason) == (422, "Invalid")
    assert reply.body["message"] == (
        'Pod "p1" is invalid: metadata.uid: Invalid value: "0000-other": field is immutable'
    )
    assert [c["field"] for c in reply.body["details"]["causes"]] == ["metadata.uid"]
    reply = admin.request(
        "PATCH",
        admin.pod_path(ns, "p1"),
        [{"op": "test", "path": "/metadata/uid", "value": "0000-other"}],
        content_type="application/json-patch+json",
    )
    # a JSON patch carries a UID precondition as a test op: its failure is a bare 422
    assert (reply.status, reply.reason) == (422, "Invalid")
    assert reply.body["message"] == (
        "the server rejected our request due to an error in our request"
    )
    assert not reply.body.get("details")
    with pytest.raises(ConflictError):
        backend.patch("Pod", ns, "p1", {"metadata": {"labels": {"a": "b"}}}, uid="0000-other")
    assert "labels" not in admin.get_pod(ns, "p1")["metadata"]
    out = backend.patch("Pod", ns, "p1", {"metadata": {"labels": {"a": "b"}}}, uid=uid)
    assert out["metadata"]["labels"] == {"a": "b"}


def test_claim_delete_conflict_names_the_qualified_kind(admin: Admin, ns: str) -> None:
    claim = new_claim(admin, ns, "c1")
    reply = admin.request(
        "DELETE", admin.claim_path(ns, "c1"), {"preconditions": {"uid": "0000-x"}}
    )
    assert (reply.status, reply.reason) == (409, "Conflict")
    assert reply.body["message"] == (
        'Operation cannot be fulfilled on ResourceClaim.resource.k8s.io "c1": the UID in the '
        f"precondition (0000-x) does not match the UID in record ({claim['metadata']['uid']}). "
        "The object might have been deleted and then recreated"
    )
    assert reply.body["details"] == {
        "name": "c1",
        "group": "resource.k8s.io",
        "kind": "ResourceClaim",
    }


def test_conflict_reply_bodies(admin: Admin, ns: str) -> None:
    """The ``Status`` replies of failed preconditions, as a client sees them."""
    uid, rv = uid_rv(new_pod(admin, ns, "p1"))
    path = admin.pod_path(ns, "p1") + "/status"
    smp = "application/strategic-merge-patch+json"
    for content_type in (smp, "application/merge-patch+json"):
        reply = admin.request(
            "PATCH",
            path,
            {"metadata": {"uid": "0000-other"}, "status": {}},
            content_type=content_type,
        )
        assert (reply.status, reply.reason) == (422, "Invalid")
        assert reply.body["message"] == (
            'Pod "p1" is invalid: metadata.uid: Invalid value: "0000-other": field is immutable'
        )
        assert reply.body["details"]["name"] == "p1" and reply.body["details"]["kind"] == "Pod"
        assert [c["field"] for c in reply.body["details"]["causes"]] == ["metadata.uid"]
    admin.ok(
        "PATCH", path, {"status": {"nominatedNodeName": "x"}}, content_type=smp
    )  # bumps the rv
    reply = admin.request(
        "PATCH",
        path,
        {"metadata": {"resourceVersion": rv}, "status": {"nominatedNodeName": "y"}},
        content_type=smp,
    )
    assert (reply.status, reply.reason) == (409, "Conflict")
    assert "the object has been modified" in reply.body["message"]
    reply = admin.request("GET", admin.pod_path(ns, "nope"))
    assert (reply.status, reply.reason) == (404, "NotFound")
    assert reply.body["details"] == {"name": "nope", "kind": "pods"}
    assert reply.body["message"] == 'pods "nope" not found'
    reply = admin.request("DELETE", admin.pod_path(ns, "p1"), {"preconditions": {"uid": "0000-x"}})
    assert (reply.status, reply.reason) == (409, "Conflict")
    assert reply.body["message"] == (
        'Operation cannot be fulfilled on Pod "p1": the UID in the precondition (0000-x) does '
        f"not match the UID in record ({uid}). The object might have been deleted and then "
        "recreated"
    )
    current = admin.get_pod(ns, "p1")["metadata"]["resourceVersion"]
    reply = admin.request(
        "DELETE", admin.pod_path(ns, "p1"), {"preconditions": {"resourceVersion": rv}}
    )
    assert (reply.status, reply.reason) == (409, "Conflict")
    assert reply.body["message"] == (
        f'Operation cannot be fulfilled on Pod "p1": the ResourceVersion in the precondition '
        f"({rv}) does not match the ResourceVersion in record ({current}). The object might "
        "have been modified"
    )
    assert reply.body["details"] == {"name": "p1", "kind": "Pod"}
    reply = admin.request(
        "POST",
        admin.pod_path(ns, "p1") + "/binding",
        {"metadata": {"name": "p1", "uid": "0000-x"}, "target": {"name": "n1"}},
    )
    assert (reply.status, reply.reason) == (409, "Conflict")
    assert (
        f"Precondition failed: UID in precondition: 0000-x, UID in object meta: {uid}"
        in (reply.body["message"])
    )
    reply = admin.request(
        "POST",
        admin.pod_path(ns),
        {
            "metadata": {"name": "p1"},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        },
    )
    assert (reply.status, reply.reason) == (409, "AlreadyExists")
    assert reply.body["message"] == 'pods "p1" already exists'


# --------------------------------------------------------------------------- bindings


def test_bind_sets_node_and_pod_scheduled(
    backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    backend.bind(ns, "p1", uid=uid, node="n1")
    stored = admin.get_pod(ns, "p1")
    assert stored["spec"]["nodeName"] == "n1"
    sched = condition(stored, "PodScheduled")
    assert sched is not None and sched["status"] == "True"


def test_bind_reply_is_a_201_success_status(admin: Admin, ns: str) -> None:
    uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    reply = admin.request(
        "POST",
        admin.pod_path(ns, "p1") + "/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p1", "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
        },
    )
    assert reply.status == 201
    assert reply.body["kind"] == "Status" and reply.body["status"] == "Success"
    assert reply.body["code"] == 201


def test_double_binding_conflicts(backend: KubernetesBackend, admin: Admin, ns: str) -> None:
    uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    backend.bind(ns, "p1", uid=uid, node="n1")
    for node in ("n2", "n1"):  # to another node, and again to the same one
        with pytest.raises(ConflictError) as info:
            backend.bind(ns, "p1", uid=uid, node=node)
        assert info.value.status == 409
        assert 'is already assigned to node "n1"' in str(info.value)
    assert admin.get_pod(ns, "p1")["spec"]["nodeName"] == "n1"


def test_binding_a_pod_with_scheduling_gates_is_refused(
    backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    uid, _ = uid_rv(new_pod(admin, ns, "gated", gates=("example.com/wait",)))
    with pytest.raises(ConflictError) as info:
        backend.bind(ns, "gated", uid=uid, node="n1")
    assert "pod gated has non-empty .spec.schedulingGates" in str(info.value)
    assert admin.get_pod(ns, "gated")["spec"].get("nodeName") is None


# --------------------------------------------------------------------------- deletions


def test_delete_with_uid_precondition(backend: KubernetesBackend, admin: Admin, ns: str) -> None:
    uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    claim = new_claim(admin, ns, "c1")
    with pytest.raises(ConflictError):
        backend.delete("Pod", ns, "p1", uid="0000-other", grace_period_seconds=0)
    backend.delete("Pod", ns, "p1", uid=uid, grace_period_seconds=0)
    backend.delete("ResourceClaim", ns, "c1", uid=claim["metadata"]["uid"])
    assert not admin.pod_exists(ns, "p1")
    assert admin.request("GET", admin.claim_path(ns, "c1")).status == 404
    with pytest.raises(NotFoundError):
        backend.delete("Pod", ns, "p1", uid=uid)


def test_unbound_pod_is_deleted_at_once(backend: KubernetesBackend, admin: Admin, ns: str) -> None:
    uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    backend.delete("Pod", ns, "p1", uid=uid)  # default grace period, but never scheduled
    assert not admin.pod_exists(ns, "p1")


def test_recreated_pod_is_protected_by_the_uid_precondition(
    backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    old_uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    remove_pod(admin, ns, "p1")
    new_uid, _ = uid_rv(new_pod(admin, ns, "p1"))
    assert new_uid != old_uid
    with pytest.raises(ConflictError):
        backend.delete("Pod", ns, "p1", uid=old_uid, grace_period_seconds=0)
    with pytest.raises(ConflictError):
        backend.bind(ns, "p1", uid=old_uid, node="n1")
    with pytest.raises(ConflictError):
        backend.patch_status(
            "Pod",
            ns,
            "p1",
            {"status": {"nominatedNodeName": "n1"}},
            uid=old_uid,
            resource_version=None,
        )
    stored = admin.get_pod(ns, "p1")
    assert stored["metadata"]["uid"] == new_uid and stored["spec"].get("nodeName") is None


def test_not_found(backend: KubernetesBackend, ns: str) -> None:
    for call in (
        lambda: backend.get("Pod", ns, "nope"),
        lambda: backend.patch_status("Pod", ns, "nope", {}, uid="u", resource_version=None),
        lambda: backend.bind(ns, "nope", uid="u", node="n1"),
        lambda: backend.delete("Pod", ns, "nope", uid="u"),
        lambda: backend.get("ResourceClaim", ns, "nope"),
    ):
        with pytest.raises(NotFoundError) as info:
            call()
        assert info.value.status == 404
        assert not info.value.retryable


def test_unauthorized_is_permanent(target: Target, ns: str) -> None:
    with (
        target.backend(token="wrong-token", request_timeout=5.0) as b,
        pytest.raises(InvalidRequestError) as info,
    ):
        b.get("Pod", ns, "p1")
    assert info.value.status == 401
    assert not info.value.retryable


# --------------------------------------------------------------------------- DRA


@dataclass
class ClaimedPod:
    """Claim c1 in the test's namespace (``uid``, ``rv`` as created) and pod p1 that uses it;
    :meth:`patch` merge-patches the claim's status through the backend. Test thread."""

    backend: KubernetesBackend
    ns: str
    uid: str
    rv: str
    pod: dict[str, Any]

    def patch(self, status: dict[str, Any], resource_version: str | None = None) -> Obj:
        return self.backend.patch_status(
            "ResourceClaim",
            self.ns,
            "c1",
            {"status": status},
            uid=self.uid,
            resource_version=resource_version,
            patch_type="merge",
        )


@pytest.fixture
def claimed(backend: KubernetesBackend, admin: Admin, ns: str) -> ClaimedPod:
    uid, rv = uid_rv(new_claim(admin, ns, "c1"))
    return ClaimedPod(backend, ns, uid, rv, new_pod(admin, ns, "p1", claims=("c1",)))


def test_claim_allocation_and_reservation(claimed: ClaimedPod, admin: Admin, ns: str) -> None:
    pod = claimed.pod
    out = claimed.patch(
        {"allocation": allocation("n1"), "reservedFor": [consumer(pod)]}, claimed.rv
    )
    assert out["kind"] == "ResourceClaim"
    stored = admin.get_claim(ns, "c1")
    result = stored["status"]["allocation"]["devices"]["results"][0]
    assert (result["pool"], result["device"]) == ("n1", "gpu-0")
    assert stored["status"]["reservedFor"] == [consumer(pod)]
    for field in ("reservedFor", "allocation"):  # unreserve, then deallocate
        claimed.patch({field: None})
    assert admin.get_claim(ns, "c1").get("status", {}) == {}


def test_claim_reservation_needs_an_allocation(claimed: ClaimedPod, admin: Admin, ns: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        claimed.patch({"reservedFor": [consumer(claimed.pod)]})
    assert info.value.status == 422
    assert not info.value.retryable
    assert "reservedFor" in str(info.value)
    assert admin.get_claim(ns, "c1").get("status", {}).get("reservedFor") is None


def test_claim_allocation_is_immutable_and_kept_while_reserved(
    claimed: ClaimedPod, admin: Admin, ns: str
) -> None:
    claimed.patch({"allocation": allocation("n1"), "reservedFor": [consumer(claimed.pod)]})
    with pytest.raises(InvalidRequestError) as info:
        claimed.patch({"allocation": allocation("n2")})  # re-allocating in place
    assert info.value.status == 422
    with pytest.raises(InvalidRequestError) as info:
        claimed.patch({"allocation": None})  # deallocating while reserved
    assert info.value.status == 422
    stored = admin.get_claim(ns, "c1")
    assert stored["status"]["allocation"]["devices"]["results"][0]["pool"] == "n1"


def test_claim_reserved_for_merges_by_uid_in_a_strategic_patch(
    backend: KubernetesBackend, admin: Admin, ns: str
) -> None:
    claim = new_claim(admin, ns, "c1")
    p1 = new_pod(admin, ns, "p1", claims=("c1",))
    p2 = new_pod(admin, ns, "p2", claims=("c1",))
    uid, _ = uid_rv(claim)
    for status in (
        {"allocation": allocation("n1"), "reservedFor": [consumer(p1)]},
        {"reservedFor": [consumer(p2)]},
    ):
        backend.patch_status(
            "ResourceClaim", ns, "c1", {"status": status}, uid=uid, resource_version=None
        )
    stored = admin.get_claim(ns, "c1")
    # merged by uid; the new entry goes first, as with any strategic-merge list
    assert stored["status"]["reservedFor"] == [consumer(p2), consumer(p1)]


# --------------------------------------------------------------------------- concurrency


def test_shared_client_under_parallel_workers(target: Target, admin: Admin, ns: str) -> None:
    workers = 8
    uids = [uid_rv(new_pod(admin, ns, f"p{i}"))[0] for i in range(workers)]
    with target.backend(workers=workers) as b:
        errors = patch_from_threads(b, ns, uids, rounds=10)
    assert errors == []
    for i in range(workers):
        assert admin.get_pod(ns, f"p{i}")["status"]["nominatedNodeName"] == "n9"


def test_version_is_the_release_the_emulator_follows(admin: Admin) -> None:
    """``GET /version`` (kr8s reads it when it connects): the emulator reports the release of
    kube-apiserver it is checked against."""
    for path in ("/version", "/version/"):
        version = admin.ok("GET", path)
        assert (version["major"], version["minor"]) == ("1", "37"), version
        assert version["gitVersion"].startswith("v1.37."), version
