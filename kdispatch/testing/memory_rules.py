"""The rules of the in-memory apiserver's verbs, as pure functions over stored snapshots.

* Naming: :func:`plural` (the resource in a NotFound or conflict message), :func:`qualified`
  (the kind in a precondition conflict or a 422), :func:`generated_name`
  (``metadata.generateName``); :func:`check_str` and :func:`logged_uid` for the arguments.
* Preconditions: :func:`check_uid_precondition` and :func:`check_rv_precondition` (a patch's,
  an update's, a binding's wording), :func:`check_delete_preconditions` (a deletion's and an
  eviction's wording, as kube-apiserver's ``BeforeDelete``).
* Per verb: :func:`bound` (the binding subresource), :func:`patch_body` and
  :func:`patched_object` (a patch of a whole object or of its ``status``),
  :func:`updated_object` (an update), :func:`create_body` (a create request's body).

What a status may hold and how a pod's is served: :mod:`kdispatch.testing.memory_status`.
The verbs that apply these rules to the store: :mod:`kdispatch.testing.memory_verbs`.

Pure module: no threads, no locks. The verbs call it with the server's lock held; the argument
checks (:func:`check_str`, :func:`logged_uid`, :func:`create_body`) also run on the calling
thread before a request is served.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kdispatch.actors.model.errors import (
    ConflictError,
    InvalidObjectError,
    InvalidRequestError,
)
from kdispatch.actors.model.kinds import KindTable
from kdispatch.actors.model.objects import POD, POD_GROUP, RESOURCE_CLAIM

from . import memory_events
from .memory_deletion import keep_deletion_marks
from .memory_objects import to_json
from .memory_patch import check_patch_flavour, keep_identity, patch_object
from .memory_podgroup import admit_podgroup
from .memory_status import served_pod_status, validate_claim_status, validate_status

Json = dict[str, Any]


# ================================================================ naming


def now() -> str:
    """The current time as a stored timestamp (``2026-01-01T00:00:00Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def plural(kind: str) -> str:
    """The resource of ``kind`` as a NotFound or conflict message names it (``pods``)."""
    return kind.lower() + "s"


def qualified(kinds: KindTable, kind: str) -> str:
    """``Pod``, ``ResourceClaim.resource.k8s.io``: how kube-apiserver names a kind in a
    precondition conflict or a 422 message."""
    info = kinds.get(kind)
    return f"{kind}.{info.group}" if info is not None and info.group else kind


def check_str(what: str, value: object) -> str:
    """``value``, which must be a string (``InvalidRequestError`` otherwise)."""
    if not isinstance(value, str):
        raise InvalidRequestError(f"{what} must be a string, got {value!r}")
    return value


def logged_uid(uid: object) -> str:
    """A UID precondition as logged: ``""`` for none. Rejects non-strings."""
    if uid is None:
        return ""
    return check_str("uid", uid)


_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The characters of a generated name's suffix (apimachinery's ``util/rand``)."""


def generated_name(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` named as kube-apiserver names an object created with ``metadata.generateName``
    and no name: the prefix (cut to 58 characters) and five random characters."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping) or meta.get("name"):
        return obj
    prefix = meta.get("generateName")
    if not isinstance(prefix, str) or not prefix:
        return obj
    suffix = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
    return {**obj, "metadata": {**meta, "name": prefix[:58] + suffix}}


# ================================================================ preconditions


def check_uid_precondition(cur: Json, uid: object) -> None:
    """A UID precondition of a patch, an update or a binding (``ConflictError``)."""
    actual = cur["metadata"].get("uid")
    if uid != actual:
        raise ConflictError(
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
        )


def check_rv_precondition(cur: Json, rv: object) -> None:
    """A resourceVersion precondition of a patch or an update (``ConflictError``)."""
    if rv != cur["metadata"].get("resourceVersion"):
        raise ConflictError(
            f"Operation cannot be fulfilled on {plural(cur['kind'])} "
            f'"{cur["metadata"]["name"]}": the object has been modified; please apply your '
            "changes to the latest version and try again"
        )


def check_delete_preconditions(
    cur: Json, uid: str | None, resource_version: str | None, kinds: KindTable
) -> None:
    """A deletion's (or an eviction's) ``preconditions``."""
    if uid is not None and uid != cur["metadata"].get("uid"):
        raise _delete_conflict(
            cur, kinds, "UID", uid, cur["metadata"].get("uid"), why="deleted and then recreated"
        )
    rv = cur["metadata"].get("resourceVersion")
    if resource_version is not None and resource_version != rv:
        raise _delete_conflict(cur, kinds, "ResourceVersion", resource_version, rv, why="modified")


def _delete_conflict(
    cur: Json, kinds: KindTable, field: str, expected: object, actual: object, *, why: str
) -> ConflictError:
    """A deletion's failed precondition, worded as kube-apiserver's ``BeforeDelete`` words
    it: on the kind (``Pod``, ``ResourceClaim.resource.k8s.io``), not the resource."""
    return ConflictError(
        f"Operation cannot be fulfilled on {qualified(kinds, cur['kind'])} "
        f'"{cur["metadata"]["name"]}": the '
        f"{field} in the precondition ({expected}) does not match the {field} in record "
        f"({actual}). The object might have been {why}"
    )


# ================================================================ per verb


def bound(pod: Json, node: str) -> Json:
    """``pod`` with ``spec.nodeName = node`` and the PodScheduled condition set to True
    (replacing any previous PodScheduled entry, as the binding subresource does).
    ``ConflictError`` for a pod that is bound, being deleted or still has
    ``spec.schedulingGates``, worded as kube-apiserver's."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec", {})
    already = spec.get("nodeName")
    if already:
        raise ConflictError(
            f'Operation cannot be fulfilled on pods/binding "{name}": '
            f'pod {name} is already assigned to node "{already}"'
        )
    if pod["metadata"].get("deletionTimestamp"):
        raise ConflictError(
            f'Operation cannot be fulfilled on pods/binding "{name}": '
            f"pod {name} is being deleted, cannot be assigned to a host"
        )
    if spec.get("schedulingGates"):
        raise ConflictError(
            f'Operation cannot be fulfilled on pods/binding "{name}": '
            f"pod {name} has non-empty .spec.schedulingGates"
        )
    status = dict(pod.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    previous = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    since = (
        previous.get("lastTransitionTime")
        if previous is not None and previous.get("status") == "True"
        else None
    )
    scheduled = {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": since or now(),
    }
    if previous is None:
        conditions.append(scheduled)
    else:
        conditions = [scheduled if c is previous else c for c in conditions]
    status["conditions"] = conditions
    return {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}, "status": status}


def patch_body(patch: object, flavour: object, kind_flavour: str, subresource: object) -> Any:
    """The owned JSON of a patch of an object (or of its ``status``): refuses another
    subresource, an unknown patch type and a strategic patch of a kind without that flavour
    (415), as kube-apiserver does before it reads the object."""
    if subresource not in (None, "status"):
        raise InvalidRequestError(f"unsupported subresource {subresource!r}")
    if flavour not in ("strategic", "merge", "json"):
        raise InvalidRequestError(f"unsupported patch type {flavour!r}")
    check_patch_flavour(flavour, kind_flavour)
    try:
        return to_json(patch, "patch")
    except InvalidObjectError as err:
        raise InvalidRequestError(str(err)) from None


def patched_object(
    cur: Json,
    body: Any,
    flavour: str,
    *,
    uid: str | None,
    resource_version: str | None,
    subresource: str | None,
    has_status: bool,
    strict_claims: bool,
) -> Json:
    """The object a patch ``body`` of ``cur`` stores, after its preconditions (those a merge
    patch's metadata carries, then ``uid``, then ``resource_version``; ``ConflictError``).
    A patch of the object leaves ``status`` alone for kinds with a status subresource
    (``has_status``), a status patch changes only ``status``, identity fields and the
    deletion marks never change; a pod's status as served, conditions validated, a claim's
    status validated as kube-apiserver does when ``strict_claims``, a PodGroup admitted and an
    Event's immutable fields kept."""
    patched, preconditions = patch_object(cur, body, flavour)
    if uid is not None:
        preconditions.append(("uid", uid))
    if resource_version is not None:
        preconditions.append(("rv", resource_version))
    for which, expected in preconditions:
        if which == "uid":
            check_uid_precondition(cur, expected)
        else:
            check_rv_precondition(cur, expected)
    if not isinstance(patched, dict):
        raise InvalidRequestError("the patched object is not a JSON object")
    kind = cur["kind"]
    new = keep_deletion_marks(cur, keep_identity(cur, patched))
    if subresource == "status":
        status = new.get("status") or {}
        if kind == POD and isinstance(status, dict):
            status = served_pod_status(status)
        new = {**cur, "status": status}
    elif has_status:
        new = {k: v for k, v in new.items() if k != "status"}
        if "status" in cur:
            new["status"] = cur["status"]
    if isinstance(new.get("status"), dict):
        validate_status(new["status"])
        if kind == RESOURCE_CLAIM and strict_claims:
            validate_claim_status(cur["metadata"]["name"], cur.get("status") or {}, new["status"])
    if kind == POD_GROUP:
        new = admit_podgroup(new, cur)
    if memory_events.applies(cur):
        memory_events.validate_update(cur, new)
    return new


def updated_object(cur: Json, data: Json) -> Json:
    """The object an update ``data`` of ``cur`` stores: a ``uid`` or ``resourceVersion`` in
    ``data`` must match (``ConflictError``); the stored uid, creationTimestamp and deletion
    marks are kept; a PodGroup is admitted. ``data`` is the caller's own copy (changed)."""
    meta = data["metadata"]
    if "uid" in meta:
        check_uid_precondition(cur, meta["uid"])
    if "resourceVersion" in meta:
        check_rv_precondition(cur, meta["resourceVersion"])
    for field in ("uid", "creationTimestamp", "resourceVersion"):
        if field in cur["metadata"]:
            meta[field] = cur["metadata"][field]
    data = keep_deletion_marks(cur, data)
    if data["kind"] == POD_GROUP:
        data = admit_podgroup(data, cur)
    return data


def create_body(kind: str, namespace: str, body: Mapping[str, Any]) -> Json:
    """The owned JSON of a create request's ``body``: of ``kind``, in ``namespace`` (when
    not ``""``), without the ``uid`` and ``resourceVersion`` the server sets.
    ``InvalidObjectError`` for a body that is not JSON."""
    data: Json = to_json(body, "obj")
    data["kind"] = kind
    meta = data.get("metadata")
    if isinstance(meta, dict):
        meta.pop("uid", None)
        meta.pop("resourceVersion", None)
        if namespace:
            meta["namespace"] = namespace
    return data
