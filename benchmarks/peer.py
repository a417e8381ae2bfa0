"""Peer benchmark: the example scheduler (kdispatch) against the real kube-scheduler, on a real
kube-apiserver + etcd (``kdispatch.testing.envtest``).

    python -m benchmarks.peer --out /tmp/peer [--quick] [--rounds 3] [--workload flood ...]

Each run: a fresh control plane, N fake nodes and the workload created through the API, then
one scheduler (kube-scheduler with ``SchedulerAsyncAPICalls`` off and on, the example
scheduler, the example ``--pre-kep``) until every pod that fits is bound and every unfit pod
has ``PodScheduled=False``, or the deadline. Rounds are interleaved (every scheduler once per
round, the order rotated), so same-round ratios against kube-scheduler with the gate on
compare runs that shared the machine's conditions. Writes ``peer.json``, ``peer.md`` and
``peer-<workload>.png`` to ``--out``.

Needs ``python -m kdispatch.testing.envtest build --with-scheduler``. Benchmark-only code; runs
on the main thread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.peer_report import write_report
from benchmarks.peer_run import BY_WORKLOAD, WORKLOADS, as_dict, run_one
from benchmarks.peer_schedulers import BY_NAME, CONTENDERS, REPO
from kdispatch.testing.envtest import find_binaries
from kdispatch.testing.envtest.modules import KUBERNETES

# nodes, pods: 50 nodes and 200 pods (the flood: 80 unfit, 40 fitting; gang: 80 unfit, 4 gangs
# of 10 pods, 1 infeasible)
QUICK = (0.1, 0.04)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.peer", description=__doc__)
    p.add_argument("--out", type=Path, required=True, help="folder for JSON, Markdown, PNGs")
    p.add_argument(
        "--workload",
        action="append",
        choices=[w.name for w in WORKLOADS],
        help="workloads to run (repeatable; default all)",
    )
    p.add_argument(
        "--scheduler",
        action="append",
        choices=[c.name for c in CONTENDERS],
        help="schedulers to run (repeatable; default all)",
    )
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="scale nodes and pods of every workload (e.g. 0.2 for a fifth)",
    )
    p.add_argument("--quick", action="store_true", help="50 nodes, 200 pods, 1 round")
    p.add_argument("--deadline", type=float, default=900.0, help="seconds a scheduler gets per run")
    p.add_argument(
        "--example-repo",
        type=Path,
        default=REPO,
        help="checkout whose examples.scheduler (and kdispatch) to run (default this one)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    factors = QUICK if args.quick else (args.scale, args.scale)
    rounds = 1 if args.quick else args.rounds
    workloads = [BY_WORKLOAD[n].scaled(*factors) for n in args.workload or BY_WORKLOAD]
    contenders = [BY_NAME[n] for n in args.scheduler or BY_NAME]
    need_kube = any(c.kind == "kube" for c in contenders)
    binaries = find_binaries(scheduler=need_kube)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "meta": {
            "kubernetes": KUBERNETES.version,
            "python": platform.python_version(),
            "cpus": _cpus(),
            "rounds": rounds,
            "scale": {"nodes": factors[0], "pods": factors[1]},
            "deadline_s": args.deadline,
            "example": _describe(args.example_repo),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "workloads": [as_dict(w) for w in workloads],
            "contenders": {c.name: c.label for c in contenders},
        },
        "records": [],
    }
    for workload in workloads:
        for r in range(rounds):
            order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
            for contender in order:
                print(f"{workload.name} round {r + 1}/{rounds}: {contender.name} ...", flush=True)
                rec = run_one(
                    workload,
                    contender,
                    binaries,
                    out / "runs" / f"{workload.name}-r{r}-{contender.name}",
                    deadline_s=args.deadline,
                    round_no=r,
                    example_repo=args.example_repo,
                )
                print(
                    f"  {rec['stopped_by']} in {rec['wall_s']:.1f} s: bound {rec['bound']}"
                    f"/{rec['pods_fit']}, marked {rec['unschedulable_marked']}/"
                    f"{rec['pods_unfit']}, lost {rec['lost']}, duplicates {rec['duplicates']},"
                    f" requests {rec['requests_total']}",
                    flush=True,
                )
                if "gang" in rec:
                    g = rec["gang"]
                    print(
                        f"  gangs: {g['feasible_fully_bound']}/{g['gangs_feasible']} feasible"
                        f" fully bound, complete p99 {g['completion_s']['p99']} s, infeasible"
                        f" gangs' pods bound {g['infeasible_pods_bound']}, PodGroups with"
                        f" condition {g['podgroups_with_condition']}/{g['gangs']}",
                        flush=True,
                    )
                results["records"].append(rec)
                (out / "peer.json").write_text(json.dumps(results, indent=1))
    for path in write_report(results, out):
        print(f"wrote {path}")
    return 0


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def _describe(repo: Path) -> str:
    """The example's checkout: its branch and commit."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "log", "-1", "--format=%h %s", "--decorate=short"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        branch = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--abbrev-ref", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(repo)
    return f"{branch} {out[:80]}"


if __name__ == "__main__":
    sys.exit(main())
