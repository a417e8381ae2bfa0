"""Stress run: ≥ 10,000 concurrent object actors under random churn, then a full check.

``python -m examples.stress --objects 10000 --seconds 10 [--faults 0.05] [--json PATH]``

An embedded apiserver holds ``objects`` Pods and ResourceClaims (one claim per ten objects).
Every object first gets one call, so every object has a live actor at once; then ``threads``
churn threads, each owning a disjoint shard of the objects (so the order of the calls on one
object is well defined), submit random calls as fast as they can for ``seconds``: condition and
nominatedNodeName patches, bindings (sometimes to a second node), preemptions, claim
allocations and reservations, caller cancellations — while the same threads, acting as kubelet
and controllers, update objects behind the dispatcher's back (informer updates that make its
pending patches stale) and delete some, and the apiserver injects faults.

At the end, after ``Dispatcher.stop`` drained everything, it checks:

* every future resolved, and exactly once (no second attempt to resolve it, which the future
  would silently refuse, and its done-callbacks ran once);
* the apiserver's final state equals the intents, as :mod:`kdispatch.testing.oracle` judges it
  (the same oracle as the chaos benchmark's): per object and aspect (condition,
  nominatedNodeName, node, claim allocation, each claim reservation) no call that promised a
  value lost it, and the final value is one the intents may have left there (the last call that
  certainly applied, or a later one that may have); a successfully preempted object is gone;
* no pod was bound twice (no two ``SUCCESS`` futures for different nodes, the apiserver's
  request log and the informer's view of each pod);
* no object actor, pooled actor, pykka actor or thread is left after stop.

It also reports the longest single ``submit()`` and the longest full (generation 2) garbage
collection while calls were being submitted (``--gc-freeze`` turns on
``RuntimeConfig.gc_freeze``).

Pure orchestration on the caller's thread plus the churn threads; exit status 0 when every check
passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pykka

from examples.common import (
    add_config_options,
    check_amounts,
    check_counts,
    check_rate,
    config_from_args,
    configure,
    option_names,
)
from examples.gcwatch import GcWatch
from examples.scheduler.claims import allocation_for
from kdispatch import (
    ApiError,
    Call,
    ClaimStatusPatch,
    Dispatcher,
    DispatcherConfig,
    ExecutorConfig,
    Informer,
    Obj,
    Outcome,
    PodBinding,
    PodPreemption,
    PodStatusPatch,
    RateLimitConfig,
    RetryConfig,
    RuntimeConfig,
    meta,
    pod_node_name,
)
from kdispatch.testing import (
    FaultPlan,
    InMemoryApiServer,
    Latency,
    MemoryListWatch,
    live_pooled_actors,
    make_claim,
    make_pod,
)
from kdispatch.testing.oracle import ABSENT, Field, IntentLog, duplicate_bindings, score

CHURN_CONDITION = "example.com/Churn"
NODES = tuple(f"node-{i}" for i in range(8))
DEVICES = ("gpu-0", "gpu-1")
CONSUMERS_PER_CLAIM = 3


@dataclass(frozen=True, slots=True)
class StressConfig:
    """Knobs of a stress run (validated)."""

    objects: int = 10_000
    seconds: float = 10.0
    threads: int = 4
    faults: float = 0.05
    latency_ms: float = 1.0
    workers: int = 16
    seed: int = 1
    drain_timeout: float = 60.0
    gc_freeze: bool = False
    """The dispatcher's ``RuntimeConfig.gc_freeze``, plus one ``freeze_gc()`` once every object
    has a live actor."""

    def __post_init__(self) -> None:
        check_counts(self, "objects", "threads", "workers")
        check_amounts(self, "seconds", "faults", "latency_ms", "drain_timeout")
        check_rate("faults", self.faults)


@dataclass
class _Obj:
    """A churned object: kind, name, uid and (claims) its consumer uids."""

    kind: str
    name: str
    uid: str
    consumers: tuple[str, ...] = ()


@dataclass
class StressResult:
    """Figures and findings of a run; ``ok`` when every check passed."""

    config: dict[str, Any]
    intents: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    peak_live_actors: int = 0
    external_updates: int = 0
    external_deletes: int = 0
    faults_injected: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    churn_seconds: float = 0.0
    drain_seconds: float = 0.0
    drained: bool = False
    unresolved: int = 0
    resolved_more_than_once: int = 0
    state_mismatches: int = 0
    aspects_checked: int = 0
    double_bindings: int = 0
    leaked_actors: int = 0
    leaked_pooled_actors: int = 0
    leaked_threads: list[str] = field(default_factory=list)
    max_submit_ms: float = 0.0
    """The longest single ``Dispatcher.submit()`` of the run (touch and churn)."""
    gc_full_collections: int = 0
    gc_full_max_ms: float = 0.0
    """The longest full (generation 2) collection while calls were submitted."""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every check passed."""
        return not (
            self.unresolved
            or self.resolved_more_than_once
            or self.state_mismatches
            or self.double_bindings
            or self.leaked_actors
            or self.leaked_pooled_actors
            or self.leaked_threads
        )

    def note(self, text: str) -> None:
        """Keep the first 20 findings."""
        if len(self.problems) < 20:
            self.problems.append(text)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures (with ``ok``)."""
        return {**asdict(self), "ok": self.ok}


class _Recorder:
    """Intents in submission order (an :class:`IntentLog`), how often each future resolved,
    and the longest submit. Churn threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.log = IntentLog()
        self.intents = self.log.intents
        self.callbacks: Counter[int] = Counter()
        self.resolutions: Counter[Future[Outcome]] = Counter()
        """Attempts to resolve each future: a second one is a bug the future itself would hide
        (a resolved future refuses it, and its done-callbacks never run twice)."""
        self.max_submit = 0.0

    def submit(self, dispatcher: Dispatcher, call: Call, uid: str, values: dict[str, Any]) -> None:
        """Churn thread. Submit ``call`` (timed) through the intent log, which records the
        aspect ``values`` it asks for (a submit the closed dispatcher refuses is recorded as
        rejected)."""
        took = 0.0

        def send() -> Future[Outcome]:
            nonlocal took
            t0 = time.perf_counter()
            try:
                future = dispatcher.submit(call)
            finally:
                took = time.perf_counter() - t0
            self._count_resolutions(future)
            return future

        strict = {f: v for name, value in values.items() for f, v in _fields(name, value)}
        intent = self.log.record(
            uid,
            call.call_type,
            call.relevance,
            strict,
            send,
            exclusive="gone" in values,
            node=values.get("node"),
        )
        with self._lock:
            self.max_submit = max(self.max_submit, took)
        if intent.future is None:
            return

        def resolved(_f: Future[Outcome]) -> None:
            with self._lock:
                self.callbacks[intent.seq] += 1

        intent.future.add_done_callback(resolved)

    def _count_resolutions(self, future: Future[Outcome]) -> None:
        """Count every attempt to resolve ``future`` from now on (and the one before, if it is
        resolved already). A resolution between the two is missed: never a false finding."""
        if future.done():
            with self._lock:
                self.resolutions[future] += 1
        for name in ("set_result", "set_exception"):
            setattr(future, name, self._counting(future, getattr(future, name)))

    def _counting(
        self, future: Future[Outcome], resolve: Callable[[Any], None]
    ) -> Callable[[Any], None]:
        """``resolve`` (a method of ``future``), counting each call first."""

        def counted(value: Any) -> None:
            with self._lock:
                self.resolutions[future] += 1
            resolve(value)

        return counted


def _fields(name: str, value: Any) -> list[tuple[Field, Any]]:
    """The oracle's fields of one aspect value a call asks for."""
    if name == "cond":
        status, message = value
        return [
            (("cond", CHURN_CONDITION, "status"), status),
            (("cond", CHURN_CONDITION, "message"), message),
        ]
    if name == "nnn":
        return [(("nnn",), value or ABSENT)]
    if name == "node":
        return [(("node",), value)]
    if name == "alloc":
        return [(("alloc",), ABSENT if value is None else allocation_for(*value))]
    if name.startswith("res:"):
        return [(("reserved", name[len("res:") :]), value)]
    return []  # "gone": a preemption promises the object's absence (exclusive)


class _Churner(threading.Thread):
    """One churn thread over a shard of the objects (see module docstring)."""

    def __init__(
        self,
        index: int,
        shard: list[_Obj],
        env: _Env,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"stress-churn-{index}", daemon=True)
        self.shard = shard
        self.env = env
        self.stop_event = stop
        self.rng = random.Random(env.cfg.seed * 1000 + index)
        self.updates = 0
        self.deletes = 0
        self.version = 0

    def run(self) -> None:
        """Churn thread body."""
        while not self.stop_event.is_set():
            obj = self.rng.choice(self.shard)
            # an external update/delete racing with another writer: fine
            with contextlib.suppress(ApiError):
                self.step(obj)

    def current(self, obj: _Obj) -> Obj | None:
        """The informer's newest object (the basis of the next call)."""
        return self.env.cache(obj.kind).get(obj.uid)

    def step(self, obj: _Obj) -> None:
        """Churn thread. One random action on ``obj``."""
        current = self.current(obj)
        if current is None:
            return  # deleted
        roll = self.rng.random()
        env, rec = self.env, self.env.recorder
        if roll < 0.02:
            self.external_update(obj)
            return
        if roll < 0.025:
            self.external_delete(obj)
            return
        if roll < 0.035:
            env.dispatcher.cancel(obj.uid)
            return
        if obj.kind == "ResourceClaim":
            self.claim_call(obj, current)
            return
        self.version += 1
        if roll < 0.04:
            call: Call = PodPreemption.for_pod(current, preemptor="default/stress")
            rec.submit(env.dispatcher, call, obj.uid, {"gone": True})
        elif roll < 0.25:
            node = self.rng.choice(NODES[:2])  # often the same node again, sometimes another
            rec.submit(env.dispatcher, PodBinding.for_pod(current, node), obj.uid, {"node": node})
        elif roll < 0.45:
            nnn = self.rng.choice((*NODES, None))
            call = PodStatusPatch.for_pod(current, nominated_node_name=nnn)
            rec.submit(env.dispatcher, call, obj.uid, {"nnn": nnn})
        else:
            cond = {
                "type": CHURN_CONDITION,
                "status": self.rng.choice(("True", "False")),
                "reason": "Churn",
                "message": f"v{self.version}",
            }
            call = PodStatusPatch.for_pod(current, conditions=[cond])
            rec.submit(env.dispatcher, call, obj.uid, {"cond": (cond["status"], cond["message"])})

    def claim_call(self, obj: _Obj, current: Obj) -> None:
        """Churn thread. Allocate/deallocate and reserve/unreserve a consumer."""
        env = self.env
        consumer = self.rng.choice(obj.consumers)
        ref = {"resource": "pods", "name": f"c-{consumer[:8]}", "uid": consumer}
        roll = self.rng.random()
        values: dict[str, Any]
        if roll < 0.3:
            node, device = self.rng.choice(NODES), self.rng.choice(DEVICES)
            call = ClaimStatusPatch.for_claim(current, allocate=allocation_for(node, device))
            values = {"alloc": (node, device)}
        elif roll < 0.4:
            call = ClaimStatusPatch.for_claim(current, deallocate=True)
            values = {"alloc": None}
        elif roll < 0.75:
            call = ClaimStatusPatch.for_claim(current, reserve=[ref])
            values = {f"res:{consumer}": True}
        else:
            call = ClaimStatusPatch.for_claim(current, unreserve=[consumer])
            values = {f"res:{consumer}": False}
        env.recorder.submit(env.dispatcher, call, obj.uid, values)

    def external_update(self, obj: _Obj) -> None:
        """Churn thread. A controller relabels the object (resourceVersion-guarded): the
        dispatcher's pending patches become stale and must rebase."""
        fresh = self.env.server.get_object(obj.kind, "default", obj.name)
        if fresh is None or meta(fresh).get("uid") != obj.uid:
            return
        fresh["metadata"]["labels"] = {"churn": str(self.rng.randrange(1000))}
        self.env.server.update(fresh)
        self.updates += 1

    def external_delete(self, obj: _Obj) -> None:
        """Churn thread. Someone else deletes the object (rarely)."""
        if self.rng.random() < 0.2:
            self.env.server.remove(obj.kind, "default", obj.name)
            self.env.removed.add(obj.uid)
            self.deletes += 1


@dataclass
class _Env:
    """The live parts of a stress run."""

    cfg: StressConfig
    server: InMemoryApiServer
    dispatcher: Dispatcher
    informers: dict[str, Informer]
    recorder: _Recorder
    rebinds: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)

    def cache(self, kind: str) -> Mapping[str, Obj]:
        """The informer cache of ``kind`` (uid → newest object; lookups from any thread)."""
        return self.informers[kind].cache


def _objects(cfg: StressConfig, server: InMemoryApiServer) -> list[_Obj]:
    objs: list[_Obj] = []
    for i in range(cfg.objects):
        if i % 10 == 9:
            claim = server.create(make_claim(f"claim-{i:06d}"))
            consumers = tuple(
                f"{claim['metadata']['uid']}-c{k}" for k in range(CONSUMERS_PER_CLAIM)
            )
            objs.append(
                _Obj(
                    "ResourceClaim", claim["metadata"]["name"], claim["metadata"]["uid"], consumers
                )
            )
        else:
            pod = server.create(make_pod(f"pod-{i:06d}"))
            objs.append(_Obj("Pod", pod["metadata"]["name"], pod["metadata"]["uid"]))
    return objs


def _audit_bindings(env: _Env) -> Callable[[Obj, Obj], None]:
    """An informer update handler recording pods seen moving from one node to another."""

    def on_update(old: Obj, new: Obj) -> None:
        before, after = pod_node_name(old), pod_node_name(new)
        if before is not None and after != before:
            env.rebinds.add(str(meta(new).get("uid")))

    return on_update


def _setup(cfg: StressConfig) -> tuple[_Env, list[_Obj]]:
    server = InMemoryApiServer(
        latency=Latency(fixed=cfg.latency_ms / 1000.0),
        faults=FaultPlan(
            rate=cfg.faults,
            weights={"429": 1, "500": 1, "timeout": 1, "conn_reset": 1, "apply_then_fail": 2},
            retry_after=0.01,
        )
        if cfg.faults
        else None,
        seed=cfg.seed,
        request_log_limit=2_000_000,
    )
    objs = _objects(cfg, server)
    dispatcher = Dispatcher(
        server,
        DispatcherConfig(
            rate_limit=RateLimitConfig(qps=math.inf),
            executor=ExecutorConfig(workers=cfg.workers),
            retry=RetryConfig(max_attempts=12, max_backoff=0.5),
            runtime=RuntimeConfig(gc_freeze=cfg.gc_freeze),
        ),
    )
    informers = {
        kind: Informer(MemoryListWatch(server, kind), name=f"stress-{kind.lower()}")
        for kind in ("Pod", "ResourceClaim")
    }
    env = _Env(cfg, server, dispatcher, informers, _Recorder())
    for kind, inf in informers.items():
        inf.attach(dispatcher)
        if kind == "Pod":
            inf.add_handler(on_update=_audit_bindings(env))
    return env, objs


def _touch_all(env: _Env, objs: list[_Obj]) -> None:
    """One call per object, so every object has a live actor at the same time."""
    for obj in objs:
        current = env.cache(obj.kind).get(obj.uid)
        if current is None:
            continue
        if obj.kind == "Pod":
            cond = {"type": CHURN_CONDITION, "status": "False", "reason": "Churn", "message": "v0"}
            call: Call = PodStatusPatch.for_pod(current, conditions=[cond])
            values: dict[str, Any] = {"cond": ("False", "v0")}
        else:
            ref = {"resource": "pods", "name": "c0", "uid": obj.consumers[0]}
            call = ClaimStatusPatch.for_claim(current, reserve=[ref])
            values = {f"res:{obj.consumers[0]}": True}
        env.recorder.submit(env.dispatcher, call, obj.uid, values)


def _check_state(env: _Env, objs: list[_Obj], result: StressResult) -> None:
    """Final apiserver state against the intents, judged by :func:`score` (see the module
    docstring)."""
    finals = {
        kind: {str(meta(o).get("uid")): o for o in env.server.list(kind).items}
        for kind in ("Pod", "ResourceClaim")
    }
    final = {obj.uid: finals[obj.kind].get(obj.uid) for obj in objs}
    # every object starts without any of the aspects the calls set
    found = score(env.recorder.intents, final, initial={}, examples=20)
    result.aspects_checked = found.fields_checked
    result.state_mismatches = found.lost_intents + (
        found.live_objects_checked - found.live_objects_converged
    )
    for text in (*found.lost_examples, *found.unconverged_examples):
        result.note(text)


def _check_bindings(env: _Env, result: StressResult) -> None:
    """Pods bound twice, judged by :func:`duplicate_bindings` over the bindings the server
    applied and the futures (``SUCCESS`` for two different nodes), plus those the informer saw
    rebound. (The in-memory apiserver refuses to bind a bound pod, so the first and last can
    only catch a broken server; the futures are the dispatcher's word.)"""
    applied = (r.uid for r in env.server.request_log if r.op == "bind" and r.outcome == "ok")
    twice = duplicate_bindings(applied, intents=env.recorder.intents) | env.rebinds
    result.double_bindings = len(twice)
    for uid in sorted(twice)[:5]:
        result.note(f"pod {uid} bound twice")


def run_stress(cfg: StressConfig, *, stream: Any = None) -> StressResult:
    """Execute a stress run (caller thread) and return its findings."""
    threads_before = set(threading.enumerate())
    pooled_before = live_pooled_actors()
    result = StressResult(config=asdict(cfg))
    env, objs = _setup(cfg)

    def say(text: str) -> None:
        if stream is not None:
            print(text, file=stream, flush=True)

    env.dispatcher.start()
    for inf in env.informers.values():
        inf.start()
        inf.wait_for_sync(60.0)
    say(f"{len(objs)} objects created; touching every one")
    gc_watch = GcWatch().install()
    _touch_all(env, objs)
    result.peak_live_actors = env.dispatcher.live_actors
    if cfg.gc_freeze:
        env.dispatcher.freeze_gc()
    stop = threading.Event()
    shards = [objs[i :: cfg.threads] for i in range(cfg.threads)]
    churners = [_Churner(i, shard, env, stop) for i, shard in enumerate(shards) if shard]
    started = time.monotonic()
    for c in churners:
        c.start()
    say(f"{result.peak_live_actors} live object actors; churning for {cfg.seconds:g}s")
    stop.wait(cfg.seconds)
    stop.set()
    for c in churners:
        c.join()
    result.churn_seconds = round(time.monotonic() - started, 3)
    gc_watch.uninstall()
    full = gc_watch.summary()["gen2"]
    result.gc_full_collections, result.gc_full_max_ms = full["collections"], full["max_ms"]
    result.max_submit_ms = round(env.recorder.max_submit * 1000, 3)
    result.peak_live_actors = max(result.peak_live_actors, env.dispatcher.live_actors)
    say(f"{len(env.recorder.intents)} calls submitted; draining")
    started = time.monotonic()
    result.drained = env.dispatcher.stop(drain=True, timeout=cfg.drain_timeout)
    result.drain_seconds = round(time.monotonic() - started, 3)
    stats = env.dispatcher.stats()
    for inf in env.informers.values():
        inf.stop()
    _summarise(env, churners, stats, result)
    _check_state(env, objs, result)
    _check_bindings(env, result)
    _check_leaks(env, threads_before, pooled_before, result)
    return result


def _summarise(
    env: _Env, churners: list[_Churner], stats: dict[str, Any], res: StressResult
) -> None:
    res.outcomes = dict(sorted(stats["outcomes"].items()))
    res.sent = int(stats["sent_total"])
    res.faults_injected = env.server.fault_counts()
    res.external_updates = sum(c.updates for c in churners)
    res.external_deletes = sum(c.deletes for c in churners)
    submitted = [i for i in env.recorder.intents if i.rejected is None]
    res.intents = len(submitted)
    for intent in env.recorder.intents:
        if intent.rejected not in (None, "DispatcherClosed"):
            res.unresolved += 1  # refused at submit for another reason than the closing
            res.note(f"{intent.call_type} on {intent.uid}: submit raised {intent.rejected}")
    for intent in submitted:
        times = env.recorder.callbacks[intent.seq]
        if intent.future is None or not intent.future.done():
            res.unresolved += 1
            res.note(f"{intent.call_type} on {intent.uid}: future never resolved")
            continue
        attempts = env.recorder.resolutions[intent.future]
        if times != 1 or attempts > 1:
            res.resolved_more_than_once += 1
            res.note(
                f"{intent.call_type} on {intent.uid}: resolved {max(attempts, times)} times "
                f"({times} done-callback runs)"
            )


def _check_leaks(
    env: _Env, threads_before: set[threading.Thread], pooled_before: int, res: StressResult
) -> None:
    res.leaked_actors = env.dispatcher.live_actors + len(pykka.ActorRegistry.get_all())
    res.leaked_pooled_actors = max(0, live_pooled_actors() - pooled_before)
    leftover = [t for t in threading.enumerate() if t not in threads_before]
    for t in leftover:
        t.join(5.0)
    res.leaked_threads = [t.name for t in leftover if t.is_alive()]


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; exit status 0 when every check passed."""
    p = argparse.ArgumentParser(
        prog="python -m examples.stress", description=__doc__.split("\n")[0]
    )
    names = ("objects", "seconds", "threads", "faults", "latency_ms", "workers", "seed")
    add_config_options(p, StressConfig(), *names, helps={"threads": "churn threads"})
    p.add_argument(
        "--gc-freeze", action="store_true", help="the dispatcher's RuntimeConfig.gc_freeze"
    )
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    build = partial(config_from_args, StressConfig, args)
    cfg = configure(build, verbose=args.verbose, options=option_names(p))
    if isinstance(cfg, int):
        return cfg
    if args.json and not Path(args.json).resolve().parent.is_dir():
        print(f"error: --json {args.json}: no such directory", file=sys.stderr)
        return 2
    result = run_stress(cfg, stream=sys.stderr)
    out = result.as_dict()
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
        except OSError as err:
            print(f"error: --json {args.json}: {err.strerror or err}", file=sys.stderr)
            return 2
    for key in (
        "intents",
        "sent",
        "peak_live_actors",
        "external_updates",
        "external_deletes",
        "churn_seconds",
        "max_submit_ms",
        "gc_full_collections",
        "gc_full_max_ms",
        "drain_seconds",
        "drained",
        "unresolved",
        "resolved_more_than_once",
        "aspects_checked",
        "state_mismatches",
        "double_bindings",
        "leaked_actors",
        "leaked_pooled_actors",
        "leaked_threads",
    ):
        print(f"{key:<24} {out[key]}")
    print(f"{'outcomes':<24} {out['outcomes']}")
    print(f"{'faults_injected':<24} {out['faults_injected']}")
    for problem in result.problems:
        print(f"problem: {problem}")
    print("OK" if result.ok else "FAILED")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
