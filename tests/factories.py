"""Small builders of Kubernetes-shaped JSON objects for tests."""

from __future__ import annotations

from typing import Any

from kdispatch.actors.call_types import BUILTIN_CALL_TYPES
from kdispatch.actors.calls import CallTypeRegistry
from kdispatch.actors.kinds import KindTable


def pod(
    name: str = "p",
    uid: str | None = None,
    rv: int = 1,
    *,
    namespace: str = "default",
    node: str | None = None,
    conditions: tuple[dict[str, Any], ...] = (),
    nnn: str | None = None,
    terminating: bool = False,
) -> dict[str, Any]:
    """A Pod dict. ``uid`` defaults to ``uid-<name>``."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}",
        "resourceVersion": str(rv),
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": "Pending", "conditions": [dict(c) for c in conditions]}
    if nnn:
        status["nominatedNodeName"] = nnn
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def cond(
    type_: str = "PodScheduled",
    status: str = "False",
    reason: str = "Unschedulable",
    message: str = "",
) -> dict[str, Any]:
    """A pod condition."""
    out = {"type": type_, "status": status, "reason": reason}
    if message:
        out["message"] = message
    return out


def call_types_with(*kinds: str) -> CallTypeRegistry:
    """The built-in call types, checked against a fresh kind table that also holds ``kinds``
    (test custom resources in the ``example.io/v1`` group), so registering a user call type
    for them leaves the process-wide kind table alone."""
    table = KindTable()
    for kind in kinds:
        table.register(kind, "example.io", "v1", f"{kind.lower()}s")
    return CallTypeRegistry(BUILTIN_CALL_TYPES, kinds=table)
