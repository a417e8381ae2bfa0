"""JSON object helpers of the in-memory apiserver, and builders for test objects.

``to_json`` turns caller input into plain owned JSON (dicts, lists, scalars) and rejects anything
else; ``clone`` is a fast deep copy of such JSON. ``make_pod``, ``make_podgroup``,
``make_condition``, ``make_node``, ``make_claim`` and ``make_pdb`` build objects in the shape the
real apiserver serves (``spec.containers[].resources.requests``, ``spec.priority``,
``spec.resourceClaims`` ...).

Pure module: no threads, no pykka, no kubernetes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar, cast

from kdispatch.actors.model.errors import InvalidObjectError
from kdispatch.actors.model.kinds import BUILTIN_KINDS
from kdispatch.actors.model.objects import (
    POD_GROUP,
    RESOURCE_CLAIM,
    check_json,
    check_label,
    check_subdomain,
    check_uid,
)

CLUSTER_SCOPED_KINDS: frozenset[str] = frozenset(
    info.kind for info in BUILTIN_KINDS if not info.namespaced
)
"""Built-in kinds stored under namespace ``""`` (from the kind table)."""

API_VERSIONS: Mapping[str, str] = MappingProxyType(
    {info.kind: info.api_version for info in BUILTIN_KINDS}
)
"""``apiVersion`` of the built-in kinds (from the kind table)."""


# Type tuples built once: ``isinstance(v, A | B)`` builds a union object on every call.
_CONTAINERS = (dict, list)


def to_json(value: object, path: str = "object") -> Any:
    """A fresh JSON copy of ``value`` (mappings → dict, lists/tuples → list). Raises
    :class:`InvalidObjectError` naming the path of anything that is not JSON
    (:func:`kdispatch.actors.model.objects.check_json`)."""
    return check_json(value, path)


J = TypeVar("J")


def clone(value: J) -> J:
    """Deep copy of plain JSON (dicts, lists, scalars); several times faster than
    ``copy.deepcopy`` for this shape."""
    return cast(J, _clone(value))


def _clone(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clone(v) if isinstance(v, _CONTAINERS) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) if isinstance(v, _CONTAINERS) else v for v in value]
    return value


def _check_amount(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidObjectError(f"{name} must be an int >= 0, got {value!r}")
    return value


def _uid(uid: str | None) -> str:
    return str(uuid.uuid4()) if uid is None else check_uid(uid)


def cpu_quantity(milli: int) -> str:
    """``1500`` → ``"1500m"``, ``2000`` → ``"2"``."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _labels(labels: Mapping[str, str] | None, what: str) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise InvalidObjectError(f"{what} must map strings to strings, got {labels!r}")
    return dict(labels)


def _metadata(
    name: str,
    namespace: str,
    uid: str | None,
    labels: Mapping[str, str] | None,
    rv: int | str | None,
) -> dict[str, Any]:
    """An object's ``metadata``: a generated UID when ``uid`` is None, ``labels`` and the
    resourceVersion ``rv`` when given."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": _uid(uid)}
    checked = _labels(labels, "labels")
    if checked:
        meta["labels"] = checked
    if rv is not None:
        meta["resourceVersion"] = str(rv)
    return meta


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    cpu_m: int = 100,
    mem_mi: int = 128,
    priority: int = 0,
    node_selector: Mapping[str, str] | None = None,
    uid: str | None = None,
    claims: Iterable[str] = (),
    labels: Mapping[str, str] | None = None,
    rv: int | str | None = None,
    node: str | None = None,
    phase: str = "Pending",
    conditions: Iterable[Mapping[str, Any]] | None = None,
    nominated_node_name: str | None = None,
    terminating: bool = False,
    pod_group: str | None = None,
) -> dict[str, Any]:
    """A Pod (labelled ``labels``) with one container requesting ``cpu_m`` millicores and
    ``mem_mi`` MiB: unbound and pending unless ``node`` (``spec.nodeName``) or ``phase`` say
    otherwise. ``claims`` names ResourceClaims (same namespace) the pod references, both in
    ``spec.resourceClaims`` and in the container's ``resources.claims``. A UID is generated when
    ``uid`` is None. As a server would have served it: ``rv`` (``metadata.resourceVersion``),
    ``conditions`` (copied into ``status.conditions``), ``nominated_node_name``
    (``status.nominatedNodeName``) and ``terminating`` (a ``metadata.deletionTimestamp``).
    ``pod_group`` names the PodGroup (same namespace) the pod belongs to:
    ``spec.schedulingGroup.podGroupName`` (Kubernetes 1.37, feature gate ``GenericWorkload``)."""
    check_subdomain(name)
    check_label(namespace)
    _check_amount("cpu_m", cpu_m)
    _check_amount("mem_mi", mem_mi)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidObjectError(f"priority must be an int, got {priority!r}")
    if isinstance(claims, str):
        raise InvalidObjectError("claims must be a collection of claim names, not a string")
    claim_names = [check_subdomain(c, "claim name") for c in claims]
    resources: dict[str, Any] = {
        "requests": {"cpu": cpu_quantity(cpu_m), "memory": f"{mem_mi}Mi"},
    }
    if claim_names:
        resources["claims"] = [{"name": c} for c in claim_names]
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "priority": priority,
        "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}
        ],
    }
    selector = _labels(node_selector, "node_selector")
    if selector:
        spec["nodeSelector"] = selector
    if claim_names:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claim_names]
    if node is not None:
        spec["nodeName"] = check_subdomain(node, "node name")
    if pod_group is not None:
        spec["schedulingGroup"] = {"podGroupName": check_subdomain(pod_group, "pod_group")}
    meta = _metadata(name, namespace, uid, labels, rv)
    if terminating:
        meta["deletionTimestamp"] = TERMINATING_SINCE
    status: dict[str, Any] = {"phase": phase}
    if conditions is not None:
        status["conditions"] = [to_json(c, "conditions[]") for c in conditions]
    if nominated_node_name is not None:
        status["nominatedNodeName"] = nominated_node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


TERMINATING_SINCE = "2026-01-01T00:00:00Z"
"""The ``deletionTimestamp`` of a pod built with ``terminating=True``."""


SERVED_AT = "2026-01-01T00:00:00Z"
"""The ``lastTransitionTime`` :func:`make_podgroup` gives a condition that has none."""


def make_podgroup(
    name: str,
    namespace: str = "default",
    *,
    min_count: int | None = None,
    basic: bool = False,
    uid: str | None = None,
    rv: int | str | None = None,
    generation: int | None = None,
    conditions: Iterable[Mapping[str, Any]] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ``scheduling.k8s.io/v1beta1`` PodGroup (Kubernetes 1.37, feature gate
    ``GenericWorkload``): a gang of at least ``min_count`` pods
    (``spec.schedulingPolicy.gang.minCount``), or with ``basic=True`` a group whose pods are
    scheduled one by one (``basic: {}``; no ``min_count`` then). Pods join it with
    ``make_pod(..., pod_group=name)``. A UID is generated when ``uid`` is None. As a server
    would have served it: ``rv``, ``generation`` (``metadata.generation``, which kube-apiserver
    keeps as created and never bumps for PodGroups) and ``conditions`` (``status.conditions``;
    each gets ``lastTransitionTime`` :data:`SERVED_AT` and an empty ``message`` unless it has
    them)."""
    check_subdomain(name)
    check_label(namespace)
    if not isinstance(basic, bool):
        raise InvalidObjectError(f"basic must be a bool, got {basic!r}")
    if basic:
        if min_count is not None:
            raise InvalidObjectError("a basic PodGroup has no min_count")
        policy: dict[str, Any] = {"basic": {}}
    else:
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise InvalidObjectError(
                f"min_count must be an int >= 1 for a gang (or basic=True), got {min_count!r}"
            )
        policy = {"gang": {"minCount": min_count}}
    meta = _metadata(name, namespace, uid, labels, rv)
    if generation is not None:
        meta["generation"] = _check_amount("generation", generation)
    status: dict[str, Any] = {}
    if conditions is not None:
        status["conditions"] = [
            {"message": "", "lastTransitionTime": SERVED_AT, **to_json(c, "conditions[]")}
            for c in conditions
        ]
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": POD_GROUP,
        "metadata": meta,
        "spec": {"schedulingPolicy": policy, "disruptionMode": {"single": {}}, "priority": 0},
        "status": status,
    }


def make_condition(
    type_: str = "PodScheduled",
    status: str = "False",
    reason: str = "Unschedulable",
    message: str = "",
) -> dict[str, Any]:
    """A pod condition (``message`` only when given); by default the scheduler's
    ``PodScheduled=False/Unschedulable``."""
    out = {"type": type_, "status": status, "reason": reason}
    if message:
        out["message"] = message
    return out


def make_node(
    name: str, cpu_m: int, mem_mi: int, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Ready Node with ``cpu_m`` millicores and ``mem_mi`` MiB allocatable (110 pods), labelled
    ``kubernetes.io/hostname`` plus ``labels``."""
    check_subdomain(name, "node name")
    _check_amount("cpu_m", cpu_m)
    _check_amount("mem_mi", mem_mi)
    resources = {"cpu": cpu_quantity(cpu_m), "memory": f"{mem_mi}Mi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid(None),
            "labels": {"kubernetes.io/hostname": name, **_labels(labels, "labels")},
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def make_claim(name: str, namespace: str = "default", uid: str | None = None) -> dict[str, Any]:
    """An unallocated ``resource.k8s.io/v1`` ResourceClaim asking for one device of class
    ``gpu.example.com``. A UID is generated when ``uid`` is None."""
    check_subdomain(name)
    check_label(namespace)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": RESOURCE_CLAIM,
        "metadata": {"name": name, "namespace": namespace, "uid": _uid(uid)},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "device",
                        "exactly": {
                            "deviceClassName": "gpu.example.com",
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        },
        "status": {},
    }


def make_pdb(
    name: str,
    namespace: str = "default",
    *,
    match_labels: Mapping[str, str],
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
) -> dict[str, Any]:
    """A ``policy/v1`` PodDisruptionBudget selecting pods by ``match_labels``, with
    ``min_available`` or ``max_unavailable`` (an int or a percentage such as ``"50%"``)."""
    check_subdomain(name)
    check_label(namespace)
    if (min_available is None) == (max_unavailable is None):
        raise InvalidObjectError("give exactly one of min_available and max_unavailable")
    for label, value in (("min_available", min_available), ("max_unavailable", max_unavailable)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | str)
            or (isinstance(value, int) and value < 0)
        ):
            raise InvalidObjectError(f"{label} must be an int >= 0 or a percentage")
    spec: dict[str, Any] = {"selector": {"matchLabels": _labels(match_labels, "match_labels")}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    else:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
