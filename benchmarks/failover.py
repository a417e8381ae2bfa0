"""``python -m benchmarks.failover``: leader failover and restart of the main job, as processes.

An in-memory apiserver runs as its own process (``python -m examples.apiserver``, seeded with
pending pods); scheduler replicas (``python -m examples.scheduler --kubeconfig ...``) run as
further processes. Scenarios:

* ``sigkill``: three replicas with ``--leader-elect``; the leader is SIGKILLed once it has
  bound a quarter of the pods (with a client rate limit, so calls are pending in its
  dispatcher at that moment);
* ``sigterm``: the same, but the leader gets SIGTERM (graceful: drain, release the lease);
* ``restart``: one replica without leader election, SIGKILLed mid-run and started again.

Everything is audited from the apiserver's request log (every write in the order applied, with
the writer's ``User-Agent``) and its lease writes: takeover time (the new leader's first lease
write minus the kill, both on the machine's monotonic clock, which processes share), bindings
per pod, requests of the old leader that landed after the new leader's first write, and pods
the new leader (or the restarted run) bound; pods bound more than once are judged by
:func:`kdispatch.testing.oracle.duplicate_bindings` over the applied bindings (the figure
``duplicate_bindings`` counts those pods). Writes ``benchmarks/results/failover.json`` (``--runs``
per scenario, median/min/max). Benchmark and test harness; not library code.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from benchmarks.workloads.common import spread
from kdispatch.testing.oracle import duplicate_bindings
from kdispatch.testing.waiting import poll

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "failover.json"
WRITE_OPS = frozenset({"bind", "patch_status", "delete"})


POLL_S = 0.05
"""How often the driver looks at the apiserver's audit and the process table."""


@dataclass(frozen=True, slots=True)
class Timing:
    """Lease timings (seconds) of the replicas."""

    lease_duration: float = 2.0
    renew_deadline: float = 1.5
    retry_period: float = 0.25


@dataclass(frozen=True, slots=True)
class Scenario:
    """One run's shape."""

    pods: int = 400
    nodes: int = 20
    replicas: int = 3
    qps: float = 100.0
    latency_ms: float = 5.0
    kill_after: float = 0.25  # share of the pods bound by the leader before it is signalled
    timing: Timing = field(default_factory=Timing)
    deadline: float = 60.0  # seconds for the whole run to converge
    dispatcher_process: bool = False  # each replica runs its dispatcher in a child process


def _running(processes: list[psutil.Process]) -> bool:
    """Whether any of ``processes`` is still running (zombies count as gone)."""
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            continue
    return False


class Cluster:
    """The apiserver process and the replica processes of one run. Use as a context manager:
    leaving it kills every process it started (by pid) and waits for them."""

    def __init__(self, scenario: Scenario, workdir: Path) -> None:
        self.scenario = scenario
        self.workdir = workdir
        self.kubeconfig = workdir / "kubeconfig"
        self.apiserver: subprocess.Popen[str] | None = None
        self.replicas: dict[str, subprocess.Popen[str]] = {}
        self.url = ""

    # ----------------------------------------------------------------- processes

    def __enter__(self) -> Cluster:
        s = self.scenario
        self.apiserver = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "examples.apiserver",
                "--nodes",
                str(s.nodes),
                "--pods",
                str(s.pods),
                "--latency-ms",
                str(s.latency_ms),
                "--write-kubeconfig",
                str(self.kubeconfig),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=open(self.workdir / "apiserver.err", "w"),
            text=True,
        )
        assert self.apiserver.stdout is not None
        line = self.apiserver.stdout.readline()
        if not line:
            raise RuntimeError(
                "apiserver did not start: " + (self.workdir / "apiserver.err").read_text()
            )
        self.url = json.loads(line)["url"]
        return self

    def start_replica(self, identity: str, *, leader_elect: bool = True) -> subprocess.Popen[str]:
        """Start a scheduler replica; its figures go to ``<identity>.json``."""
        s, t = self.scenario, self.scenario.timing
        args = [
            sys.executable,
            "-m",
            "examples.scheduler",
            "--kubeconfig",
            str(self.kubeconfig),
            "--scheduler-name",
            "default-scheduler",
            "--identity",
            identity,
            "--qps",
            str(s.qps),
            "--burst",
            "10",
            "--max-seconds",
            str(s.deadline),
            "--no-progress",
            "--json",
            str(self.workdir / f"{identity}.json"),
        ]
        if s.dispatcher_process:
            args.append("--dispatcher-process")
        if leader_elect:
            args += [
                "--leader-elect",
                "--lease-duration",
                str(t.lease_duration),
                "--renew-deadline",
                str(t.renew_deadline),
                "--retry-period",
                str(t.retry_period),
            ]
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=open(self.workdir / f"{identity}.out", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.replicas[identity] = proc
        return proc

    def __exit__(self, *exc: object) -> None:
        procs = [*self.replicas.values(), *([self.apiserver] if self.apiserver else [])]
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()

    def alive(self) -> list[str]:
        """Identities of replicas still running."""
        return [i for i, p in self.replicas.items() if p.poll() is None]

    # ----------------------------------------------------------------- observation

    def audit(self) -> dict[str, Any]:
        """The apiserver's request log and lease writes (as dicts)."""
        with urllib.request.urlopen(self.url + "/debug/kdispatch/requests", timeout=10) as r:
            raw = json.load(r)
        requests = [dict(zip(raw["request_fields"], row, strict=True)) for row in raw["requests"]]
        leases = [dict(zip(raw["lease_fields"], row, strict=True)) for row in raw["leases"]]
        return {"requests": requests, "leases": leases}

    def holder(self) -> str:
        """The current lease holder's identity ("" if none)."""
        leases = self.audit()["leases"]
        return _identity(leases[-1]["holder"]) if leases else ""

    def bound_by(self, identity: str) -> int:
        """Pods bound by a replica so far."""
        agent = f"kdispatch-scheduler/{identity}"
        return sum(
            1
            for r in self.audit()["requests"]
            if r["op"] == "bind" and r["outcome"] == "ok" and r["writer"] == agent
        )


def _identity(agent: str) -> str:
    return agent.removeprefix("kdispatch-scheduler/")


# --------------------------------------------------------------------------- analysis


def analyse(audit: dict[str, Any], *, old: str, killed_at: float, pods: int) -> dict[str, Any]:
    """Figures and checks of one failover (or restart) from the apiserver's audit."""
    requests = audit["requests"]
    old_agent = f"kdispatch-scheduler/{old}"
    landed = [r for r in requests if r["op"] in WRITE_OPS and r["outcome"] == "ok"]
    binds = {r["name"] for r in landed if r["op"] == "bind"}
    takeover = next(
        (w for w in audit["leases"] if w["t"] >= killed_at and w["holder"] not in ("", old)),
        None,
    )
    new = takeover["holder"] if takeover is not None else ""
    new_agent = f"kdispatch-scheduler/{new}" if new else ""
    firsts = [i for i, r in enumerate(landed) if new_agent and r["writer"] == new_agent]
    first_new = firsts[0] if firsts else len(landed)
    old_after = [r for r in landed[first_new:] if r["writer"] == old_agent]
    old_landed = {r["name"] for r in landed if r["op"] == "bind" and r["writer"] == old_agent}
    attempts_on_old = [
        r
        for r in requests
        if r["op"] == "bind" and r["writer"] != old_agent and r["name"] in old_landed
    ]
    return {
        "old_leader": old,
        "new_leader": new,
        "takeover_s": None if takeover is None else takeover["t"] - killed_at,
        "pods": pods,
        "pods_bound": len(binds),
        "bound_by_old": len(old_landed),
        "rescheduled_by_new": sum(
            1 for r in landed if r["op"] == "bind" and r["writer"] != old_agent
        ),
        "duplicate_bindings": len(
            duplicate_bindings(r["name"] for r in landed if r["op"] == "bind")
        ),
        "old_writes_after_new_first_write": len(old_after),
        "old_writes_total": sum(1 for r in landed if r["writer"] == old_agent),
        "old_writes_after_signal": sum(
            1 for r in landed if r["writer"] == old_agent and r["t"] >= killed_at
        ),
        "binding_attempts_on_pods_bound_before": len(attempts_on_old),
        "bind_conflicts": sum(
            1 for r in requests if r["op"] == "bind" and r["outcome"] == "Conflict"
        ),
    }


def run_failover(scenario: Scenario, workdir: Path, sig: signal.Signals) -> dict[str, Any]:
    """Three replicas, signal the leader mid-run, converge; the figures and checks."""
    with Cluster(scenario, workdir) as cluster:
        for i in range(scenario.replicas):
            cluster.start_replica(f"r{i}")
        if not poll(lambda: cluster.holder() != "", 30, interval=POLL_S):
            raise RuntimeError("no leader elected")
        leader = cluster.holder()
        target = max(1, int(scenario.pods * scenario.kill_after))
        if not poll(lambda: cluster.bound_by(leader) >= target, scenario.deadline, interval=POLL_S):
            raise RuntimeError(f"{leader} bound too little")
        # the leader's descendants (its dispatcher process, if any): a SIGKILL orphans them,
        # so the test's own leak check cannot see them; they must exit by themselves
        descendants = psutil.Process(cluster.replicas[leader].pid).children(recursive=True)
        killed_at = time.monotonic()
        cluster.replicas[leader].send_signal(sig)
        converged = poll(
            lambda: (
                len(
                    {
                        r["name"]
                        for r in cluster.audit()["requests"]
                        if r["op"] == "bind" and r["outcome"] == "ok"
                    }
                )
                >= scenario.pods
            ),
            scenario.deadline,
            interval=POLL_S,
        )
        finished = poll(lambda: not cluster.alive(), scenario.deadline, interval=POLL_S)
        orphans_gone = poll(lambda: not _running(descendants), scenario.deadline, interval=POLL_S)
        out = analyse(cluster.audit(), old=leader, killed_at=killed_at, pods=scenario.pods)
        out.update(
            signal=sig.name,
            dispatcher_process=scenario.dispatcher_process,
            old_leader_descendants=len(descendants),
            old_leader_descendants_gone=orphans_gone,
            converged=converged,
            replicas_finished=finished,
            exit_codes={i: p.returncode for i, p in cluster.replicas.items()},
            released=any(
                w["holder"] == "" and w["writer"].endswith("/" + leader)
                for w in cluster.audit()["leases"]
            ),
        )
        out["figures"] = {
            i: json.loads((workdir / f"{i}.json").read_text())
            for i in cluster.replicas
            if (workdir / f"{i}.json").exists()
        }
        return out


def run_restart(scenario: Scenario, workdir: Path) -> dict[str, Any]:
    """One replica without leader election, SIGKILLed mid-run, then started again."""
    with Cluster(scenario, workdir) as cluster:
        first = cluster.start_replica("first", leader_elect=False)
        target = max(1, int(scenario.pods * scenario.kill_after))
        if not poll(
            lambda: cluster.bound_by("first") >= target, scenario.deadline, interval=POLL_S
        ):
            raise RuntimeError("first run bound too little")
        killed_at = time.monotonic()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        second = cluster.start_replica("second", leader_elect=False)
        second.wait(timeout=scenario.deadline)
        out = analyse(cluster.audit(), old="first", killed_at=killed_at, pods=scenario.pods)
        out.pop("takeover_s")
        out["new_leader"] = "second"
        out["second_exit_code"] = second.returncode
        out["second_figures"] = json.loads((workdir / "second.json").read_text())
        return out


def _spread(values: list[float]) -> dict[str, float]:
    return {**spread(values), "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.failover", description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--pods", type=int, default=400)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    scenario = Scenario(pods=args.pods)
    results: dict[str, Any] = {"scenario": asdict(scenario), "runs": {}}
    for name in ("sigkill", "sigterm", "restart"):
        runs = []
        for i in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                if name == "restart":
                    r = run_restart(scenario, Path(tmp))
                else:
                    sig = signal.SIGKILL if name == "sigkill" else signal.SIGTERM
                    r = run_failover(scenario, Path(tmp), sig)
            r.pop("figures", None)
            r.pop("second_figures", None)
            runs.append(r)
            print(f"{name} run {i + 1}: {json.dumps(r)}", file=sys.stderr)
        summary: dict[str, Any] = {
            "rescheduled_by_new": _spread([r["rescheduled_by_new"] for r in runs]),
            "duplicate_bindings_total": sum(r["duplicate_bindings"] for r in runs),
            "old_writes_after_new_first_write_total": sum(
                r["old_writes_after_new_first_write"] for r in runs
            ),
            "unconverged_runs": sum(1 for r in runs if r["pods_bound"] < r["pods"]),
        }
        if name != "restart":
            times = [r["takeover_s"] for r in runs if r["takeover_s"] is not None]
            summary["takeover_s"] = _spread(times) if times else None
            summary["censored_takeovers"] = len(runs) - len(times)
            summary["bound_s"] = (
                scenario.timing.lease_duration + scenario.timing.retry_period
                if name == "sigkill"
                else scenario.timing.renew_deadline + scenario.timing.retry_period
            )
        results["runs"][name] = {"summary": summary, "samples": runs}
    results["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: v["summary"] for k, v in results["runs"].items()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
