"""One run of the peer benchmark: a fresh real apiserver (envtest), fake nodes and a workload
created through the API, then one scheduler until every pod that can fit is bound and every
unfit pod has ``PodScheduled=False`` (or the scheduler exits, or the deadline passes); what it
cost is read from the server: ``apiserver_request_total``, the pods' timestamps, a pod watch
(and a PodGroup watch for gangs), and ``/proc/<pid>/stat`` of each process.

Benchmark-only code; runs on the caller's (main) thread, plus the watches' threads.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.peer_cluster import (
    NAMESPACE,
    PODGROUPS,
    Api,
    Obj,
    RequestKey,
    condition,
    cpu_seconds,
    create_nodes,
    create_podgroups,
    create_pods,
    list_podgroups,
    list_pods,
    node_body,
    pod_body,
    request_delta,
    request_totals,
    timestamp,
)
from benchmarks.peer_gang import (
    Gang,
    gang_figures,
    layout,
    members,
    pod_bodies,
    podgroup_bodies,
)
from benchmarks.peer_schedulers import REPO, Contender, Supervised, start
from benchmarks.peer_stats import p50_p99, rounded
from benchmarks.peer_watch import PodWatch, Seen
from kdispatch.testing.envtest import Binaries, ControlPlane

NODE_CPU, NODE_MEMORY, NODE_PODS = "16", "64Gi", 110
FIT = {"cpu": "100m", "memory": "128Mi"}  # 10 per node at the full size: everything fits
UNFIT = {"cpu": "64", "memory": "1Gi"}  # more cpu than any node has
GROUP_GRACE_S = 15.0  # after the pods are settled: how long PodGroup conditions may take


@dataclass(frozen=True)
class Workload:
    """``unfit`` pods that fit no node, ``fit`` pods, and ``gangs`` PodGroups of
    ``gang_size`` pods each (minCount ``gang_size``), ``infeasible_gangs`` of them with one
    member asking for more cpu than any node has. The PodGroups exist before the scheduler
    starts; with ``late`` the unfit pods exist first and the fitting pods and the gangs' pods
    arrive once the scheduler has marked an unfit pod ``PodScheduled=False`` (the #135900
    flood), otherwise every pod exists before the scheduler starts. ``qps``/``burst``: each
    scheduler's client-side limit."""

    name: str
    title: str
    nodes: int
    fit: int
    unfit: int = 0
    late: bool = False
    qps: float = 50.0
    burst: int = 100
    gangs: int = 0
    infeasible_gangs: int = 0
    gang_size: int = 10

    def scaled(self, nodes: float, pods: float) -> Workload:
        """Nodes and pods scaled; gangs keep their size, their number scales (at least one
        feasible and one infeasible gang stay when there were any)."""
        gangs = max(2, round(self.gangs * pods)) if self.gangs else 0
        infeasible = max(1, round(self.infeasible_gangs * pods)) if self.infeasible_gangs else 0
        return replace(
            self,
            nodes=max(2, round(self.nodes * nodes)),
            fit=max(1, round(self.fit * pods)) if self.fit else 0,
            unfit=round(self.unfit * pods),
            gangs=gangs,
            infeasible_gangs=min(infeasible, gangs - 1) if gangs else 0,
        )

    @property
    def feature_gates(self) -> dict[str, bool]:
        """What the apiserver and kube-scheduler need for this workload: PodGroups and
        kube-scheduler's gang scheduling (``GenericWorkload``) when it has gangs."""
        return {"GenericWorkload": True} if self.gangs else {}

    @property
    def runtime_config(self) -> dict[str, bool]:
        """The APIs the apiserver serves beyond its defaults: PodGroups when it has gangs."""
        return {"scheduling.k8s.io/v1beta1": True} if self.gangs else {}


WORKLOADS = (
    Workload("qps50", "500 nodes, 5,000 fitting pods, QPS 50/burst 100", 500, 5000),
    Workload(
        "unthrottled",
        "500 nodes, 5,000 fitting pods, unthrottled (QPS 5000)",
        500,
        5000,
        qps=5000.0,
        burst=5000,
    ),
    Workload(
        "flood",
        "#135900 flood: 2,000 unfit pods first, then 1,000 fitting pods, QPS 50",
        500,
        1000,
        unfit=2000,
        late=True,
    ),
    Workload(
        "gang",
        "gangs behind the #135900 flood: 2,000 unfit pods first, then 100 PodGroups of 10 pods"
        " (20 infeasible), QPS 50",
        500,
        0,
        unfit=2000,
        late=True,
        gangs=100,
        infeasible_gangs=20,
    ),
)
BY_WORKLOAD = {w.name: w for w in WORKLOADS}


BACKGROUND = ("coordination.k8s.io/leases",)


def scheduler_request(key: str) -> bool:
    """Whether a request key (``"VERB resource[/subresource]"``) counted in the window is the
    scheduler's: not the apiserver's own identity-lease renewals (neither scheduler elects a
    leader in this benchmark, so every Lease request is the apiserver's)."""
    return key.split(" ", 1)[-1] not in BACKGROUND


_r = rounded


def _done(fit: set[str], unfit: set[str], either: set[str]) -> Callable[[Mapping[str, Seen]], bool]:
    """Settled: every ``fit`` pod bound, every ``unfit`` pod ``PodScheduled=False``, every
    ``either`` pod (a member of an infeasible gang) one or the other."""

    def check(pods: Mapping[str, Seen]) -> bool:
        return (
            all(n in pods and pods[n].node for n in fit)
            and all(n in pods and pods[n].unschedulable_at is not None for n in unfit)
            and all(
                n in pods and (pods[n].node or pods[n].unschedulable_at is not None) for n in either
            )
        )

    return check


@dataclass
class _Window:
    """What is read at the start of the measured window, from the scheduler's start."""

    t0: float
    cpu_control: float
    requests: dict[RequestKey, float]
    own: dict[str, int]


def _bodies(names: list[str], served: str, req: Mapping[str, str], group: str) -> list[Obj]:
    return [pod_body(n, served, req["cpu"], req["memory"], group) for n in names]


def _arriving(served: str, fit: list[str], gangs: list[Gang]) -> list[Obj]:
    """The pods that arrive late in a ``late`` workload: the fitting pods, then the gangs'
    members, gang after gang."""
    return _bodies(fit, served, FIT, "fit") + pod_bodies(gangs, served, FIT, UNFIT)


def _setup(api: Api, workload: Workload, served: str) -> tuple[list[str], list[str], list[Gang]]:
    """The nodes, the PodGroups, the unfit pods and (unless they arrive late) the fitting
    pods and the gangs' pods."""
    nodes = [f"n{i:04d}" for i in range(workload.nodes)]
    create_nodes(api, [node_body(n, NODE_CPU, NODE_MEMORY, NODE_PODS) for n in nodes])
    fit = [f"fit-{i:05d}" for i in range(workload.fit)]
    unfit = [f"unfit-{i:05d}" for i in range(workload.unfit)]
    gangs = layout(workload.gangs, workload.infeasible_gangs, workload.gang_size)
    create_podgroups(api, podgroup_bodies(gangs))
    create_pods(api, _bodies(unfit, served, UNFIT, "unfit"))
    if not workload.late:
        create_pods(api, _arriving(served, fit, gangs))
    return fit, unfit, gangs


def _settle(
    watch: PodWatch, sched: Supervised, done: Callable[[Mapping[str, Seen]], bool], end: float
) -> str:
    """Wait until ``done``, the deadline, or the scheduler's exit (the example is restarted
    while pods are unsettled); returns how the run stopped."""
    while True:
        watch.wait(lambda pods: done(pods) or not sched.running(), max(0.0, end - time.monotonic()))
        with watch.lock:
            if done(watch.pods):
                return "done"
        if time.monotonic() >= end:
            return "deadline"
        if sched.running():  # the watch failed
            return "watch-failed"
        if not sched.restartable:
            return "exited"
        sched.restart()


def _watch(api: Api, *, groups: bool) -> PodWatch:
    """The pod watch (and the PodGroup watch with ``groups``) from now on, started."""
    listed = api.ok("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1")
    groups_rv = api.ok("GET", f"{PODGROUPS}?limit=1") if groups else None
    return PodWatch(
        api,
        listed["metadata"]["resourceVersion"],
        None if groups_rv is None else groups_rv["metadata"]["resourceVersion"],
    ).start()


def _arrive(api: Api, watch: PodWatch, late: list[Obj], end: float) -> float:
    """Once the scheduler marks the first unfit pod (the flood is being marked
    unschedulable), create the ``late`` pods; returns when they started to arrive."""
    watch.wait(
        lambda pods: any(s.unschedulable_at is not None for s in pods.values()),
        min(120.0, end - time.monotonic()),
    )
    arrived = time.monotonic()
    create_pods(api, late)
    return arrived


def _await_group_conditions(watch: PodWatch, groups: int, stopped_by: str) -> float:
    """Once the pods are settled, give the scheduler up to :data:`GROUP_GRACE_S` to show
    ``PodGroupInitiallyScheduled`` on every PodGroup (the requests it sends meanwhile count
    as after settled); returns the seconds waited."""
    if not groups or stopped_by != "done":
        return 0.0
    began = time.monotonic()
    with watch.lock:
        watch.changed.wait_for(
            lambda: (
                watch.error != ""
                or sum(g.condition_at is not None for g in watch.groups.values()) >= groups
            ),
            GROUP_GRACE_S,
        )
    return time.monotonic() - began


def run_one(
    workload: Workload,
    contender: Contender,
    binaries: Binaries,
    folder: Path,
    *,
    deadline_s: float,
    round_no: int = 0,
    example_repo: Path = REPO,
    on_end: Callable[[Api, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """One fresh control plane, ``workload`` and ``contender``; returns the run's record.
    ``on_end(api, record)`` is called while the control plane still runs (tests check the
    record against the server there)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    cp = ControlPlane(
        binaries,
        workdir=folder / "cp",
        feature_gates=workload.feature_gates,
        runtime_config=workload.runtime_config,
    )
    cp.start()
    watch: PodWatch | None = None
    try:
        cp.create_namespace(NAMESPACE)
        api = Api(cp.url, cp.admin_token, cp.ca_file)
        t_setup = time.monotonic()
        fit, unfit, gangs = _setup(api, workload, contender.served)
        feasible, infeasible = members(gangs, feasible=True), members(gangs, feasible=False)
        setup_s = time.monotonic() - t_setup
        watch = _watch(api, groups=bool(gangs))
        control = [p.pid for p in cp.processes]
        w = _Window(
            0.0,
            sum(cpu_seconds(pid) for pid in control),
            request_totals(api),
            watch.own_requests(),
        )
        w.t0 = time.monotonic()
        load0 = os.getloadavg()[0]
        sched = Supervised(
            partial(
                start,
                contender,
                binary=binaries.kube_scheduler,
                kubeconfig=cp.write_kubeconfig(folder / "scheduler.kubeconfig"),
                folder=folder / "scheduler",
                qps=workload.qps,
                burst=workload.burst,
                gates=workload.feature_gates,
                max_seconds=deadline_s,
                example_repo=example_repo,
            ),
            restartable=contender.kind == "example",
        )
        ready_s = time.monotonic() - w.t0
        end = w.t0 + deadline_s
        late = _arriving(contender.served, fit, gangs) if workload.late else []
        arrived = _arrive(api, watch, late, end) if late else w.t0
        done = _done(set(fit + feasible), set(unfit), set(infeasible))
        stopped_by = _settle(watch, sched, done, end)
        t_end = time.monotonic()
        load1 = os.getloadavg()[0]
        cpu_sched = sched.cpu_seconds()
        totals = request_totals(api)
        requests = request_delta(w.requests, totals)
        own1 = watch.own_requests()
        own = {k: v - w.own[k] for k, v in own1.items()} | {"POST pods": len(late)}
        cpu_control = sum(cpu_seconds(pid) for pid in control) - w.cpu_control
        groups_waited = _await_group_conditions(watch, len(gangs), stopped_by)
        sched.stop()
        # what it sent after the pods were settled, until it stopped (the example drains its
        # queued Events and verifies; kube-scheduler is stopped at once)
        drain, _, _ = split_requests(
            request_delta(totals, request_totals(api)),
            {k: v - own1[k] for k, v in watch.own_requests().items()},
        )
        seen, groups_seen = watch.snapshot()
        pods = {p["metadata"]["name"]: p for p in list_pods(api)}
        record = _record(
            workload,
            contender,
            round_no=round_no,
            pods=pods,
            seen=seen,
            fit=fit + feasible,
            unfit=unfit,
            either=infeasible,
            requests=requests,
            harness=own,
            t0=w.t0,
            arrived=arrived,
            wall_s=t_end - w.t0,
            stopped_by=stopped_by,
            cpu_sched=cpu_sched,
            cpu_control=cpu_control,
            reports=sched.reports(),
        )
        record.update(
            setup_s=round(setup_s, 2),
            ready_s=round(ready_s, 3),
            restarts=sched.restarts,
            drain_requests=dict(sorted(drain.items())),
            event_requests_with_drain=record["event_requests"] + event_count(drain),
            first_unfit_marked_s=_r(arrived - w.t0) if workload.late else None,
            # the machine's 1-minute load average when the scheduler started and when the
            # pods were settled (the machine may be shared: other work shows here)
            load_average={"start": round(load0, 2), "settled": round(load1, 2)},
            watch_error=watch.error,
            log=str(folder / "scheduler"),
        )
        if gangs:
            record["gang"] = gang_figures(
                gangs,
                t0=w.t0,
                seen=seen,
                groups_seen=groups_seen,
                pods=pods,
                groups={g["metadata"]["name"]: g for g in list_podgroups(api)},
            ) | {"condition_wait_after_settled_s": round(groups_waited, 2)}
        if on_end is not None:
            on_end(api, record)
        return record
    finally:
        if watch is not None:
            watch.stop()
        cp.stop()


def _record(
    workload: Workload,
    contender: Contender,
    *,
    round_no: int,
    pods: Mapping[str, Obj],
    seen: Mapping[str, Seen],
    fit: list[str],
    unfit: list[str],
    either: list[str],
    requests: Mapping[RequestKey, int],
    harness: Mapping[str, int],
    t0: float,
    arrived: float,
    wall_s: float,
    stopped_by: str,
    cpu_sched: float,
    cpu_control: float,
    reports: list[dict[str, Any]],
) -> dict[str, Any]:
    """The run's figures from the server's final state, the watch and the counters."""
    bound = [n for n in fit if pods.get(n, {}).get("spec", {}).get("nodeName")]
    marked = [n for n in unfit if _status(pods.get(n), "False")]
    misplaced = [n for n in unfit if pods.get(n, {}).get("spec", {}).get("nodeName")]
    lost_fit = [n for n in fit if n not in bound]
    lost_unfit = [n for n in unfit if n not in marked and n not in misplaced]
    either_bound = [n for n in either if pods.get(n, {}).get("spec", {}).get("nodeName")]
    either_marked = [n for n in either if n not in either_bound and _status(pods.get(n), "False")]
    lost_either = len(either) - len(either_bound) - len(either_marked)
    latency = []
    for n in bound:
        cond = _status(pods[n], "True")
        if cond is not None:
            created = timestamp(pods[n]["metadata"]["creationTimestamp"])
            latency.append(timestamp(cond["lastTransitionTime"]) - created)
    bound_at = [t for n in bound if n in seen and (t := seen[n].bound_at) is not None]
    bind_times = [t - arrived for t in bound_at]
    first = [t - t0 for t in bound_at]
    by_verb, errors, background = split_requests(requests, harness)
    total = sum(by_verb.values())
    events = event_count(by_verb)
    rebinds = sum(seen[n].rebinds for n in seen)
    conflicts = sum(v for k, v in errors.items() if k.startswith("POST pods/binding 409"))
    scheduled = len(bound) + len(marked) + len(either_bound) + len(either_marked)
    return {
        "workload": workload.name,
        "contender": contender.name,
        "round": round_no,
        "nodes": workload.nodes,
        "pods_fit": len(fit),
        "pods_unfit": len(unfit),
        "pods_either": len(either),
        "qps": workload.qps,
        "burst": workload.burst,
        "stopped_by": stopped_by,
        "wall_s": round(wall_s, 3),
        "bound": len(bound),
        "unschedulable_marked": len(marked),
        "misplaced": len(misplaced),
        "lost": len(lost_fit) + len(lost_unfit) + lost_either,
        "duplicates": rebinds + sum(int(r.get("duplicate_bindings") or 0) for r in reports),
        "binding_conflicts_409": conflicts,
        "first_bind_s": _r(min(first) if first else None),
        "bind_latency_s": p50_p99(latency),
        "bind_after_arrival_s": p50_p99(bind_times),
        "requests": dict(sorted(by_verb.items())),
        "harness_requests": dict(harness),
        "background_requests": background,
        "request_errors": dict(sorted(errors.items())),
        "requests_total": total,
        "event_requests": events,
        "requests_per_pod": _r(total / scheduled if scheduled else None),
        "cpu_scheduler_s": round(cpu_sched, 2),
        "cpu_control_plane_s": round(cpu_control, 2),
        "cpu_scheduler_ms_per_pod": _r(1000 * cpu_sched / scheduled if scheduled else None, 2),
        "cpu_control_plane_ms_per_pod": _r(
            1000 * cpu_control / scheduled if scheduled else None, 2
        ),
        "example_reports": [
            {
                k: report[k]
                for k in (
                    "stopped_by",
                    "pods_total",
                    "pods_bound",
                    "duplicate_bindings",
                    "lost_intents",
                )
                if k in report
            }
            for report in reports
        ],
    }


def split_requests(
    requests: Mapping[RequestKey, int], harness: Mapping[str, int]
) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """The scheduler's requests by ``"VERB resource[/subresource]"`` out of what the server
    counted, less the harness's own (``harness``: the POSTs of late pods, the pod watch's
    ended watches and re-lists); its failed ones by key and code; and the background (the
    apiserver's own Lease renewals)."""
    by_verb: dict[str, int] = {}
    errors: dict[str, int] = {}
    left = dict(harness)
    for (verb, resource, sub, code), counted in requests.items():
        key = f"{verb} {resource}{'/' + sub if sub else ''}"
        mine = min(counted, left.get(key, 0)) if code.startswith("2") else 0
        left[key] = left.get(key, 0) - mine
        count = counted - mine
        if count:
            by_verb[key] = by_verb.get(key, 0) + count
            if code.startswith(("4", "5")):
                errors[f"{key} {code}"] = errors.get(f"{key} {code}", 0) + count
    background = {k: v for k, v in by_verb.items() if not scheduler_request(k)}
    return {k: v for k, v in by_verb.items() if scheduler_request(k)}, errors, background


def event_count(by_verb: Mapping[str, int]) -> int:
    """Requests on Events (core or events.k8s.io)."""
    return sum(v for k, v in by_verb.items() if k.split(" ", 1)[-1].endswith("events"))


def _status(pod: Obj | None, status: str) -> Obj | None:
    cond = None if pod is None else condition(pod, "PodScheduled")
    return cond if cond is not None and cond.get("status") == status else None


def as_dict(workload: Workload) -> dict[str, Any]:
    return asdict(workload)
