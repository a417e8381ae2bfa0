"""The wire format of :class:`~kdispatch.testing.httpserver.ApiServerHTTP`: what a request path
names, how errors are answered, and the documents and encodings the apiserver serves.

* :class:`Route` and :func:`parse_route`: a REST path as a kind with namespace, name and
  subresource (:class:`LeaseRoute` for a Lease's path); :func:`discovery` for the others.
* :class:`HttpError`, :class:`Abort`, :class:`Garbled`: how a request ends when it does not
  succeed; :func:`error_reply` maps a backend error to its ``Status`` reply, as
  kube-apiserver words it (:func:`status_object`, with the details of :func:`kind_details`,
  :func:`invalid_details` and :func:`deletion_conflict`).
* :func:`dumps`, :func:`chunk`, :func:`strip_type`, :func:`initial_end`: the JSON bodies and
  watch chunks; :func:`int_query` and :func:`delete_options` read the query and DeleteOptions.

Everything here is a pure function of its arguments, except :func:`peer_closed`, which peeks
at a socket; it runs on whichever thread calls it.
"""

from __future__ import annotations

import json
import math
import select
import socket
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from kdispatch.actors.model.errors import (
    AlreadyExistsError,
    ApiError,
    BadResponseError,
    ConflictError,
    DisruptionBudgetError,
    GoneError,
    InvalidRequestError,
    NotFoundError,
    TooManyRequestsError,
)
from kdispatch.actors.model.kinds import KindInfo, KindTable

from .memory_leases import LeasePath
from .memory_patch import JsonPatchTestFailed
from .memory_pdb import PDB_MESSAGE

JSON_PATCH_REJECTED = "the server rejected our request due to an error in our request"
"""kube-apiserver's whole message for a JSON patch whose ``test`` operation failed."""

VERSION: dict[str, str] = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.2",
    "gitCommit": "",
    "gitTreeState": "",
    "buildDate": "",
    "goVersion": "",
    "compiler": "gc",
    "platform": "linux/amd64",
}
"""``GET /version``: the kube-apiserver release whose behaviour the emulator follows (the one
``kdispatch.testing.envtest`` builds, against which the conformance suite checks it)."""

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class Abort(Exception):
    """End the request without a reply: ``reset`` closes with RST, else a plain close."""

    def __init__(self, *, reset: bool) -> None:
        super().__init__("connection aborted")
        self.reset = reset


class Garbled(Exception):
    """Answer 200 with a body that is not JSON (a reply the client cannot understand)."""


def _delta_seconds(seconds: float) -> str:
    """``seconds`` as a ``Retry-After`` value, as given (a fraction as a decimal fraction,
    which the clients read)."""
    value = float(seconds)
    return str(int(value)) if value.is_integer() else repr(value)


class HttpError(Exception):
    """Answer with a ``Status`` error object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}


def status_object(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``v1.Status`` as the apiserver serves it."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if 200 <= code < 300 else "Failure",
        "code": code,
    }
    if message:
        status["message"] = message
    if reason:
        status["reason"] = reason
    if details:
        status["details"] = details
    return status


def dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


# ----------------------------------------------------------------- routes


class Route:
    """A parsed request path: the kind, and namespace/name/subresource when present."""

    __slots__ = ("info", "kind", "name", "namespace", "plural", "sub")

    def __init__(
        self, info: KindInfo, namespace: str | None, name: str | None, sub: str | None
    ) -> None:
        self.info = info
        self.kind = info.kind
        self.plural = info.plural
        self.namespace = namespace if info.namespaced else ""
        self.name = name
        self.sub = sub

    def details(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.plural} if self.name else {"kind": self.plural}


class LeaseRoute(Route):
    """A lease path as a route (for error details)."""

    def __init__(self, lease: LeasePath) -> None:
        self.plural = "leases"
        self.kind = "Lease"
        self.namespace = lease.namespace
        self.name = lease.name
        self.sub = None


def not_found() -> HttpError:
    return HttpError(404, "NotFound", "the server could not find the requested resource")


def parse_route(kinds: KindTable, path: str) -> Route | tuple[str, str] | None:
    """The resource a path names; ``(group, version)`` for a discovery document of a group
    version (``("", "")`` for the group list); None for ``/api``."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        if len(parts) == 1:
            return None
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"]:
        if len(parts) == 1:
            return ("", "")
        if len(parts) < 3:
            raise not_found()
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise not_found()
    if not rest:
        return (group or "core", version)
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        info = kinds.by_resource(group, version, rest[2])
        if info is not None and info.namespaced:
            namespace, rest = rest[1], rest[2:]
    info = kinds.by_resource(group, version, rest[0])
    if info is None or len(rest) > 3 or (info.namespaced and namespace is None and len(rest) > 1):
        raise not_found()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return Route(info, namespace, name, sub)


# ----------------------------------------------------------------- errors


def error_reply(exc: ApiError, route: Route) -> HttpError | Garbled:
    """The reply to a backend error that is answered (every one but a dropped connection and
    a timeout, which act on the connection itself)."""
    if isinstance(exc, DisruptionBudgetError):
        message, _, cause = str(exc).partition(PDB_MESSAGE)
        return HttpError(
            429,
            "TooManyRequests",
            PDB_MESSAGE,
            details={
                "causes": [{"reason": "DisruptionBudget", "message": cause.strip() or message}]
            },
        )
    if isinstance(exc, TooManyRequestsError):
        return HttpError(
            429,
            "TooManyRequests",
            str(exc),
            details={**route.details(), "retryAfterSeconds": math.ceil(exc.retry_after)},
            headers={"Retry-After": _delta_seconds(exc.retry_after)},
        )
    if isinstance(exc, NotFoundError):
        return HttpError(404, "NotFound", str(exc), details=route.details())
    if isinstance(exc, AlreadyExistsError):
        return HttpError(409, "AlreadyExists", str(exc), details=route.details())
    if isinstance(exc, ConflictError):
        return HttpError(409, "Conflict", str(exc), details=route.details())
    if isinstance(exc, GoneError):
        return HttpError(410, "Expired", str(exc))
    if isinstance(exc, JsonPatchTestFailed):
        # kube-apiserver: a generic 422 without details, not the patch library's message
        return HttpError(422, "Invalid", JSON_PATCH_REJECTED)
    if isinstance(exc, InvalidRequestError):
        code = exc.status if 400 <= exc.status < 500 else 422
        known = code != 422 and code in HTTPStatus._value2member_map_
        reason = HTTPStatus(code).phrase.replace(" ", "") if known else "Invalid"
        return HttpError(code, reason, str(exc), details=route.details())
    if isinstance(exc, BadResponseError):
        return Garbled(str(exc))
    code = exc.status if 500 <= exc.status <= 599 else 500
    wait = exc.retry_after
    headers = {"Retry-After": _delta_seconds(wait)} if wait else None
    return HttpError(code, "InternalError", str(exc), headers=headers)


def qualified_kind(route: Route) -> str:
    """``Pod``, ``ResourceClaim.resource.k8s.io``: how the apiserver names a kind in a 422
    message and in a deletion's precondition conflict."""
    return f"{route.kind}.{route.info.group}" if route.info.group else route.kind


def deletion_conflict(exc: ConflictError, route: Route) -> HttpError:
    """The 409 of a deletion's (or an eviction's) failed precondition: kube-apiserver names
    the kind in its details here, not the resource."""
    return HttpError(409, "Conflict", str(exc), details=kind_details(route))


def kind_details(route: Route) -> dict[str, Any]:
    """``details`` naming the kind (not the resource) and, for non-core kinds, the group."""
    details: dict[str, Any] = {"name": route.name, "kind": route.kind}
    if route.info.group:
        details["group"] = route.info.group
    return details


def invalid_details(route: Route, field: str, message: str) -> dict[str, Any]:
    """``details`` of a 422 as the apiserver writes them: the kind, its group, one cause."""
    details = kind_details(route)
    details["causes"] = [{"reason": "FieldValueInvalid", "message": message, "field": field}]
    return details


# ----------------------------------------------------------------- bodies and watch chunks


def initial_end(route: Route, rv: str) -> dict[str, Any]:
    """The BOOKMARK object that ends a watch's initial events: an empty object of the kind at
    the resourceVersion they were listed at, annotated ``k8s.io/initial-events-end``."""
    return {
        "kind": route.kind,
        "apiVersion": route.info.api_version,
        "metadata": {"resourceVersion": rv, "annotations": {INITIAL_EVENTS_END: "true"}},
    }


def chunk(event: Mapping[str, Any]) -> bytes:
    data = dumps(event) + b"\n"
    return f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n"


def peer_closed(sock: socket.socket) -> bool:
    """Whether the client closed its end of a watch connection (it never sends anything else)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def strip_type(item: Mapping[str, Any]) -> dict[str, Any]:
    """A list item as the apiserver serves it: without ``kind`` and ``apiVersion``."""
    return {k: v for k, v in item.items() if k not in ("kind", "apiVersion")}


# ----------------------------------------------------------------- query and options


def int_query(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(400, "BadRequest", f"bad {key} {raw!r}") from None
    if value < 0:
        raise HttpError(400, "BadRequest", f"bad {key} {raw!r}")
    return value


def delete_options(
    options: object, query: Mapping[str, str]
) -> tuple[str | None, str | None, int | None]:
    """(uid, resourceVersion, gracePeriodSeconds) of DeleteOptions (or the query)."""
    opts = options if isinstance(options, dict) else {}
    pre = opts.get("preconditions")
    pre = pre if isinstance(pre, dict) else {}
    uid, rv = pre.get("uid"), pre.get("resourceVersion")
    grace = opts.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    if grace is not None:
        try:
            grace = int(grace)
        except (TypeError, ValueError):
            raise HttpError(400, "BadRequest", f"bad gracePeriodSeconds {grace!r}") from None
    return (
        None if uid is None else str(uid),
        None if rv is None else str(rv),
        grace,
    )


# ----------------------------------------------------------------- discovery


def discovery(kinds: KindTable, which: tuple[str, str] | None) -> dict[str, Any]:
    """A discovery document of the kind table: ``/api`` (None), ``/apis`` (``("", "")``) or
    one group version's APIResourceList."""
    if which is None:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    group, version = which
    if not group:
        versions: dict[str, set[str]] = {}
        for info in kinds:
            if info.group:
                versions.setdefault(info.group, set()).add(info.version)
        groups = []
        for name in sorted(versions):
            vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in sorted(versions[name])]
            groups.append({"name": name, "versions": vs, "preferredVersion": vs[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    group = "" if group == "core" else group
    resources: list[dict[str, Any]] = []
    for info in kinds:
        if info.group != group or info.version != version:
            continue
        resources.append(
            {
                "name": info.plural,
                "singularName": info.kind.lower(),
                "namespaced": info.namespaced,
                "kind": info.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
        )
        if info.status:
            resources.append(
                {
                    "name": f"{info.plural}/status",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    if not resources:
        raise not_found()
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
