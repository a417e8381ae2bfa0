"""``InMemoryApiServer``: the embedded apiserver the main job and the tests use.

It implements :class:`~kdispatch.ApiBackend` (``get``, ``patch_status``, ``bind``,
``delete`` — with injectable latency and faults, logged and counted) plus an admin surface
without faults or latency (``create``, ``update``, ``get_object``, ``list``, ``watch`` ...) for
tests, informers and examples.

Model: objects are JSON dicts stored by ``(kind, namespace, name)`` (namespace ``""`` for
cluster-scoped kinds such as Node). One global resourceVersion counter, as in etcd, rendered as
a decimal string; every change bumps it and emits exactly one watch event. A request that changes
nothing (a no-op patch or update) writes nothing, as the real apiserver does. Stored objects are
never mutated — every write stores a new snapshot — and callers always get their own deep copy.

Threading: one lock guards the store, the event history, the watch registry, the fault injector
and the counters. Latency sleeps happen on the calling thread outside the lock. Watch consumers
have their own queues (see :mod:`kdispatch.testing.memory_watch`), so slow consumers never
block writers.
"""

from __future__ import annotations

import base64
import builtins
import json
import secrets
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple, TypeVar

from loguru import logger

from kdispatch.actors.model.backend import PatchType, check_grace_period, check_page_limit
from kdispatch.actors.model.conditions import OMITTED_WHEN_EMPTY
from kdispatch.actors.model.errors import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    GoneError,
    InvalidInputError,
    InvalidObjectError,
    InvalidRequestError,
    NotFoundError,
)
from kdispatch.actors.model.kinds import DEFAULT_KINDS, KindTable
from kdispatch.actors.model.objects import (
    POD,
    POD_GROUP,
    RESOURCE_CLAIM,
    check_node_name,
    check_uid,
    is_dns_label,
    is_dns_subdomain,
)
from kdispatch.adapters.listing import ObjectList

from . import memory_events
from .audit import RequestRecord, request_writer
from .memory_deletion import (
    check_finalizers,
    finalized,
    held,
    keep_deletion_marks,
    mark_deleting,
)
from .memory_faults import (
    APPLY_THEN_FAIL,
    FAULTS,
    OPS,
    FaultInjector,
    FaultPlan,
    Latency,
    fault_name,
)
from .memory_leases import LeaseStore
from .memory_objects import (
    CLUSTER_SCOPED_KINDS,
    clone,
    make_claim,
    make_node,
    make_pdb,
    make_pod,
    make_podgroup,
    to_json,
)
from .memory_patch import (
    check_patch_flavour,
    json_merge,
    json_patch,
    status_merge_keys,
    strategic_merge,
)
from .memory_pdb import check_eviction, disruption_status
from .memory_podgroup import admit_podgroup, prepare_podgroup_create
from .memory_select import Predicate, both, parse_field_selector, parse_label_selector
from .memory_watch import EventType, Watch, WatchEvent

__all__ = [
    "CLUSTER_SCOPED_KINDS",
    "FAULTS",
    "OPS",
    "FaultPlan",
    "InMemoryApiServer",
    "Latency",
    "RequestRecord",
    "Watch",
    "WatchEvent",
    "make_claim",
    "make_node",
    "make_pdb",
    "make_pod",
    "make_podgroup",
    "request_writer",
]

T = TypeVar("T")
Key = tuple[str, str, str]
Json = dict[str, Any]


class _Req(NamedTuple):
    op: str
    kind: str
    namespace: str
    name: str
    uid: str

    @property
    def what(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class _Event(NamedTuple):
    rv: int
    kind: str
    namespace: str
    type: EventType
    obj: Json
    old: Json | None  # the state before a MODIFIED or DELETED (selectors, list snapshots)


ObjectPatchType = Literal["strategic", "merge", "json"]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _plural(kind: str) -> str:
    return kind.lower() + "s"


def _uid(uid: object) -> str:
    """A UID precondition as logged: ``""`` for none. Rejects non-strings."""
    if uid is None:
        return ""
    return _check_str("uid", uid)


def _check_str(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidRequestError(f"{what} must be a string, got {value!r}")
    return value


class InMemoryApiServer:
    """Thread-safe embedded apiserver. See the module docstring for the model.

    ``latency``/``faults``/``seed``: the injected latency and fault models (seeded, so a run is
    reproducible for a given request order). ``history``: how many events are kept for watches
    that resume from a resourceVersion (older → 410 Gone). ``sleep``: how latency is waited
    (inject a recorder in tests). ``kinds``: the kind table (default: the process-wide one);
    it says which kinds are cluster-scoped and fills ``apiVersion``. Objects of any kind may be
    stored, registered or not. ``cluster_scoped``: more kinds stored without a namespace.
    ``request_log_limit``: the request log keeps the newest this many records.
    ``watch_queue_limit``: a watch whose consumer falls this many live events behind is dropped
    (None: unbounded queues); a watch's initial events (its replay) are not counted, as
    kube-apiserver sends them at the consumer's pace. ``strict_claims``: validate ResourceClaim
    status updates as kube-apiserver does (``reservedFor`` needs an allocation, an allocation
    cannot be replaced); off by default because some tests and the chaos run reserve
    unallocated claims.
    """

    def __init__(
        self,
        *,
        latency: Latency | None = None,
        faults: FaultPlan | None = None,
        seed: int = 0,
        history: int = 100_000,
        sleep: Callable[[float], None] = time.sleep,
        cluster_scoped: Iterable[str] = CLUSTER_SCOPED_KINDS,
        request_log_limit: int = 200_000,
        watch_queue_limit: int | None = None,
        kinds: KindTable | None = None,
        strict_claims: bool = False,
    ) -> None:
        if kinds is not None and not isinstance(kinds, KindTable):
            raise InvalidInputError(f"kinds must be a KindTable, got {kinds!r}")
        self._kinds = kinds if kinds is not None else DEFAULT_KINDS
        limits = [("history", history), ("request_log_limit", request_log_limit)]
        if watch_queue_limit is not None:
            limits.append(("watch_queue_limit", watch_queue_limit))
        for name, value in limits:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInputError(f"{name} must be an int >= 0, got {value!r}")
        self._watch_queue_limit = watch_queue_limit
        self._strict_claims = bool(strict_claims)
        if not callable(sleep):
            raise InvalidInputError(f"sleep must be callable, got {sleep!r}")
        self._lock = threading.Lock()
        # Wakes wait_for_request; taken without _lock held by the waiter (it reads the log
        # through request_log, outside this condition), so the two never nest the other way.
        self._logged = threading.Condition(threading.Lock())
        self._log_count = 0
        self._faults = FaultInjector(latency, faults, seed)
        self._fixed_latency = self._faults.latency.jitter == 0
        self._sleep = sleep
        self._extra_cluster_scoped = frozenset(cluster_scoped)
        self._objects: dict[Key, Json] = {}
        self._rv = 0
        self._history: deque[_Event] = deque()
        self._history_limit = history
        self._floor = 0  # every event with rv > floor is in the history
        self._watches: dict[str, set[Watch]] = {}
        self._log: deque[RequestRecord] = deque(maxlen=request_log_limit)
        self._counts: Counter[str] = Counter()
        self._fault_counts: Counter[str] = Counter()
        self.leases = LeaseStore(self)  # coordination.k8s.io/v1 Leases (memory_leases.py)

    # ================================================================ ApiBackend (faultable)

    def get(self, kind: str, namespace: str, name: str) -> Json:
        """Read one object. Request thread (executor worker)."""

        def apply() -> Json:
            return self._lookup(kind, namespace, name)

        return clone(self._request(_Req("get", kind, namespace, name, ""), apply))

    def patch_status(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        uid: str | None,
        resource_version: str | None,
        patch_type: PatchType = "strategic",
    ) -> Json:
        """Patch ``status`` with UID and (optional) resourceVersion preconditions. ``patch`` may
        hold ``status`` and, like the real apiserver's optimistic-concurrency fields, a
        ``metadata`` with only ``uid``/``resourceVersion`` (extra preconditions). ``uid=None``
        (no precondition) is accepted for HTTP front ends; the dispatcher always passes one.
        A strategic patch of a kind without that flavour (a CRD) answers 415 as upstream.
        Request thread."""

        kind_flavour = self._patch_flavour(kind)

        def apply() -> Json:
            check_patch_flavour(patch_type, kind_flavour)
            status_patch, extra_uid, extra_rv = self._parse_status_patch(patch, patch_type)
            cur = self._lookup(kind, namespace, name)
            for expected in (uid, extra_uid):
                if expected is not None:
                    self._check_uid(cur, expected)
            for expected_rv in (resource_version, extra_rv):
                if expected_rv is not None:
                    self._check_rv(cur, expected_rv)
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
            self._validate_status(status)
            if kind == POD:
                status = _served_pod_status(status)
            if kind == RESOURCE_CLAIM and self._strict_claims:
                _validate_claim_status(name, cur.get("status") or {}, status)
            if status == cur.get("status", {}):
                return cur
            new = {**cur, "status": status}
            if kind == POD_GROUP:
                new = admit_podgroup(new, cur)
            return self._replace(cur, new)

        return clone(self._request(_Req("patch_status", kind, namespace, name, _uid(uid)), apply))

    def bind(self, namespace: str, name: str, *, uid: str | None, node: str) -> None:
        """Bind a pod to ``node``: sets ``spec.nodeName`` and ``PodScheduled=True``. A pod
        that is bound, being deleted or still has ``spec.schedulingGates`` is a conflict, as on
        kube-apiserver. ``uid=None``: no UID precondition (a binding without
        ``metadata.uid``). Request thread."""

        def apply() -> Json:
            try:
                check_node_name(node)
            except InvalidObjectError as err:
                raise InvalidRequestError(str(err)) from None
            cur = self._lookup(POD, namespace, name)
            if uid is not None:
                self._check_uid(cur, uid)
            bound = cur.get("spec", {}).get("nodeName")
            if bound:
                raise ConflictError(
                    f'Operation cannot be fulfilled on pods/binding "{name}": '
                    f'pod {name} is already assigned to node "{bound}"'
                )
            if cur["metadata"].get("deletionTimestamp"):
                raise ConflictError(
                    f'Operation cannot be fulfilled on pods/binding "{name}": '
                    f"pod {name} is being deleted, cannot be assigned to a host"
                )
            if cur.get("spec", {}).get("schedulingGates"):
                raise ConflictError(
                    f'Operation cannot be fulfilled on pods/binding "{name}": '
                    f"pod {name} has non-empty .spec.schedulingGates"
                )
            return self._replace(cur, _bound(cur, node))

        self._request(_Req("bind", POD, namespace, name, _uid(uid)), apply)

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str | None,
        grace_period_seconds: int | None = None,
        resource_version: str | None = None,
    ) -> None:
        """Delete with a UID (and optional resourceVersion) precondition; the object is removed
        at once (the grace period is validated, not waited) unless it has finalizers: then it
        is marked deleted and stays until they are removed
        (:mod:`~kdispatch.testing.memory_deletion`). ``uid=None``: no precondition (HTTP
        front ends). Request thread."""

        def apply() -> Json:
            check_grace_period(grace_period_seconds)
            cur = self._lookup(kind, namespace, name)
            self._check_delete_preconditions(cur, uid, resource_version)
            return self._delete_object(cur, grace_period_seconds)

        self._request(_Req("delete", kind, namespace, name, _uid(uid)), apply)

    def patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any] | builtins.list[Any],
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        subresource: str | None = None,
        patch_type: ObjectPatchType | None = None,
    ) -> Json:
        """Patch any object, or its ``status`` (``subresource="status"``), and return it.

        ``patch_type``: ``strategic`` (kinds whose flavour is strategic: a CRD answers 415,
        ``InvalidRequestError``, as upstream), ``merge`` (RFC 7386) or ``json`` (RFC 6902, a
        list of operations; a failed ``test`` answers 422 as upstream does); None: the kind's
        flavour from the kind table (``merge`` for unknown kinds). ``uid``/``resource_version``
        and a ``metadata.uid``/``metadata.resourceVersion`` in a merge patch are preconditions
        (``ConflictError``; over HTTP, :class:`~kdispatch.testing.ApiServerHTTP` answers a
        wrong body UID with kube-apiserver's 422 instead).
        As on the apiserver, a patch of the object leaves ``status`` alone for kinds with a
        status subresource, a status patch changes only ``status``, and identity fields
        (name, namespace, uid, creationTimestamp, kind, apiVersion) never change. Strategic
        merge merges the lists of a pod's and a claim's status by their upstream merge keys
        (conditions by ``type``, and so on); other lists are replaced whole. Request thread."""
        info = self._kinds.get(kind)
        kind_flavour = self._patch_flavour(kind)
        flavour = patch_type or kind_flavour
        has_status = info.status if info is not None else True

        def apply() -> Json:
            if subresource not in (None, "status"):
                raise InvalidRequestError(f"unsupported subresource {subresource!r}")
            if flavour not in ("strategic", "merge", "json"):
                raise InvalidRequestError(f"unsupported patch type {flavour!r}")
            check_patch_flavour(flavour, kind_flavour)
            try:
                body = to_json(patch, "patch")
            except InvalidObjectError as err:
                raise InvalidRequestError(str(err)) from None
            cur = self._lookup(kind, namespace, name)
            patched, preconditions = _apply_patch(cur, body, flavour)
            if uid is not None:
                preconditions.append(("uid", uid))
            if resource_version is not None:
                preconditions.append(("rv", resource_version))
            for which, expected in preconditions:
                if which == "uid":
                    self._check_uid(cur, expected)
                else:
                    self._check_rv(cur, expected)
            if not isinstance(patched, dict):
                raise InvalidRequestError("the patched object is not a JSON object")
            new = keep_deletion_marks(cur, _keep_identity(cur, patched))
            if subresource == "status":
                status = new.get("status") or {}
                if kind == POD and isinstance(status, dict):
                    status = _served_pod_status(status)
                new = {**cur, "status": status}
            elif has_status:
                new = {k: v for k, v in new.items() if k != "status"}
                if "status" in cur:
                    new["status"] = cur["status"]
            if isinstance(new.get("status"), dict):
                self._validate_status(new["status"])
                if kind == RESOURCE_CLAIM and self._strict_claims:
                    _validate_claim_status(name, cur.get("status") or {}, new["status"])
            if kind == POD_GROUP:
                new = admit_podgroup(new, cur)
            if memory_events.applies(cur):
                memory_events.validate_update(cur, new)
            if new == cur:
                return cur
            return self._write(cur, new)

        op = "patch_status" if subresource == "status" else "patch"
        return clone(self._request(_Req(op, kind, namespace, name, _uid(uid)), apply))

    def evict(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None,
        grace_period_seconds: int | None = None,
        resource_version: str | None = None,
    ) -> None:
        """``pods/eviction``: delete the pod unless a PodDisruptionBudget forbids it now
        (:class:`~kdispatch.DisruptionBudgetError`, a 429), decided as upstream's eviction
        handler decides, from figures computed over the stored pods, since no disruption
        controller keeps a budget's status here (:meth:`pdb_status` shows them).
        ``uid``/``resource_version``: the deleteOptions' preconditions (409); ``uid=None``:
        none. Request thread."""

        def apply() -> Json:
            check_grace_period(grace_period_seconds)
            cur = self._lookup(POD, namespace, name)
            self._check_delete_preconditions(cur, uid, resource_version)
            check_eviction(
                cur, self._in_namespace(PDB, namespace), self._in_namespace(POD, namespace)
            )
            return self._delete_object(cur, grace_period_seconds)

        self._request(_Req("evict", POD, namespace, name, _uid(uid)), apply)

    def pdb_status(self, namespace: str, name: str) -> dict[str, int]:
        """The figures the eviction of :meth:`evict` uses for PDB ``namespace/name``
        (``expectedPods``, ``currentHealthy``, ``desiredHealthy``, ``disruptionsAllowed``).
        No faults. Any thread."""
        with self._lock:
            pdb = self._lookup(PDB, namespace, name)
            return disruption_status(pdb, self._in_namespace(POD, namespace))

    # ================================================================ fault scripting

    def script(self, op: str, *faults: str | ApiError, name: str | None = None) -> None:
        """Make the next ``op`` requests (on object ``name`` if given) fail with ``faults``, in
        order, before any random fault. Fault names: see :data:`FAULTS`. Any thread."""
        with self._lock:
            self._faults.script(op, faults, name)

    def pending_faults(self) -> int:
        """Scripted faults that have not fired yet. Any thread."""
        with self._lock:
            return self._faults.pending_scripted()

    # ================================================================ admin (no faults)

    def create(
        self,
        obj: Mapping[str, Any] | str,
        namespace: str | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Json:
        """Store a new object (ADDED event). Fills ``metadata.uid`` (uuid4) if missing,
        ``resourceVersion``, ``creationTimestamp``, ``apiVersion`` for known kinds and namespace
        ``default`` for namespaced kinds. Raises ``AlreadyExistsError`` for a taken name. Any
        thread.

        ``create(kind, namespace, body)`` is the API request instead (as
        ``KubernetesBackend.create``; op ``create``: latency, faults, the request log): the
        server sets the UID, as kube-apiserver does; a malformed body is
        ``InvalidRequestError``. Request thread."""
        if isinstance(obj, str) and namespace is not None:
            return self._create_request(obj, namespace, body)
        data = self._new_object(obj)  # type: ignore[arg-type]  # _admin_object checks it
        if data["kind"] == POD_GROUP:
            data = admit_podgroup(data, None)
        with self._lock:
            self._insert(data)
        return clone(data)

    def _new_object(self, obj: Mapping[str, Any]) -> Json:
        data = self._admin_object(_generated_name(obj))
        meta = data["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        info = self._kinds.get(data["kind"])
        if "apiVersion" not in data and info is not None:
            data["apiVersion"] = info.api_version
        return data

    def _insert(self, data: Json) -> Json:
        """Store a new object (lock held)."""
        key = self._key_of(data)
        if key in self._objects:
            raise AlreadyExistsError(f'{_plural(key[0])} "{key[2]}" already exists')
        self._rv += 1
        data["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[key] = data
        self._emit("ADDED", data)
        return data

    def _create_request(self, kind: str, namespace: str, body: Mapping[str, Any] | None) -> Json:
        _check_str("namespace", namespace)
        if not isinstance(body, Mapping):
            raise InvalidRequestError(f"obj must be a mapping, got {type(body).__name__}")
        try:
            data = to_json(body, "obj")
            data["kind"] = kind
            meta = data.get("metadata")
            if isinstance(meta, dict):
                meta.pop("uid", None)
                meta.pop("resourceVersion", None)
                if namespace:
                    meta["namespace"] = namespace
            data = self._new_object(data)
        except InvalidObjectError as err:
            raise InvalidRequestError(str(err)) from None

        def apply() -> Json:
            if kind == POD_GROUP:  # status reset, defaults, validation
                return self._insert(admit_podgroup(prepare_podgroup_create(data), None))
            if memory_events.applies(data):
                memory_events.validate_create(data)
            return self._insert(data)

        name = data["metadata"]["name"]  # generated from generateName, if it had none
        req = _Req("create", kind, namespace, str(name), "")
        return clone(self._request(req, apply))

    def update(self, obj: Mapping[str, Any]) -> Json:
        """Replace an object (e.g. a kubelet status update; MODIFIED event). A
        ``resourceVersion`` or ``uid`` in ``obj`` must match the stored one (``ConflictError``);
        the stored uid, creationTimestamp and deletionTimestamp are kept. Any thread."""
        data = self._admin_object(obj)
        key = self._key_of(data)
        with self._lock:
            cur = self._objects.get(key)
            if cur is None:
                raise NotFoundError(f'{_plural(key[0])} "{key[2]}" not found')
            meta = data["metadata"]
            if "uid" in meta:
                self._check_uid(cur, meta["uid"])
            if "resourceVersion" in meta:
                self._check_rv(cur, meta["resourceVersion"])
            for field in ("uid", "creationTimestamp", "resourceVersion"):
                if field in cur["metadata"]:
                    meta[field] = cur["metadata"][field]
            data = keep_deletion_marks(cur, data)
            if data["kind"] == POD_GROUP:
                data = admit_podgroup(data, cur)
            if data == cur:
                return clone(cur)
            result = self._write(cur, data)
        return clone(result)

    def remove(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Json:
        """Delete without faults or logging (e.g. the kubelet finishing a graceful deletion);
        returns the last state. ``NotFoundError`` if missing; optional ``uid`` and
        ``resource_version`` preconditions (``ConflictError``), checked atomically. Any
        thread."""
        with self._lock:
            cur = self._lookup(kind, namespace, name)
            if uid is not None:
                self._check_uid(cur, uid)
            if resource_version is not None:
                self._check_rv(cur, resource_version)
            return clone(self._remove(cur))

    def mark_terminating(
        self, kind: str, namespace: str, name: str, grace_period_seconds: int = 30
    ) -> Json:
        """Set ``metadata.deletionTimestamp`` (a graceful deletion in progress; MODIFIED event).
        Idempotent. Any thread."""
        with self._lock:
            cur = self._lookup(kind, namespace, name)
            if cur["metadata"].get("deletionTimestamp"):
                return clone(cur)
            meta = {
                **cur["metadata"],
                "deletionTimestamp": _now(),
                "deletionGracePeriodSeconds": grace_period_seconds,
            }
            return clone(self._replace(cur, {**cur, "metadata": meta}))

    def get_object(self, kind: str, namespace: str, name: str) -> Json | None:
        """The stored object (a copy) or None. No faults, latency or logging. Any thread."""
        with self._lock:
            obj = self._objects.get(self._key(kind, namespace, name))
        return None if obj is None else clone(obj)

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ObjectList:
        """The objects of ``kind`` (in ``namespace`` if given, matching the selectors if
        given), sorted by namespace and name, as :meth:`KubernetesBackend.list
        <kdispatch.KubernetesBackend.list>` returns them: an :class:`~kdispatch.ObjectList`
        of the items, the resourceVersion to watch from and the next page's token. Every
        object unless ``limit`` asks for a page: at most ``limit`` objects after
        ``continue_token``, and the token of the next page (None on the last). As with etcd,
        every page is a snapshot at the first page's resourceVersion (the token carries it)
        and reports that resourceVersion; ``GoneError`` (410 Expired) when the event history
        no longer reaches back to it (after :meth:`compact`, or ``history`` events later).
        Any thread."""
        _check_str("kind", kind)
        if namespace is not None:
            _check_str("namespace", namespace)
        check_page_limit(limit)
        page = _decode_continue(continue_token)
        matches = _predicate(label_selector, field_selector)
        scoped = self._scoped(kind)
        after: tuple[str, str] | None = None
        with self._lock:
            if page is None:
                at, stored = self._rv, self._objects.items()
            else:
                at, after = page
                stored = self._objects_at(kind, at).items()
            snapshots = [
                obj
                for (k, ns, _), obj in stored
                if k == kind and (namespace is None or scoped or ns == namespace)
            ]
        rv = str(at)
        snapshots.sort(key=_sort_key)
        if after is not None:
            snapshots = [o for o in snapshots if _sort_key(o) > after]
        if matches is not None:
            snapshots = [o for o in snapshots if matches(o)]
        token = None
        if limit is not None and len(snapshots) > limit:
            snapshots = snapshots[:limit]
            token = _encode_continue(at, _sort_key(snapshots[-1]))
        return ObjectList([clone(o) for o in snapshots], rv, token)

    def watch(
        self,
        kind: str,
        *,
        resource_version: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Watch:
        """Open a watch on ``kind`` (in ``namespace`` if given; with selectors, only objects
        that match: one that starts matching arrives as ADDED, one that stops as DELETED, as
        the apiserver's watch cache does).

        ``resource_version``: None or ``""`` → only changes from now on; ``"0"`` → the current
        objects as synthetic ADDED events, then changes (the apiserver's "any version"); a
        resourceVersion ``R`` → every change with rv > R, then live ones, or ``GoneError`` (410)
        when the history no longer reaches back to R. Any thread.
        """
        _check_str("kind", kind)
        if namespace is not None:
            _check_str("namespace", namespace)
        if resource_version is not None and not isinstance(resource_version, str):
            raise InvalidRequestError(
                f"resource_version must be a string, got {resource_version!r}"
            )
        if resource_version and not resource_version.isdigit():
            raise InvalidRequestError(f"invalid resourceVersion {resource_version!r}")
        scope = None if self._scoped(kind) else namespace
        w = Watch(
            kind,
            scope,
            self._unregister,
            self._watch_queue_limit,
            _predicate(label_selector, field_selector),
        )
        with self._lock:
            if resource_version == "0":
                for (k, ns, _), obj in sorted(self._objects.items()):
                    if k == kind and w.matches(ns):
                        w.push("ADDED", obj, initial=True)
            elif resource_version:
                since = int(resource_version)
                if since < self._floor:
                    raise GoneError(f"too old resource version: {since} ({self._floor})")
                replay: builtins.list[_Event] = []
                for event in reversed(self._history):
                    if event.rv <= since:
                        break
                    if event.kind == kind and w.matches(event.namespace):
                        replay.append(event)
                for event in reversed(replay):
                    w.push(event.type, event.obj, event.old, initial=True)
            self._watches.setdefault(kind, set()).add(w)
        return w

    def drop_watches(self) -> int:
        """End every open watch as a dropped connection would; returns how many. Any thread."""
        with self._lock:
            watches = [w for ws in self._watches.values() for w in ws]
            self._watches.clear()
            dropped = sum(1 for w in watches if w.end(dropped=True))
        logger.debug("dropped {} watches", dropped)
        return dropped

    def compact(self) -> None:
        """Forget the event history (like an etcd compaction): a watch from any resourceVersion
        older than the current one gets 410 Gone, and so does the next page of a list begun
        before. Any thread."""
        with self._lock:
            self._history.clear()
            self._floor = self._rv

    # ================================================================ observation

    @property
    def request_log(self) -> builtins.list[RequestRecord]:
        """A copy of the request log (oldest first). Any thread."""
        with self._lock:
            return list(self._log)

    def wait_for_request(
        self,
        op: str,
        *,
        name: str | None = None,
        outcome: str | None = None,
        timeout: float = 10.0,
    ) -> RequestRecord:
        """Block until the log holds a request ``op`` (on ``name``, with ``outcome``, where
        given) and return the first such record; :class:`TimeoutError` after ``timeout``
        seconds. For tests that must know a call reached the server (e.g. met its scripted
        429) before they go on. Any thread but the one serving requests."""
        deadline = time.monotonic() + timeout
        while True:
            with self._logged:
                seen = self._log_count
            for record in self.request_log:
                if (
                    record.op == op
                    and name in (None, record.name)
                    and outcome in (None, record.outcome)
                ):
                    return record
            with self._logged:
                left = deadline - time.monotonic()
                if self._log_count == seen and (
                    left <= 0 or not self._logged.wait_for(self._log_moved(seen), left)
                ):
                    what = (
                        f"{op}"
                        + (f" of {name}" if name else "")
                        + (f" answered {outcome}" if outcome else "")
                    )
                    raise TimeoutError(f"no request {what} within {timeout:g} s")

    def _log_moved(self, seen: int) -> Callable[[], bool]:
        return lambda: self._log_count != seen

    def counts(self) -> dict[str, int]:
        """Successful requests per op (every op of :data:`OPS` present). Any thread."""
        with self._lock:
            return {op: self._counts[op] for op in sorted(OPS)}

    def fault_counts(self) -> dict[str, int]:
        """Injected faults (scripted and random) by name. Any thread."""
        with self._lock:
            return dict(self._fault_counts)

    @property
    def non_blocking(self) -> bool:
        """Whether no request ever waits (no latency configured). Then the dispatcher may run
        requests on its actor threads instead of handing them to executor workers. Any
        thread."""
        lat = self._faults.latency
        return lat.fixed == 0 and lat.jitter == 0 and not any(lat.per_op.values())

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion. Any thread."""
        with self._lock:
            return str(self._rv)

    # ================================================================ internals

    def _request(self, req: _Req, apply: Callable[[], T]) -> T:
        """Latency, then fault draw, apply, log and count under the lock. Request thread."""
        if self._fixed_latency:
            delay = self._faults.latency.base(req.op)
        else:
            with self._lock:
                delay = self._faults.delay(req.op)
        if delay > 0:
            self._sleep(delay)
        with self._lock:
            fault = self._faults.draw(req.op, req.name)
            if fault is not None and fault != APPLY_THEN_FAIL:
                self._fault(req, fault_name(fault))
                raise self._faults.error(fault, req.op, req.what)
            try:
                result = apply()
            except ApiError as err:
                if fault == APPLY_THEN_FAIL:
                    self._fault(req, APPLY_THEN_FAIL)
                    raise self._faults.error(fault, req.op, req.what) from err
                self._record(req, err.reason)
                raise
            if fault == APPLY_THEN_FAIL:
                self._fault(req, APPLY_THEN_FAIL)
                raise self._faults.error(fault, req.op, req.what)
            self._counts[req.op] += 1
            self._record(req, "ok")
            return result

    def _fault(self, req: _Req, fault: str) -> None:
        self._fault_counts[fault] += 1
        self._record(req, fault)
        logger.debug("injected {} on {} {}", fault, req.op, req.what)

    def _record(self, req: _Req, outcome: str) -> None:
        self._log.append(
            RequestRecord(
                req.op,
                req.kind,
                req.namespace,
                req.name,
                req.uid,
                outcome,
                time.monotonic(),
                request_writer.get(),
            )
        )
        with self._logged:
            self._log_count += 1
            self._logged.notify_all()

    def _in_namespace(self, kind: str, namespace: str) -> builtins.list[Json]:
        """Stored objects of ``kind`` in ``namespace`` (snapshots). Lock held."""
        return [o for (k, ns, _), o in self._objects.items() if k == kind and ns == namespace]

    def _patch_flavour(self, kind: str) -> str:
        """The patch flavour ``kind`` takes (its kind table row; ``merge`` for unknown kinds)."""
        info = self._kinds.get(kind)
        return info.patch if info is not None else "merge"

    def _scoped(self, kind: str) -> bool:
        """Whether ``kind`` is cluster-scoped (stored under namespace ``""``)."""
        if kind in self._extra_cluster_scoped:
            return True
        info = self._kinds.get(kind)
        return info is not None and not info.namespaced

    def _key(self, kind: str, namespace: str, name: str) -> Key:
        _check_str("kind", kind)
        _check_str("namespace", namespace)
        _check_str("name", name)
        return (kind, "" if self._scoped(kind) else namespace, name)

    def _lookup(self, kind: str, namespace: str, name: str) -> Json:
        """The stored snapshot (never to be mutated or handed out). Lock held."""
        obj = self._objects.get(self._key(kind, namespace, name))
        if obj is None:
            raise NotFoundError(f'{_plural(kind)} "{name}" not found')
        return obj

    def _key_of(self, data: Json) -> Key:
        meta = data["metadata"]
        return (data["kind"], meta.get("namespace", ""), meta["name"])

    def _objects_at(self, kind: str, rv: int) -> dict[Key, Json]:
        """The objects of ``kind`` as they were at resourceVersion ``rv``, by key: the stored
        ones with every later event undone, newest first. ``GoneError`` (410 Expired, as etcd
        answers a compacted continue token) when the history no longer reaches back to ``rv``.
        Lock held."""
        if rv > self._rv:
            raise InvalidRequestError("invalid continue token", status=400)
        if rv < self._floor:
            raise GoneError(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter."
            )
        objects = {key: obj for key, obj in self._objects.items() if key[0] == kind}
        for event in reversed(self._history):
            if event.rv <= rv:
                break
            if event.kind != kind:
                continue
            key = self._key_of(event.obj)
            if event.type == "ADDED":
                del objects[key]
            else:
                assert event.old is not None, "MODIFIED and DELETED keep the state before"
                objects[key] = event.old
        return objects

    def _admin_object(self, obj: Mapping[str, Any]) -> Json:
        """Validated owned copy of an object given to create/update, namespace normalised."""
        if not isinstance(obj, Mapping):
            raise InvalidObjectError(f"object must be a mapping, got {type(obj).__name__}")
        data: Json = to_json(obj)
        kind = data.get("kind")
        if not isinstance(kind, str) or not kind:
            raise InvalidObjectError("object has no kind")
        meta = data.get("metadata")
        if not isinstance(meta, dict):
            raise InvalidObjectError("object has no metadata")
        if not meta.get("name"):
            raise InvalidObjectError(
                f'{self._qualified(kind)} "" is invalid: metadata.name: Required value: name or '
                "generateName is required"
            )
        if not is_dns_subdomain(meta.get("name")):
            raise InvalidObjectError(f"invalid name {meta.get('name')!r}")
        if self._scoped(kind):
            meta.pop("namespace", None)
        else:
            meta.setdefault("namespace", "default")
            if not is_dns_label(meta["namespace"]):
                raise InvalidObjectError(f"invalid namespace {meta['namespace']!r}")
        if "uid" in meta:
            check_uid(meta["uid"])
        return data

    def _check_uid(self, cur: Json, uid: object) -> None:
        actual = cur["metadata"].get("uid")
        if uid != actual:
            raise ConflictError(
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
            )

    def _check_delete_preconditions(
        self, cur: Json, uid: str | None, resource_version: str | None
    ) -> None:
        """A deletion's (or an eviction's) ``preconditions``. Lock held."""
        if uid is not None and uid != cur["metadata"].get("uid"):
            raise self._delete_conflict(
                cur, "UID", uid, cur["metadata"].get("uid"), "deleted and then recreated"
            )
        rv = cur["metadata"].get("resourceVersion")
        if resource_version is not None and resource_version != rv:
            raise self._delete_conflict(cur, "ResourceVersion", resource_version, rv, "modified")

    def _delete_conflict(
        self, cur: Json, field: str, expected: object, actual: object, why: str
    ) -> ConflictError:
        """A deletion's failed precondition, worded as kube-apiserver's ``BeforeDelete`` words
        it: on the kind (``Pod``, ``ResourceClaim.resource.k8s.io``), not the resource."""
        return ConflictError(
            f"Operation cannot be fulfilled on {self._qualified(cur['kind'])} "
            f'"{cur["metadata"]["name"]}": the '
            f"{field} in the precondition ({expected}) does not match the {field} in record "
            f"({actual}). The object might have been {why}"
        )

    def _qualified(self, kind: str) -> str:
        """``Pod``, ``ResourceClaim.resource.k8s.io``: how kube-apiserver names a kind in a
        precondition conflict or a 422 message."""
        info = self._kinds.get(kind)
        return f"{kind}.{info.group}" if info is not None and info.group else kind

    def _check_rv(self, cur: Json, rv: object) -> None:
        if rv != cur["metadata"].get("resourceVersion"):
            raise ConflictError(
                f"Operation cannot be fulfilled on {_plural(cur['kind'])} "
                f'"{cur["metadata"]["name"]}": the object has been modified; please apply your '
                "changes to the latest version and try again"
            )

    @staticmethod
    def _parse_status_patch(
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

    @staticmethod
    def _validate_status(status: Json) -> None:
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

    def _replace(self, cur: Json, new: Json) -> Json:
        """Store ``new`` (sharing structure with ``cur``) with a fresh rv; MODIFIED. Lock held."""
        self._rv += 1
        new = {**new, "metadata": {**new["metadata"], "resourceVersion": str(self._rv)}}
        self._objects[self._key_of(cur)] = new
        self._emit("MODIFIED", new, cur)
        return new

    def _write(self, cur: Json, new: Json) -> Json:
        """Store a patched or replaced ``new``: refused when it adds a finalizer to an object
        being deleted; removes the object when it drops the last finalizer its deletion waited
        for (the reply is ``new`` at ``cur``'s resourceVersion). Lock held."""
        check_finalizers(cur, new, self._qualified(cur["kind"]))
        if finalized(cur, new):
            self._remove(cur)
            return new
        return self._replace(cur, new)

    def _delete_object(self, cur: Json, grace_period_seconds: int | None) -> Json:
        """Remove ``cur``, or mark it deleted while finalizers hold it; returns its state after
        the deletion. Lock held."""
        if not held(cur):
            return self._remove(cur)
        marked = mark_deleting(cur, grace_period_seconds)
        return cur if marked is None else self._replace(cur, marked)

    def _remove(self, cur: Json) -> Json:
        """Delete ``cur``; DELETED with the last state at a fresh rv. Lock held."""
        del self._objects[self._key_of(cur)]
        self._rv += 1
        last = {**cur, "metadata": {**cur["metadata"], "resourceVersion": str(self._rv)}}
        self._emit("DELETED", last, cur)
        return last

    def _emit(self, event_type: EventType, obj: Json, old: Json | None = None) -> None:
        """Record an event at the current rv and deliver it to the matching watches. Lock
        held."""
        kind = obj["kind"]
        namespace = obj["metadata"].get("namespace", "")
        if self._history_limit == 0:
            self._floor = self._rv
        else:
            if len(self._history) >= self._history_limit:
                self._floor = self._history.popleft().rv
            self._history.append(_Event(self._rv, kind, namespace, event_type, obj, old))
        watches = self._watches.get(kind)
        if not watches:
            return
        overflowed = [
            w for w in watches if w.matches(namespace) and not w.push(event_type, obj, old)
        ]
        for w in overflowed:
            watches.discard(w)
            logger.debug("dropped a {} watch that fell behind", kind)

    def _unregister(self, w: Watch) -> None:
        """Forget a stopped watch. Consumer thread; never called with the watch lock held."""
        with self._lock:
            watches = self._watches.get(w.kind)
            if watches is not None:
                watches.discard(w)


_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The characters of a generated name's suffix (apimachinery's ``util/rand``)."""


def _generated_name(obj: Mapping[str, Any]) -> Mapping[str, Any]:
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


def _bound(pod: Json, node: str) -> Json:
    """``pod`` with ``spec.nodeName = node`` and the PodScheduled condition set to True
    (replacing any previous PodScheduled entry, as the binding subresource does)."""
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
        "lastTransitionTime": since or _now(),
    }
    if previous is None:
        conditions.append(scheduled)
    else:
        conditions = [scheduled if c is previous else c for c in conditions]
    status["conditions"] = conditions
    return {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}, "status": status}


def _sort_key(obj: Json) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _encode_continue(rv: int, key: tuple[str, str]) -> str:
    """The next page's token, as etcd's: the list's resourceVersion and the last key served."""
    body = {"v": "meta.k8s.io/v1", "rv": rv, "start": list(key)}
    raw = json.dumps(body, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _decode_continue(token: object) -> tuple[int, tuple[str, str]] | None:
    """The resourceVersion and the last key of a token from :func:`_encode_continue`; None
    for no token, 400 ``invalid continue token`` for anything else."""
    if token is None or token == "":
        return None
    if not isinstance(token, str):
        raise InvalidRequestError(f"continue must be a string, got {token!r}")
    try:
        body = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (ValueError, UnicodeError):
        raise InvalidRequestError("invalid continue token", status=400) from None
    rv = body.get("rv") if isinstance(body, dict) else None
    key = body.get("start") if isinstance(body, dict) else None
    if (
        isinstance(rv, bool)
        or not isinstance(rv, int)
        or rv < 1
        or not (isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key))
    ):
        raise InvalidRequestError("invalid continue token", status=400)
    return rv, (key[0], key[1])


def _predicate(label_selector: str | None, field_selector: str | None) -> Predicate | None:
    for name, value in (("label_selector", label_selector), ("field_selector", field_selector)):
        if value is not None and not isinstance(value, str):
            raise InvalidRequestError(f"{name} must be a string, got {value!r}")
    return both(parse_label_selector(label_selector), parse_field_selector(field_selector))


PDB = "PodDisruptionBudget"
_IDENTITY = ("name", "namespace", "uid", "creationTimestamp", "resourceVersion")


def _keep_identity(cur: Json, new: Json) -> Json:
    """``new`` with ``cur``'s kind, apiVersion and identity metadata (never patched)."""
    meta = new.get("metadata")
    meta = dict(meta) if isinstance(meta, dict) else {}
    for field in _IDENTITY:
        if field in cur["metadata"]:
            meta[field] = cur["metadata"][field]
        else:
            meta.pop(field, None)
    out = {**new, "metadata": meta, "kind": cur["kind"]}
    if "apiVersion" in cur:
        out["apiVersion"] = cur["apiVersion"]
    return out


def _apply_patch(
    cur: Json, body: Any, flavour: str
) -> tuple[Any, builtins.list[tuple[str, object]]]:
    """(the patched object, the preconditions a merge patch's metadata carries)."""
    preconditions: builtins.list[tuple[str, object]] = []
    if flavour == "json":
        if not isinstance(body, list):
            raise InvalidRequestError("a JSON patch must be a list of operations")
        return json_patch(cur, body), preconditions
    if not isinstance(body, dict):
        raise InvalidRequestError("a merge patch must be a JSON object")
    meta = body.get("metadata")
    if isinstance(meta, dict):
        if "uid" in meta:
            preconditions.append(("uid", meta["uid"]))
        if "resourceVersion" in meta:
            preconditions.append(("rv", meta["resourceVersion"]))
    if flavour == "strategic":
        keys = {("status", *p): k for p, k in status_merge_keys(cur["kind"]).items()}
        return strategic_merge(cur, body, keys), preconditions
    merged = json_merge(cur, body)
    return (merged if isinstance(merged, dict) else {}), preconditions


def _validate_claim_status(name: str, old: Json, new: Json) -> None:
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


def _served_pod_status(status: Json) -> Json:
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
