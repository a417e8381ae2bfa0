"""Chaos run of the dispatcher with an oracle.

    python -m benchmarks.chaos --pods N --fault-rate F --json PATH [--http]

N pods (and N/5 ResourceClaims) live on the embedded in-memory apiserver, which fails a share F
of the status patches, bindings and deletions with 429 (with Retry-After), 500, timeouts and
"applied on the server but the reply was lost"; with ``--http`` the dispatcher talks to it through
the official client over real HTTP on 127.0.0.1 (connection resets join the faults). One driver
thread submits random intents — pod status patches (conditions, nominatedNodeName), bindings,
preemptions, claim reservations and allocations — and meanwhile deletes random pods on the
server; informers (list+watch, the in-memory source or the official client) report every change
and deletion to the dispatcher, and a monkey keeps compacting the watch history and cutting the
watches, so informers resume and re-list (410). Then the dispatcher is drained and stopped, and
the oracle (:mod:`kdispatch.testing.oracle`) compares the server with the intents.

JSON keys (ideal values in brackets): ``lost_intents`` [0], ``duplicate_bindings`` [0],
``converged`` [1.0], ``unresolved_futures`` [0], ``leaked`` [0] — see :func:`run` — plus counts
of outcomes, faults, retries, watch drops and re-lists. Exit status 0 when all five are ideal.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import asdict, dataclass
from typing import Any

import pykka
from kubernetes import client as k8s
from loguru import logger

from benchmarks.chaos_watch import BindingAuditor, WatchMonkey
from examples.common import add_config_options, config_from_args
from kdispatch import (
    ApiBackend,
    ClaimStatusPatch,
    ClientListWatch,
    Dispatcher,
    DispatcherConfig,
    ExecutorConfig,
    Informer,
    KubernetesBackend,
    ListWatch,
    NotFoundError,
    Outcome,
    PodBinding,
    PodStatusPatch,
    RateLimitConfig,
    RetryConfig,
    prepare_configuration,
)
from kdispatch.testing import (
    ApiServerHTTP,
    FaultPlan,
    InMemoryApiServer,
    Latency,
    MemoryListWatch,
    live_pooled_actors,
    make_claim,
    make_pod,
)
from kdispatch.testing.oracle import ABSENT, Field, IntentLog, score

Obj = dict[str, Any]
POD, CLAIM = "Pod", "ResourceClaim"
CHAOS_CONDITION = "example.com/Chaos"


@dataclass(frozen=True)
class ChaosConfig:
    """One chaos run. ``intents_per_pod``: actions per pod on average (intents, deletions,
    preemptions). ``watch_chaos_interval``: seconds between history compactions + watch drops
    (0: none). ``request_timeout``: the HTTP client's timeout (``--http``).
    """

    pods: int = 1000
    fault_rate: float = 0.2
    http: bool = False
    seed: int = 1
    intents_per_pod: float = 4.0
    claims_per_pod: float = 0.2
    workers: int = 16
    request_timeout: float = 0.5
    latency_ms: float = 0.0
    watch_chaos_interval: float = 1.0
    batch: int = 500
    settle_timeout: float = 600.0
    drain_timeout: float = 30.0


@dataclass(slots=True)
class _Object:
    kind: str
    name: str
    uid: str
    initial: Obj
    node: str = ""  # a pod's designated node
    deleted: bool = False  # deleted by the driver (server-side)


class _Driver:
    """Submits random intents and records them for the oracle. Runs on the driver thread."""

    def __init__(
        self,
        cfg: ChaosConfig,
        server: InMemoryApiServer,
        dispatcher: Dispatcher,
        caches: dict[str, Informer],
    ) -> None:
        self.cfg = cfg
        self.rng = random.Random(f"chaos:{cfg.seed}")
        self.server = server
        self.d = dispatcher
        self.caches = caches
        self.log = IntentLog()
        self.intents = self.log.intents
        self.pods: list[_Object] = []
        self.claims: list[_Object] = []
        self.nodes = [f"node-{i}" for i in range(max(2, cfg.pods // 10))]
        self.reserved: dict[str, set[str]] = defaultdict(set)
        self.deletions = 0

    # ----------------------------------------------------------------- setup

    def create(self) -> None:
        for i in range(self.cfg.pods):
            obj = self.server.create(make_pod(f"chaos-{i}"))
            node = self.nodes[i % len(self.nodes)]
            self.pods.append(_Object(POD, obj["metadata"]["name"], _uid(obj), obj, node))
        for i in range(max(1, int(self.cfg.pods * self.cfg.claims_per_pod))):
            obj = self.server.create(make_claim(f"claim-{i}"))
            self.claims.append(_Object(CLAIM, obj["metadata"]["name"], _uid(obj), obj))

    # ----------------------------------------------------------------- the run

    def drive(self) -> list[Future[Outcome]]:
        """Submit every action; returns the futures. Keeps at most two batches unresolved."""
        total = int(self.cfg.pods * self.cfg.intents_per_pod)
        actions: list[tuple[float, Callable[[], None]]] = [
            (0.42, self.status_patch),
            (0.25, self.binding),
            (0.20 if self.claims else 0.0, self.claim_patch),
            (0.05, self.preemption),
            (0.05, self.deletion),
            (0.03, self.late_intent),
        ]
        weights = [w for w, _ in actions]
        batches: list[list[Future[Outcome]]] = []
        for start in range(0, total, self.cfg.batch):
            first = len(self.intents)
            for _ in range(min(self.cfg.batch, total - start)):
                self.rng.choices(actions, weights)[0][1]()
            batches.append([i.future for i in self.intents[first:] if i.future is not None])
            if len(batches) > 2:
                wait(batches[-3], timeout=self.cfg.settle_timeout)
        return [i.future for i in self.intents if i.future is not None]

    def _pick_pod(self, *, live: bool = True) -> _Object:
        for _ in range(8):
            pod = self.rng.choice(self.pods)
            if pod.deleted != live:
                return pod
        return pod

    def _basis(self, o: _Object) -> Obj:
        """The freshest copy the driver has, like a scheduler's informer cache."""
        cached = self.caches[o.kind].cache.get(o.uid)
        return cached if cached is not None else o.initial

    # ----------------------------------------------------------------- actions

    def status_patch(self, pod: _Object | None = None) -> None:
        pod = pod or self._pick_pod()
        rng = self.rng
        conditions: list[dict[str, str]] = []
        strict: dict[Field, Any] = {}
        if rng.random() < 0.6:
            cond = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": f"0/{len(self.nodes)} nodes: attempt {rng.randrange(4)}",
            }
            conditions.append(cond)
        if rng.random() < 0.4 or not conditions:
            cond = {
                "type": CHAOS_CONDITION,
                "status": rng.choice(("True", "False")),
                "reason": rng.choice(("Alpha", "Beta")),
            }
            if rng.random() < 0.5:
                cond["message"] = f"m{rng.randrange(3)}"
            conditions.append(cond)
        for c in conditions:
            for key in ("status", "reason", "message"):
                if key in c:
                    strict["cond", c["type"], key] = c[key]
        kwargs: dict[str, Any] = {"conditions": conditions}
        if rng.random() < 0.35:
            nnn = rng.choice((None, *rng.sample(self.nodes, 2)))
            kwargs["nominated_node_name"] = nnn
            strict["nnn",] = nnn or ABSENT
        basis = self._basis(pod)
        self.log.record(
            pod.uid,
            "pod_status_patch",
            1,
            strict,
            lambda: self.d.submit(PodStatusPatch.for_pod(basis, **kwargs)),
        )

    def binding(self, pod: _Object | None = None) -> None:
        pod = pod or self._pick_pod()
        node = pod.node if self.rng.random() < 0.8 else self.rng.choice(self.nodes)
        basis = self._basis(pod)
        loose: dict[Field, Any] = {
            ("cond", "PodScheduled", "status"): "True",
            ("cond", "PodScheduled", "reason"): ABSENT,
            ("cond", "PodScheduled", "message"): ABSENT,
        }
        self.log.record(
            pod.uid,
            "pod_binding",
            2,
            {("node",): node},
            lambda: self.d.submit(PodBinding.for_pod(basis, node)),
            loose=loose,
            node=node,
        )

    def preemption(self) -> None:
        pod = self._pick_pod()
        basis = self._basis(pod)
        self.log.record(
            pod.uid,
            "pod_preemption",
            3,
            {},
            lambda: self.d.preempt(basis, preemptor="default/chaos-preemptor"),
            exclusive=True,
        )

    def deletion(self) -> None:
        """Delete a pod on the server (as its owner or the kubelet would); the informer tells
        the dispatcher, and half the time the driver tells it directly as well."""
        pod = self._pick_pod()
        pod.deleted = True
        self.deletions += 1
        try:
            last = self.server.remove(POD, "default", pod.name)
        except NotFoundError:
            return
        if self.rng.random() < 0.5:
            self.d.on_delete(last)

    def late_intent(self) -> None:
        """An intent for a pod that may already be gone."""
        pod = self._pick_pod(live=False)
        (self.status_patch if self.rng.random() < 0.5 else self.binding)(pod)

    def claim_patch(self) -> None:
        claim = self.rng.choice(self.claims)
        basis = self._basis(claim)
        reserved = self.reserved[claim.uid]
        roll = self.rng.random()
        strict: dict[Field, Any]
        if roll < 0.1:
            alloc = self._allocation() if self.rng.random() < 0.7 else None
            strict = {("alloc",): alloc if alloc is not None else ABSENT}
            if alloc is None:
                call = ClaimStatusPatch.for_claim(basis, deallocate=True)
            else:
                call = ClaimStatusPatch.for_claim(basis, allocate=alloc)
        elif roll < 0.35 and reserved:
            cuid = self.rng.choice(sorted(reserved))
            reserved.discard(cuid)
            strict = {("reserved", cuid): False}
            call = ClaimStatusPatch.for_claim(basis, unreserve=[cuid])
        else:
            pod = self.rng.choice(self.pods)
            reserved.add(pod.uid)
            strict = {("reserved", pod.uid): True}
            consumer = {"resource": "pods", "name": pod.name, "uid": pod.uid}
            call = ClaimStatusPatch.for_claim(basis, reserve=[consumer])
        self.log.record(claim.uid, "claim_status_patch", 1, strict, lambda: self.d.submit(call))

    def _allocation(self) -> dict[str, Any]:
        device = f"gpu-{self.rng.randrange(4)}"
        return {
            "devices": {
                "results": [
                    {
                        "request": "device",
                        "driver": "gpu.example.com",
                        "pool": "p",
                        "device": device,
                    }
                ]
            }
        }


def _uid(obj: Obj) -> str:
    return str(obj["metadata"]["uid"])


# --------------------------------------------------------------------------- the run


def _config(cfg: ChaosConfig) -> DispatcherConfig:
    return DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf, burst=1),
        # bounded, but with enough attempts that a 20% fault rate does not exhaust them
        retry=RetryConfig(max_attempts=12, base_backoff=0.002, max_backoff=0.05),
        executor=ExecutorConfig(workers=cfg.workers),
    )


def _fault_plan(cfg: ChaosConfig) -> FaultPlan:
    weights = {"429": 1.0, "500": 1.0, "timeout": 1.0, "apply_then_fail": 1.0}
    if cfg.http:
        weights["conn_reset"] = 1.0
    return FaultPlan(rate=cfg.fault_rate, weights=weights, retry_after=0.01)


def _duplicates(
    driver: _Driver,
    server: InMemoryApiServer,
    auditor: BindingAuditor,
    final: dict[str, Obj | None],
) -> tuple[int, list[str]]:
    """Pods bound twice or to two nodes, by four independent witnesses."""
    flagged: dict[str, str] = {}
    ok_binds = Counter(r.uid for r in server.request_log if r.op == "bind" and r.outcome == "ok")
    for uid, n in ok_binds.items():
        if n > 1:
            flagged.setdefault(uid, f"the server answered {n} bindings with success")
    for uid, nodes in auditor.nodes().items():
        if len(nodes) > 1:
            flagged.setdefault(uid, f"seen bound to {sorted(nodes)}")
    promised: dict[str, set[str]] = defaultdict(set)
    asked: dict[str, set[str]] = defaultdict(set)
    for i in driver.intents:
        if i.binding_node is None:
            continue
        asked[i.uid].add(i.binding_node)
        fut = i.future
        if (
            fut is not None
            and fut.done()
            and fut.exception() is None
            and fut.result() is Outcome.SUCCESS
        ):
            promised[i.uid].add(i.binding_node)
    for uid, nodes in promised.items():
        if len(nodes) > 1:
            flagged.setdefault(uid, f"bindings to {sorted(nodes)} all said success")
    for pod in driver.pods:
        obj = final.get(pod.uid)
        node = (obj or {}).get("spec", {}).get("nodeName")
        if node and node not in asked[pod.uid]:
            flagged.setdefault(pod.uid, f"bound to {node}, which no intent asked for")
    return len(flagged), [f"{u}: {why}" for u, why in list(flagged.items())[:10]]


def _leaks(baseline: set[threading.Thread], pooled_before: int, timeout: float = 5.0) -> list[str]:
    """Threads and actors started by the run and still alive (bounded joins first)."""
    deadline = time.monotonic() + timeout
    extra = [t for t in threading.enumerate() if t not in baseline]
    for t in extra:
        t.join(max(0.0, deadline - time.monotonic()))
    left = [f"thread {t.name}" for t in extra if t.is_alive()]
    left += [f"pykka actor {a}" for a in pykka.ActorRegistry.get_all()]
    pooled = live_pooled_actors() - pooled_before
    if pooled > 0:
        left.append(f"{pooled} pooled actors")
    return left


class _Harness:
    """The apiserver (in memory, optionally behind HTTP), the backend, the dispatcher, the
    informers, the auditor and the watch monkey of one run. Driver thread."""

    def __init__(self, cfg: ChaosConfig) -> None:
        self.cfg = cfg
        self.server = InMemoryApiServer(
            latency=Latency(fixed=cfg.latency_ms / 1000.0),
            faults=_fault_plan(cfg),
            seed=cfg.seed,
            history=max(100_000, cfg.pods * 40),
            request_log_limit=max(200_000, cfg.pods * 60),
        )
        self.auditor = BindingAuditor(self.server).start()
        self.http: ApiServerHTTP | None = None
        self.kbackend: KubernetesBackend | None = None
        self.clients: list[Any] = []  # informer ApiClients
        backend: ApiBackend = self.server
        if cfg.http:
            self.http = ApiServerHTTP(
                self.server, hang_seconds=max(2.0, cfg.request_timeout * 4)
            ).start()
            self.kbackend = KubernetesBackend.for_url(
                self.http.url, workers=cfg.workers, request_timeout=cfg.request_timeout
            )
            backend = self.kbackend
        self.dispatcher = Dispatcher(backend, _config(cfg)).start()
        self.informers = {
            kind: Informer(self._source(kind), name=f"chaos-{kind.lower()}", backoff_initial=0.01)
            for kind in (POD, CLAIM)
        }
        self.monkey = (
            WatchMonkey(self.server, cfg.watch_chaos_interval) if cfg.watch_chaos_interval else None
        )
        self.drained = False

    def _source(self, kind: str) -> ListWatch:
        if self.http is None:
            return MemoryListWatch(self.server, kind)
        client = k8s.ApiClient(prepare_configuration(k8s.Configuration(host=self.http.url), 2))
        self.clients.append(client)
        return ClientListWatch(client, kind, request_timeout=10.0)

    def start(self) -> None:
        """Start the informers (after the objects exist) and the monkey."""
        for informer in self.informers.values():
            informer.attach(self.dispatcher)
            informer.start()
        for informer in self.informers.values():
            informer.wait_for_sync(30.0)
        if self.monkey is not None:
            self.monkey.start()

    def stop(self) -> None:
        """Drain and stop the dispatcher, then everything else. Safe after a failed start."""
        if self.monkey is not None:
            self.monkey.stop()
        self.drained = self.dispatcher.stop(drain=True, timeout=self.cfg.drain_timeout)
        for informer in self.informers.values():
            informer.stop()
        self.auditor.stop()
        if self.kbackend is not None:
            self.kbackend.close()
        for client in self.clients:
            client.close()
        if self.http is not None:
            self.http.stop()


def run(cfg: ChaosConfig) -> dict[str, Any]:
    """One chaos run; returns the figures (see the module docstring).

    * ``lost_intents``: intents whose future promised success (or never resolved) while the
      server's final state does not show them and nothing later superseded them;
    * ``duplicate_bindings``: pods bound twice or to two nodes (request log, a watch on every
      pod change, the futures and the final state are all witnesses);
    * ``converged``: share of live objects with intents whose final state is what the last
      intents left there;
    * ``unresolved_futures``: futures still pending after ``stop()`` returned;
    * ``leaked``: threads and actors of the run alive after everything was stopped.
    """
    baseline = set(threading.enumerate())
    pooled_before = live_pooled_actors()
    h = _Harness(cfg)
    server = h.server
    driver = _Driver(cfg, server, h.dispatcher, h.informers)
    try:
        driver.create()
        h.start()
        started = time.monotonic()
        futures = driver.drive()
        submitted_s = time.monotonic() - started
        _done, pending = wait(futures, timeout=cfg.settle_timeout)
        settled_s = time.monotonic() - started
    finally:
        h.stop()
    unresolved = sum(1 for f in futures if not f.done())
    stats = h.dispatcher.stats()
    final: dict[str, Obj | None] = {}
    for o in (*driver.pods, *driver.claims):
        obj = server.get_object(o.kind, "default", o.name)
        final[o.uid] = obj if obj is not None and _uid(obj) == o.uid else None
    initial = {o.uid: o.initial for o in (*driver.pods, *driver.claims)}
    result = score(driver.intents, final, initial)
    duplicates, duplicate_examples = _duplicates(driver, server, h.auditor, final)
    leaks = _leaks(baseline, pooled_before)
    informers = h.informers.values()
    monkey = h.monkey
    return {
        "lost_intents": result.lost_intents,
        "duplicate_bindings": duplicates,
        "converged": round(result.converged, 6),
        "unresolved_futures": unresolved,
        "leaked": len(leaks),
        "config": asdict(cfg),
        "mode": "http" if cfg.http else "memory",
        "intents": len(driver.intents),
        "actions": dict(
            Counter(i.call_type for i in driver.intents), server_delete=driver.deletions
        ),
        "outcomes": dict(result.outcomes),
        "pending_after_settle": len(pending),
        "drained": h.drained,
        "live_objects_checked": result.live_objects_checked,
        "live_objects_converged": result.live_objects_converged,
        "pods_deleted_on_server": sum(1 for p in driver.pods if final[p.uid] is None),
        "faults_injected": server.fault_counts(),
        "requests_ok": server.counts(),
        "requests_sent": stats["sent_total"],
        "retries": stats["retries"],
        "informer_relists_after_first": sum(i.relists for i in informers) - len(informers),
        "informer_watches": sum(i.watches for i in informers),
        "watch_drops": monkey.drops if monkey else 0,
        "compactions": monkey.compactions if monkey else 0,
        "auditor_relists": h.auditor.relists,
        "submit_seconds": round(submitted_s, 3),
        "settle_seconds": round(settled_s, 3),
        "lost_examples": result.lost_examples,
        "unconverged_examples": result.unconverged_examples,
        "duplicate_examples": duplicate_examples,
        "leaks": leaks,
    }


IDEAL = {
    "lost_intents": 0,
    "duplicate_bindings": 0,
    "converged": 1.0,
    "unresolved_futures": 0,
    "leaked": 0,
}


def ideal(figures: dict[str, Any]) -> bool:
    """Whether the five oracle figures all have their ideal values."""
    return all(figures[k] == v for k, v in IDEAL.items())


def main(argv: list[str] | None = None) -> int:
    """Command line; returns the exit status (0 when the oracle is satisfied)."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.chaos", description=__doc__.split("\n")[0]
    )
    add_config_options(p, ChaosConfig, "pods", "fault_rate")
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    p.add_argument("--http", action="store_true", help="real client over HTTP on 127.0.0.1")
    knobs = (
        "seed",
        "workers",
        "intents_per_pod",
        "request_timeout",
        "latency_ms",
        "watch_chaos_interval",
    )
    add_config_options(p, ChaosConfig, *knobs)
    args = p.parse_args(argv)
    cfg = config_from_args(ChaosConfig, args)
    logger.disable("kdispatch")
    figures = run(cfg)
    text = json.dumps(figures, indent=2, sort_keys=True, default=str)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(text)
    return 0 if ideal(figures) else 1


if __name__ == "__main__":
    sys.exit(main())
