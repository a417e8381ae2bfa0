"""kdispatch against a real cluster: a toy scheduler that binds its pods through the Dispatcher.

Pods that name this scheduler (``spec.schedulerName``, default ``kdispatch-example``) and are
not bound yet get bound round-robin to Ready, schedulable nodes. With no such node, the pod gets
a ``PodScheduled=False`` / ``Unschedulable`` status patch instead (retried on the next update).
Every API call goes through :class:`kdispatch.actors.Dispatcher` over :class:`KubernetesBackend`;
pods,
nodes and (optionally) ResourceClaims come from informers, and the pod and claim informers feed
the dispatcher so pending calls are rebased on, or cancelled by, what the cluster reports.

Run it with a kubeconfig, or inside a pod whose service account has ``examples/rbac.yaml``::

    python -m examples.real_cluster --kubeconfig ~/.kube/config [--context NAME]
    python -m examples.real_cluster --in-cluster

and give it something to schedule::

    kubectl run demo --image=registry.k8s.io/pause:3.10 \\
        --overrides='{"spec": {"schedulerName": "kdispatch-example"}}'

Stop with Ctrl-C (or ``--duration``): informers stop, then the dispatcher drains what is pending.
"""

from __future__ import annotations

import argparse
import itertools
import math
import queue
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from kubernetes import client as k8s
from kubernetes.config import ConfigException
from loguru import logger

from kdispatch import (
    CallOutcomeError,
    ClientListWatch,
    Dispatcher,
    DispatcherClosed,
    DispatcherConfig,
    ExecutorConfig,
    Informer,
    InvalidConfigError,
    KubernetesBackend,
    Outcome,
    PodBinding,
    PodStatusPatch,
    RateLimitConfig,
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--kubeconfig", help="kubeconfig file (default: ~/.kube/config)")
    src.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--scheduler-name", default="kdispatch-example")
    p.add_argument("--workers", type=int, default=8, help="executor threads (pool size follows)")
    p.add_argument("--qps", type=float, default=50.0)
    p.add_argument("--burst", type=int, default=100)
    p.add_argument("--request-timeout", type=float, default=10.0)
    p.add_argument("--claims", action="store_true", help="also inform ResourceClaims (k8s ≥ 1.34)")
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until Ctrl-C)")
    p.add_argument("--verbose", action="store_true", help="library debug logs on stderr")
    args = p.parse_args(argv)
    if not (math.isfinite(args.duration) and args.duration >= 0):
        p.error(f"--duration must be a number >= 0, got {args.duration!r}")  # exit status 2
    return args


_print_lock = threading.Lock()


def say(line: str) -> None:
    """Print one line from any thread without interleaving."""
    with _print_lock:
        print(line, flush=True)


def is_ready_node(node: Mapping[str, Any]) -> bool:
    """Ready=True and not cordoned."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wants_scheduling(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """An unbound, live pod that names our scheduler."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return (
        spec.get("schedulerName") == scheduler_name
        and not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
    )


class ToyScheduler:
    """Takes pods from a queue (filled by the informer thread) and submits calls; the main
    thread runs :meth:`run`, results are reported from the futures' callbacks."""

    def __init__(self, dispatcher: Dispatcher, nodes: Informer, scheduler_name: str) -> None:
        self.dispatcher = dispatcher
        self.nodes = nodes
        self.scheduler_name = scheduler_name
        self.pending: queue.Queue[Mapping[str, Any]] = queue.Queue()
        self.in_flight: set[str] = set()
        self._lock = threading.Lock()
        self._round_robin = itertools.count()

    # informer thread: only enqueue
    def offer(self, pod: Mapping[str, Any]) -> None:
        if wants_scheduling(pod, self.scheduler_name):
            self.pending.put(pod)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                pod = self.pending.get(timeout=0.5)
            except queue.Empty:
                continue
            uid = pod["metadata"]["uid"]
            with self._lock:
                if uid in self.in_flight:
                    continue
                self.in_flight.add(uid)
            try:
                self.schedule(pod)
            except DispatcherClosed:
                return

    def schedule(self, pod: Mapping[str, Any]) -> None:
        name = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
        ready = sorted(
            n["metadata"]["name"] for n in self.nodes.snapshot().values() if is_ready_node(n)
        )
        call: PodBinding | PodStatusPatch
        if ready:
            node = ready[next(self._round_robin) % len(ready)]
            call = PodBinding.for_pod(pod, node)
            what = f"bind {name} -> {node}"
        else:
            call = PodStatusPatch.for_pod(
                pod,
                conditions=[
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "no ready node",
                    }
                ],
            )
            what = f"unschedulable {name}"
        future = self.dispatcher.submit(call)
        future.add_done_callback(lambda f: self.report(f, what, pod["metadata"]["uid"]))

    def report(self, future: Future[Outcome], what: str, uid: str) -> None:
        """Runs on whichever thread resolved the future: keep it short."""
        try:
            outcome = future.result()
            say(f"{what}: {outcome.value}")
        except CallOutcomeError as exc:
            say(f"{what}: {exc.result_label} ({exc})")
        except DispatcherClosed:
            say(f"{what}: dispatcher closed")
        finally:
            with self._lock:
                self.in_flight.discard(uid)  # a later informer update may try again


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.verbose:
        logger.enable("kdispatch")
    try:
        config = DispatcherConfig(
            rate_limit=RateLimitConfig(qps=args.qps, burst=args.burst),
            executor=ExecutorConfig(workers=args.workers),
        )
        if args.in_cluster:
            backend = KubernetesBackend.in_cluster(
                workers=args.workers, request_timeout=args.request_timeout
            )
        else:
            backend = KubernetesBackend.from_kubeconfig(
                args.kubeconfig,
                args.context,
                workers=args.workers,
                request_timeout=args.request_timeout,
            )
    except (InvalidConfigError, ConfigException) as err:  # names the file and the context
        print(f"error: {err}", file=sys.stderr)
        return 2
    # Watches hold a connection each for minutes: give the informers their own pool.
    informer_client: Any = k8s.ApiClient(backend.api_client.configuration)
    dispatcher = Dispatcher(backend, config)
    nodes = Informer(ClientListWatch(informer_client, "Node"), name="nodes")
    pods = Informer(ClientListWatch(informer_client, "Pod"), name="pods")
    scheduler = ToyScheduler(dispatcher, nodes, args.scheduler_name)
    pods.attach(dispatcher)
    pods.add_handler(scheduler.offer, lambda _old, new: scheduler.offer(new))
    informers = [nodes, pods]
    if args.claims:
        claims = Informer(ClientListWatch(informer_client, "ResourceClaim"), name="claims")
        claims.attach(dispatcher)
        informers.append(claims)

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.duration > 0:
        timer = threading.Timer(args.duration, stop.set)
        timer.daemon = True
        timer.start()

    dispatcher.start()
    try:
        for inf in informers:
            inf.start()
        for inf in informers:
            while True:
                try:
                    inf.wait_for_sync(1.0)
                    break
                except TimeoutError as exc:  # InformerSyncTimeout says why: cannot connect...
                    if stop.is_set():
                        return 1
                    print(f"waiting for the {inf.name} informer to sync: {exc}", file=sys.stderr)
        say(
            f"synced: {len(nodes.cache)} nodes, {len(pods.cache)} pods; scheduling pods with "
            f"schedulerName={args.scheduler_name!r}"
        )
        scheduler.run(stop)
    finally:
        for inf in informers:
            inf.stop(timeout=5.0)
        started = time.monotonic()
        drained = dispatcher.stop(drain=True, timeout=10.0)
        say(
            f"dispatcher stopped ({'drained' if drained else 'deadline hit'}, "
            f"{time.monotonic() - started:.2f}s): {dispatcher.stats()}"
        )
        informer_client.close()
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
