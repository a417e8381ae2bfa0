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

Parts: the object store with its event history and watches
(:mod:`kdispatch.testing.memory_store`); the request path with latency, faults, the request log
and the counters (:mod:`kdispatch.testing.memory_requests`); what each verb does to the store
(:mod:`kdispatch.testing.memory_verbs`), by the pure rules of
:mod:`kdispatch.testing.memory_rules`, :mod:`kdispatch.testing.memory_status`,
:mod:`kdispatch.testing.memory_patch` and their siblings. This module is the public face: the
arguments a request checks before it is served, and which part serves it.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from kdispatch.actors.model.backend import PatchType, check_page_limit
from kdispatch.actors.model.errors import (
    ApiError,
    InvalidInputError,
    InvalidObjectError,
    InvalidRequestError,
)
from kdispatch.actors.model.kinds import DEFAULT_KINDS, KindTable
from kdispatch.actors.model.objects import POD
from kdispatch.adapters.listing import ObjectList

from .audit import RequestRecord, request_writer
from .memory_faults import FAULTS, OPS, FaultInjector, FaultPlan, Latency
from .memory_leases import LeaseStore
from .memory_objects import (
    CLUSTER_SCOPED_KINDS,
    clone,
    make_claim,
    make_node,
    make_pdb,
    make_pod,
    make_podgroup,
)
from .memory_requests import Req, RequestGate
from .memory_rules import check_str, create_body, logged_uid
from .memory_store import ObjectStore
from .memory_verbs import Verbs
from .memory_watch import Watch, WatchEvent

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

Json = dict[str, Any]
ObjectPatchType = Literal["strategic", "merge", "json"]


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
        kinds = kinds if kinds is not None else DEFAULT_KINDS
        limits = [("history", history), ("request_log_limit", request_log_limit)]
        if watch_queue_limit is not None:
            limits.append(("watch_queue_limit", watch_queue_limit))
        for name, value in limits:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInputError(f"{name} must be an int >= 0, got {value!r}")
        if not callable(sleep):
            raise InvalidInputError(f"sleep must be callable, got {sleep!r}")
        self._lock = threading.Lock()  # guards the store, the verbs' writes and the requests'
        injector = FaultInjector(latency, faults, seed)
        self._requests = RequestGate(self._lock, injector, sleep, request_log_limit)
        self._store = ObjectStore(self._lock, kinds, cluster_scoped, history, watch_queue_limit)
        self._verbs = Verbs(self._lock, self._store, bool(strict_claims))
        self.leases = LeaseStore(self)  # coordination.k8s.io/v1 Leases (memory_leases.py)

    # ================================================================ ApiBackend (faultable)

    def get(self, kind: str, namespace: str, name: str) -> Json:
        """Read one object. Request thread (executor worker)."""
        return clone(self._requests.run(Req("get", kind, namespace, name, ""), self._verbs.get))

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
        req = Req("patch_status", kind, namespace, name, logged_uid(uid))
        return clone(
            self._requests.run(
                req, self._verbs.patch_status, patch, uid, resource_version, patch_type
            )
        )

    def bind(self, namespace: str, name: str, *, uid: str | None, node: str) -> None:
        """Bind a pod to ``node``: sets ``spec.nodeName`` and ``PodScheduled=True``. A pod
        that is bound, being deleted or still has ``spec.schedulingGates`` is a conflict, as on
        kube-apiserver. ``uid=None``: no UID precondition (a binding without
        ``metadata.uid``). Request thread."""
        req = Req("bind", POD, namespace, name, logged_uid(uid))
        self._requests.run(req, self._verbs.bind, uid, node)

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
        req = Req("delete", kind, namespace, name, logged_uid(uid))
        self._requests.run(req, self._verbs.delete, uid, grace_period_seconds, resource_version)

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

        def apply(req: Req) -> Json:
            return self._verbs.patch(
                req,
                patch,
                uid=uid,
                resource_version=resource_version,
                subresource=subresource,
                patch_type=patch_type,
            )

        op = "patch_status" if subresource == "status" else "patch"
        return clone(self._requests.run(Req(op, kind, namespace, name, logged_uid(uid)), apply))

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
        req = Req("evict", POD, namespace, name, logged_uid(uid))
        self._requests.run(req, self._verbs.evict, uid, grace_period_seconds, resource_version)

    def pdb_status(self, namespace: str, name: str) -> dict[str, int]:
        """The figures the eviction of :meth:`evict` uses for PDB ``namespace/name``
        (``expectedPods``, ``currentHealthy``, ``desiredHealthy``, ``disruptionsAllowed``).
        No faults. Any thread."""
        return self._verbs.pdb_status(namespace, name)

    # ================================================================ fault scripting

    def script(self, op: str, *faults: str | ApiError, name: str | None = None) -> None:
        """Make the next ``op`` requests (on object ``name`` if given) fail with ``faults``, in
        order, before any random fault. Fault names: see :data:`FAULTS`. Any thread."""
        self._requests.script(op, faults, name)

    def pending_faults(self) -> int:
        """Scripted faults that have not fired yet. Any thread."""
        return self._requests.pending_faults()

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
        data = self._store.new_object(obj)  # type: ignore[arg-type]  # admin_object checks it
        return self._verbs.insert(data)

    def _create_request(self, kind: str, namespace: str, body: Mapping[str, Any] | None) -> Json:
        """``create(kind, namespace, body)``: the API request. Request thread."""
        check_str("namespace", namespace)
        if not isinstance(body, Mapping):
            raise InvalidRequestError(f"obj must be a mapping, got {type(body).__name__}")
        try:
            data = self._store.new_object(create_body(kind, namespace, body))
        except InvalidObjectError as err:
            raise InvalidRequestError(str(err)) from None
        name = data["metadata"]["name"]  # generated from generateName, if it had none
        req = Req("create", kind, namespace, str(name), "")
        return clone(self._requests.run(req, self._verbs.create, data))

    def update(self, obj: Mapping[str, Any]) -> Json:
        """Replace an object (e.g. a kubelet status update; MODIFIED event). A
        ``resourceVersion`` or ``uid`` in ``obj`` must match the stored one (``ConflictError``);
        the stored uid, creationTimestamp and deletionTimestamp are kept. Any thread."""
        return self._verbs.update(self._store.admin_object(obj))

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
        return self._verbs.remove(kind, namespace, name, uid, resource_version)

    def mark_terminating(
        self, kind: str, namespace: str, name: str, grace_period_seconds: int = 30
    ) -> Json:
        """Set ``metadata.deletionTimestamp`` (a graceful deletion in progress; MODIFIED event).
        Idempotent. Any thread."""
        return self._verbs.mark_terminating(kind, namespace, name, grace_period_seconds)

    def get_object(self, kind: str, namespace: str, name: str) -> Json | None:
        """The stored object (a copy) or None. No faults, latency or logging. Any thread."""
        with self._lock:
            obj = self._store.objects.get(self._store.key(kind, namespace, name))
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
        check_str("kind", kind)
        if namespace is not None:
            check_str("namespace", namespace)
        check_page_limit(limit)
        return self._store.listing(
            kind,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
        )

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
        check_str("kind", kind)
        if namespace is not None:
            check_str("namespace", namespace)
        if resource_version is not None and not isinstance(resource_version, str):
            raise InvalidRequestError(
                f"resource_version must be a string, got {resource_version!r}"
            )
        if resource_version and not resource_version.isdigit():
            raise InvalidRequestError(f"invalid resourceVersion {resource_version!r}")
        return self._store.open_watch(
            kind,
            resource_version,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )

    def drop_watches(self) -> int:
        """End every open watch as a dropped connection would; returns how many. Any thread."""
        return self._store.drop_watches()

    def compact(self) -> None:
        """Forget the event history (like an etcd compaction): a watch from any resourceVersion
        older than the current one gets 410 Gone, and so does the next page of a list begun
        before. Any thread."""
        self._store.compact()

    # ================================================================ observation

    @property
    def request_log(self) -> builtins.list[RequestRecord]:
        """A copy of the request log (oldest first). Any thread."""
        return self._requests.log()

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
        return self._requests.wait_for(op, name, outcome, timeout)

    def counts(self) -> dict[str, int]:
        """Successful requests per op (every op of :data:`OPS` present). Any thread."""
        return self._requests.counts()

    def fault_counts(self) -> dict[str, int]:
        """Injected faults (scripted and random) by name. Any thread."""
        return self._requests.fault_counts()

    @property
    def non_blocking(self) -> bool:
        """Whether no request ever waits (no latency configured). Then the dispatcher may run
        requests on its actor threads instead of handing them to executor workers. Any
        thread."""
        return self._requests.non_blocking

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion. Any thread."""
        with self._lock:
            return str(self._store.rv)
