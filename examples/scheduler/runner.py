"""One run of the main job: set up the cluster and the scheduler, drive it to the end, verify.

Embedded mode (default): an :class:`~kdispatch.testing.memory.InMemoryApiServer` with the requested
latency and faults; nodes and claims are created, informers synced, then the scheduler starts
and wave 1 of the pods is created; wave 2 (high priority) follows once wave 1 has been placed.
``--kubeconfig`` mode: a real cluster; nothing is created, the scheduler places the pending pods
that name it (``spec.schedulerName``).

PodGroups (``scheduling.k8s.io/v1beta1``) are watched when the apiserver serves them (the first
list answers; a 404 means the ``GenericWorkload`` gate or the API is off, a 403 that the identity
may not read them, and every pod is then scheduled on its own). ``--gangs N`` adds N gang
PodGroups of ``--gang-size`` pods to the embedded workload (see :mod:`examples.scheduler.workload`).

A run ends when every pod of this scheduler (its ``spec.schedulerName``) is bound or gone
(preempted), or unschedulable with ``PodScheduled=False`` observed on the server (unschedulable
pods are retried with backoff while the run lasts: there is no attempt limit), at the
``max_seconds`` deadline, or on Ctrl-C — and always shuts down cleanly: scheduling threads,
dispatcher (draining what is pending), informers, monitor.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any, TextIO

from kubernetes import client as k8s

from examples.common import check_amounts, check_counts, check_rate
from examples.gcwatch import GcWatch
from examples.scheduler.api import DispatchedApi, SchedulerApi
from examples.scheduler.claims import claim_key
from examples.scheduler.cycle import Scheduler, SchedulerConfig, check_backoffs
from examples.scheduler.direct import DirectApi
from examples.scheduler.ha import (
    LeaderElect,
    Terminated,
    default_identity,
    finishing,
    make_elector,
    running,
    sigterm_while_finishing,
    user_agent,
)
from examples.scheduler.limiter import ClientLimiter, ThrottledBackend
from examples.scheduler.prekep import PreKepApi
from examples.scheduler.progress import Monitor, budget_share, describe
from examples.scheduler.report import figures, gang_latency_ms
from examples.scheduler.tracker import Tracker
from examples.scheduler.verify import BindingAudit, verify
from examples.scheduler.workload import WorkloadSpec, build_workload
from kdispatch import (
    ApiBackend,
    ApiError,
    ClientListWatch,
    Dispatcher,
    DispatcherConfig,
    ExecutorConfig,
    ForbiddenError,
    Informer,
    InvalidInputError,
    KubernetesBackend,
    LeadershipLost,
    LeaseElector,
    ListWatch,
    NotFoundError,
    Obj,
    ProcessDispatcher,
    RateLimitConfig,
    RetryConfig,
    RuntimeConfig,
    meta,
)
from kdispatch.testing import FaultPlan, InMemoryApiServer, Latency, MemoryListWatch

DRAIN_TIMEOUT = 120.0
"""Seconds a finished run lets its calls and Events drain (Events wait for their own token
bucket: at 50 QPS, 3,000 of them take a minute)."""

MAX_BACKLOG = 192
"""Default of ``--max-backlog``: measured in ``benchmarks.process_executor`` (see
docs/benchmarks.md, "The scheduling loop paced on the backlog"): by Little's law the binding
wait is the bound over the binding throughput, and 192 kept the dispatcher process's binding
wait p99 under 0.5 s at the 500 to 1,000 bindings per second of the benchmark's loaded 2-core
machine (256 did not), without fewer pods per second."""

PACE_LANES = ("pod_preemption", "pod_binding", "pod_status_patch")
"""``pace_on`` values: a lane of each relevance but the Events'."""

API_MODES = ("async", "pre-kep", "all-blocking")
"""``api`` values: the dispatcher; kube-scheduler before KEP-5229 (blocking status patches,
binding threads); every call blocking the scheduling thread."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything the CLI can set. ``qps=0`` means no client-side rate limit.
    ``binding_threads`` (``pre-kep`` only): None means as many as ``workers``, the same thread
    budget as the dispatcher's executor. ``gc_freeze``: the dispatcher's
    ``RuntimeConfig.gc_freeze``, plus one ``freeze_gc()`` once the informers synced."""

    nodes: int = 500
    pods: int = 5000
    latency_ms: float = 10.0
    qps: float = 0.0
    burst: int = 100
    faults: float = 0.0
    api: str = "async"
    binding_threads: int | None = None
    gc_freeze: bool = False
    kubeconfig: str | None = None
    scheduler_name: str | None = None
    threads: int = 2
    workers: int = 32
    max_seconds: float = 120.0
    backoff_initial: float = 1.0
    """Backoff after a pod's first failed cycle (kube-scheduler's podInitialBackoffSeconds)."""
    backoff_max: float = 10.0
    """The longest backoff (podMaxBackoffSeconds)."""
    unschedulable_max: float = 300.0
    """How long a pod nothing fit waits for a cluster event before it is retried anyway
    (podMaxInUnschedulablePodsDuration; ``SchedulerConfig.unschedulable_max``)."""
    high_priority_share: float = 0.03
    unschedulable_share: float = 0.01
    claim_share: float = 0.02
    fill: float = 0.9
    seed: int = 1
    leader_elect: LeaderElect | None = None  # high availability (examples/scheduler/ha.py)
    identity: str = ""  # the replica's name in its User-Agent (default: host_pid)
    dispatcher_process: bool = False
    """Run the dispatcher in a child process (:class:`~kdispatch.actors.facade.process.
    ProcessDispatcher`); needs ``kubeconfig`` (the child builds its own backend from it)."""
    max_backlog: int = MAX_BACKLOG
    """Pacing (the dispatcher only): a scheduling thread takes its next item only while fewer
    calls than this are unresolved in the lane of ``pace_on`` and above
    (``SchedulerConfig.max_backlog``); 0: never waits."""
    pace_on: str = "pod_binding"
    """The lane pacing counts: a built-in call type, its lane and the lanes above it (the
    default, the binding lane, never waits for status patches; ``pod_status_patch``: every
    lane but the Events')."""
    gangs: int = 0
    """Gang PodGroups added to the embedded workload (``minCount`` = ``gang_size``)."""
    gang_size: int = 4
    """Pods per gang."""
    infeasible_gang_share: float = 0.2
    """Share of the gangs that cannot be placed as a whole (one member asks for more cpu
    than any node has)."""

    def __post_init__(self) -> None:
        check_counts(self, "nodes", "pods", "burst", "threads", "workers", "gang_size")
        check_amounts(self, "gangs")
        check_amounts(
            self,
            "latency_ms",
            "qps",
            "faults",
            "max_seconds",
            "backoff_initial",
            "backoff_max",
            "unschedulable_max",
        )
        check_rate("faults", self.faults)
        check_backoffs(self.backoff_initial, self.backoff_max)
        check_amounts(self, "max_backlog")
        if self.max_backlog:
            check_counts(self, "max_backlog")
        if self.pace_on not in PACE_LANES:
            raise InvalidInputError(f"pace_on must be one of {PACE_LANES}, got {self.pace_on!r}")
        if self.api not in API_MODES:
            raise InvalidInputError(f"api must be one of {API_MODES}, got {self.api!r}")
        if self.binding_threads is not None:
            check_counts(self, "binding_threads")
        if self.max_seconds <= 0:
            raise InvalidInputError("max_seconds must be > 0")
        if not isinstance(self.fill, int | float) or not 0 < self.fill <= 1:
            raise InvalidInputError(f"fill must be in (0, 1], got {self.fill!r}")
        if not isinstance(self.infeasible_gang_share, int | float) or not (
            0 <= self.infeasible_gang_share <= 1
        ):
            raise InvalidInputError(
                f"infeasible_gang_share must be between 0 and 1, got {self.infeasible_gang_share!r}"
            )
        for name in ("high_priority_share", "unschedulable_share", "claim_share"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 <= value <= 0.5:
                raise InvalidInputError(f"{name} must be between 0 and 0.5, got {value!r}")
        if self.leader_elect is not None and self.api != "async":
            raise InvalidInputError(
                "--leader-elect needs the dispatcher (not --pre-kep or --all-blocking)"
            )
        if self.dispatcher_process and (self.api != "async" or self.kubeconfig is None):
            raise InvalidInputError(
                "--dispatcher-process needs the dispatcher and --kubeconfig (an embedded "
                "apiserver cannot be shared with the child process)"
            )

    @property
    def embedded(self) -> bool:
        """True when running on the in-memory apiserver."""
        return self.kubeconfig is None


@dataclass
class _Env:
    """The live parts of a run."""

    api: SchedulerApi
    scheduler: Scheduler
    informers: list[Informer]
    server: InMemoryApiServer | None
    backend: ApiBackend
    audit: BindingAudit
    lists: dict[str, ListWatch] = field(default_factory=dict)
    elector: LeaseElector | None = None


def _settings(cfg: RunConfig) -> dict[str, Any]:
    out = asdict(cfg)
    out.pop("kubeconfig")
    out["qps"] = cfg.qps or None
    out["embedded"] = cfg.embedded
    if cfg.api == "pre-kep":
        out["binding_threads"] = cfg.binding_threads or cfg.workers
    return out


def _make_api(
    cfg: RunConfig, backend: ApiBackend, elector: LeaseElector | None = None
) -> SchedulerApi:
    """The scheduler's API; with ``elector``, the dispatcher's sends are gated by its lease
    (in-process: ``send_gate=elector.may_send``; in a child process: ``leader=elector``, the
    send deadline in shared memory)."""
    retry = RetryConfig(max_attempts=8)
    if cfg.api == "all-blocking":  # --qps: one client-side limiter, as --pre-kep's
        limited = ThrottledBackend(backend, ClientLimiter(cfg.qps, cfg.burst)) if cfg.qps else None
        return DirectApi(limited or backend, retry)
    if cfg.api == "pre-kep":
        return PreKepApi(
            backend,
            retry,
            binding_threads=cfg.binding_threads or cfg.workers,
            qps=cfg.qps,
            burst=cfg.burst,
        )
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=cfg.qps or math.inf, burst=cfg.burst),
        executor=ExecutorConfig(workers=cfg.workers),
        retry=retry,
        runtime=RuntimeConfig(gc_freeze=cfg.gc_freeze),
    )
    if cfg.dispatcher_process:
        factory = partial(
            child_backend,
            cfg.kubeconfig,
            cfg.workers,
            user_agent(cfg.identity or default_identity()),
        )
        return DispatchedApi(ProcessDispatcher(factory, config, leader=elector).start())
    send_gate = elector.may_send if elector is not None else None
    dispatcher = Dispatcher(backend, config, send_gate=send_gate)
    return DispatchedApi(dispatcher.start())


def child_backend(kubeconfig: str | None, workers: int, agent: str) -> KubernetesBackend:
    """The dispatcher process's backend (``--dispatcher-process``): built in the child from the
    kubeconfig, with the replica's ``User-Agent``. Module-level so that it pickles."""
    kube = KubernetesBackend.from_kubeconfig(kubeconfig, workers=workers)
    kube.api_client.user_agent = agent
    return kube


Handlers = tuple[Callable[[Obj], None], Callable[[Obj], None], Callable[[Obj], None]]
"""``(on_add, on_update, on_delete)``, each taking the newest object."""


def _informer(lw: ListWatch, name: str, *handlers: Handlers) -> Informer:
    """An informer delivering to each ``(on_add, on_update, on_delete)`` triple."""
    inf = Informer(lw, name=name)
    for on_add, on_update, on_delete in handlers:
        inf.add_handler(on_add, _new_only(on_update), on_delete)
    return inf


def _new_only(on_update: Callable[[Obj], None]) -> Callable[[Obj, Obj], None]:
    """Adapt a one-argument update handler to the informer's ``(old, new)`` signature."""

    def handler(_old: Obj, new: Obj) -> None:
        on_update(new)

    return handler


def _setup(cfg: RunConfig, tracker: Tracker) -> _Env:
    server: InMemoryApiServer | None = None
    if cfg.embedded:
        server = InMemoryApiServer(
            latency=Latency(fixed=cfg.latency_ms / 1000.0),
            faults=FaultPlan(rate=cfg.faults) if cfg.faults else None,
            seed=cfg.seed,
            request_log_limit=max(200_000, 40 * cfg.pods),
        )
        backend: ApiBackend = server
        lists: dict[str, ListWatch] = {kind: MemoryListWatch(server, kind) for kind in KINDS}
    else:
        kube = KubernetesBackend.from_kubeconfig(cfg.kubeconfig, workers=cfg.workers)
        kube.api_client.user_agent = user_agent(cfg.identity or default_identity())
        backend = kube
        informer_client = k8s.ApiClient(kube.api_client.configuration)
        lists = {kind: ClientListWatch(informer_client, kind) for kind in KINDS}
    elector: LeaseElector | None = None
    revoke: list[Callable[[LeadershipLost], None]] = []
    if cfg.leader_elect is not None:
        settings = replace(cfg.leader_elect, identity=cfg.leader_elect.identity or cfg.identity)

        def on_lost(err: LeadershipLost) -> None:  # revoke the dispatcher built below
            for hook in revoke:
                hook(err)

        elector = make_elector(settings, backend, on_lost)
    api = _make_api(cfg, backend, elector)
    if isinstance(api, DispatchedApi):
        revoke.append(api.dispatcher.revoke)
    name = cfg.scheduler_name or ("default-scheduler" if cfg.embedded else "kdispatch-example")
    try:  # refused (a scheduler name no Event can carry): the dispatcher started above stops
        scheduler = Scheduler(
            api,
            SchedulerConfig(
                threads=cfg.threads,
                scheduler_name=name,
                backoff_initial=cfg.backoff_initial,
                backoff_max=cfg.backoff_max,
                unschedulable_max=cfg.unschedulable_max,
                seed=cfg.seed,
                max_backlog=(cfg.max_backlog or None) if cfg.api == "async" else None,
                pace_on=cfg.pace_on,
            ),
            tracker=tracker,
        )
    except BaseException:
        api.close(drain=False, timeout=10.0)
        raise
    s = scheduler
    audit = BindingAudit()
    groups: list[Informer] = []
    if serves(lists["PodGroup"]):  # before the pods: their cycles look their groups up
        s.podgroups.serve()
        groups.append(
            _informer(
                lists["PodGroup"],
                "podgroups",
                (api.on_add, api.on_update, api.on_delete),
                (s.on_podgroup_add, s.on_podgroup_update, s.on_podgroup_delete),
            )
        )
    else:
        del lists["PodGroup"]
    informers = [
        _informer(lists["Node"], "nodes", (s.on_node_add, s.on_node_update, s.on_node_delete)),
        _informer(
            lists["ResourceClaim"],
            "claims",
            (api.on_add, api.on_update, api.on_delete),
            (s.on_claim_add, s.on_claim_update, s.on_claim_delete),
        ),
        *groups,
        _informer(
            lists["Pod"],
            "pods",
            (api.on_add, api.on_update, api.on_delete),
            (s.on_pod_add, s.on_pod_update, s.on_pod_delete),
            (audit.on_pod, audit.on_pod, audit.on_delete),
        ),
    ]
    return _Env(api, scheduler, informers, server, backend, audit, lists, elector)


KINDS = ("Node", "ResourceClaim", "PodGroup", "Pod")
"""The kinds a run lists and watches (PodGroups only where served)."""


def serves(lw: ListWatch) -> bool:
    """Main thread. Whether the apiserver serves ``lw``'s kind to this identity: False when a
    first list meets a 404 (the API is off, e.g. PodGroups without the ``GenericWorkload``
    gate) or a 403 (the identity may not read it: PodGroups are optional in
    ``examples/rbac.yaml``), with a line on stderr for the 403. Any other error (the
    apiserver unreachable) counts as served: the informer's sync then says what is wrong."""
    try:
        lw.list()
    except NotFoundError:
        return False
    except ForbiddenError as exc:
        print(f"not reading {lw.kind}s, every pod on its own: {exc}", file=sys.stderr)
        return False
    except ApiError:
        return True
    return True


def _placed(sched: Scheduler, created: int) -> bool:
    """Every created pod is known and nothing is being scheduled or bound."""
    return sched.known() >= created and not sched.busy()


class _Waiter:
    """Polls a condition from the main thread until it holds, the deadline passes or the
    run is interrupted (Ctrl-C raises KeyboardInterrupt out of the wait)."""

    def __init__(self, deadline: float, interval: float = 0.01) -> None:
        self.deadline = deadline
        self._interval = interval
        self._tick = threading.Event()

    def until(self, condition: Callable[[], bool]) -> bool:
        while not condition():
            if time.monotonic() >= self.deadline:
                return False
            self._tick.wait(self._interval)
        return True


def run(
    cfg: RunConfig,
    *,
    stream: TextIO | None = sys.stderr,
    command_started: float | None = None,
) -> dict[str, Any]:
    """Execute one run and return its figures (see :mod:`examples.scheduler.report`). Main
    thread: Ctrl-C ends the run early, with a summary. ``command_started``: when the command
    started (``time.monotonic()``; default: now), the start of ``command_s``."""
    command_started = time.monotonic() if command_started is None else command_started
    running()
    tracker = Tracker()
    env = _setup(cfg, tracker)
    sched = env.scheduler
    started = time.monotonic()
    pods_total = 0
    stopped_by = "done"
    monitor = Monitor(
        # tokens are only sampled when there is a budget to measure
        lambda: (_tokens_taken(env.api) if cfg.qps > 0 else 0, env.api.outstanding()),
        lambda: describe(
            sched.phase_counts(),
            max(pods_total, sched.known()),
            time.monotonic() - started,
            sum(env.api.stats()["sent"].values()),
        ),
        stream,
    )
    elector = env.elector
    gc_watch = GcWatch().install()
    try:
        try:
            if elector is not None:  # campaign first; lead before listing anything
                _lead(elector)
            _sync_informers(env, gc_watch)
            if cfg.gc_freeze and isinstance(env.api, DispatchedApi):
                env.api.dispatcher.freeze_gc()  # warm-up done: informer caches are long-lived
            gc_watch.reset()
            started = time.monotonic()
            waiter = _Waiter(started + cfg.max_seconds)
            sched.start()
            monitor.start()
            if env.server is not None:
                workload = build_workload(
                    WorkloadSpec(
                        nodes=cfg.nodes,
                        pods=cfg.pods,
                        high_priority_share=cfg.high_priority_share,
                        unschedulable_share=cfg.unschedulable_share,
                        claim_share=cfg.claim_share,
                        fill=cfg.fill,
                        seed=cfg.seed,
                        gangs=cfg.gangs,
                        gang_size=cfg.gang_size,
                        infeasible_gang_share=cfg.infeasible_gang_share,
                    )
                )
                # nodes, claims and PodGroups first; informers deliver them before the pods
                for obj in workload.nodes + workload.claims + workload.podgroups:
                    env.server.create(obj)
                waiter.until(lambda: len(sched.cache.nodes) >= cfg.nodes)
                started = time.monotonic()
                for i, wave in enumerate(workload.waves):
                    if i and not waiter.until(partial(_placed, sched, pods_total)):
                        break
                    for pod in wave:
                        env.server.create(_naming(pod, sched.config.scheduler_name))
                        pods_total += 1
            done = waiter.until(
                lambda: (sched.known() >= pods_total and sched.settled()) or _lost(elector)
            )
            if not cfg.embedded:
                pods_total = sched.known()
            if _lost(elector):
                stopped_by = "leadership_lost"
            elif not done:
                stopped_by = "deadline"
        finally:
            finishing()  # from here on a SIGTERM is noted, not raised into the shutdown
    except KeyboardInterrupt:
        stopped_by = "interrupt"
    except Terminated:
        stopped_by = "terminated"
    ended = time.monotonic()
    gc_watch.uninstall()
    return _finish(
        cfg,
        env,
        tracker=tracker,
        monitor=monitor,
        stopped_by=stopped_by,
        pods_total=pods_total,
        wall_s=ended - started,
        gc_pauses=gc_watch.summary(),
        command_started=command_started,
    )


def _naming(pod: Obj, scheduler_name: str) -> Obj:
    """``pod`` (of the embedded workload) naming this scheduler in ``spec.schedulerName``
    (``--scheduler-name``), so that it is one of the run's own pods."""
    pod["spec"]["schedulerName"] = scheduler_name
    return pod


def _tokens_taken(api: SchedulerApi) -> int:
    """Monitor thread. Rate-limiter tokens taken so far: the dispatcher's counter (``stats()``
    collects every metric family, too much 20 times a second), else from ``stats()``."""
    if isinstance(api, DispatchedApi):
        return api.dispatcher.tokens_taken
    return int(api.stats()["tokens_taken"])


def _lead(elector: LeaseElector) -> None:
    """Main thread. Campaign until this replica leads."""
    elector.start()
    _Waiter(math.inf).until(lambda: elector.is_leader)


SYNC_TIMEOUT = 60.0
"""Seconds an informer may take for its first list before the run gives up."""
SYNC_REPORT_EVERY = 2.0
"""While an informer has not synced, say why this often (on stderr)."""


def _sync_informers(env: _Env, gc_watch: GcWatch) -> None:
    """Main thread. Start the informers one by one and wait for each one's first list; when
    one never comes (a ``TimeoutError`` naming the cause) or is refused (``UnauthorizedError``,
    ``ForbiddenError``), release everything set-up started and raise."""
    try:
        for inf in env.informers:
            inf.start()
            _wait_for_sync(inf, SYNC_TIMEOUT)
    except Exception:
        gc_watch.uninstall()
        _abort(env)
        raise


def _wait_for_sync(inf: Informer, timeout: float) -> None:
    """Main thread. Wait for ``inf``'s first list, saying every few seconds on stderr why it
    has not arrived (``cannot connect to https://...``, a 403, ...). After ``timeout``
    seconds, raises ``TimeoutError`` with that cause (``wait_for_sync`` raises an
    ``InformerSyncTimeout``, a ``TimeoutError`` whose ``cause`` is the reason alone)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            inf.wait_for_sync(max(0.0, min(SYNC_REPORT_EVERY, left)))
            return
        except TimeoutError as exc:
            cause = getattr(exc, "cause", "") or str(exc)
            if left <= SYNC_REPORT_EVERY:
                raise TimeoutError(
                    f"informer {inf.name} did not sync within {timeout:g} s: {cause}"
                ) from exc
            waited = timeout - (deadline - time.monotonic())
            print(
                f"informer {inf.name} not synced after {waited:.0f} s: {cause}",
                file=sys.stderr,
                flush=True,
            )


def _abort(env: _Env) -> None:
    """Main thread. Release what set-up started when the run cannot begin (no sync)."""
    for inf in env.informers:
        inf.stop()
    env.api.close(drain=False, timeout=2.0)
    if env.elector is not None:
        env.elector.stop(release=True)
    if isinstance(env.backend, KubernetesBackend):
        env.backend.close()


def _lost(elector: LeaseElector | None) -> bool:
    return elector is not None and elector.lost is not None


def _final_state(env: _Env) -> tuple[dict[str, Obj], dict[str, Obj], dict[str, Obj]]:
    """Pods and PodGroups by uid, claims by ``namespace/name``."""
    pods, _ = env.lists["Pod"].list()
    claims, _ = env.lists["ResourceClaim"].list()
    groups, _ = env.lists["PodGroup"].list() if "PodGroup" in env.lists else ([], "")
    return (
        {str(meta(p).get("uid")): p for p in pods},
        {claim_key(c): c for c in claims},
        {str(meta(g).get("uid")): g for g in groups},
    )


def _finish(
    cfg: RunConfig,
    env: _Env,
    *,
    tracker: Tracker,
    monitor: Monitor,
    stopped_by: str,
    pods_total: int,
    wall_s: float,
    gc_pauses: dict[str, Any],
    command_started: float,
) -> dict[str, Any]:
    """Shut everything down (drain unless interrupted), verify and compute the figures."""
    clean = stopped_by in ("done", "terminated")
    env.scheduler.stop()
    timeout = DRAIN_TIMEOUT if clean else 2.0
    if stopped_by == "terminated":  # drain until the renew deadline, then hand over
        timeout = cfg.leader_elect.renew_deadline if cfg.leader_elect else 10.0
    drain_started = time.monotonic()
    drained = env.api.close(drain=clean, timeout=timeout)
    drain_s = time.monotonic() - drain_started
    if env.elector is not None:
        env.elector.stop(release=stopped_by != "leadership_lost")
    monitor.stop()
    try:
        pods, claims, groups = _final_state(env)
    except ApiError as exc:  # e.g. interrupted while the apiserver was unreachable
        print(f"cannot read the final state: {exc}", file=sys.stderr)
        pods, claims, groups = {}, {}, {}
    for inf in env.informers:
        inf.stop()
    if isinstance(env.backend, KubernetesBackend):
        env.backend.close()
    log = env.server.request_log if env.server is not None else None
    check = verify(tracker.snapshot(), pods, claims, log, env.audit, groups=groups)
    victims = tracker.preempted
    extra: dict[str, Any] = {
        "stopped_by": stopped_by,
        "sigterm_while_finishing": sigterm_while_finishing(),
        "drained": drained,
        "qps_budget_used": budget_share(monitor.samples, cfg.qps or math.inf, cfg.burst),
        "preemption_rounds": env.scheduler.preemptions.started,
        "victims": len(victims),
        "max_preemptions_per_victim": max(victims.values(), default=0),
        "scheduling_cycles": env.scheduler.cycles,
        "scheduler_errors": env.scheduler.errors,
        "faults_injected": env.server.fault_counts() if env.server is not None else {},
        "unschedulable_pods": env.scheduler.unschedulable()[:100],
        "podgroups": len(env.scheduler.podgroups) if env.scheduler.podgroups.served else None,
        "gangs": dict(sorted(env.scheduler.gangs.items())),
        "gang_latency_ms": gang_latency_ms(tracker.gang_latencies.values()),
        "events_recorded": env.scheduler.events.recorded,
        "events_spam_dropped": env.scheduler.events.spam_dropped,
        "problems": check.problems,
        "gc_pauses": gc_pauses,
        "requests": None if log is None else len(log),
        "requests_by_op": None if log is None else dict(sorted(Counter(r.op for r in log).items())),
        "drain_s": round(drain_s, 3),
    }
    api_stats = env.api.stats()
    extra["command_s"] = round(time.monotonic() - command_started, 3)
    return figures(
        mode=env.api.mode,
        settings=_settings(cfg),
        counts=env.scheduler.phase_counts(),
        pods_total=pods_total,
        api_stats=api_stats,
        submit_latencies=tracker.submit_latencies,
        loop_submit_latencies=tracker.loop_submit_latencies,
        binding_latencies=tracker.binding_latencies,
        wall_s=wall_s,
        active_s=tracker.active_window(),
        verification={
            "duplicate_bindings": check.duplicate_bindings,
            "lost_intents": check.lost_intents,
            "unresolved_futures": check.unresolved,
            "closed_at_stop": check.closed_at_stop,
            "intents_checked": check.checked,
        },
        extra=extra,
    )
