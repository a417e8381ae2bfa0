"""Tests of the in-memory apiserver (kdispatch.testing.memory): storage, preconditions, patch
semantics, binding, deletion, the object builders and the request log. Its watches are tested in
tests/integration/test_memory_watch.py, its fault and latency injection in
tests/integration/test_memory_faults.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kdispatch import (
    AlreadyExistsError,
    ApiBackend,
    ConflictError,
    GoneError,
    InvalidObjectError,
    InvalidRequestError,
    NotFoundError,
    TooManyRequestsError,
)
from kdispatch.testing import InMemoryApiServer, make_claim, make_node, make_pod
from kdispatch.testing.memory import Watch
from tests.backends import nominate
from tests.memory_server import conditions, drain, patch, rv, uid

pytestmark = pytest.mark.timeout(30)


def test_is_an_api_backend(server: InMemoryApiServer) -> None:
    assert isinstance(server, ApiBackend)


def test_create_fills_metadata(server: InMemoryApiServer) -> None:
    spec = make_pod("p1")
    del spec["metadata"]["uid"]
    del spec["metadata"]["namespace"]
    created = server.create(spec)
    meta = created["metadata"]
    assert meta["namespace"] == "default"
    assert len(meta["uid"]) == 36
    assert meta["resourceVersion"] == "1" == server.resource_version
    assert meta["creationTimestamp"].endswith("Z")
    assert server.get_object("Pod", "default", "p1") == created


def test_create_keeps_given_uid_and_fills_api_version(server: InMemoryApiServer) -> None:
    obj = {"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "ns", "uid": "u-1"}}
    created = server.create(obj)
    assert created["metadata"]["uid"] == "u-1"
    assert created["apiVersion"] == "resource.k8s.io/v1"
    assert "resourceVersion" not in obj["metadata"], "input must not be mutated"


def test_node_is_cluster_scoped(server: InMemoryApiServer) -> None:
    node = make_node("n1", 4000, 8192)
    node["metadata"]["namespace"] = "ignored"
    created = server.create(node)
    assert "namespace" not in created["metadata"]
    assert server.get_object("Node", "", "n1") == created
    assert server.get_object("Node", "anything", "n1") == created
    items = server.list("Node", namespace="default").items
    assert [i["metadata"]["name"] for i in items] == ["n1"]


def test_create_same_name_already_exists(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    with pytest.raises(AlreadyExistsError):
        server.create(make_pod("p1"))
    server.create(make_pod("p1", namespace="other"))  # other namespace: fine


@pytest.mark.parametrize(
    "bad",
    [
        "not a mapping",
        {"metadata": {"name": "x"}},
        {"kind": "Pod"},
        {"kind": "Pod", "metadata": {"name": "Bad_Name"}},
        {"kind": "Pod", "metadata": {"name": "x", "namespace": "Bad NS"}},
        {"kind": "Pod", "metadata": {"name": "x", "uid": "bad uid!"}},
        {"kind": "Pod", "metadata": {"name": "x"}, "spec": {"f": object()}},
        {"kind": "Pod", "metadata": {"name": "x"}, "spec": {"f": float("nan")}},
    ],
)
def test_create_rejects_bad_objects(server: InMemoryApiServer, bad: Any) -> None:
    with pytest.raises(InvalidObjectError):
        server.create(bad)
    assert server.resource_version == "0"


def test_resource_version_is_global_across_kinds(server: InMemoryApiServer) -> None:
    a = server.create(make_pod("a"))
    c = server.create(make_claim("c"))
    n = server.create(make_node("n", 1000, 1024))
    assert [rv(a), rv(c), rv(n)] == ["1", "2", "3"]


# ----------------------------------------------------------------------------- get / list / copies


def test_get_returns_copies(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    got = dict(server.get("Pod", "default", "p1"))
    got["spec"]["containers"][0]["name"] = "mutated"
    pod["status"]["phase"] = "Mutated"
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None
    assert stored["spec"]["containers"][0]["name"] == "main"
    assert stored["status"]["phase"] == "Pending"


def test_get_not_found(server: InMemoryApiServer) -> None:
    with pytest.raises(NotFoundError):
        server.get("Pod", "default", "nope")
    assert server.get_object("Pod", "default", "nope") is None
    assert server.request_log[-1].outcome == "NotFound"


def test_list_sorted_filtered_with_rv(server: InMemoryApiServer) -> None:
    for ns, name in [("b", "x"), ("a", "z"), ("a", "y")]:
        server.create(make_pod(name, namespace=ns))
    server.create(make_claim("c", namespace="a"))
    items, list_rv, _ = server.list("Pod")
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items] == [
        ("a", "y"),
        ("a", "z"),
        ("b", "x"),
    ]
    assert list_rv == "4"
    assert [i["metadata"]["name"] for i in server.list("Pod", namespace="a").items] == ["y", "z"]


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [i["metadata"]["name"] for i in items]


def test_later_pages_of_a_list_are_a_snapshot_at_the_first_pages_resource_version(
    server: InMemoryApiServer,
) -> None:
    """As etcd serves them: whatever changes between two pages, the next page shows the objects
    as they were when the first page was served, and reports its resourceVersion."""
    for name in ("b", "c", "d", "f"):
        server.create(make_pod(name))
    server.create(make_pod("b", namespace="other"))
    first = server.list("Pod", "default", limit=2)
    assert _names(first.items) == ["b", "c"] and first.resource_version == "5"
    server.create(make_pod("a"))  # sorts before the continue key
    server.create(make_pod("e"))  # sorts after it
    d = server.get_object("Pod", "default", "d")
    assert d is not None
    nominate(server, "d", "n1", uid=uid(d))
    server.remove("Pod", "default", "f")
    server.create(make_pod("g"))  # created and deleted between the pages
    server.remove("Pod", "default", "g")
    rest = server.list("Pod", "default", limit=2, continue_token=first.continue_token)
    assert _names(rest.items) == ["d", "f"]  # not a, e or g; f as it was before its deletion
    assert rest.items[0] == d  # d before the patch
    assert rest.resource_version == first.resource_version
    assert rest.continue_token is None
    assert _names(server.list("Pod", "default").items) == ["a", "b", "c", "d", "e"]


def test_a_continue_token_the_history_no_longer_reaches_is_expired() -> None:
    """The 410 Expired etcd answers for a continue token older than a compaction: after
    ``compact``, or once ``history`` events were written since the first page."""
    server = InMemoryApiServer(history=2)
    for name in ("a", "b", "c"):
        server.create(make_pod(name))
    first = server.list("Pod", limit=1)
    server.create(make_pod("d"))
    server.create(make_pod("e"))  # the history still reaches back to the first page
    assert _names(server.list("Pod", limit=9, continue_token=first.continue_token).items) == [
        "b",
        "c",
    ]
    server.create(make_pod("f"))  # now it does not
    with pytest.raises(GoneError, match="continue parameter is too old"):
        server.list("Pod", limit=9, continue_token=first.continue_token)
    first = server.list("Pod", limit=1)
    server.compact()  # nothing was written since the first page: it is still served
    rest = server.list("Pod", limit=9, continue_token=first.continue_token)
    assert _names(rest.items) == ["b", "c", "d", "e", "f"]
    server.create(make_pod("g"))
    server.compact()
    with pytest.raises(GoneError):
        server.list("Pod", limit=9, continue_token=first.continue_token)
    with pytest.raises(InvalidRequestError, match="invalid continue token"):
        server.list("Pod", limit=1, continue_token="bm90LWpzb24=")


# ----------------------------------------------------------------------------- patch_status


def test_patch_uid_precondition(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    with pytest.raises(ConflictError, match="UID in precondition"):
        patch(server, pod, {"nominatedNodeName": "n1"}, uid="other-uid")
    assert server.resource_version == rv(pod)


def test_patch_resource_version_precondition(
    server: InMemoryApiServer, pod: dict[str, Any]
) -> None:
    newer = patch(server, pod, {"nominatedNodeName": "n1"}, resource_version=rv(pod))
    assert int(rv(newer)) == int(rv(pod)) + 1
    with pytest.raises(ConflictError, match="has been modified"):
        patch(server, pod, {"nominatedNodeName": "n2"}, resource_version=rv(pod))
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["status"]["nominatedNodeName"] == "n1"


def test_patch_preconditions_in_patch_metadata(
    server: InMemoryApiServer, pod: dict[str, Any]
) -> None:
    body = {"metadata": {"uid": "other"}, "status": {"phase": "Running"}}
    with pytest.raises(ConflictError):
        server.patch_status("Pod", "default", "p1", body, uid=uid(pod), resource_version=None)
    body = {"metadata": {"resourceVersion": "999"}, "status": {"phase": "Running"}}
    with pytest.raises(ConflictError):
        server.patch_status("Pod", "default", "p1", body, uid=uid(pod), resource_version=None)
    body = {"metadata": {"uid": uid(pod), "resourceVersion": rv(pod)}, "status": {"phase": "X"}}
    out = server.patch_status("Pod", "default", "p1", body, uid=uid(pod), resource_version=None)
    assert out["status"]["phase"] == "X"


def test_patch_not_found(server: InMemoryApiServer) -> None:
    with pytest.raises(NotFoundError):
        server.patch_status(
            "Pod", "default", "nope", {"status": {}}, uid="u", resource_version=None
        )


def test_strategic_conditions_merge_by_type(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    patch(
        server,
        pod,
        {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "m",
                },
                {"type": "DisruptionTarget", "status": "True"},
            ]
        },
    )
    out = patch(
        server,
        pod,
        {
            "conditions": [
                {"type": "PodScheduled", "message": "new"},
                {"type": "Ready", "status": "False"},
            ]
        },
    )
    conds = conditions(out)
    # the apiserver's order: the patch's elements, a new one before the original-only ones
    assert [c["type"] for c in out["status"]["conditions"]] == [
        "PodScheduled",
        "Ready",
        "DisruptionTarget",
    ]
    assert conds["PodScheduled"] == {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "new",
    }
    assert conds["DisruptionTarget"]["status"] == "True"


def test_strategic_none_deletes_and_clears_nominated_node(
    server: InMemoryApiServer, pod: dict[str, Any]
) -> None:
    resources = {"cpu": "1", "memory": "1Gi"}
    patch(server, pod, {"nominatedNodeName": "n1", "allocatedResources": resources})
    out = patch(
        server, pod, {"nominatedNodeName": None, "allocatedResources": {"cpu": None, "pods": "1"}}
    )
    assert "nominatedNodeName" not in out["status"]
    assert out["status"]["allocatedResources"] == {"memory": "1Gi", "pods": "1"}
    assert out["status"]["phase"] == "Pending"


def test_strategic_other_lists_replace(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    patch(server, pod, {"containerStatuses": [{"name": "a"}, {"name": "b"}]})
    out = patch(server, pod, {"containerStatuses": [{"name": "c"}]})
    assert out["status"]["containerStatuses"] == [{"name": "c"}]


def test_strategic_directives(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    patch(
        server,
        pod,
        {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]},
    )
    out = patch(
        server,
        pod,
        {
            "conditions": [{"type": "A", "$patch": "delete"}],
            "$setElementOrder/conditions": [{"type": "B"}],
        },
    )
    assert [c["type"] for c in out["status"]["conditions"]] == ["B"]
    out = patch(
        server, pod, {"conditions": [{"$patch": "replace"}, {"type": "C", "status": "True"}]}
    )
    assert [c["type"] for c in out["status"]["conditions"]] == ["C"]
    with pytest.raises(InvalidRequestError, match=r"unsupported directive '\$deleteFrom/x'"):
        patch(server, pod, {"$deleteFrom/x": ["a"]})
    with pytest.raises(InvalidRequestError, match="merge key"):
        patch(server, pod, {"conditions": [{"status": "True"}]})


def test_claim_reserved_for_merges_by_uid(server: InMemoryApiServer) -> None:
    claim = server.create(make_claim("c1"))
    patch(server, claim, {"allocation": {"devices": {"results": []}}})
    patch(server, claim, {"reservedFor": [{"resource": "pods", "name": "a", "uid": "ua"}]})
    out = patch(server, claim, {"reservedFor": [{"resource": "pods", "name": "b", "uid": "ub"}]})
    assert [r["uid"] for r in out["status"]["reservedFor"]] == ["ub", "ua"]  # new one first
    out = patch(server, claim, {"reservedFor": [{"uid": "ua", "$patch": "delete"}]})
    assert [r["uid"] for r in out["status"]["reservedFor"]] == ["ub"]
    assert "allocation" in out["status"]


def test_strict_claims_validate_both_status_patch_paths() -> None:
    """``strict_claims``: kube-apiserver's claim status rules hold for ``patch_status`` and for
    the generic ``patch(subresource="status")`` (a JSON patch over HTTP takes that one)."""
    server = InMemoryApiServer(strict_claims=True)
    claim = server.create(make_claim("c1"))
    reserve = {"reservedFor": [{"resource": "pods", "name": "a", "uid": "ua"}]}
    with pytest.raises(InvalidRequestError, match="reservedFor: Forbidden"):
        patch(server, claim, reserve)
    with pytest.raises(InvalidRequestError, match="reservedFor: Forbidden"):
        server.patch(
            "ResourceClaim", "default", "c1", {"status": reserve}, subresource="status",
            patch_type="merge",
        )  # fmt: skip
    patch(server, claim, {"allocation": {"devices": {"results": []}}})
    other = {"allocation": {"devices": {"results": [{"device": "d"}]}}}
    with pytest.raises(InvalidRequestError, match="cannot be modified once set"):
        server.patch(
            "ResourceClaim", "default", "c1", {"status": other}, subresource="status",
            patch_type="merge",
        )  # fmt: skip
    out = patch(server, claim, reserve)
    assert out["status"]["reservedFor"][0]["uid"] == "ua"
    stored = server.get_object("ResourceClaim", "default", "c1")
    assert stored is not None
    assert stored["status"]["allocation"] == {"devices": {"results": []}}


def test_merge_patch_is_rfc7386(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    patch(server, pod, {"conditions": [{"type": "A", "status": "True"}], "nominatedNodeName": "n"})
    out = patch(
        server,
        pod,
        {
            "conditions": [{"type": "B", "status": "True"}],
            "nominatedNodeName": None,
            "allocatedResources": {"cpu": "1"},
        },
        patch_type="merge",
    )
    assert out["status"]["conditions"] == [{"type": "B", "status": "True"}]
    assert "nominatedNodeName" not in out["status"]
    assert out["status"]["allocatedResources"] == {"cpu": "1"}


@pytest.mark.parametrize(
    "body",
    [
        {"spec": {"nodeName": "n1"}},
        {"status": {}, "metadata": {"labels": {"a": "b"}}},
        {"status": "not an object"},
        {"status": {"conditions": "nope"}},
        {"status": {"bad": object()}},
    ],
)
def test_patch_rejects_invalid_bodies(
    server: InMemoryApiServer, pod: dict[str, Any], body: dict[str, Any]
) -> None:
    with pytest.raises(InvalidRequestError):
        server.patch_status("Pod", "default", "p1", body, uid=uid(pod), resource_version=None)
    assert server.resource_version == rv(pod)


def test_merge_patch_rejects_duplicate_condition_types(
    server: InMemoryApiServer, pod: dict[str, Any]
) -> None:
    with pytest.raises(InvalidRequestError, match="duplicate"):
        patch(server, pod, {"conditions": [{"type": "A"}, {"type": "A"}]}, patch_type="merge")


def test_patch_rejects_unknown_patch_type(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError):
        patch(server, pod, {}, patch_type="json")


def test_noop_patch_writes_nothing(
    server: InMemoryApiServer, pod: dict[str, Any], pod_watch: Watch
) -> None:
    first = patch(server, pod, {"conditions": [{"type": "A", "status": "True"}]})
    again = patch(server, pod, {"conditions": [{"type": "A", "status": "True"}]})
    assert rv(again) == rv(first)
    assert len(drain(pod_watch)) == 1
    assert server.counts()["patch_status"] == 2


# ----------------------------------------------------------------------------- bind


def test_bind_sets_node_and_pod_scheduled(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    patch(
        server,
        pod,
        {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    )
    server.bind("default", "p1", uid=uid(pod), node="n1")
    got = server.get("Pod", "default", "p1")
    assert got["spec"]["nodeName"] == "n1"
    scheduled = conditions(dict(got))["PodScheduled"]
    assert scheduled["status"] == "True"
    assert "reason" not in scheduled
    assert len(got["status"]["conditions"]) == 1


def test_double_bind_conflicts_naming_node(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    server.bind("default", "p1", uid=uid(pod), node="n1")
    for node in ("n1", "n2"):
        with pytest.raises(ConflictError, match='already assigned to node "n1"'):
            server.bind("default", "p1", uid=uid(pod), node=node)
    assert server.counts()["bind"] == 1


def test_bind_preconditions(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    with pytest.raises(ConflictError, match="UID"):
        server.bind("default", "p1", uid="other", node="n1")
    with pytest.raises(NotFoundError):
        server.bind("default", "nope", uid=uid(pod), node="n1")
    with pytest.raises(InvalidRequestError):
        server.bind("default", "p1", uid=uid(pod), node="Not A Node")
    server.mark_terminating("Pod", "default", "p1")
    with pytest.raises(ConflictError, match="being deleted"):
        server.bind("default", "p1", uid=uid(pod), node="n1")
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and "nodeName" not in stored["spec"]


# ----------------------------------------------------------------------------- delete


def test_delete_uid_precondition_and_not_found(
    server: InMemoryApiServer, pod: dict[str, Any], pod_watch: Watch
) -> None:
    with pytest.raises(ConflictError):
        server.delete("Pod", "default", "p1", uid="other")
    assert server.get_object("Pod", "default", "p1") is not None
    server.delete("Pod", "default", "p1", uid=uid(pod), grace_period_seconds=0)
    assert server.get_object("Pod", "default", "p1") is None
    with pytest.raises(NotFoundError):
        server.delete("Pod", "default", "p1", uid=uid(pod))
    [event] = drain(pod_watch)
    assert event.type == "DELETED"
    assert event.object["metadata"]["uid"] == uid(pod)
    assert int(event.resource_version) == int(rv(pod)) + 1 == int(server.resource_version)


def test_delete_rejects_bad_grace_period(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError):
        server.delete("Pod", "default", "p1", uid=uid(pod), grace_period_seconds=-1)
    assert server.get_object("Pod", "default", "p1") is not None


def test_recreated_pod_is_a_different_object(
    server: InMemoryApiServer, pod: dict[str, Any]
) -> None:
    server.delete("Pod", "default", "p1", uid=uid(pod))
    again = server.create(make_pod("p1"))
    assert uid(again) != uid(pod)
    with pytest.raises(ConflictError):
        server.bind("default", "p1", uid=uid(pod), node="n1")


# ----------------------------------------------------------------------------- admin writes


def test_update_replaces_keeps_uid_and_checks_rv(
    server: InMemoryApiServer, pod: dict[str, Any]
) -> None:
    new = dict(pod)
    new["status"] = {"phase": "Running"}
    updated = server.update(new)
    assert updated["status"] == {"phase": "Running"}
    assert uid(updated) == uid(pod)
    with pytest.raises(ConflictError):
        server.update(new)  # stale resourceVersion
    no_rv = {"kind": "Pod", "metadata": {"name": "p1"}, "spec": {}, "status": {"phase": "Done"}}
    replaced = server.update(no_rv)
    assert uid(replaced) == uid(pod) and replaced["spec"] == {}
    same = server.update(no_rv)
    assert rv(same) == rv(replaced), "a no-op update writes nothing"
    with pytest.raises(ConflictError):
        server.update({**no_rv, "metadata": {"name": "p1", "uid": "other"}})
    with pytest.raises(NotFoundError):
        server.update({"kind": "Pod", "metadata": {"name": "nope"}})


def test_mark_terminating_and_remove(
    server: InMemoryApiServer, pod: dict[str, Any], pod_watch: Watch
) -> None:
    marked = server.mark_terminating("Pod", "default", "p1")
    assert marked["metadata"]["deletionTimestamp"]
    assert server.mark_terminating("Pod", "default", "p1") == marked
    last = server.remove("Pod", "default", "p1")
    assert [e.type for e in drain(pod_watch)] == ["MODIFIED", "DELETED"]
    assert last["metadata"]["deletionTimestamp"]
    with pytest.raises(NotFoundError):
        server.mark_terminating("Pod", "default", "p1")
    assert server.request_log == []


def test_finalizers_hold_a_deletion_until_an_update_removes_them(
    server: InMemoryApiServer, pod_watch: Watch
) -> None:
    """The in-process API as over HTTP (tests/realapi/test_real_requests.py): a held deletion
    marks the pod, an update cannot move the marks, and dropping the last finalizer removes
    it."""
    body = make_pod("p1")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    created = server.create(body)
    server.delete("Pod", "default", "p1", uid=uid(created), grace_period_seconds=0)
    marked = server.get_object("Pod", "default", "p1")
    assert marked is not None and marked["metadata"]["deletionGracePeriodSeconds"] == 0
    stamp = marked["metadata"]["deletionTimestamp"]
    moved = {**marked, "metadata": {**marked["metadata"], "deletionTimestamp": None}}
    del moved["metadata"]["resourceVersion"]
    server.update(moved)  # nothing else changed: the marks stay, no write
    kept = server.get_object("Pod", "default", "p1")
    assert kept is not None and kept["metadata"]["deletionTimestamp"] == stamp
    server.update({**kept, "metadata": {**kept["metadata"], "finalizers": []}})
    assert server.get_object("Pod", "default", "p1") is None
    assert [e.type for e in drain(pod_watch)] == ["ADDED", "MODIFIED", "DELETED"]


# ----------------------------------------------------------------------------- builders


def test_make_pod_shape() -> None:
    pod = make_pod(
        "web",
        "prod",
        cpu_m=1500,
        mem_mi=256,
        priority=10,
        node_selector={"zone": "a"},
        uid="u1",
        claims=["gpu"],
    )
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    assert pod["metadata"] == {"name": "web", "namespace": "prod", "uid": "u1"}
    container = pod["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "1500m", "memory": "256Mi"}
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert pod["spec"]["priority"] == 10
    assert pod["spec"]["nodeSelector"] == {"zone": "a"}
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "gpu"}]
    assert "nodeName" not in pod["spec"]
    assert make_pod("a")["metadata"]["uid"] != make_pod("a")["metadata"]["uid"]


def test_make_node_and_claim_shape() -> None:
    node = make_node("n1", 4000, 8192, labels={"zone": "a"})
    assert node["status"]["allocatable"] == {"cpu": "4", "memory": "8192Mi", "pods": "110"}
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "n1", "zone": "a"}
    claim = make_claim("c1", uid="cu")
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["metadata"] == {"name": "c1", "namespace": "default", "uid": "cu"}
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1


@pytest.mark.parametrize(
    "build",
    [
        lambda: make_pod("Bad"),
        lambda: make_pod("ok", namespace="a.b"),
        lambda: make_pod("ok", cpu_m=-1),
        lambda: make_pod("ok", claims="abc"),
        lambda: make_pod("ok", uid="bad uid"),
        lambda: make_node("n", 1000, True),
        lambda: make_claim("c", uid=""),
    ],
)
def test_builders_reject_bad_input(build: Any) -> None:
    with pytest.raises(InvalidObjectError):
        build()


# ----------------------------------------------------------------------------- front-end hooks


def test_requests_without_uid_precondition(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    out = server.patch_status(
        "Pod", "default", "p1", {"status": {"phase": "Running"}}, uid=None, resource_version=None
    )
    assert out["status"]["phase"] == "Running"
    server.bind("default", "p1", uid=None, node="n1")
    server.delete("Pod", "default", "p1", uid=None)
    assert server.get_object("Pod", "default", "p1") is None
    assert {r.uid for r in server.request_log} == {""}
    with pytest.raises(InvalidRequestError):
        server.delete("Pod", "default", "p1", uid=123)  # type: ignore[arg-type]


def test_wait_for_request_returns_the_first_matching_record_or_times_out() -> None:
    server = InMemoryApiServer()
    server.create(make_pod("a"))
    server.script("get", "429", name="a")
    refused: list[BaseException] = []

    def get() -> None:
        try:
            server.get("Pod", "default", "a")
        except TooManyRequestsError as exc:
            refused.append(exc)

    worker = threading.Thread(target=get)
    worker.start()
    record = server.wait_for_request("get", name="a", timeout=10)
    worker.join(10)
    assert (record.op, record.name, record.outcome) == ("get", "a", "429")
    assert len(refused) == 1
    with pytest.raises(TimeoutError, match="no request get of b"):
        server.wait_for_request("get", name="b", timeout=0.05)
