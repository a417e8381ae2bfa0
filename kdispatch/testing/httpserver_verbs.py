"""The verbs of :class:`~kdispatch.testing.httpserver.ApiServerHTTP`: one request of a kind's
REST path translated into the calls of the store serving that kind (the
:class:`~kdispatch.testing.memory.InMemoryApiServer`, or a kind-specific store), and its answer
written back as the apiserver writes it.

:meth:`Verbs.handle` picks the verb from the method and the route: list and watch, create, get,
replace, patch (of the object or of its status), delete, and a pod's binding and eviction. The
rules that make the answers kube-apiserver's (what a create resets, which body fields are
preconditions, which details a conflict names) live here; the wire format is
:mod:`kdispatch.testing.httpserver_wire`'s. Every method runs on the request's connection
thread.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from kdispatch.actors.model.errors import (
    AlreadyExistsError,
    ConflictError,
    GoneError,
    NotFoundError,
)

from .httpserver_handler import Handler
from .httpserver_wire import (
    Abort,
    HttpError,
    Route,
    chunk,
    delete_options,
    deletion_conflict,
    initial_end,
    int_query,
    invalid_details,
    peer_closed,
    qualified_kind,
    status_object,
    strip_type,
)
from .memory import InMemoryApiServer
from .memory_patch import check_patch_flavour

_STATUS_ONLY_KINDS = frozenset({"Pod", "ResourceClaim"})
"""Kinds whose merge/strategic status patches go through ``patch_status`` (the dispatcher's
request, with its strict checks); every other kind uses the generic ``patch``."""

_PATCH_TYPES = {
    "application/strategic-merge-patch+json": "strategic",
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
}

_DEFAULT_WATCH_SECONDS = 1800.0
_SCHEDULER = "default-scheduler"


class Verbs:
    """Serves the requests of a kind's resources from ``server`` and the kind-specific
    ``stores``. ``lock`` and ``stopping`` are the HTTP server's: an open watch is registered
    in :attr:`watches` under ``lock`` (the server ends them on stop), and none opens once
    ``stopping`` is set. ``watch_poll`` bounds how long a watch waits before it checks for a
    stop or a gone client."""

    def __init__(
        self,
        server: InMemoryApiServer,
        stores: Mapping[str, Any],
        *,
        watch_poll: float,
        lock: threading.Condition,
        stopping: threading.Event,
    ) -> None:
        self.server = server
        self._stores = stores
        self._watch_poll = watch_poll
        self._lock = lock
        self._stopping = stopping
        self.watches: dict[Any, threading.Thread] = {}  # open watch → its connection thread

    def _store(self, kind: str) -> Any:
        """The store serving ``kind``: a plugged-in one, else the in-memory server."""
        return self._stores.get(kind, self.server)

    def handle(
        self,
        h: Handler,
        method: str,
        route: Route,
        query: Mapping[str, str],
        body: Any,
    ) -> None:
        """Serve one request. Connection thread."""
        store = self._store(route.kind)
        ns, name = route.namespace or "", route.name or ""
        if route.name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    self._watch(h, route, query)
                else:
                    self._list(h, route, query)
                return
            if method == "POST" and (route.namespace is not None or not route.info.namespaced):
                self._create(h, route, body)
                return
        elif route.sub is None:
            if method == "GET":
                h._reply_json(200, store.get(route.kind, ns, name))
                return
            if method == "DELETE":
                self._delete(h, route, query, body)
                return
            if method == "PUT":
                self._replace(h, route, body)
                return
            if method == "PATCH":
                self._patch(h, route, body, None)
                return
        elif route.sub == "status" and route.info.status:
            if method == "GET":
                h._reply_json(200, store.get(route.kind, ns, name))
                return
            if method == "PATCH":
                self._patch(h, route, body, "status")
                return
        elif route.sub == "binding" and method == "POST" and route.kind == "Pod":
            self._bind(h, route, body)
            return
        elif route.sub == "eviction" and method == "POST" and route.kind == "Pod":
            self._evict(h, route, body)
            return
        raise HttpError(405, "MethodNotAllowed", f"{method} is not supported on {h.path}")

    def _current_uid(self, route: Route) -> str:
        obj = self._store(route.kind).get_object(
            route.kind, route.namespace or "", route.name or ""
        )
        if obj is None:
            raise NotFoundError(f'{route.plural} "{route.name}" not found')
        return str(obj["metadata"]["uid"])

    def _list(self, h: Handler, route: Route, query: Mapping[str, str]) -> None:
        if query.get("continue") and query.get("resourceVersion"):
            # the token carries the resourceVersion of the list it continues
            raise HttpError(
                400, "BadRequest", "specifying resource version is not allowed when using continue"
            )
        limit = int_query(query, "limit")
        items, rv, token = self._store(route.kind).list(
            route.kind,
            namespace=route.namespace or None,
            label_selector=query.get("labelSelector") or None,
            field_selector=query.get("fieldSelector") or None,
            limit=limit if limit else None,
            continue_token=query.get("continue") or None,
        )
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
        h._reply_json(
            200,
            {
                "kind": f"{route.kind}List",
                "apiVersion": route.info.api_version,
                "metadata": meta,
                "items": [strip_type(item) for item in items],
            },
        )

    def _owned_body(self, route: Route, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise HttpError(400, "BadRequest", "body must be a JSON object")
        obj = dict(body)
        obj.setdefault("kind", route.kind)
        obj.setdefault("apiVersion", route.info.api_version)
        if obj["kind"] != route.kind:
            raise HttpError(400, "BadRequest", f"body is a {obj['kind']!r}, not a {route.kind}")
        meta = dict(obj.get("metadata") or {})
        if route.namespace:
            if meta.get("namespace", route.namespace) != route.namespace:
                raise HttpError(400, "BadRequest", "metadata.namespace does not match the path")
            meta["namespace"] = route.namespace
        if route.name is not None and meta.get("name", route.name) != route.name:
            raise HttpError(400, "BadRequest", "metadata.name does not match the path")
        obj["metadata"] = meta
        return obj

    def _create(self, h: Handler, route: Route, body: Any) -> None:
        obj = self._owned_body(route, body)
        # as the apiserver: the UID is the server's, a new pod's status is reset to Pending (a
        # claim's to empty), and a pod without a scheduler gets the default one
        obj["metadata"].pop("uid", None)
        if route.kind == "Pod":
            spec = obj.get("spec")
            if isinstance(spec, dict):
                obj["spec"] = {**spec, "schedulerName": spec.get("schedulerName") or _SCHEDULER}
            obj["status"] = {"phase": "Pending"}
        elif route.kind == "ResourceClaim":
            obj["status"] = {}
        store = self._store(route.kind)
        try:
            if store is self.server:  # a request of its own: logged (and faultable), like a patch
                h._reply_json(201, store.create(route.kind, route.namespace or "", obj))
            else:
                h._reply_json(201, store.create(obj))
        except AlreadyExistsError as exc:  # the details name the object, as on a GET
            details = {"name": obj["metadata"].get("name"), "kind": route.plural}
            raise HttpError(409, "AlreadyExists", str(exc), details=details) from None

    def _replace(self, h: Handler, route: Route, body: Any) -> None:
        obj = self._owned_body(route, body)
        obj["metadata"].setdefault("name", route.name)
        h._reply_json(200, self._store(route.kind).update(obj))

    def _patch(self, h: Handler, route: Route, body: Any, sub: str | None) -> None:
        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        patch_type = _PATCH_TYPES.get(content_type)
        if patch_type is None:
            raise HttpError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format: {content_type}",
            )
        check_patch_flavour(patch_type, route.info.patch)  # before the body is looked at
        store = self._store(route.kind)
        ns, name = route.namespace or "", route.name or ""
        if patch_type != "json":
            self._check_body_uid(route, body)
        if sub == "status" and patch_type != "json" and route.kind in _STATUS_ONLY_KINDS:
            self._patch_status(h, route, body, patch_type)
            return
        if patch_type == "json":
            if not isinstance(body, list):
                raise HttpError(400, "BadRequest", "a JSON patch must be a list of operations")
        elif not isinstance(body, dict):
            raise HttpError(400, "BadRequest", "patch body must be a JSON object")
        obj = store.patch(route.kind, ns, name, body, subresource=sub, patch_type=patch_type)
        h._reply_json(200, obj)

    def _patch_status(self, h: Handler, route: Route, body: Any, patch_type: str) -> None:
        if not isinstance(body, dict):
            raise HttpError(400, "BadRequest", "patch body must be a JSON object")
        # The status subresource applies only status: the apiserver resets every other field
        # (spec, labels, ...) to the stored object's, so changes to them are silently dropped.
        meta = body.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        patch = {"status": body["status"]} if "status" in body else {}
        uid = meta.get("uid")
        rv = meta.get("resourceVersion")
        if uid is None:
            uid = self._current_uid(route)
        obj = self._store(route.kind).patch_status(
            route.kind,
            route.namespace or "",
            route.name or "",
            patch,
            uid=str(uid),
            resource_version=None if rv is None else str(rv),
            patch_type=patch_type,
        )
        h._reply_json(200, obj)

    def _check_body_uid(self, route: Route, body: Any) -> None:
        """A ``metadata.uid`` in a strategic or merge patch body is not a precondition on
        kube-apiserver: it is applied to the object and fails validation as an immutable field
        (422 Invalid) when it is not the object's UID. Connection thread."""
        meta = body.get("metadata") if isinstance(body, dict) else None
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if uid is None:
            return
        stored = self._store(route.kind).get_object(
            route.kind, route.namespace or "", route.name or ""
        )
        if stored is None or uid == stored["metadata"].get("uid"):
            return
        cause = f"Invalid value: {json.dumps(uid)}: field is immutable"
        raise HttpError(
            422,
            "Invalid",
            f'{qualified_kind(route)} "{route.name}" is invalid: metadata.uid: {cause}',
            details=invalid_details(route, "metadata.uid", cause),
        )

    def _bind(self, h: Handler, route: Route, body: Any) -> None:
        if not isinstance(body, dict):
            raise HttpError(400, "BadRequest", "body must be a v1 Binding")
        target = body.get("target")
        node = target.get("name") if isinstance(target, dict) else None
        if not isinstance(node, str) or not node:
            raise HttpError(
                422, "Invalid", "Binding.target.name: Required value", details=route.details()
            )
        meta = body.get("metadata")
        if isinstance(meta, dict) and meta.get("name", route.name) != route.name:
            raise HttpError(400, "BadRequest", "name in URL does not match name in Binding object")
        uid = (meta.get("uid") if isinstance(meta, dict) else None) or self._current_uid(route)
        try:
            self.server.bind(route.namespace or "", route.name or "", uid=str(uid), node=node)
        except ConflictError as exc:
            if "pods/binding" not in str(exc):
                raise  # a UID precondition: reported on "pods"
            details = {"name": route.name, "kind": "pods/binding"}
            raise HttpError(409, "Conflict", str(exc), details=details) from None
        h._reply_json(201, status_object(201, "", ""))

    def _evict(self, h: Handler, route: Route, body: Any) -> None:
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise HttpError(400, "BadRequest", "body must be a policy/v1 Eviction")
        meta = body.get("metadata")
        if isinstance(meta, dict) and meta.get("name", route.name) != route.name:
            raise HttpError(400, "BadRequest", "name in URL does not match name in Eviction object")
        uid, rv, grace = delete_options(body.get("deleteOptions"), {})
        try:
            self.server.evict(
                route.namespace or "",
                route.name or "",
                uid=uid,
                resource_version=rv,
                grace_period_seconds=grace,
            )
        except ConflictError as exc:  # a failed precondition, reported as a deletion's
            raise deletion_conflict(exc, route) from None
        h._reply_json(201, status_object(201, "", ""))

    def _delete(self, h: Handler, route: Route, query: Mapping[str, str], body: Any) -> None:
        uid, rv, grace = delete_options(body, query)
        store = self._store(route.kind)
        ns, name = route.namespace or "", route.name or ""
        before = store.get_object(route.kind, ns, name)
        if uid is None:
            uid = self._current_uid(route)
        try:
            store.delete(
                route.kind, ns, name, uid=uid, resource_version=rv, grace_period_seconds=grace
            )
        except ConflictError as exc:
            raise deletion_conflict(exc, route) from None
        after = store.get_object(route.kind, ns, name)
        h._reply_json(200, after or before or status_object(200, "", ""))

    # ----------------------------------------------------------------- watch

    def _watch(self, h: Handler, route: Route, query: Mapping[str, str]) -> None:
        store = self._store(route.kind)
        selectors = {
            "label_selector": query.get("labelSelector") or None,
            "field_selector": query.get("fieldSelector") or None,
        }
        rv = query.get("resourceVersion") or None
        timeout = _DEFAULT_WATCH_SECONDS
        if "timeoutSeconds" in query:
            try:
                timeout = float(int(query["timeoutSeconds"]))
            except ValueError:
                raise HttpError(400, "BadRequest", "bad timeoutSeconds") from None
        initial: list[dict[str, Any]] = []
        initial_end_wanted = False
        if rv in (None, "0"):
            # kube-apiserver ends the initial ADDED events with a BOOKMARK when asked for them
            initial_end_wanted = query.get("allowWatchBookmarks") == "true"
            initial, list_rv, _ = store.list(
                route.kind, namespace=route.namespace or None, **selectors
            )
            rv = str(list_rv)
        try:
            w = store.watch(
                route.kind,
                resource_version=rv,
                namespace=route.namespace or None,
                **selectors,
            )
        except GoneError:  # the apiserver reports it in the stream, not as the HTTP status
            # as kube-apiserver words it for a watch served from etcd (no watch cache)
            status = status_object(
                410, "Expired", "The resourceVersion for the provided watch is too old."
            )
            self._start_stream(h)
            h.wfile.write(chunk({"type": "ERROR", "object": status}) + b"0\r\n\r\n")
            return
        with self._lock:
            if self._stopping.is_set():
                w.stop()
            self.watches[w] = threading.current_thread()
        try:
            self._start_stream(h)
            for obj in initial:
                h.wfile.write(chunk({"type": "ADDED", "object": obj}))
            if initial_end_wanted:
                h.wfile.write(chunk({"type": "BOOKMARK", "object": initial_end(route, rv)}))
            if self._stream(h, w, time.monotonic() + timeout):
                h.wfile.write(b"0\r\n\r\n")
        finally:
            w.stop()
            with self._lock:
                self.watches.pop(w, None)

    @staticmethod
    def _start_stream(h: Handler) -> None:
        """Send the headers of a chunked watch reply. The connection closes after the watch."""
        h.close_connection = True
        h.wfile.write(
            (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            ).encode("latin-1")
        )

    def _stream(self, h: Handler, w: Any, deadline: float) -> bool:
        """Send events until the deadline, a stop, or a drop. True for a clean end (send the
        last chunk), False when the connection must be cut."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            event = w.next(timeout=min(remaining, self._watch_poll))
            if event is not None:
                h.wfile.write(chunk({"type": event.type, "object": event.object}))
                continue
            if w.ended:
                if w.dropped:
                    raise Abort(reset=True)
                return True
            if peer_closed(h.connection):
                return False
