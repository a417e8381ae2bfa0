"""``coordination.k8s.io/v1`` Leases for the embedded apiserver (what leader election needs).

Leases live in the :class:`~kdispatch.testing.memory.InMemoryApiServer`'s own store, so they
share its single resourceVersion counter and watch events, like every object in etcd. This
module adds what the generic admin surface lacks: the Lease's shape and validation, optimistic
concurrency as the apiserver applies it (an ``update`` whose ``metadata.resourceVersion`` is not
the stored one → ``ConflictError``/409; without one, an unconditional update, which the Lease
strategy allows), merge patches, deletes with preconditions, and a log of lease writes with the
writer's identity (:data:`~kdispatch.testing.memory.request_writer`) for audits.

:func:`serve_http` maps the REST paths the official client's ``CoordinationV1Api`` uses::

    GET    /apis/coordination.k8s.io/v1/leases                         list, all namespaces
    GET    /apis/coordination.k8s.io/v1/namespaces/{ns}/leases         list
    POST   /apis/coordination.k8s.io/v1/namespaces/{ns}/leases         create
    GET    /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}  read
    PUT    /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}  replace
    PATCH  /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}  merge / strategic patch
    DELETE /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}  delete (preconditions)

Watches on leases are not served (nothing here needs them). Threading: every method may be
called from any thread; the server's lock makes each store operation atomic, and read-modify-
write operations (patch) retry on a concurrent write unless the caller gave a resourceVersion.
"""

from __future__ import annotations

import builtins
import re
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kdispatch.actors.model.errors import ConflictError, InvalidRequestError, NotFoundError
from kdispatch.actors.model.objects import is_dns_label, is_dns_subdomain
from kdispatch.adapters.listing import ObjectList

from .audit import request_writer
from .memory_objects import clone, to_json
from .memory_patch import json_merge

if TYPE_CHECKING:  # the server holds this store: no import at run time
    from .memory import InMemoryApiServer

Json = dict[str, Any]


__all__ = ["LEASE", "LEASE_API_VERSION", "LeasePath", "LeaseStore", "LeaseWrite", "serve_http"]

LEASE = "Lease"
LEASE_API_VERSION = "coordination.k8s.io/v1"
PATH_PREFIX = "/apis/coordination.k8s.io/v1/"


_PATH = re.compile(
    r"^/apis/coordination\.k8s\.io/v1/(?:namespaces/(?P<ns>[^/]+)/)?leases(?:/(?P<name>[^/]+))?$"
)
_SPEC_STR = ("holderIdentity", "acquireTime", "renewTime", "preferredHolder", "strategy")
_SPEC_INT = ("leaseDurationSeconds", "leaseTransitions")
_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",  # no lists in a Lease: same result
}
_PATCH_RETRIES = 16


@dataclass(frozen=True, slots=True)
class LeaseWrite:
    """One successful lease write: ``op`` (create/update/patch/delete), the lease, the holder
    after the write (``""`` if none or deleted), its resourceVersion, the writer's identity and
    ``t`` = ``time.monotonic()`` when it was applied."""

    op: str
    namespace: str
    name: str
    holder: str
    resource_version: str
    writer: str
    t: float


@dataclass(frozen=True, slots=True)
class LeasePath:
    """A parsed lease REST path: namespace None = all namespaces, name None = the collection."""

    namespace: str | None
    name: str | None

    @classmethod
    def parse(cls, path: str) -> LeasePath | None:
        """The lease path ``path`` names, or None if it is not one."""
        m = _PATH.match(path)
        if m is None:
            return None
        return cls(m.group("ns"), m.group("name"))


class LeaseStore:
    """Lease operations on one in-memory apiserver (see the module docstring)."""

    def __init__(self, server: InMemoryApiServer, *, log_limit: int = 100_000) -> None:
        self._server = server
        self._log_lock = threading.Lock()
        self._log: deque[LeaseWrite] = deque(maxlen=log_limit)

    # ----------------------------------------------------------------- operations

    def create(self, namespace: str, body: Mapping[str, Any]) -> Json:
        """Create a Lease in ``namespace`` (``AlreadyExistsError`` if the name is taken)."""
        obj = self._owned(body, namespace)
        if obj["metadata"].get("resourceVersion"):
            raise InvalidRequestError(
                "metadata.resourceVersion: Invalid value: must not be set on create", status=422
            )
        obj["metadata"].pop("uid", None)
        created = self._server.create(obj)
        self._record("create", created)
        return created

    def get(self, namespace: str, name: str) -> Json:
        """The Lease, or ``NotFoundError``."""
        obj = self._server.get_object(LEASE, _ns(namespace), _name(name))
        if obj is None:
            raise NotFoundError(f'leases.coordination.k8s.io "{name}" not found')
        return obj

    def list(self, namespace: str | None = None) -> ObjectList:
        """Leases (in ``namespace`` if given), as the server's ``list`` returns them."""
        return self._server.list(LEASE, namespace=None if namespace is None else _ns(namespace))

    def update(self, namespace: str, name: str, body: Mapping[str, Any]) -> Json:
        """Replace the Lease (PUT). A ``metadata.resourceVersion`` in ``body`` must be the stored
        one (``ConflictError``); without one the update is unconditional."""
        obj = self._owned(body, namespace)
        if obj["metadata"]["name"] != name:
            raise InvalidRequestError(
                "the name of the object does not match the name on the URL", status=400
            )
        if not obj["metadata"].get("resourceVersion"):
            obj["metadata"].pop("resourceVersion", None)
        self.get(namespace, name)  # 404 before anything else, as the apiserver answers
        updated = self._server.update(obj)
        self._record("update", updated)
        return updated

    def patch(
        self, namespace: str, name: str, patch: Mapping[str, Any], patch_type: str = "merge"
    ) -> Json:
        """Apply a JSON merge patch (strategic is the same for a Lease: it has no lists). A
        ``metadata.resourceVersion`` in the patch is a precondition."""
        if patch_type not in ("merge", "strategic"):
            raise InvalidRequestError(f"unsupported patch type {patch_type!r}", status=415)
        if not isinstance(patch, Mapping):
            raise InvalidRequestError("patch must be a JSON object", status=400)
        body: Json = to_json(patch, "patch")
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
        for _ in range(_PATCH_RETRIES):
            cur = self.get(namespace, name)
            rv = cur["metadata"]["resourceVersion"]
            if wanted_rv is not None and wanted_rv != rv:
                raise ConflictError(_modified(name))
            merged = json_merge(cur, body)
            if not isinstance(merged, dict):
                raise InvalidRequestError("patch must leave an object", status=422)
            merged.setdefault("metadata", {})
            merged["metadata"] = {**merged["metadata"], "name": name, "resourceVersion": rv}
            obj = self._owned(merged, namespace)
            try:
                patched = self._server.update(obj)
            except ConflictError:
                if wanted_rv is not None:
                    raise
                continue  # written meanwhile: patch the newer version
            self._record("patch", patched)
            return patched
        raise ConflictError(_modified(name))

    def delete(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Json:
        """Delete the Lease (preconditions checked atomically); returns its last state."""
        last = self._server.remove(
            LEASE, _ns(namespace), _name(name), uid=uid, resource_version=resource_version
        )
        self._record("delete", last, holder="")
        return last

    # ----------------------------------------------------------------- audit

    @property
    def writes(self) -> builtins.list[LeaseWrite]:
        """Successful lease writes, oldest first (a copy). Any thread."""
        with self._log_lock:
            return list(self._log)

    # ----------------------------------------------------------------- internals

    def _record(self, op: str, obj: Json, *, holder: str | None = None) -> None:
        spec = obj.get("spec") or {}
        meta = obj["metadata"]
        entry = LeaseWrite(
            op,
            meta.get("namespace", ""),
            meta["name"],
            (spec.get("holderIdentity") or "") if holder is None else holder,
            str(meta.get("resourceVersion", "")),
            request_writer.get(),
            time.monotonic(),
        )
        with self._log_lock:
            self._log.append(entry)

    @staticmethod
    def _owned(body: Mapping[str, Any], namespace: str) -> Json:
        """A validated copy of a Lease body, typed and placed in ``namespace``."""
        if not isinstance(body, Mapping):
            raise InvalidRequestError("body must be a JSON object", status=400)
        obj: Json = to_json(body, "lease")
        kind = obj.get("kind", LEASE)
        if kind != LEASE:
            raise InvalidRequestError(f"kind must be Lease, got {kind!r}", status=400)
        obj["kind"] = LEASE
        obj["apiVersion"] = LEASE_API_VERSION
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise InvalidRequestError("metadata: Required value", status=422)
        if not is_dns_subdomain(meta.get("name")):
            raise InvalidRequestError(
                f"metadata.name: Invalid value: {meta.get('name')!r}", status=422
            )
        ns = _ns(namespace)
        if meta.get("namespace", ns) != ns:
            raise InvalidRequestError(
                "the namespace of the object does not match the namespace on the URL",
                status=400,
            )
        meta["namespace"] = ns
        spec = obj.get("spec")
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise InvalidRequestError("spec must be an object", status=422)
        cleaned: Json = {}
        for key in _SPEC_STR:
            value = spec.get(key)
            if value is not None:
                if not isinstance(value, str):
                    raise InvalidRequestError(f"spec.{key} must be a string", status=422)
                cleaned[key] = value
        for key in _SPEC_INT:
            value = spec.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InvalidRequestError(f"spec.{key} must be an int >= 0", status=422)
                if key == "leaseDurationSeconds" and value == 0:
                    raise InvalidRequestError(
                        "spec.leaseDurationSeconds: must be greater than 0", status=422
                    )
                cleaned[key] = value
        obj["spec"] = cleaned  # unknown spec fields are dropped, as the apiserver does
        obj.pop("status", None)
        return obj


def _ns(namespace: object) -> str:
    if not isinstance(namespace, str) or not is_dns_label(namespace):
        raise InvalidRequestError(f"invalid namespace {namespace!r}", status=400)
    return namespace


def _name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"invalid name {name!r}", status=400)
    return name


def _modified(name: str) -> str:
    return (
        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )


def serve_http(
    store: LeaseStore,
    method: str,
    path: LeasePath,
    query: Mapping[str, str],
    body: Any,
    *,
    content_type: str,
) -> tuple[int, Json]:
    """Serve one lease request: ``(HTTP code, JSON reply)``; errors are raised as
    :class:`~kdispatch.ApiError` subclasses for the HTTP front end to render.
    Connection thread."""
    ns, name = path.namespace, path.name
    if name is None:
        if method == "GET":
            if query.get("watch") in ("true", "1"):
                raise InvalidRequestError("watching leases is not supported", status=405)
            items, rv, _ = store.list(ns)
            return 200, {
                "kind": "LeaseList",
                "apiVersion": LEASE_API_VERSION,
                "metadata": {"resourceVersion": rv},
                "items": [
                    {k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items
                ],
            }
        if method == "POST" and ns is not None:
            return 201, store.create(ns, _object(body))
    elif ns is not None:
        if method == "GET":
            return 200, store.get(ns, name)
        if method == "PUT":
            return 200, store.update(ns, name, _object(body))
        if method == "PATCH":
            patch_type = _PATCH_TYPES.get(content_type)
            if patch_type is None:
                raise InvalidRequestError(
                    f"the body of the request was in an unknown format: {content_type}",
                    status=415,
                )
            return 200, store.patch(ns, name, _object(body), patch_type)
        if method == "DELETE":
            options = body if isinstance(body, dict) else {}
            pre = options.get("preconditions")
            pre = pre if isinstance(pre, dict) else {}
            last = store.delete(
                ns, name, uid=pre.get("uid"), resource_version=pre.get("resourceVersion")
            )
            return 200, clone(last)
    raise InvalidRequestError(f"{method} is not supported on this path", status=405)


def _untyped(item: Json) -> Json:
    return {k: v for k, v in item.items() if k not in ("kind", "apiVersion")}


def _object(body: Any) -> Json:
    if not isinstance(body, dict):
        raise InvalidRequestError("body must be a JSON object", status=400)
    return body
