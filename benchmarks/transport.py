"""Transports side by side: the same pod status patches through three client paths.

``python -m benchmarks.transport [--calls 1000] [--threads 8] [--runs 3] [--json PATH]``

Contenders, in one process, against one ``ApiServerHTTP`` (the in-memory apiserver over HTTP)
running in a **separate process**, so the CPU measured here is the client's alone:

* ``models``: the official client as most code uses it — ``CoreV1Api.patch_namespaced_pod_status``
  with a dict body, answered as a ``V1Pod`` model (the baseline);
* ``client``: ``KubernetesBackend(transport="client")`` — the official ``call_api`` path, raw
  JSON replies;
* ``lean``: ``KubernetesBackend(transport="lean")`` (the default) — prebuilt JSON through the
  client's own urllib3 pool;
* ``dispatcher``: a :class:`~kdispatch.Dispatcher` over ``KubernetesBackend()``
  (lean) with ``--threads`` executor workers and no QPS limit, used as a scheduler uses it: one
  thread submits a ``PodStatusPatch`` (``nominatedNodeName``) for each of ``--calls`` distinct
  pods, created just before the measurement, and then checks every future. Sequentially, that
  thread submits and waits for each call's future in turn.

Each run measures every contender sequentially (one thread) and with ``--threads`` threads, in
a rotating order; figures are calls/s (wall clock) and client CPU µs per call
(``time.process_time``, every thread of this process: for the dispatcher, its actor pool and
executor threads too, also reported by thread role), and the server process's CPU per call
(from ``/proc``, Linux only). Every patch changes the pod (``nominatedNodeName`` alternates for the
direct contenders; the dispatcher's pods have none yet), carries a UID precondition (the
dispatcher's a resourceVersion one too), and is checked: direct replies must be the pod, every
dispatcher future must resolve ``Outcome.SUCCESS``, and the dispatcher must have sent exactly
one request per call. Reported: per-run figures, median/min/max over the runs, and the ratios
lean/models, lean/client and dispatcher/models computed within each run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from benchmarks.workloads.common import (
    http_server_process,
    publish,
    serve_http,
    spread,
    thread_role,
)
from benchmarks.workloads.contenders import KdispatchContender
from kdispatch import (
    KubernetesBackend,
    Outcome,
    PodStatusPatch,
    prepare_configuration,
)
from kdispatch.testing import make_pod

PODS = 16
DISPATCHERS = ("dispatcher",)
"""The dispatcher contenders."""
CONTENDERS = ("models", "client", "lean", *DISPATCHERS)
RATIOS = (
    ("lean", "models"),
    ("lean", "client"),
    ("dispatcher", "models"),
)


def serve() -> None:
    """Child process: serve PODS pods over HTTP until stdin closes."""
    from kdispatch.testing import InMemoryApiServer, make_pod

    mem = InMemoryApiServer(history=1000, request_log_limit=1000)
    for i in range(PODS):
        mem.create(make_pod(f"p{i}", uid=f"uid-{i}"))
    serve_http(mem)


Patch = Callable[[int, int], None]  # (pod index, call number)


def _patchers(url: str, workers: int) -> tuple[dict[str, Patch], list[Any]]:
    closers: list[Any] = []

    def body(j: int) -> dict[str, Any]:
        return {"status": {"nominatedNodeName": f"n{j % 2}"}}

    cfg = prepare_configuration(k8s.Configuration(host=url), workers)
    models_client = k8s.ApiClient(cfg)
    closers.append(models_client)
    core: Any = k8s.CoreV1Api(models_client)

    def models(i: int, j: int) -> None:
        pod = core.patch_namespaced_pod_status(
            f"p{i}", "default", {**body(j), "metadata": {"uid": f"uid-{i}"}}
        )
        assert pod.metadata.name == f"p{i}"

    patchers: dict[str, Patch] = {"models": models}
    for transport in ("client", "lean"):
        backend = KubernetesBackend.for_url(url, workers=workers, transport=transport)
        closers.append(backend)

        def patch(i: int, j: int, b: KubernetesBackend = backend) -> None:
            out = b.patch_status(
                "Pod", "default", f"p{i}", body(j), uid=f"uid-{i}", resource_version=None
            )
            assert out["metadata"]["name"] == f"p{i}"

        patchers[transport] = patch
    return patchers, closers


def server_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) the server process used so far; None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_role() -> dict[str, float]:
    """CPU seconds used so far by the live threads of this process, summed by role."""
    out: dict[str, float] = {}
    for t in threading.enumerate():
        if t.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (OSError, AttributeError):  # the thread just ended, or no per-thread clocks
            continue
        role = thread_role(t.name)
        out[role] = out.get(role, 0.0) + seconds
    return out


class Window:
    """Wall clock, this process's CPU and the server's CPU over one measurement."""

    def __init__(self, server_pid: int | None) -> None:
        self._pid = server_pid
        self._server = None if server_pid is None else server_cpu(server_pid)
        self._cpu, self._wall = time.process_time(), time.perf_counter()

    def figures(self, calls: int) -> dict[str, Any]:
        """The window's figures per call, for ``calls`` calls made in it."""
        wall, cpu = time.perf_counter() - self._wall, time.process_time() - self._cpu
        out: dict[str, Any] = {
            "calls": calls,
            "calls_per_s": calls / wall,
            "cpu_us_per_call": cpu / calls * 1e6,
        }
        server = None if self._pid is None else server_cpu(self._pid)
        if server is not None and self._server is not None:
            out["server_cpu_us_per_call"] = (server - self._server) / calls * 1e6
        return out


def _measure(
    patch: Patch, calls: int, threads: int, server_pid: int | None = None
) -> dict[str, Any]:
    per_thread = calls // threads
    errors: list[BaseException] = []
    start_gate = threading.Barrier(threads + 1)

    def work(t: int) -> None:
        start_gate.wait()
        try:
            for j in range(per_thread):
                patch(t % PODS, j)
        except BaseException as exc:  # reported, never hidden
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    window = Window(server_pid)
    start_gate.wait()
    for th in pool:
        th.join()
    figures = window.figures(per_thread * threads)
    if errors:
        raise RuntimeError(f"{len(errors)} threads failed: {errors[0]!r}")
    return figures


class DispatcherContender:
    """The ``dispatcher`` contender: a started :class:`~kdispatch.Dispatcher` over a lean
    ``KubernetesBackend``, built as every workload's kdispatch contender
    (:class:`~benchmarks.workloads.contenders.KdispatchContender`, no QPS limit), and a second
    backend that creates the pods (outside the timing). Benchmark thread."""

    def __init__(self, url: str, workers: int) -> None:
        self.backend = KubernetesBackend.for_url(url, workers=workers)
        self._setup = KubernetesBackend.for_url(url, workers=1)
        kdispatch = KdispatchContender(self.backend, qps=math.inf, burst=workers, workers=workers)
        self.dispatcher = kdispatch.dispatcher
        self._made = 0

    def fresh_pods(self, n: int) -> list[dict[str, Any]]:
        """``n`` pods no call has touched yet, as the server stored them."""
        pods = []
        for _ in range(n):
            self._made += 1
            name = f"d{self._made}"
            pod = make_pod(name, uid=f"uid-{name}")
            pods.append(self._setup.create("Pod", "default", pod))
        return pods

    def measure(
        self, calls: int, sequential: bool, server_pid: int | None = None
    ) -> dict[str, Any]:
        pods = self.fresh_pods(calls)
        d = self.dispatcher
        sent0 = d.tokens_taken
        roles0 = cpu_by_role()
        window = Window(server_pid)
        if sequential:
            outcomes = [
                d.submit(PodStatusPatch.for_pod(p, nominated_node_name="n1")).result(30)
                for p in pods
            ]
        else:
            futures = [d.submit(PodStatusPatch.for_pod(p, nominated_node_name="n1")) for p in pods]
            outcomes = [f.result(60) for f in futures]
        figures = window.figures(calls)
        roles1 = cpu_by_role()
        bad = [o for o in outcomes if o is not Outcome.SUCCESS]
        if bad:
            raise RuntimeError(f"{len(bad)} dispatcher calls did not succeed: {bad[0]!r}")
        sent = d.tokens_taken - sent0
        if sent != calls:
            raise RuntimeError(f"dispatcher sent {sent} requests for {calls} calls")
        figures["cpu_us_per_call_by_thread"] = {
            role: (roles1[role] - roles0.get(role, 0.0)) / calls * 1e6
            for role in sorted(roles1)
            if role != "other"
        }
        return figures

    def close(self) -> None:
        self.dispatcher.stop(drain=True, timeout=30)
        self.backend.close()
        self._setup.close()


def run(calls: int, threads: int, runs: int) -> dict[str, Any]:
    """Start the server process, run every contender ``runs`` times per mode."""
    with http_server_process("benchmarks.transport") as (proc, url):
        patchers, closers = _patchers(url, max(threads, 1))
        dispatchers = {name: DispatcherContender(url, max(threads, 1)) for name in DISPATCHERS}
        closers.extend(dispatchers.values())
        try:
            for patch in patchers.values():  # warm up: connections, imports, caches
                _measure(patch, 50, 1)
            for dispatcher in dispatchers.values():
                dispatcher.measure(50, sequential=True)
                dispatcher.measure(50, sequential=False)
            per_run: list[dict[str, Any]] = []
            n = len(CONTENDERS)
            for r in range(runs):
                order = CONTENDERS[r % n :] + CONTENDERS[: r % n]
                figures: dict[str, Any] = {}
                for mode, n_threads in (("sequential", 1), (f"{threads}_threads", threads)):
                    figures[mode] = {
                        name: (
                            dispatchers[name].measure(calls, n_threads == 1, proc.pid)
                            if name in dispatchers
                            else _measure(patchers[name], calls, n_threads, proc.pid)
                        )
                        for name in order
                    }
                per_run.append(figures)
        finally:
            for c in closers:
                c.close()
    return {"runs": per_run, "summary": _summary(per_run)}


def _summary(per_run: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in per_run[0]:
        entry: dict[str, Any] = {}
        for name in CONTENDERS:
            entry[name] = {
                key: spread([r[mode][name][key] for r in per_run])
                for key in ("calls_per_s", "cpu_us_per_call", "server_cpu_us_per_call")
                if all(key in r[mode][name] for r in per_run)
            }
        for name in DISPATCHERS:
            entry[name]["cpu_us_per_call_by_thread"] = {
                role: spread(
                    [r[mode][name]["cpu_us_per_call_by_thread"].get(role, 0.0) for r in per_run]
                )
                for role in per_run[0][mode][name]["cpu_us_per_call_by_thread"]
            }
        for name, base in RATIOS:
            entry[f"{name}_vs_{base}"] = {
                "calls_per_s": spread(
                    [r[mode][name]["calls_per_s"] / r[mode][base]["calls_per_s"] for r in per_run]
                ),
                "cpu_per_call": spread(
                    [
                        r[mode][name]["cpu_us_per_call"] / r[mode][base]["cpu_us_per_call"]
                        for r in per_run
                    ]
                ),
            }
        out[mode] = entry
    return out


def _table(result: dict[str, Any]) -> str:
    lines = []
    for mode, entry in result["summary"].items():
        lines.append(f"{mode}: calls/s and client CPU µs per call, median (min-max)")
        for name in CONTENDERS:
            c, u = entry[name]["calls_per_s"], entry[name]["cpu_us_per_call"]
            server = entry[name].get("server_cpu_us_per_call")
            lines.append(
                f"  {name:23s} {c['median']:8.0f} ({c['min']:.0f}-{c['max']:.0f}) calls/s  "
                f"{u['median']:6.0f} ({u['min']:.0f}-{u['max']:.0f}) µs"
                + (f", server {server['median']:.0f} µs" if server else "")
            )
        for name in DISPATCHERS:
            split = entry[name]["cpu_us_per_call_by_thread"]
            lines.append(
                f"  {name} CPU µs per call by thread: "
                + ", ".join(f"{role} {v['median']:.0f}" for role, v in split.items())
            )
        for name, base in RATIOS:
            r = entry[f"{name}_vs_{base}"]
            lines.append(
                f"  {name}/{base}: {r['calls_per_s']['median']:.2f}x calls/s "
                f"({r['calls_per_s']['min']:.2f}-{r['calls_per_s']['max']:.2f}), "
                f"{r['cpu_per_call']['median']:.2f}x CPU per call "
                f"({r['cpu_per_call']['min']:.2f}-{r['cpu_per_call']['max']:.2f})"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve()
        return None
    if args.calls < args.threads or args.threads < 1 or args.runs < 1:
        parser.error("need --calls >= --threads >= 1 and --runs >= 1")
    load_start = list(os.getloadavg())
    result = run(args.calls, args.threads, args.runs)
    meta = {
        "calls": args.calls,
        "threads": args.threads,
        "runs": args.runs,
        "python": sys.version.split()[0],
    }
    publish(result, meta, _table, args.json, load_start)
    return result


if __name__ == "__main__":
    main()
