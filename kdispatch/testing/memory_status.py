"""What a ``status`` write may hold, and how a pod's status is served, in the in-memory
apiserver.

* :func:`parse_status_patch`: the body of a ``…/status`` patch (``status`` and the optimistic
  concurrency fields of ``metadata``, nothing else).
* :func:`validate_status`: the status conditions (a list, each with a string ``type``, no
  type twice), for every kind.
* :func:`validate_claim_status`: kube-apiserver's ResourceClaim status rules, behind the
  server's ``strict_claims``.
* :func:`served_pod_status`: a pod's status pruned to the fields of a core/v1 ``PodStatus``
  (:data:`POD_STATUS_FIELDS`, :data:`POD_STATUS_ELEMENT_FIELDS`), as kube-apiserver decodes
  and serves it.

Pure module: no threads, no locks; the in-memory apiserver calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdispatch.actors.model.conditions import OMITTED_WHEN_EMPTY
from kdispatch.actors.model.errors import InvalidObjectError, InvalidRequestError

from .memory_objects import to_json

Json = dict[str, Any]


def parse_status_patch(
    patch: object, patch_type: object
) -> tuple[Json | None, str | None, str | None]:
    """(status patch, uid precondition, resourceVersion precondition) of a patch body."""
    if patch_type not in ("strategic", "merge"):
        raise InvalidRequestError(f"unsupported patch type {patch_type!r}")
    if not isinstance(patch, Mapping):
        raise InvalidRequestError(f"patch must be a JSON object, got {type(patch).__name__}")
    try:
        body = to_json(patch, "patch")
    except InvalidObjectError as err:
        raise InvalidRequestError(str(err)) from None
    extra = set(body) - {"status", "metadata"}
    if extra:
        raise InvalidRequestError(f"only status may be patched, got {sorted(extra)}")
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict) or set(meta) - {"uid", "resourceVersion"}:
        raise InvalidRequestError("patch metadata may only hold uid and resourceVersion")
    status = body.get("status")
    if status is not None and not isinstance(status, dict):
        raise InvalidRequestError("patch status must be a JSON object")
    return status, meta.get("uid"), meta.get("resourceVersion")


def validate_status(status: Json) -> None:
    """``status.conditions``, when present, is a list of objects each with a string ``type``,
    no type twice (``InvalidRequestError``)."""
    conditions = status.get("conditions")
    if conditions is None:
        return
    if not isinstance(conditions, list):
        raise InvalidRequestError("status.conditions must be a list")
    seen: set[str] = set()
    for cond in conditions:
        ctype = cond.get("type") if isinstance(cond, dict) else None
        if not isinstance(ctype, str) or not ctype:
            raise InvalidRequestError("every status condition needs a string type")
        if ctype in seen:
            raise InvalidRequestError(f"duplicate status condition type {ctype!r}")
        seen.add(ctype)


def validate_claim_status(name: str, old: Json, new: Json) -> None:
    """kube-apiserver's ResourceClaim status validation (resource.k8s.io/v1) for what a
    scheduler writes: ``reservedFor`` needs an allocation (so a claim cannot be deallocated
    while reserved), and an allocation cannot be replaced by another one."""
    prefix = f'ResourceClaim.resource.k8s.io "{name}" is invalid: status.'
    if new.get("reservedFor") and not new.get("allocation"):
        raise InvalidRequestError(
            prefix + "reservedFor: Forbidden: may not be specified when `allocated` is not set"
        )
    before, after = old.get("allocation"), new.get("allocation")
    if before and after and before != after:
        # (the server prints the value as null)
        raise InvalidRequestError(
            prefix + "allocation: Invalid value: null: field cannot be modified once set"
        )


POD_STATUS_FIELDS = frozenset(
    {
        "observedGeneration",
        "phase",
        "conditions",
        "message",
        "reason",
        "nominatedNodeName",
        "hostIP",
        "hostIPs",
        "podIP",
        "podIPs",
        "startTime",
        "initContainerStatuses",
        "containerStatuses",
        "qosClass",
        "ephemeralContainerStatuses",
        "resize",
        "resourceClaimStatuses",
        "extendedResourceClaimStatus",
        "allocatedResources",
        "resources",
        "nodeAllocatableResourceClaimStatuses",
        "volumeHealth",
    }
)
"""The fields of a core/v1 ``PodStatus`` (Kubernetes v1.37). kube-apiserver decodes a pod's
status into that type, so it drops any other field a status patch sets (and answers with a
``Warning: 299 - "unknown field \"status.…\""`` header)."""

POD_STATUS_ELEMENT_FIELDS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "conditions",
        frozenset(
            {
                "type",
                "observedGeneration",
                "status",
                "lastProbeTime",
                "lastTransitionTime",
                "reason",
                "message",
            }
        ),
    ),
    ("podIPs", frozenset({"ip"})),
    ("hostIPs", frozenset({"ip"})),
    ("resourceClaimStatuses", frozenset({"name", "resourceClaimName"})),
)
"""The lists of a ``PodStatus`` whose elements are pruned too, with their type's fields
(``PodCondition``, ``PodIP``, ``HostIP``, ``PodResourceClaimStatus``). The elements of the
other lists (``containerStatuses`` ...) and the objects under ``status`` keep what they are
given."""


_NO_FIELDS: frozenset[str] = frozenset()


def served_pod_status(status: Json) -> Json:
    """``status`` as kube-apiserver serves a core/v1 ``PodStatus``: the fields that type lacks
    dropped (:data:`POD_STATUS_FIELDS`, :data:`POD_STATUS_ELEMENT_FIELDS`), and its empty
    strings (``nominatedNodeName: ""``, ...) and each condition's empty ``reason`` and
    ``message`` left out (the fields are ``omitempty``). Pure; returns ``status`` itself when
    it is served as it is."""
    if "" in status.values() or not POD_STATUS_FIELDS.issuperset(status):
        status = {k: v for k, v in status.items() if v != "" and k in POD_STATUS_FIELDS}
    for field, known in POD_STATUS_ELEMENT_FIELDS:
        items = status.get(field)
        if not items or not isinstance(items, list):
            continue
        omitted = OMITTED_WHEN_EMPTY if field == "conditions" else _NO_FIELDS
        for item in items:
            if isinstance(item, dict) and (
                not known.issuperset(item) or (omitted and "" in item.values())
            ):
                break
        else:
            continue  # every element served as it is
        kept = [
            {k: v for k, v in item.items() if k in known and not (v == "" and k in omitted)}
            if isinstance(item, dict)
            else item
            for item in items
        ]
        status = {**status, field: kept}
    return status
