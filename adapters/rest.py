"""How a :class:`~kdispatch.KubernetesBackend` call becomes a REST request, and how its reply
is checked: the checks of names and arguments (before anything is sent), the query strings, the
bodies carrying preconditions, and the checks that a decoded reply is what was asked for.

Upstream facts the bodies rely on: ``metadata.uid`` and ``metadata.resourceVersion`` in a
strategic or JSON merge patch body are preconditions (a JSON patch carries them as ``test``
operations); a deletion or an eviction carries them in ``DeleteOptions.preconditions``;
``pods/binding`` answers ``Status{code: 201}``.

Pure functions: no I/O, no threads; bad arguments raise
:class:`~kdispatch.InvalidRequestError` (an unknown kind ``UnknownKindError``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from kdispatch.actors.model.backend import check_grace_period, check_page_limit
from kdispatch.actors.model.errors import (
    BadResponseError,
    InvalidInputError,
    InvalidObjectError,
    InvalidRequestError,
)
from kdispatch.actors.model.kinds import KindInfo, KindTable
from kdispatch.actors.model.objects import check_uid, get_path, is_dns_label, is_dns_subdomain

from .listing import ObjectList
from .transport import decode_object

AnyPatchType = Literal["strategic", "merge", "json"]
CONTENT_TYPES: Mapping[str, str] = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}
SUBRESOURCES = frozenset({"status", "scale", "binding", "eviction", "ephemeralcontainers"})

Query = list[tuple[str, str]]


def ref(namespace: str, name: str) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object."""
    return f"{namespace}/{name}" if namespace else name


def text(what: str, value: object) -> str:
    """``value`` if it is a non-empty str (``text("resource_version", rv)``: a
    resourceVersion precondition; a UID has :func:`uid_precondition`)."""
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{what} must be a non-empty str, got {value!r}")
    return value


def uid_precondition(uid: object) -> str:
    """``uid`` if it is an object UID as :func:`~kdispatch.actors.model.objects.check_uid`
    reads it, else :class:`~kdispatch.InvalidRequestError`, before anything is sent: a UID
    precondition is checked here again, however its call was built."""
    try:
        return check_uid(uid)
    except InvalidObjectError as exc:
        raise InvalidRequestError(f"uid precondition: {exc}") from None


def target(kinds: KindTable, kind: object, namespace: object, name: object) -> KindInfo:
    """The kind's facts, after rejecting a malformed namespace or name."""
    info = kinds.lookup(kind)
    if not info.namespaced:
        if namespace not in ("", None):
            raise InvalidRequestError(f"{kind} is cluster-scoped, got namespace {namespace!r}")
    elif not is_dns_label(namespace):
        raise InvalidRequestError(f"invalid namespace {namespace!r}")
    if not is_dns_subdomain(name):
        raise InvalidRequestError(f"invalid name {name!r}")
    return info


def check_scope(info: KindInfo, namespace: object) -> str | None:
    """A list-watch's ``namespace`` (None: every namespace), or :class:`InvalidInputError`: not
    an RFC 1123 label, or given for a cluster-scoped kind."""
    if namespace is None:
        return None
    if not info.namespaced:
        raise InvalidInputError(f"{info.kind} is cluster-scoped, got namespace {namespace!r}")
    if not is_dns_label(namespace):
        raise InvalidInputError(f"namespace must be an RFC 1123 label or None, got {namespace!r}")
    return namespace


def collection(info: KindInfo, namespace: str | None) -> str:
    """The collection's path (every namespace when ``namespace`` is None or empty)."""
    if namespace is not None and namespace != "":
        if not info.namespaced:
            raise InvalidRequestError(f"{info.kind} is cluster-scoped, got namespace {namespace!r}")
        if not is_dns_label(namespace):
            raise InvalidRequestError(f"invalid namespace {namespace!r}")
    return info.collection_path(namespace or None)


def api_path(path: object) -> str:
    """``path`` if it is an API path (``/api...``, ``/apis...``, no ``..``)."""
    if not isinstance(path, str) or not path.startswith(("/api", "/apis")) or ".." in path:
        raise InvalidRequestError(f"path must be an API path, got {path!r}")
    return path


def check_subresource(subresource: object) -> None:
    """One of the subresources a backend call may name."""
    if subresource not in SUBRESOURCES:
        raise InvalidRequestError(f"unsupported subresource {subresource!r}")


def _add(query: Query, name: str, what: str, value: object) -> None:
    """Append ``name=value`` unless ``value`` is None (else it must be a non-empty str)."""
    if value is not None:
        query.append((name, text(what, value)))


def selectors(label_selector: object, field_selector: object) -> Query:
    """The query of the label and field selectors given."""
    query: Query = []
    _add(query, "labelSelector", "label_selector", label_selector)
    _add(query, "fieldSelector", "field_selector", field_selector)
    return query


def list_query(
    query: Query, limit: object, continue_token: object, resource_version: object
) -> Query:
    """``query`` (the selectors) completed for one list page."""
    check_page_limit(limit)
    if limit is not None:
        query.append(("limit", str(limit)))
    _add(query, "continue", "continue_token", continue_token)
    _add(query, "resourceVersion", "resource_version", resource_version)
    return query


def watch_query(
    timeout_seconds: object,
    label_selector: object,
    field_selector: object,
    resource_version: object,
    bookmarks: bool,
) -> Query:
    """The query of a watch (``timeout_seconds`` at least 1)."""
    if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, int):
        raise InvalidRequestError(f"timeout_seconds must be an int, got {timeout_seconds!r}")
    query = [("watch", "true"), *selectors(label_selector, field_selector)]
    if resource_version:
        query.append(("resourceVersion", text("resource_version", resource_version)))
    query.append(("timeoutSeconds", str(max(1, timeout_seconds))))
    if bookmarks:
        query.append(("allowWatchBookmarks", "true"))
    return query


def create_body(
    kinds: KindTable, kind: str, namespace: str, obj: object
) -> tuple[KindInfo, str, dict[str, Any]]:
    """The kind's facts, the new object's name and the body that creates it."""
    info = kinds.lookup(kind)
    if not isinstance(obj, Mapping):
        raise InvalidRequestError(f"obj must be a mapping, got {type(obj).__name__}")
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    target(kinds, kind, namespace, name)
    return info, str(name), {"apiVersion": info.api_version, "kind": kind, **obj}


def patch_body(
    info: KindInfo,
    patch: object,
    *,
    uid: str | None,
    resource_version: str | None,
    subresource: str | None,
    patch_type: AnyPatchType | None,
) -> tuple[object, str]:
    """The body and content type of a patch carrying the preconditions (``patch_type`` None:
    the kind's flavour)."""
    if subresource is not None:
        check_subresource(subresource)
    if subresource == "status" and not info.status:
        raise InvalidRequestError(f"{info.kind} has no status subresource")
    if uid is not None:
        uid_precondition(uid)
    if resource_version is not None:
        text("resource_version", resource_version)
    flavour = info.patch if patch_type is None else patch_type
    if flavour not in CONTENT_TYPES:
        raise InvalidRequestError(
            f"patch_type must be 'strategic', 'merge' or 'json', got {patch_type!r}"
        )
    if flavour == "json":
        if isinstance(patch, Mapping | str | bytes) or not isinstance(patch, Sequence):
            raise InvalidRequestError("a JSON patch must be a list of operations")
        return [*_tests(uid, resource_version), *(_op(op) for op in patch)], CONTENT_TYPES["json"]
    if not isinstance(patch, Mapping):
        raise InvalidRequestError(f"patch must be a dict, got {type(patch).__name__}")
    return _with_preconditions(patch, uid, resource_version), CONTENT_TYPES[flavour]


def _with_preconditions(
    patch: Mapping[str, Any], uid: str | None, resource_version: str | None
) -> dict[str, Any]:
    """A copy of ``patch`` whose ``metadata`` carries the UID / resourceVersion preconditions."""
    body = dict(patch)
    if uid is None and resource_version is None:
        return body
    existing = body.get("metadata")
    metadata = dict(existing) if isinstance(existing, Mapping) else {}
    if uid is not None:
        metadata["uid"] = uid
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    body["metadata"] = metadata
    return body


def _tests(uid: str | None, resource_version: str | None) -> list[dict[str, Any]]:
    """JSON patch ``test`` operations for the preconditions."""
    ops: list[dict[str, Any]] = []
    if uid is not None:
        ops.append({"op": "test", "path": "/metadata/uid", "value": uid})
    if resource_version is not None:
        ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})
    return ops


def _op(op: object) -> dict[str, Any]:
    if not isinstance(op, Mapping) or not isinstance(op.get("op"), str):
        raise InvalidRequestError(f"a JSON patch operation must be a mapping with 'op': {op!r}")
    return dict(op)


def check_status_patch_type(patch_type: object) -> None:
    """A status patch is a strategic or a JSON merge patch (None: the kind's flavour)."""
    if patch_type is not None and patch_type not in ("strategic", "merge"):
        raise InvalidRequestError(f"patch_type must be 'strategic' or 'merge', got {patch_type!r}")


def delete_options(
    uid: str,
    resource_version: str | None,
    grace_period_seconds: object,
    propagation_policy: object = None,
) -> dict[str, Any]:
    """``DeleteOptions`` with the UID (and resourceVersion) preconditions."""
    uid_precondition(uid)
    check_grace_period(grace_period_seconds)
    pre: dict[str, str] = {"uid": uid}
    if resource_version is not None:
        pre["resourceVersion"] = text("resource_version", resource_version)
    options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": pre}
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    if propagation_policy is not None:
        if propagation_policy not in ("Orphan", "Background", "Foreground"):
            raise InvalidRequestError(f"invalid propagation_policy {propagation_policy!r}")
        options["propagationPolicy"] = propagation_policy
    return options


def binding(namespace: str, name: str, uid: str, node: object) -> dict[str, Any]:
    """A ``Binding`` of the pod to ``node``, its UID precondition in its metadata."""
    uid_precondition(uid)
    if not is_dns_subdomain(node):
        raise InvalidRequestError(f"invalid node name {node!r}")
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def eviction(namespace: str, name: str, uid: str, grace_period_seconds: object) -> dict[str, Any]:
    """A ``policy/v1`` ``Eviction``, its UID precondition in its ``deleteOptions``."""
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": delete_options(uid, None, grace_period_seconds),
    }


def check_created(code: int, reply: Mapping[str, Any], kind: str, what: str) -> None:
    """A subresource creation must answer 200/201 with a success ``Status`` or the object."""
    if code not in (200, 201):
        raise BadResponseError(f"{what}: unexpected HTTP {code}", status=code)
    reply_kind = reply.get("kind")
    if reply_kind == "Status":
        if reply.get("status") != "Success":
            raise BadResponseError(f"{what}: reply Status is {reply.get('status')!r}", status=code)
    elif reply_kind != kind:
        raise BadResponseError(f"{what}: reply kind is {reply_kind!r}", status=code)


def typed_object(data: bytes, info: KindInfo, what: str) -> dict[str, Any]:
    """The reply decoded as one object of the kind (``kind``/``apiVersion`` filled when
    absent)."""
    obj = decode_object(data, what)
    got = obj.get("kind")
    if got is None:
        obj["kind"] = info.kind
        obj.setdefault("apiVersion", info.api_version)
    elif got != info.kind:
        raise BadResponseError(f"{what}: reply kind is {got!r}, expected {info.kind!r}")
    if not isinstance(obj.get("metadata"), Mapping):
        raise BadResponseError(f"{what}: reply has no metadata")
    return obj


def with_type_meta(obj: dict[str, Any], info: KindInfo) -> dict[str, Any]:
    """``obj`` with ``kind``/``apiVersion`` filled in (list items come without them)."""
    if obj.get("kind") != info.kind:
        obj["kind"] = info.kind
    obj.setdefault("apiVersion", info.api_version)
    return obj


def object_list(data: bytes, info: KindInfo, what: str) -> ObjectList:
    """The reply decoded as one page of a list."""
    body = decode_object(data, what)
    items = body.get("items")
    rv = get_path(body, "metadata", "resourceVersion")
    token = get_path(body, "metadata", "continue")
    if items is None:
        items = []
    if not isinstance(items, list) or not isinstance(rv, str) or not rv:
        raise BadResponseError(f"{what}: reply has no items or no resourceVersion")
    if not all(isinstance(item, dict) for item in items):
        raise BadResponseError(f"{what}: reply has a non-object item")
    for item in items:
        with_type_meta(item, info)
    return ObjectList(items, rv, token if isinstance(token, str) and token else None)
