"""Object builders and small helpers shared by the conformance tests (both targets)."""

from __future__ import annotations

import json
from typing import Any

from tests.realapi.cluster import Admin

DRIVER = "gpu.example.com"


def pod_body(
    name: str,
    *,
    cpu: str = "100m",
    priority_class: str | None = None,
    scheduler: str | None = None,
    gates: tuple[str, ...] = (),
    claims: tuple[str, ...] = (),
    node: str | None = None,
) -> dict[str, Any]:
    """A Pending pod as a user would create it (no uid, no status: the server sets them);
    with ``node``, one already running there (``spec.nodeName`` set at creation)."""
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    if claims:
        resources["claims"] = [{"name": c} for c in claims]
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}
        ]
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if scheduler:
        spec["schedulerName"] = scheduler
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def claim_body(name: str) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaim asking for one device of class ``DRIVER``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "device",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        },
    }


def allocation(node: str, device: str = "gpu-0") -> dict[str, Any]:
    """A v1 allocation of ``claim_body``'s request on ``node``, as a DRA scheduler writes it."""
    return {
        "devices": {
            "results": [{"request": "device", "driver": DRIVER, "pool": node, "device": device}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def consumer(pod: dict[str, Any]) -> dict[str, str]:
    """The ``reservedFor`` entry for ``pod``."""
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}


def new_pod(admin: Admin, ns: str, name: str, **kw: Any) -> dict[str, Any]:
    """Create a pod; returns the server's object (its uid and resourceVersion)."""
    obj = admin.create(admin.pod_path(ns), pod_body(name, **kw))
    obj.setdefault("kind", "Pod")
    return obj


def new_claim(admin: Admin, ns: str, name: str) -> dict[str, Any]:
    obj = admin.create(admin.claim_path(ns), claim_body(name))
    obj.setdefault("kind", "ResourceClaim")
    return obj


def remove_pod(admin: Admin, ns: str, name: str) -> None:
    """Finish a deletion the way a kubelet would: delete with grace period 0."""
    reply = admin.request("DELETE", admin.pod_path(ns, name), {"gracePeriodSeconds": 0})
    assert reply.status in (200, 404), reply


def uid_rv(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]


def assert_checks(checks: dict[str, bool], figures: str) -> None:
    """Print ``figures`` (shown with -s or -rP), then fail naming every check that is False."""
    print(figures)
    failed = [name for name, ok in checks.items() if not ok]
    assert not failed, f"{failed}: {figures}"


def watch_once(admin: Admin, path: str, rv: str, **query: str) -> list[dict[str, Any]]:
    """The events of a 2 s watch from ``rv`` (the raw JSON lines); ``query``: more
    parameters (``allowWatchBookmarks="true"``)."""
    reply = admin.request(
        "GET",
        path,
        query={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "2", **query},
    )
    assert reply.status == 200, reply
    raw = reply.body.get("_raw")
    if raw is None:  # no event, or exactly one: the body parsed as one JSON object
        return [reply.body] if reply.body else []
    return [json.loads(line) for line in str(raw).splitlines() if line.strip()]
