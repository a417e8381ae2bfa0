"""What each verb of the in-memory apiserver does to its store.

:class:`Verbs` applies the rules of :mod:`kdispatch.testing.memory_rules` (preconditions,
binding, patches, updates), :mod:`kdispatch.testing.memory_status`,
:mod:`kdispatch.testing.memory_deletion`, :mod:`kdispatch.testing.memory_pdb`,
:mod:`kdispatch.testing.memory_podgroup` and :mod:`kdispatch.testing.memory_events` to the
objects of an :class:`~kdispatch.testing.memory_store.ObjectStore`, and writes the result.

Its request methods (``get``, ``patch_status``, ``bind``, ``delete``, ``patch``, ``evict``,
``create``) are the ``apply`` step of
:meth:`~kdispatch.testing.memory_requests.RequestGate.run`: they run on the request thread
with the server's lock held, and return the stored snapshot the request answers with (the
server hands out a copy). The admin methods (``insert``, ``update``, ``remove``,
``mark_terminating``, ``pdb_status``) take the lock themselves and return copies.
"""

from __future__ import annotations

import threading
from typing import Any

from kdispatch.actors.model.backend import PatchType, check_grace_period
from kdispatch.actors.model.errors import InvalidObjectError, InvalidRequestError, NotFoundError
from kdispatch.actors.model.objects import POD, POD_GROUP, RESOURCE_CLAIM, check_node_name

from . import memory_events
from .memory_objects import clone
from .memory_patch import check_patch_flavour, json_merge, status_merge_keys, strategic_merge
from .memory_pdb import check_eviction, disruption_status
from .memory_podgroup import admit_podgroup, prepare_podgroup_create
from .memory_requests import Req
from .memory_rules import (
    bound,
    check_delete_preconditions,
    check_rv_precondition,
    check_uid_precondition,
    now,
    patch_body,
    patched_object,
    plural,
    updated_object,
)
from .memory_status import (
    parse_status_patch,
    served_pod_status,
    validate_claim_status,
    validate_status,
)
from .memory_store import ObjectStore, key_of

Json = dict[str, Any]
PDB = "PodDisruptionBudget"


class Verbs:
    """The verbs of one in-memory apiserver over its ``store``. ``lock``: the server's lock
    (the store's). ``strict_claims``: validate ResourceClaim status updates as kube-apiserver
    does (see :class:`~kdispatch.testing.InMemoryApiServer`)."""

    def __init__(self, lock: threading.Lock, store: ObjectStore, strict_claims: bool) -> None:
        self._lock = lock
        self._store = store
        self._strict_claims = strict_claims

    # ================================================================ requests (lock held)

    def get(self, req: Req) -> Json:
        """Read one object. Request thread, lock held."""
        return self._store.lookup(req.kind, req.namespace, req.name)

    def patch_status(
        self,
        req: Req,
        patch: dict[str, Any],
        uid: str | None,
        resource_version: str | None,
        patch_type: PatchType,
    ) -> Json:
        """Patch ``status`` (see ``InMemoryApiServer.patch_status``). Request thread, lock
        held."""
        _, kind, namespace, name, _ = req
        store = self._store
        check_patch_flavour(patch_type, store.patch_flavour(kind))
        status_patch, extra_uid, extra_rv = parse_status_patch(patch, patch_type)
        cur = store.lookup(kind, namespace, name)
        for expected in (uid, extra_uid):
            if expected is not None:
                check_uid_precondition(cur, expected)
        for expected_rv in (resource_version, extra_rv):
            if expected_rv is not None:
                check_rv_precondition(cur, expected_rv)
        if "status" not in patch:  # nothing to apply: the status stays as stored
            status: Json = cur.get("status") or {}
        elif patch_type == "strategic":
            if status_patch is None:
                status = {}
            else:
                status = strategic_merge(
                    cur.get("status"), status_patch, status_merge_keys(cur["kind"])
                )
        else:
            merged = json_merge(cur.get("status"), status_patch)
            status = merged if isinstance(merged, dict) else {}
        validate_status(status)
        if kind == POD:
            status = served_pod_status(status)
        if kind == RESOURCE_CLAIM and self._strict_claims:
            validate_claim_status(name, cur.get("status") or {}, status)
        if status == cur.get("status", {}):
            return cur
        new = {**cur, "status": status}
        if kind == POD_GROUP:
            new = admit_podgroup(new, cur)
        return store.replace(cur, new)

    def bind(self, req: Req, uid: str | None, node: str) -> Json:
        """Bind a pod to ``node`` (see ``InMemoryApiServer.bind``). Request thread, lock
        held."""
        try:
            check_node_name(node)
        except InvalidObjectError as err:
            raise InvalidRequestError(str(err)) from None
        cur = self._store.lookup(POD, req.namespace, req.name)
        if uid is not None:
            check_uid_precondition(cur, uid)
        return self._store.replace(cur, bound(cur, node))

    def delete(
        self,
        req: Req,
        uid: str | None,
        grace_period_seconds: int | None,
        resource_version: str | None,
    ) -> Json:
        """Delete, or mark deleted while finalizers hold it (see
        ``InMemoryApiServer.delete``). Request thread, lock held."""
        cur = self._deletable(req.kind, req, uid, grace_period_seconds, resource_version)
        return self._store.delete(cur, grace_period_seconds)

    def patch(
        self,
        req: Req,
        patch: object,
        *,
        uid: str | None,
        resource_version: str | None,
        subresource: str | None,
        patch_type: str | None,
    ) -> Json:
        """Patch an object or its ``status`` (see ``InMemoryApiServer.patch``). Request
        thread, lock held."""
        store = self._store
        info = store.kinds.get(req.kind)
        kind_flavour = store.patch_flavour(req.kind)
        flavour = patch_type or kind_flavour
        body = patch_body(patch, flavour, kind_flavour, subresource)
        cur = store.lookup(req.kind, req.namespace, req.name)
        new = patched_object(
            cur,
            body,
            flavour,
            uid=uid,
            resource_version=resource_version,
            subresource=subresource,
            has_status=info.status if info is not None else True,
            strict_claims=self._strict_claims,
        )
        if new == cur:
            return cur
        return store.write(cur, new)

    def evict(
        self,
        req: Req,
        uid: str | None,
        grace_period_seconds: int | None,
        resource_version: str | None,
    ) -> Json:
        """``pods/eviction`` (see ``InMemoryApiServer.evict``): a deletion's checks, then the
        disruption budgets'. Request thread, lock held."""
        cur = self._deletable(POD, req, uid, grace_period_seconds, resource_version)
        store, namespace = self._store, req.namespace
        check_eviction(cur, store.in_namespace(PDB, namespace), store.in_namespace(POD, namespace))
        return store.delete(cur, grace_period_seconds)

    def _deletable(
        self,
        kind: str,
        req: Req,
        uid: str | None,
        grace_period_seconds: int | None,
        resource_version: str | None,
    ) -> Json:
        """The object a deletion (or an eviction) of ``req`` removes, once the checks they
        share passed: the grace period, the object's existence, the UID and resourceVersion
        preconditions. Request thread, lock held."""
        check_grace_period(grace_period_seconds)
        cur = self._store.lookup(kind, req.namespace, req.name)
        check_delete_preconditions(cur, uid, resource_version, self._store.kinds)
        return cur

    def create(self, req: Req, data: Json) -> Json:
        """Store ``data``, a create request's new object (the server's own; a PodGroup
        admitted, an Event validated). Request thread, lock held."""
        if req.kind == POD_GROUP:  # status reset, defaults, validation
            return self._store.insert(admit_podgroup(prepare_podgroup_create(data), None))
        if memory_events.applies(data):
            memory_events.validate_create(data)
        return self._store.insert(data)

    # ================================================================ admin (takes the lock)

    def insert(self, data: Json) -> Json:
        """Store ``data``, a new object (see ``InMemoryApiServer.create``; a PodGroup
        admitted); returns a copy. Any thread."""
        if data["kind"] == POD_GROUP:
            data = admit_podgroup(data, None)
        with self._lock:
            self._store.insert(data)
        return clone(data)

    def update(self, data: Json) -> Json:
        """Replace the object ``data`` names (see ``InMemoryApiServer.update``); returns a
        copy. Any thread."""
        key = key_of(data)
        with self._lock:
            cur = self._store.objects.get(key)
            if cur is None:
                raise NotFoundError(f'{plural(key[0])} "{key[2]}" not found')
            data = updated_object(cur, data)
            if data == cur:
                return clone(cur)
            result = self._store.write(cur, data)
        return clone(result)

    def remove(
        self, kind: str, namespace: str, name: str, uid: str | None, resource_version: str | None
    ) -> Json:
        """Delete at once after the optional preconditions; returns a copy of the last state.
        Any thread."""
        with self._lock:
            cur = self._store.lookup(kind, namespace, name)
            if uid is not None:
                check_uid_precondition(cur, uid)
            if resource_version is not None:
                check_rv_precondition(cur, resource_version)
            return clone(self._store.remove(cur))

    def mark_terminating(
        self, kind: str, namespace: str, name: str, grace_period_seconds: int
    ) -> Json:
        """Set ``metadata.deletionTimestamp`` unless set; returns a copy. Any thread."""
        with self._lock:
            cur = self._store.lookup(kind, namespace, name)
            if cur["metadata"].get("deletionTimestamp"):
                return clone(cur)
            meta = {
                **cur["metadata"],
                "deletionTimestamp": now(),
                "deletionGracePeriodSeconds": grace_period_seconds,
            }
            return clone(self._store.replace(cur, {**cur, "metadata": meta}))

    def pdb_status(self, namespace: str, name: str) -> dict[str, int]:
        """The eviction's figures for PDB ``namespace/name``. Any thread."""
        with self._lock:
            pdb = self._store.lookup(PDB, namespace, name)
            return disruption_status(pdb, self._store.in_namespace(POD, namespace))
