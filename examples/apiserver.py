"""``python -m examples.apiserver``: the in-memory apiserver, served standalone over HTTP.

Seeds the main job's workload (nodes, claims and every pod of both waves, all pending, for
``spec.schedulerName: default-scheduler``) and serves it on ``127.0.0.1:--port`` until SIGTERM
or Ctrl-C, so schedulers can run as separate processes against it (``--kubeconfig`` mode) —
several replicas with ``--leader-elect``, or one that is killed and restarted. Prints one line
of JSON on stdout once it listens: ``{"url": ..., "pods": N, "nodes": M}``. The request audit
(every write in the order applied, with the writer's ``User-Agent``, and the lease writes) is
served at ``GET /debug/kdispatch/requests``; ``--write-kubeconfig PATH`` writes a kubeconfig
for the URL.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from examples.scheduler.workload import WorkloadSpec, build_workload
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, Latency


def kubeconfig(url: str, token: str | None = None) -> str:
    """A kubeconfig (YAML) for ``url`` with an optional bearer token (both quoted: a JSON
    string is a YAML one)."""
    user = f"    token: {json.dumps(token)}\n" if token else "    {}\n"
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: local\n  cluster:\n    server: {json.dumps(url)}\n"
        f"users:\n- name: local\n  user:\n{user}"
        "contexts:\n- name: local\n  context:\n    cluster: local\n    user: local\n"
        "current-context: local\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m examples.apiserver", description=__doc__)
    p.add_argument("--port", type=int, default=0, help="0 = a free port")
    p.add_argument("--token", default=None, help="require this bearer token")
    p.add_argument("--nodes", type=int, default=50)
    p.add_argument("--pods", type=int, default=500)
    p.add_argument("--latency-ms", type=float, default=0.0, help="latency per request")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--write-kubeconfig", metavar="PATH")
    args = p.parse_args(argv)
    for name in ("nodes", "pods"):
        if getattr(args, name) < 0:
            p.error(f"--{name} must be >= 0, got {getattr(args, name)}")  # exit status 2
    if not 0 <= args.port <= 65535:
        p.error(f"--port must be between 0 and 65535, got {args.port}")
    if not (math.isfinite(args.latency_ms) and args.latency_ms >= 0):
        p.error(f"--latency-ms must be a number >= 0, got {args.latency_ms!r}")
    server = InMemoryApiServer(
        latency=Latency(fixed=args.latency_ms / 1000.0), request_log_limit=1_000_000
    )
    workload = build_workload(
        WorkloadSpec(
            nodes=args.nodes,
            pods=args.pods,
            high_priority_share=0.0,
            unschedulable_share=0.0,
            claim_share=0.0,
            seed=args.seed,
        )
    )
    for obj in workload.nodes + workload.claims:
        server.create(obj)
    pods = 0
    for wave in workload.waves:
        for pod in wave:
            server.create(pod)
            pods += 1
    stop = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        with ApiServerHTTP(server, port=args.port, token=args.token) as http:
            if args.write_kubeconfig:
                with open(args.write_kubeconfig, "w", encoding="utf-8") as f:
                    f.write(kubeconfig(http.url, args.token))
            print(json.dumps({"url": http.url, "pods": pods, "nodes": len(workload.nodes)}))
            sys.stdout.flush()
            while not stop.wait(0.5):
                pass
    except OSError as err:  # the port is taken, the kubeconfig cannot be written
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
