"""Pod status patches, bindings and evictions where the emulator once answered otherwise than
kube-apiserver v1.37.2 (see docs/apiserver-differences.md): each test runs on both targets."""

from __future__ import annotations

from typing import Any

import pytest

from tests.realapi.cluster import Admin

pytestmark = pytest.mark.timeout(60)

SMP = "application/strategic-merge-patch+json"


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
