"""The scheduler: informer callbacks in, scheduling cycles on N threads, binding cycles and
preemptions as call groups.

Scheduling cycle (a scheduling thread, one pod): nominated node first, else filter and score;
reserve the best node in the assume-cache (re-checked under its lock, so concurrent cycles never
double-book); hand the pod to the binding cycle. A pod that fits nowhere may preempt (see
:mod:`examples.scheduler.preemption`), otherwise it gets ``PodScheduled=False`` through the API
layer *without waiting* and backs off (``backoff_initial`` doubling up to ``backoff_max``), to
be retried as long as the scheduler runs, and earlier when a node is added or a bound pod is
deleted (:meth:`~examples.scheduler.queue.SchedulingQueue.move_unschedulable`).

Events, as kube-scheduler records them (``reportingController`` = the scheduler's name):
``Scheduled`` (action ``Binding``) once a binding succeeded, ``FailedScheduling`` (``Scheduling``,
a Warning) with every ``PodScheduled=False`` patch, ``Preempted`` (``Preempting``, on the victim,
related to the preemptor) once a victim's preemption succeeded.

Binding cycle: allocate/reserve the pod's ResourceClaims, then bind, as the steps of one call
group owned by the pod (:meth:`SchedulerApi.group <examples.scheduler.api.SchedulerApi.group>`):
the binding is submitted at once, held until every claim write succeeded (retries included),
and the pod's deletion withdraws what is not yet sent. One continuation on the binding's future
runs on a scheduling thread once it resolves, so with the dispatcher no thread ever blocks on
the apiserver or on a future (with ``--pre-kep`` or ``--all-blocking`` the blocking happens
inside ``submit``, on whichever thread the API layer runs the call). On failure the pod is
un-assumed, the claims written for it deallocated, and it is requeued with backoff; after
``max_bind_failures`` failures in a row it gets ``PodScheduled=False`` (reason
``SchedulerError``) and backs off as an unschedulable pod, retried as long as the scheduler runs.

Preemption: the preemptor's nomination and its victims' preemptions are one call group owned by
the preemptor, each victim held until the nomination succeeded.

PodGroups (Kubernetes 1.37, :mod:`examples.scheduler.podgroups`): a pod that names a ``gang``
group (``spec.schedulingGroup.podGroupName``) is scheduled with its group, all or nothing. The
cycle of any member takes every pending member of the group; with fewer than the gang still
needs (``minCount`` less the members bound or binding), they wait (:attr:`Phase.WAITING`, no API
call, as kube-scheduler holds them before its queue) until another member or the PodGroup
arrives. Otherwise each member is filtered and assumed in turn, so the members compete for room
with one another; if one fits nowhere, every member is un-assumed, gets ``PodScheduled=False``
and a ``FailedScheduling`` Event with the gang's reason, the PodGroup gets
``PodGroupInitiallyScheduled=False`` (reason ``Unschedulable``), and the members wait as unfit
pods do. Gang members never preempt. If all fit, their bindings go through one gang
(:meth:`SchedulerApi.gang <examples.scheduler.api.SchedulerApi.gang>`): held until every member
was submitted, then released together; the PodGroup's ``PodGroupInitiallyScheduled=True``
(reason ``Scheduled``) is submitted at once, held until every member was bound. Each member's
binding has its own continuation, as a single pod's. A failure before the release withdraws
every member: each is un-assumed and requeued with backoff, and the PodGroup's write is never
sent. After the release (:class:`~kdispatch.GangPartiallyBound`), the members bound stay bound,
the failed ones are requeued as usual, and their next cycle places the members the gang still
needs, as a gang again; ``PodGroupInitiallyScheduled=True`` is written once that gang is bound
(it never goes back to False, and the scheduler never sends a False over a True). A ``basic``
group's pods are scheduled one by one, with no PodGroup status. None of these calls blocks the
scheduling thread (with ``--pre-kep`` and ``--all-blocking``, the PodGroup status write blocks
it, as kube-scheduler's synchronous write did).

Pacing (``max_backlog``): ``submit`` never blocks, so a loop that decides faster than the
apiserver answers piles up calls, and each binding waits for all decided before it. With
``max_backlog`` a scheduling thread takes its next item only once fewer calls than that are
unresolved in the lane of ``pace_on`` and the lanes above it
(:meth:`~kdispatch.DispatcherLike.wait_backlog`, woken by the resolutions), so the pods wait in
the queue, undecided, instead. The default, the binding lane, counts bindings, preemptions and
evictions, never status patches or Events: the executor sends a binding before the patches
anyway, so a thread that waited for them would hold its next binding back behind them
(kubernetes#135900, moved into the loop). The backlog may exceed the bound by what the cycles
already past the check submit (about one call each).
"""

from __future__ import annotations

import enum
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from loguru import logger

from examples.scheduler.api import Backlogged, SchedulerApi
from examples.scheduler.cache import Allocation, SchedulerCache
from examples.scheduler.claims import ClaimStore, allocation_for
from examples.scheduler.framework import Filtered, Framework
from examples.scheduler.nominator import Nominator, Reservations
from examples.scheduler.podgroups import GroupInfo, PodGroups, gang_message
from examples.scheduler.podinfo import PodInfo
from examples.scheduler.preemption import UNRESOLVABLE, Preemptions, select_victims
from examples.scheduler.queue import SchedulingQueue
from examples.scheduler.steps import CallFuture, GangSteps, Steps
from examples.scheduler.tracker import BIND, CLAIM, GROUP, PREEMPT, STATUS, Tracker
from kdispatch import (
    UNSET,
    CallCancelled,
    CallOutcomeError,
    ClaimStatusPatch,
    DependencyFailed,
    DispatcherClosed,
    EventRecorder,
    GangPartiallyBound,
    InvalidInputError,
    Obj,
    ObjectNotFound,
    PodBinding,
    PodGroupStatusPatch,
    PodStatusPatch,
    get_path,
    meta,
    pod_node_name,
)

PACE_CHECK = 0.5
"""Seconds a paced scheduling thread waits for the backlog at a time, before it looks whether
the scheduler is stopping (a stop does not wait for the backlog to drain)."""

UNSCHEDULABLE_REASON = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"
"""``PodScheduled=False`` reason of a pod whose binding failed ``max_bind_failures`` times."""


class Phase(enum.Enum):
    """Where a pod is in the scheduler."""

    QUEUED = "queued"  # active or backing off
    SCHEDULING = "scheduling"
    BINDING = "binding"
    BOUND = "bound"
    UNSCHEDULABLE = "unschedulable"  # nothing fit at its last cycle: backing off, retried
    GONE = "gone"  # deleted (preempted or by someone else)
    WAITING = "waiting"  # a gang member waiting for its PodGroup or for more members


SETTLED = frozenset({Phase.BOUND, Phase.UNSCHEDULABLE, Phase.GONE, Phase.WAITING})
_PENDING = (Phase.QUEUED, Phase.UNSCHEDULABLE, Phase.WAITING)
"""Phases of a pod not placed and not in a cycle."""


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs of the scheduler (validated)."""

    threads: int = 2
    scheduler_name: str = "default-scheduler"
    max_bind_failures: int = 5
    backoff_initial: float = 1.0
    """Backoff of a pod after its first failed cycle (kube-scheduler's
    ``podInitialBackoffSeconds``); it doubles with every further failure."""
    backoff_max: float = 10.0
    """The longest backoff (``podMaxBackoffSeconds``)."""
    unschedulable_max: float = 300.0
    """How long a pod that nothing fit (and that uses no ResourceClaim) waits for a cluster
    event that may make it fit before it is retried anyway (kube-scheduler's
    ``podMaxInUnschedulablePodsDuration``): a node added or changed, a bound pod deleted, an
    assumed pod's binding failed. Pods with claims, and scheduler errors, back off instead."""
    victim_wait: float = 2.0
    """A preemptor re-checks after this long even if a victim deletion event was missed."""
    max_candidates: int = 100
    seed: int = 0
    max_backlog: int | None = None
    """Pacing: a scheduling thread takes its next item only while fewer calls than this are
    unresolved in the lane of ``pace_on`` and above; None: never waits (see the module
    docstring)."""
    pace_on: str | None = "pod_binding"
    """The lane pacing counts (a call type: its lane and the lanes above it); None: every lane
    but the Events'."""

    def __post_init__(self) -> None:
        if self.pace_on is not None and (not isinstance(self.pace_on, str) or not self.pace_on):
            raise InvalidInputError(f"pace_on must be a call type or None, got {self.pace_on!r}")
        names = ("threads", "max_bind_failures", "max_candidates")
        for name in (*names, "max_backlog") if self.max_backlog is not None else names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("backoff_initial", "backoff_max", "unschedulable_max", "victim_wait"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidInputError(f"{name} must be a number >= 0, got {value!r}")
        check_backoffs(self.backoff_initial, self.backoff_max)


def check_backoffs(initial: float, longest: float) -> None:
    """As kube-scheduler's configuration validation: the first backoff is > 0 and the longest
    one no shorter. ``InvalidInputError`` otherwise. Numbers >= 0 already."""
    if not initial > 0:
        raise InvalidInputError(f"backoff_initial must be > 0, got {initial!r}")
    if longest < initial:
        raise InvalidInputError(
            f"backoff_max ({longest!r}) must be >= backoff_initial ({initial!r})"
        )


@dataclass(slots=True)
class PodRecord:
    """The scheduler's mutable state for one pod (guarded by the scheduler lock)."""

    info: PodInfo
    phase: Phase
    attempts: int = 0
    bind_failures: int = 0
    preempted: bool = False
    woken: bool = False  # its victims went away while its cycle was running
    bound_by_us: bool = False  # a binding of ours succeeded
    status_false: bool = False  # the server shows PodScheduled=False (informer)
    last_status: tuple[str, str] | None = None
    """``(reason, message)`` of the last ``PodScheduled=False`` submitted without a
    nomination (None after a nomination): the condition any pending patch carries."""


@dataclass(slots=True)
class BindTask:
    """One binding cycle in progress."""

    rec: PodRecord
    info: PodInfo
    node: str
    allocations: list[Allocation]
    started: float
    claims: dict[str, CallFuture] = field(default_factory=dict)
    """The claim writes (``namespace/name`` of the claim: its future)."""


class Scheduler:
    """A small, real, multi-threaded scheduler on a :class:`SchedulerApi`."""

    def __init__(
        self,
        api: SchedulerApi,
        config: SchedulerConfig | None = None,
        *,
        tracker: Tracker | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.config = config or SchedulerConfig()
        self.tracker = tracker or Tracker(clock)
        self._paced_on: Backlogged | None = None
        if self.config.max_backlog is not None:
            if not isinstance(api, Backlogged):
                raise InvalidInputError("max_backlog needs an API layer with wait_backlog")
            self._paced_on = api
        self._clock = clock
        self.cache = SchedulerCache()
        self.framework = Framework(self.cache)
        self.nominator = Nominator(api.view)
        self.preemptions = Preemptions()
        self.claims = ClaimStore()
        self.podgroups = PodGroups()
        self.gangs: Counter[str] = Counter()
        """Gangs whose bindings resolved, by result: ``bound``, ``partially_bound``,
        ``withdrawn``; and ``unschedulable`` gang cycles."""
        self._gangs_open = 0  # released gangs whose future's continuation has not run yet
        self.queue = SchedulingQueue(clock)
        self.events = EventRecorder(api, controller=self.config.scheduler_name)
        self._rng = random.Random(self.config.seed)
        self._lock = threading.Lock()
        self._preempt_lock = threading.Lock()
        self._pods: dict[str, PodRecord] = {}
        self._phases: Counter[Phase] = Counter()
        self._unfit: set[str] = set()  # uids in Phase.UNSCHEDULABLE
        self._threads: list[threading.Thread] = []
        self._local = threading.local()  # .loop is True on the scheduling threads
        self.errors = 0
        """Unexpected exceptions caught in scheduling threads (0 in a healthy run)."""
        self.cycles = 0

    # ================================================================ lifecycle

    def start(self) -> None:
        """Caller thread. Start the scheduling threads."""
        for i in range(self.config.threads):
            t = threading.Thread(target=self._work, name=f"scheduler-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 10.0) -> None:
        """Caller thread. Stop the scheduling threads (cycles in progress finish)."""
        self.queue.close()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    def _work(self) -> None:
        """Scheduling thread body: continuations first, then cycles."""
        self._local.loop = True
        while self._paced() and self.step(None):
            pass

    def _paced(self) -> bool:
        """Scheduling thread. With ``max_backlog``, wait until fewer calls than that are
        unresolved in the lane of ``pace_on`` and above (woken as they resolve); False once
        the queue is closed."""
        api, bound = self._paced_on, self.config.max_backlog
        if api is None or bound is None:
            return True
        lane = self.config.pace_on
        while not api.wait_backlog(bound, PACE_CHECK, call_type=lane):
            if self.queue.closed:
                return False
        return True

    def step(self, timeout: float | None = 0.0) -> bool:
        """Scheduling thread (or a test driving the scheduler without threads): run the next
        continuation or scheduling cycle, waiting up to ``timeout`` seconds for one (None:
        until the queue closes). False when there was nothing to run."""
        item = self.queue.pop(timeout)
        if item is None:
            return False
        try:
            if isinstance(item, str):
                self._schedule(item)
            else:
                item()
        except Exception:
            self.errors += 1
            logger.opt(exception=True).error("scheduling thread error")
            if isinstance(item, str):
                self._retry_later(item)
        return True

    def _retry_later(self, uid: str) -> None:
        with self._lock:
            rec = self._pods.get(uid)
            if rec is None or rec.phase is not Phase.SCHEDULING:
                return
            self._set_phase(rec, Phase.QUEUED)
            self.queue.backoff(uid, rec.info.priority, self.config.backoff_max)

    # ================================================================ informer callbacks

    def on_pod_add(self, obj: Obj) -> None:
        """Informer thread. A pod appeared (or the informer re-listed it)."""
        self.on_pod_update(obj)

    def on_pod_update(self, obj: Obj) -> None:
        """Informer thread. Newest pod object: track it, queue it, or confirm its binding."""
        uid = meta(obj).get("uid")
        node = pod_node_name(obj)
        ours = get_path(obj, "spec", "schedulerName") in (None, self.config.scheduler_name)
        if not ours:  # another scheduler's pod: only the room it takes counts
            if node is not None:
                self.cache.confirm(PodInfo.of(obj), node)
            return
        with self._lock:
            rec = self._pods.get(uid) if isinstance(uid, str) else None
            if rec is None:
                info = PodInfo.of(obj)
                rec = PodRecord(info, Phase.QUEUED)
                self._pods[info.uid] = rec
                self._phases[Phase.QUEUED] += 1
                new = True
            else:
                info = rec.info = rec.info.with_obj(obj)
                new = False
            phase = rec.phase
            rec.status_false = _scheduled_false(obj)
            if node is not None and phase in _PENDING:
                self._set_phase(rec, Phase.BOUND)  # bound by someone else
        if new and info.group_key is not None:
            self.podgroups.join(info.group_key, info.uid)
        if node is not None:
            self.cache.confirm(info, node)
            self.nominator.remove(info.uid)
            if phase in _PENDING:
                self.queue.remove(info.uid)
            return
        if phase is Phase.GONE or info.terminating:
            return
        if info.nominated_node is not None and phase is Phase.QUEUED:
            self.nominator.observe(info)
        if new:
            self.queue.add(info.uid, info.priority)

    def on_pod_delete(self, obj: Obj) -> None:
        """Informer thread. A pod is gone: free its place, wake its preemptor, deallocate its
        claims."""
        uid = meta(obj).get("uid")
        if not isinstance(uid, str):
            return
        victim = self.cache.is_victim(uid)
        with self._lock:
            rec = self._pods.get(uid)
            if rec is not None:
                rec.preempted = rec.preempted or victim
                self._set_phase(rec, Phase.GONE)
        if rec is not None and rec.info.group_key is not None:
            self.podgroups.leave(rec.info.group_key, uid)
        self.queue.remove(uid)
        self.nominator.remove(uid)
        self.preemptions.forget(uid)
        released = self.cache.remove(uid)
        preemptor = self.preemptions.victim_gone(uid)
        if preemptor is not None:
            self._wake(preemptor)
        for alloc in released:
            self._release_claim(alloc, uid)
        if pod_node_name(obj) is not None:  # its room is free: retry who lacked resources
            self.queue.move_unschedulable(pod_deleted=True)

    def on_node_add(self, obj: Obj) -> None:
        """Informer thread. A new node: retry the unschedulable pods now."""
        self.cache.set_node(obj)
        self.queue.move_unschedulable(pod_deleted=False)

    def on_node_update(self, obj: Obj) -> None:
        """Informer thread. A node whose room, labels or taints changed: retry the
        unschedulable pods now."""
        if self.cache.set_node(obj):
            self.queue.move_unschedulable(pod_deleted=False)

    def on_node_delete(self, obj: Obj) -> None:
        """Informer thread."""
        self.cache.remove_node(str(meta(obj).get("name")))

    def on_claim_add(self, obj: Obj) -> None:
        """Informer thread (add and update)."""
        self.claims.put(obj)

    on_claim_update = on_claim_add

    def on_claim_delete(self, obj: Obj) -> None:
        """Informer thread."""
        self.claims.delete(obj)

    def on_podgroup_add(self, obj: Obj) -> None:
        """Informer thread (add and update). Keep the newest PodGroup; its members that wait
        (for it, or for more members) get a cycle now."""
        group = self.podgroups.put(obj)
        with self._lock:
            waiting = [
                rec
                for uid in self.podgroups.members(group.key)
                if (rec := self._pods.get(uid)) is not None and rec.phase is Phase.WAITING
            ]
            for rec in waiting:
                self._set_phase(rec, Phase.QUEUED)
        for rec in waiting:
            self.queue.add(rec.info.uid, rec.info.priority)

    on_podgroup_update = on_podgroup_add

    def on_podgroup_delete(self, obj: Obj) -> None:
        """Informer thread. Its pods that are not placed yet wait for it to come back."""
        self.podgroups.delete(obj)

    # ================================================================ scheduling cycle

    def _schedule(self, uid: str) -> None:
        """Scheduling thread. One scheduling cycle for one pod."""
        with self._lock:
            rec = self._pods.get(uid)
            if rec is None or rec.phase not in (Phase.QUEUED, Phase.UNSCHEDULABLE):
                return
            self._set_phase(rec, Phase.SCHEDULING)
            info = rec.info
            self.cycles += 1
        if info.node is not None or info.terminating:
            self._finish_cycle(rec, Phase.BOUND if info.node else Phase.GONE)
            return
        if info.group_key is not None and self.podgroups.served:
            group = self.podgroups.get(info.group_key)
            if group is None:  # kube-scheduler's pods wait for their PodGroup likewise
                self._finish_cycle(rec, Phase.WAITING)
                return
            if group.is_gang and self._schedule_gang(rec, group):
                return
        missing = [c for c in info.claim_keys() if self.claims.get(c) is None]
        if missing:
            msg = (
                f"0/{len(self.cache.nodes)} nodes are available: "
                f'resourceclaim "{missing[0]}" not found.'
            )
            self._unschedulable(rec, info, msg, None)
            return
        reservations = self.nominator.reservations(info.priority, info.uid)
        nominated = self.nominator.node_of(uid)
        if nominated is not None:
            allocs = self.cache.reserve(info, nominated, reservations.get(nominated, (0, 0)))
            if allocs is not None:
                self._start_binding(rec, info, nominated, allocs)
                return
        filtered = self.framework.filter(info, reservations)
        if filtered.feasible:
            placed = self._reserve_best(info, filtered, reservations)
            if placed is not None:
                self._start_binding(rec, info, *placed)
            else:
                self._requeue(rec, 0.0)  # every candidate was taken by concurrent cycles
            return
        self._no_fit(rec, info, filtered)

    def _reserve_best(
        self, info: PodInfo, filtered: Filtered, reservations: Reservations
    ) -> tuple[str, list[Allocation]] | None:
        """Scheduling thread. Assume ``info`` on its best feasible node, else (a concurrent
        cycle took it first) on the next best ones, re-checked the same way; the node and the
        new allocations, or None when every candidate was taken."""
        best = filtered.best()
        if best is None:
            return None
        allocs = self.cache.reserve(info, best.name, reservations.get(best.name, (0, 0)))
        if allocs is not None:
            return best.name, allocs
        for node in filtered.ranked():
            if node is best:
                continue
            allocs = self.cache.reserve(info, node.name, reservations.get(node.name, (0, 0)))
            if allocs is not None:
                return node.name, allocs
        return None

    def _finish_cycle(self, rec: PodRecord, phase: Phase) -> None:
        with self._lock:
            if rec.phase is Phase.SCHEDULING:
                self._set_phase(rec, phase)

    def _requeue(self, rec: PodRecord, delay: float) -> None:
        """Back to the queue after ``delay`` — at once if its victims went away meanwhile.
        The queue is updated under the scheduler lock so a concurrent :meth:`_wake` cannot slip
        between the phase change and the backoff entry."""
        with self._lock:
            if rec.phase not in (Phase.SCHEDULING, Phase.BINDING):
                return
            self._set_phase(rec, Phase.QUEUED)
            if rec.woken:
                rec.woken, delay = False, 0.0
            self.queue.backoff(rec.info.uid, rec.info.priority, delay)

    def _backoff(self, attempts: int) -> float:
        cfg = self.config
        return float(min(cfg.backoff_max, cfg.backoff_initial * 2 ** max(0, attempts - 1)))

    def _no_fit(self, rec: PodRecord, info: PodInfo, filtered: Filtered) -> None:
        """Scheduling thread. Nothing fits: wait for victims, preempt, or report
        unschedulable."""
        msg = Framework.failure_message(len(self.cache.nodes), filtered.reasons)
        if self.preemptions.waiting(info.uid):
            # kubernetes#134249: never preempt again while our victims are terminating
            self._requeue(rec, self.config.victim_wait)
            return
        resolvable = bool(set(filtered.reasons) - UNRESOLVABLE)
        if resolvable and self._preempt(info, msg):
            with self._lock:
                rec.last_status = None  # the preemption patched the status with a nomination
            self._requeue(rec, self.config.victim_wait)
            return
        self._unschedulable(rec, info, msg, None, on_pod_delete=resolvable)

    def _unschedulable(
        self,
        rec: PodRecord,
        info: PodInfo,
        msg: str,
        nominated: str | None,
        *,
        on_pod_delete: bool = True,
        reason: str = UNSCHEDULABLE_REASON,
    ) -> None:
        """Scheduling thread. ``PodScheduled=False`` without waiting, then wait: a pod that
        nothing fit waits for a cluster event (a node added or changed, or, with
        ``on_pod_delete``, a bound pod deleted or a binding failed) or ``unschedulable_max``;
        a scheduler error, or a pod with claims, backs off. Like
        kube-scheduler, no patch when the pod already shows this very condition (the informer's
        object) and the last one submitted was the same (so none pending differs); the
        ``FailedScheduling`` occurrence is recorded either way."""
        with self._lock:
            unchanged = nominated is None and rec.last_status == (reason, msg)
            rec.last_status = (reason, msg) if nominated is None else None
        if unchanged and _shows_unschedulable(info.obj, reason, msg):
            self._failed_scheduling(info, msg)
        else:
            self._patch_status(info, msg, nominated, reason=reason)
        with self._lock:
            rec.attempts += 1
            if rec.phase not in (Phase.SCHEDULING, Phase.BINDING):
                return
            self._set_phase(rec, Phase.UNSCHEDULABLE)
            parked = reason == UNSCHEDULABLE_REASON and not info.claim_keys()
            self.queue.backoff(
                info.uid,
                info.priority,
                self.config.unschedulable_max if parked else self._backoff(rec.attempts),
                unschedulable=True,
                on_pod_delete=on_pod_delete,
            )

    def _patch_status(
        self,
        info: PodInfo,
        msg: str,
        nominated: str | None,
        *,
        reason: str = UNSCHEDULABLE_REASON,
        steps: Steps | None = None,
    ) -> CallFuture | None:
        """Scheduling thread. Submit ``PodScheduled=False`` (and the nomination), as a step of
        ``steps`` if given; its future (None once the API layer is closed)."""
        cond = {"type": "PodScheduled", "status": "False", "reason": reason, "message": msg}
        call = PodStatusPatch.for_pod(
            info.obj, conditions=[cond], nominated_node_name=nominated or UNSET
        )
        expect = {"reason": reason, "nominated": nominated}
        sender = steps if steps is not None else self.api
        fut = self._submit(STATUS, info.uid, info.key, expect, partial(sender.submit, call))
        self._failed_scheduling(info, msg)
        return fut

    def _failed_scheduling(self, info: PodInfo, msg: str) -> None:
        """Scheduling thread. One ``FailedScheduling`` occurrence (a Warning)."""
        self._event(info.obj, "FailedScheduling", "Scheduling", msg, type_="Warning")

    # ================================================================ gangs

    def _schedule_gang(self, first: PodRecord, group: GroupInfo) -> bool:
        """Scheduling thread (``first`` in a cycle). Take every pending member of the gang
        into this cycle and place them all or none (see the module docstring); they wait when
        fewer than the gang still needs are present. False when the gang has its
        ``minCount`` members bound or binding already: ``first`` is scheduled on its own."""
        assert group.min_count is not None
        with self._lock:
            pending, placed = [first], 0
            for uid in self.podgroups.members(group.key):
                rec = self._pods.get(uid)
                if rec is None or rec is first:
                    continue
                if rec.phase in (Phase.BINDING, Phase.BOUND):
                    placed += 1
                elif rec.phase in _PENDING and rec.info.node is None and not rec.info.terminating:
                    pending.append(rec)
            needed = group.min_count - placed
            if needed <= 0:
                return False
            complete = len(pending) >= needed
            for rec in pending:
                self._set_phase(rec, Phase.SCHEDULING if complete else Phase.WAITING)
        for rec in pending[1:]:
            self.queue.remove(rec.info.uid)
        if not complete:
            logger.bind(pod=first.info.key).debug(
                "pod group {}: {} of {} pods needed", group.key, len(pending), needed
            )
            return True
        with self._lock:
            self.cycles += len(pending) - 1
        try:
            self._place_gang(group, pending)
        except Exception:  # the other members leave the cycle too (step() retries the first)
            for rec in pending[1:]:
                self._retry_later(rec.info.uid)
            raise
        return True

    def _place_gang(self, group: GroupInfo, recs: list[PodRecord]) -> None:
        """Scheduling thread. Filter and assume each member in turn; bind them as one gang if
        all fit, else un-assume them all."""
        placements: list[tuple[PodRecord, str, list[Allocation]]] = []
        unfit: list[Filtered] = []
        raced = False
        for rec in recs:
            info = rec.info
            reservations = self.nominator.reservations(info.priority, info.uid)
            filtered = self.framework.filter(info, reservations)
            placed = self._reserve_best(info, filtered, reservations)
            if placed is not None:
                placements.append((rec, *placed))
            elif filtered.feasible:
                raced = True  # concurrent cycles took every candidate
            else:
                unfit.append(filtered)
        if not unfit and not raced:
            self._bind_gang(group, placements)
            return
        for rec, _, _ in placements:
            self.cache.forget(rec.info.uid)
        if not unfit:
            for rec in recs:
                self._requeue(rec, 0.0)
            return
        self.gangs["unschedulable"] += 1
        reason = Framework.failure_message(len(self.cache.nodes), unfit[0].reasons)
        msg = gang_message(group.key, len(unfit), len(recs), reason)
        resolvable = any(set(f.reasons) - UNRESOLVABLE for f in unfit)
        if not group.shows("True") and not group.shows("False", UNSCHEDULABLE_REASON, msg):
            self._podgroup_status(group, scheduled=False, message=msg)
        for rec in recs:
            self._unschedulable(rec, rec.info, msg, None, on_pod_delete=resolvable)

    def _bind_gang(
        self, group: GroupInfo, placements: list[tuple[PodRecord, str, list[Allocation]]]
    ) -> None:
        """Scheduling thread. Every member is assumed: bind them through one gang, and submit
        ``PodGroupInitiallyScheduled=True`` held until all are bound. Nothing waits here."""
        with self._lock:
            gone = any(rec.phase is not Phase.SCHEDULING for rec, _, _ in placements)
            if not gone:
                for rec, _, _ in placements:
                    self._set_phase(rec, Phase.BINDING)
        if gone:  # a member was deleted meanwhile: the others try again
            for rec, _, _ in placements:
                self.cache.forget(rec.info.uid)
                self._requeue(rec, 0.0)
            return
        started = self._clock()
        try:
            gang = self.api.gang(group.obj, len(placements))
        except DispatcherClosed:
            return
        with self._lock:  # counted before any member can bind: settled() waits for it
            self._gangs_open += 1
        try:
            with gang as g:
                for rec, node, allocs in placements:
                    info = rec.info
                    self.nominator.remove(info.uid)
                    self.preemptions.forget(info.uid)
                    task = BindTask(rec, info, node, allocs, started)
                    bind = self._bind_steps(task, g)
                    if bind is not None:
                        bind.add_done_callback(partial(self._post_bound, task))
                if not group.shows("True"):
                    self._podgroup_status(group, scheduled=True, steps=g)
        finally:
            gang.future.add_done_callback(partial(self._post_gang_done, group, started))

    def _podgroup_status(
        self,
        group: GroupInfo,
        *,
        scheduled: bool,
        message: str = "",
        steps: GangSteps | None = None,
    ) -> None:
        """Scheduling thread. Submit ``PodGroupInitiallyScheduled`` (``True``/``Scheduled`` or
        ``False``/``Unschedulable``) without waiting: held until the gang of ``steps`` is
        bound, if given."""
        call = PodGroupStatusPatch.initially_scheduled(group.obj, scheduled, message=message)
        send = partial(steps.then, call) if steps is not None else partial(self.api.submit, call)
        status = "True" if scheduled else "False"
        reason = "Scheduled" if scheduled else UNSCHEDULABLE_REASON
        expect = {"status": status, "reason": reason}
        self._submit(GROUP, group.uid, group.key, expect, send)

    def _post_gang_done(self, group: GroupInfo, started: float, fut: Future[Any]) -> None:
        """Future callback (resolving thread): hand over to a scheduling thread."""
        self.queue.post(partial(self._gang_done, group, started, fut))

    def _gang_done(self, group: GroupInfo, started: float, fut: Future[Any]) -> None:
        """Continuation. The gang resolved. Each member's own continuation already handles
        its binding (the failed ones are requeued); this counts the gang."""
        with self._lock:
            self._gangs_open -= 1
        exc = fut.exception()
        if exc is None:
            self.gangs["bound"] += 1
            self.tracker.gang_done(group.key, self._clock() - started)
        elif isinstance(exc, GangPartiallyBound):
            self.gangs["partially_bound"] += 1
            logger.bind(pod=group.key).debug(
                "gang partially bound: {} bound, {} to place again", len(exc.bound), len(exc.failed)
            )
        else:
            self.gangs["withdrawn"] += 1

    # ================================================================ preemption

    def _preempt(self, info: PodInfo, msg: str) -> bool:
        """Scheduling thread. Choose and mark victims, then, in one call group owned by the
        preemptor, nominate it (read back through ``view``) and preempt the victims once the
        nomination succeeded — no waiting on any of it; the preemptor's deletion spares the
        victims not yet preempted. Preemptions are serialised so that each sees the
        nominations of the previous ones. Returns whether a preemption is under way for the
        pod."""
        if not self.cache.has_lower_priority(info.priority):
            return False
        with self._preempt_lock:
            if self.preemptions.waiting(info.uid):
                return True
            reservations = self.nominator.reservations(info.priority, info.uid)
            with self.cache.locked():
                cand = select_victims(
                    info, self.cache, reservations, self._rng, self.config.max_candidates
                )
                if cand is None:
                    return False
                victims = [v.uid for v in cand.victims]
                self.cache.mark_victims(victims)
                self.preemptions.start(info.uid, victims)
            steps = self._group(info.obj)
            if steps is None:
                return True
            with steps as g:
                nominated = self._patch_status(info, msg, cand.node, steps=g)
                self.nominator.refresh(info)  # read-your-writes: the pending nomination reserves
                logger.bind(pod=info.key, node=cand.node).debug("preempting {} pods", len(victims))
                after = [nominated] if nominated is not None else []
                for victim in cand.victims:
                    fut = self._submit(
                        PREEMPT,
                        victim.uid,
                        victim.key,
                        {"preemptor": info.uid},
                        partial(g.preempt, victim.obj, preemptor=info.key, after=after),
                    )
                    if fut is not None:
                        fut.add_done_callback(partial(self._post_victim_done, victim))
                        fut.add_done_callback(
                            partial(self._post_preempted_event, victim, info, cand.node)
                        )
        return True

    def _post_preempted_event(
        self, victim: PodInfo, preemptor: PodInfo, node: str, fut: CallFuture
    ) -> None:
        """Future callback (resolving thread): a victim's ``Preempted`` Event, recorded on a
        scheduling thread once its preemption succeeded."""
        if fut.exception() is None:
            note = f"Preempted by pod {preemptor.uid} on node {node}"
            event = partial(self._event, victim.obj, "Preempted", "Preempting", note)
            self.queue.post(partial(event, related=preemptor.obj))

    def _post_victim_done(self, victim: PodInfo, fut: CallFuture) -> None:
        """Future callback (resolving thread): hand over to a scheduling thread."""
        self.queue.post(partial(self._victim_done, victim, fut))

    def _victim_done(self, victim: PodInfo, fut: CallFuture) -> None:
        """Continuation. A victim's preemption resolved; if it failed for good the victim
        stays, may be chosen again, and no longer holds its preemptor back."""
        exc = fut.exception()
        if exc is None or isinstance(exc, ObjectNotFound | DispatcherClosed):
            return
        self.cache.unmark_victim(victim.uid)
        preemptor = self.preemptions.victim_gone(victim.uid)
        if preemptor is not None:
            self._wake(preemptor)

    def _wake(self, uid: str) -> None:
        """A preemptor's last victim is gone: retry it now (or as soon as its cycle ends)."""
        with self._lock:
            rec = self._pods.get(uid)
            if rec is None:
                return
            if rec.phase is Phase.QUEUED:
                self.queue.activate(uid, rec.info.priority)
            elif rec.phase is Phase.SCHEDULING:
                rec.woken = True

    # ================================================================ binding cycle

    def _start_binding(
        self, rec: PodRecord, info: PodInfo, node: str, allocs: list[Allocation]
    ) -> None:
        """Scheduling thread. The pod is assumed on ``node``: one call group owned by the pod
        writes its claims and binds it once every claim write succeeded (retries included);
        the pod's deletion withdraws what is not yet sent. A pod without claims is bound by a
        plain call. Nothing waits here."""
        with self._lock:
            gone = rec.phase is not Phase.SCHEDULING
            if not gone:
                self._set_phase(rec, Phase.BINDING)
        if gone:
            self.cache.forget(info.uid)
            return
        self.nominator.remove(info.uid)
        self.preemptions.forget(info.uid)
        task = BindTask(rec, info, node, allocs, self._clock())
        bind = self._bind_steps(task, None)
        if bind is not None:
            bind.add_done_callback(partial(self._post_bound, task))

    def _bind_steps(self, task: BindTask, gang: Steps | None) -> CallFuture | None:
        """Scheduling thread. Submit the pod's claim writes and its binding, as steps of
        ``gang`` (a gang member) or of a call group of its own; the binding's future (None
        once the API layer is closed, or when a claim is gone: the binding failed)."""
        info = task.info
        writes: list[tuple[str, Obj, Allocation]] = []
        for key in info.claim_keys():
            claim = self.claims.get(key)
            alloc = self.cache.allocation(key)
            if claim is None or alloc is None:  # deleted since the cycle looked
                self._binding_failed(task, None)
                return None
            writes.append((key, claim, alloc))
        binding = PodBinding.for_pod(info.obj, task.node)
        expect = {"node": task.node}
        if writes:
            if gang is not None:
                return self._claims_then_bind(task, writes, binding, gang)
            steps = self._group(info.obj)
            if steps is None:
                return None
            with steps as g:
                return self._claims_then_bind(task, writes, binding, g)
        # one call: nothing to order (the pod's deletion withdraws it all the same)
        send = partial(gang.submit if gang is not None else self.api.submit, binding)
        return self._submit(BIND, info.uid, info.key, expect, send)

    def _claims_then_bind(
        self,
        task: BindTask,
        writes: list[tuple[str, Obj, Allocation]],
        binding: PodBinding,
        g: Steps,
    ) -> CallFuture | None:
        """Scheduling thread. The claim writes and the binding held on them, as steps of
        ``g`` (a call group owned by the pod, or the pod's gang); the binding's future (None
        once the API layer is closed)."""
        info = task.info
        for key, claim, alloc in writes:
            new = alloc in task.allocations
            call = ClaimStatusPatch.for_claim(
                claim,
                allocate=allocation_for(alloc.node, alloc.device) if new else UNSET,
                reserve=[info.consumer()],
            )
            expect = {"device": (alloc.node, alloc.device), "reserve": info.uid}
            fut = self._submit(
                CLAIM, str(meta(claim).get("uid")), key, expect, partial(g.submit, call)
            )
            if fut is None:
                return None
            task.claims[key] = fut
        after = list(task.claims.values())
        send = partial(g.submit, binding, after=after)
        return self._submit(BIND, info.uid, info.key, {"node": task.node}, send)

    def _post_bound(self, task: BindTask, fut: CallFuture) -> None:
        """Future callback (resolving thread): hand over to a scheduling thread."""
        self.queue.post(partial(self._bound, task, fut))

    def _bound(self, task: BindTask, fut: CallFuture) -> None:
        """Continuation. The binding resolved."""
        exc = fut.exception()
        if exc is not None:
            self._binding_failed(task, exc)
            return
        info = task.info
        self.cache.confirm(info, task.node)
        with self._lock:
            if task.rec.phase is Phase.BINDING:
                self._set_phase(task.rec, Phase.BOUND)
            task.rec.bound_by_us = True
        self.tracker.binding_done(self._clock() - task.started)
        note = f"Successfully assigned {info.key} to {task.node}"
        self._event(info.obj, "Scheduled", "Binding", note)

    def _binding_failed(self, task: BindTask, exc: BaseException | None) -> None:
        """Continuation. Un-assume, deallocate what this cycle allocated (every claim write
        that was sent: it may have landed), requeue with backoff. After
        ``max_bind_failures`` failures in a row the pod is unschedulable for now, as
        kube-scheduler treats a failed binding: ``PodScheduled=False`` and back off."""
        if isinstance(exc, DependencyFailed):  # a claim write failed, or the group was cancelled
            exc = exc.cause
        info = task.info
        logger.bind(pod=info.key, node=task.node).debug("binding failed: {!r}", exc)
        self.cache.forget(info.uid)
        self.queue.move_unschedulable(pod_deleted=True)  # its room is free again
        for alloc in task.allocations:
            write = task.claims.get(alloc.claim)
            withdrawn = write is not None and write.done() and _withdrawn(write)
            if not withdrawn:
                self._release_claim(alloc, info.uid)
        if isinstance(exc, DispatcherClosed):
            return
        with self._lock:
            if task.rec.phase is not Phase.BINDING:  # deleted meanwhile
                return
            task.rec.bind_failures += 1
            give_up = task.rec.bind_failures >= self.config.max_bind_failures
        if give_up:
            why = str(exc) if exc is not None else "a resource claim is gone"
            self._unschedulable(
                task.rec, info, f"binding rejected: {why}", None, reason=SCHEDULER_ERROR
            )
        else:
            self._requeue(task.rec, self._backoff(task.rec.bind_failures))

    def _release_claim(self, alloc: Allocation, owner: str) -> None:
        """Deallocate and unreserve a claim (its pod failed to bind or is gone); no waiting."""
        claim = self.claims.get(alloc.claim)
        if claim is None:
            return
        call = ClaimStatusPatch.for_claim(claim, deallocate=True, unreserve=[owner])
        expect = {"device": None, "unreserve": owner}
        self._submit(
            CLAIM, str(meta(claim).get("uid")), alloc.claim, expect, partial(self.api.submit, call)
        )

    # ================================================================ helpers

    def _submit(
        self,
        kind: str,
        uid: str,
        key: str,
        expect: Mapping[str, Any],
        send: Callable[[], CallFuture],
    ) -> CallFuture | None:
        """Submit through the API layer, timing the submit and recording the intent. None
        once the API layer is closed (the run is stopping)."""
        start = time.perf_counter()
        try:
            fut = send()
        except DispatcherClosed:
            return None
        except CallOutcomeError as err:  # pragma: no cover - submit reports errors via futures
            logger.warning("submit failed: {}", err)
            return None
        self.tracker.record(
            kind,
            uid,
            key,
            expect=expect,
            future=fut,
            submit_seconds=time.perf_counter() - start,
            on_loop=getattr(self._local, "loop", False),
        )
        return fut

    def _group(self, owner: Obj) -> Steps | None:
        """Any thread. The API layer's steps for an operation of ``owner``; None once it is
        closed (the run is stopping)."""
        try:
            return self.api.group(owner)
        except DispatcherClosed:
            return None

    def _event(
        self,
        regarding: Obj,
        reason: str,
        action: str,
        note: str,
        *,
        type_: str = "Normal",
        related: Obj | None = None,
    ) -> None:
        """Record an Event (never waits with the dispatcher; an Event the spam filter drops
        or that comes after the API layer closed is only logged)."""
        try:
            self.events.event(
                regarding, type=type_, reason=reason, action=action, note=note, related=related
            )
        except (DispatcherClosed, InvalidInputError) as err:
            logger.debug("event {} not recorded: {}", reason, err)

    def _set_phase(self, rec: PodRecord, phase: Phase) -> None:
        """Scheduler lock held."""
        if rec.phase is not phase:
            self._phases[rec.phase] -= 1
            self._phases[phase] += 1
            rec.phase = phase
            if phase is Phase.UNSCHEDULABLE:
                self._unfit.add(rec.info.uid)
            else:
                self._unfit.discard(rec.info.uid)

    # ================================================================ introspection

    def phase_counts(self) -> dict[str, int]:
        """Any thread. Pods per phase, plus ``preempted`` (deleted as our victims)."""
        with self._lock:
            out = {p.value: self._phases[p] for p in Phase}
            out["preempted"] = sum(1 for r in self._pods.values() if r.preempted)
            out["bound_by_us"] = sum(
                1 for r in self._pods.values() if r.bound_by_us and r.phase is Phase.BOUND
            )
            out["total"] = len(self._pods)
        return out

    def settled(self) -> bool:
        """Any thread. Every known pod is bound or gone, or unschedulable with
        ``PodScheduled=False`` observed on the server; nothing is due for a cycle now and no
        continuation waits (a released gang's counts once its future resolved)."""
        with self._lock:
            unsettled = sum(self._phases[p] for p in Phase if p not in SETTLED)
            if (
                unsettled
                or self._gangs_open
                or not all(self._pods[u].status_false for u in self._unfit)
            ):
                return False
        active, _, tasks = self.queue.counts()
        return active == 0 and tasks == 0

    def busy(self) -> bool:
        """Any thread. Something is queued for a cycle now, in a cycle, or binding (pods that
        only back off do not count)."""
        with self._lock:
            working = self._phases[Phase.SCHEDULING] + self._phases[Phase.BINDING]
        active, _, tasks = self.queue.counts()
        return working + active + tasks > 0

    def unschedulable(self) -> list[str]:
        """Any thread. ``namespace/name`` of the pods nothing fit at their last cycle, sorted."""
        with self._lock:
            return sorted(r.info.key for r in self._pods.values() if r.phase is Phase.UNSCHEDULABLE)

    def known(self) -> int:
        """Any thread. Pods this scheduler tracks."""
        return len(self._pods)

    def record(self, uid: str) -> PodRecord | None:
        """Any thread. A pod's record (for tests and reports)."""
        return self._pods.get(uid)


def _withdrawn(future: CallFuture) -> bool:
    """Whether a resolved call was withdrawn unsent (cancelled, or a prerequisite failed)."""
    return isinstance(future.exception(), CallCancelled)


def _scheduled_condition(obj: Obj) -> Mapping[str, Any] | None:
    """The pod's ``PodScheduled`` condition when it is False (what the server shows)."""
    conditions = get_path(obj, "status", "conditions")
    if not isinstance(conditions, list):
        return None
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled":
            return c if c.get("status") == "False" else None
    return None


def _scheduled_false(obj: Obj) -> bool:
    """Whether the pod's ``PodScheduled`` condition is False (what the server shows)."""
    return _scheduled_condition(obj) is not None


def _shows_unschedulable(obj: Obj, reason: str, msg: str) -> bool:
    """Whether the pod shows ``PodScheduled=False`` with this reason and message."""
    cond = _scheduled_condition(obj)
    return cond is not None and cond.get("reason") == reason and cond.get("message") == msg
