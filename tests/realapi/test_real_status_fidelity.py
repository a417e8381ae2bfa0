"""Pod status patches, bindings and evictions where the emulator once answered otherwise than
kube-apiserver v1.37.2 (see docs/apiserver-differences.md): each test runs on both targets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.realapi.cluster import Admin

pytestmark = pytest.mark.timeout(60)

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _pod(admin: Admin, ns: str, name: str, **labels: str) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    return admin.create(admin.pod_path(ns), body)


def _status(admin: Admin, ns: str, name: str, body: object, ctype: str = SMP) -> dict[str, Any]:
    return admin.ok("PATCH", admin.pod_path(ns, name) + "/status", body, content_type=ctype)


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (SMP, {}),
        ("application/merge-patch+json", {}),
        (SMP, {"metadata": {"resourceVersion": None}}),
    ],
)
def test_a_status_patch_without_status_leaves_it(
    admin: Admin, ns: str, content_type: str, body: dict[str, Any]
) -> None:
    _pod(admin, ns, "p1")
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    _status(admin, ns, "p1", {"status": ready})
    status = _status(admin, ns, "p1", body, content_type)["status"]
    assert status["phase"] == "Running"
    assert [c["type"] for c in status["conditions"]] == ["Ready"]


def test_set_element_order_orders_the_conditions(admin: Admin, ns: str) -> None:
    _pod(admin, ns, "p1")
    conditions = [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]
    _status(admin, ns, "p1", {"status": {"conditions": conditions}})
    reordered = _status(
        admin,
        ns,
        "p1",
        {
            "status": {
                "$setElementOrder/conditions": [{"type": "B"}, {"type": "A"}],
                "conditions": [{"type": "A", "status": "False"}],
            }
        },
    )
    assert [(c["type"], c["status"]) for c in reordered["status"]["conditions"]] == [
        ("B", "False"),
        ("A", "False"),
    ]
    # a new condition named first goes first; one not named keeps its place
    added = _status(
        admin,
        ns,
        "p1",
        {
            "status": {
                "$setElementOrder/conditions": [{"type": "C"}, {"type": "A"}],
                "conditions": [{"type": "C", "status": "True"}],
            }
        },
    )
    assert [c["type"] for c in added["status"]["conditions"]] == ["C", "B", "A"]


@pytest.mark.parametrize("clear", ["", None])
def test_a_cleared_nominated_node_name_is_left_out(admin: Admin, ns: str, clear: Any) -> None:
    _pod(admin, ns, "p1")
    assert (
        _status(admin, ns, "p1", {"status": {"nominatedNodeName": "n1"}})["status"][
            "nominatedNodeName"
        ]
        == "n1"
    )
    _status(admin, ns, "p1", {"status": {"nominatedNodeName": clear}})
    assert "nominatedNodeName" not in admin.get_pod(ns, "p1")["status"]


def test_a_binding_for_another_name_is_a_bad_request(admin: Admin, ns: str) -> None:
    _pod(admin, ns, "p1")
    reply = admin.request(
        "POST",
        admin.pod_path(ns, "p1") + "/binding",
        {"metadata": {"name": "other"}, "target": {"kind": "Node", "name": "n1"}},
    )
    assert (reply.status, reply.reason) == (400, "BadRequest")
    assert reply.body["message"] == "name in URL does not match name in Binding object"
    assert not admin.get_pod(ns, "p1")["spec"].get("nodeName")
    reply = admin.request(
        "POST",
        admin.pod_path(ns, "p1") + "/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}},
    )
    assert (reply.status, reply.reason) == (400, "BadRequest")
    assert reply.body["message"] == "name in URL does not match name in Eviction object"


def test_a_pending_pod_is_evicted_whatever_its_budget(admin: Admin, ns: str) -> None:
    """Upstream's ``canIgnorePDB``: a Pending pod (bound, Ready, but not started) is evicted
    although its PodDisruptionBudget allows no disruption; a Running one is refused."""
    for name in ("w0", "w1"):
        _pod(admin, ns, name, app="web")
        admin.ok(
            "POST",
            admin.pod_path(ns, name) + "/binding",
            {"metadata": {"name": name}, "target": {"kind": "Node", "name": "n1"}},
        )
        _status(admin, ns, name, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    _status(admin, ns, "w1", {"status": {"phase": "Running"}})
    pdbs = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    admin.create(
        pdbs,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "pdb"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    # what the disruption controller (in neither) would report
    admin.ok(
        "PATCH",
        f"{pdbs}/pdb/status",
        {
            "status": {
                "observedGeneration": 1,
                "disruptionsAllowed": 0,
                "currentHealthy": 2,
                "desiredHealthy": 2,
                "expectedPods": 2,
            }
        },
        content_type="application/merge-patch+json",
    )

    def evict(name: str) -> int:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name},
            "deleteOptions": {"gracePeriodSeconds": 0},
        }
        return admin.request("POST", admin.pod_path(ns, name) + "/eviction", body).status

    assert evict("w1") == 429
    assert evict("w0") == 201


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (SMP, {"status": {"phase": "Running", "bogus": {"a": 1}}}),
        (MERGE, {"status": {"phase": "Running", "bogus": {"a": 1}}}),
        (
            JSON_PATCH,
            [
                {"op": "add", "path": "/status/phase", "value": "Running"},
                {"op": "add", "path": "/status/bogus", "value": {"a": 1}},
            ],
        ),
    ],
    ids=["strategic", "merge", "json"],
)
def test_an_unknown_status_field_is_dropped(
    admin: Admin, ns: str, content_type: str, body: object
) -> None:
    """A pod's status is a typed object: a field its type lacks is not stored (the real server
    says so in a ``Warning`` header), and the known ones next to it are."""
    _pod(admin, ns, "p1")
    status = _status(admin, ns, "p1", body, content_type)["status"]
    assert status["phase"] == "Running"
    assert "bogus" not in status
    assert "bogus" not in admin.get_pod(ns, "p1")["status"]


def test_unknown_fields_in_conditions_and_pod_ips_are_dropped(admin: Admin, ns: str) -> None:
    _pod(admin, ns, "p1")
    body = {
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "R", "bogus": 1}],
            "podIP": "10.0.0.1",
            "podIPs": [{"ip": "10.0.0.1", "bogus": 1}],
            "allocatedResources": {"cpu": "1"},
        }
    }
    status = _status(admin, ns, "p1", body)["status"]
    [ready] = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "R")
    assert "bogus" not in ready
    assert status["podIPs"] == [{"ip": "10.0.0.1"}]
    assert status["allocatedResources"] == {"cpu": "1"}


@pytest.mark.parametrize(
    "directive",
    [
        {"$deleteFromPrimitiveList/bogus": ["a"]},  # a field the status lacks
        {"$deleteFromPrimitiveList/phase": ["Running"]},  # not a list
        {"$deleteFromPrimitiveList/conditions": "Ready"},  # values that are not a list
    ],
)
def test_a_delete_from_primitive_list_that_finds_no_list_changes_nothing(
    admin: Admin, ns: str, directive: dict[str, Any]
) -> None:
    _pod(admin, ns, "p1")
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    _status(admin, ns, "p1", {"status": ready})
    status = _status(admin, ns, "p1", {"status": directive})["status"]
    assert status["phase"] == "Running"
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Ready", "True")]


FINALIZERS = ["example.com/a", "example.com/b", "example.com/c"]


@pytest.fixture
def held(admin: Admin, ns: str) -> Iterator[str]:
    """Pod ``p1`` with :data:`FINALIZERS`, which are removed afterwards (the namespace's
    cleanup could not delete it otherwise)."""
    _pod(admin, ns, "p1")
    holding = {"metadata": {"finalizers": FINALIZERS}}
    admin.ok("PATCH", admin.pod_path(ns, "p1"), holding, content_type=MERGE)
    yield "p1"
    released = {"metadata": {"finalizers": None}}
    admin.ok("PATCH", admin.pod_path(ns, "p1"), released, content_type=MERGE)


@pytest.mark.parametrize(
    ("values", "left"),
    [
        (["example.com/b", "example.com/none"], ["example.com/a", "example.com/c"]),
        (FINALIZERS, None),
        ([], FINALIZERS),
        ("example.com/b", FINALIZERS),  # not a list: nothing
        (None, None),  # null: the whole field, as for any key
    ],
    ids=["some", "all", "none", "not-a-list", "null"],
)
def test_delete_from_primitive_list_takes_finalizers_out(
    admin: Admin, ns: str, held: str, values: object, left: list[str] | None
) -> None:
    body = {"metadata": {"$deleteFromPrimitiveList/finalizers": values}}
    patched = admin.ok("PATCH", admin.pod_path(ns, held), body, content_type=SMP)
    assert patched["metadata"].get("finalizers") == left
    assert admin.get_pod(ns, held)["metadata"].get("finalizers") == left
