"""The schedulers the peer benchmark compares, each started as a child process against the
control plane's apiserver: kube-scheduler with the ``SchedulerAsyncAPICalls`` feature gate off
and on, and the example scheduler (``python -m examples.scheduler --kubeconfig``) with and
without ``--pre-kep``. The example is driven only through its command line.

Benchmark-only code; runs on the caller's thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.peer_cluster import cpu_seconds
from kdispatch.testing.envtest.flags import feature_gate_flags
from kdispatch.testing.envtest.processes import Process
from kdispatch.testing.envtest.scheduler import KubeScheduler

REPO = Path(__file__).resolve().parents[1]
KUBE = "default-scheduler"
EXAMPLE = "kdispatch-example"


@dataclass(frozen=True)
class Contender:
    """One scheduler of the comparison. ``served``: the ``spec.schedulerName`` it serves;
    ``gates``: kube-scheduler's feature gates (a workload may add its own)."""

    name: str
    label: str
    kind: str  # "kube" or "example"
    served: str
    flags: tuple[str, ...] = ()
    gates: tuple[tuple[str, bool], ...] = ()


CONTENDERS = (
    Contender(
        "kube-async",
        "kube-scheduler (SchedulerAsyncAPICalls on)",
        "kube",
        KUBE,
        gates=(("SchedulerAsyncAPICalls", True),),
    ),
    Contender(
        "kube-sync",
        "kube-scheduler (SchedulerAsyncAPICalls off)",
        "kube",
        KUBE,
        gates=(("SchedulerAsyncAPICalls", False),),
    ),
    Contender("example", "example scheduler (kdispatch)", "example", EXAMPLE),
    Contender("example-prekep", "example scheduler --pre-kep", "example", EXAMPLE, ("--pre-kep",)),
)
REFERENCE = "kube-async"
BY_NAME = {c.name: c for c in CONTENDERS}


class Running:
    """A started scheduler: its process, and how to stop it and read what it reported."""

    def __init__(self, process: Process, report: Path | None, exits_when_settled: bool) -> None:
        self.process = process
        self.report_path = report
        self.exits_when_settled = exits_when_settled

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.running()

    def stop(self, grace: float = 30.0) -> None:
        """The example ends by itself once its pods are settled (it verifies and writes its
        report): give it ``grace`` seconds first. Then SIGTERM, and SIGKILL after 60 s."""
        if self.exits_when_settled:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.popen.wait(grace)
        self.process.stop(timeout=60.0)

    def report(self) -> dict[str, Any]:
        """The example's ``--json`` figures (empty for kube-scheduler or when absent)."""
        if self.report_path is None or not self.report_path.is_file():
            return {}
        try:
            data = json.loads(self.report_path.read_text())
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


def children_cpu() -> float:
    """User + system CPU seconds of this process's reaped children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Supervised:
    """A scheduler kept running for the length of a run. kube-scheduler runs until stopped;
    the example scheduler is a batch job that ends once every pod it knows is settled, which
    can happen while a workload's pods are still arriving: then it is started again (as a
    Deployment would restart its container) and ``restarts`` counts it.

    CPU: the live process's ``/proc`` times plus the reaped instances' (this process's
    ``RUSAGE_CHILDREN`` grows only by them while a run's control plane is alive)."""

    def __init__(self, launch: Callable[..., Running], restartable: bool) -> None:
        self._launch = launch
        self.restartable = restartable
        self._cpu0 = children_cpu()
        self.instances = [launch(instance=0)]
        self.restarts = 0

    @property
    def current(self) -> Running:
        return self.instances[-1]

    def running(self) -> bool:
        return self.current.running()

    def restart(self) -> None:
        self.restarts += 1
        self.instances.append(self._launch(instance=self.restarts))

    def cpu_seconds(self) -> float:
        live = cpu_seconds(self.current.pid) if self.current.running() else 0.0
        return children_cpu() - self._cpu0 + live

    def stop(self) -> None:
        self.current.stop()

    def reports(self) -> list[dict[str, Any]]:
        return [r for r in (i.report() for i in self.instances) if r]


def start(
    contender: Contender,
    *,
    binary: Path | None,
    kubeconfig: Path,
    folder: Path,
    qps: float,
    burst: int,
    max_seconds: float,
    gates: Mapping[str, bool] | None = None,
    ready_timeout: float = 60.0,
    instance: int = 0,
    example_repo: Path = REPO,
) -> Running:
    """Start ``contender`` against the cluster of ``kubeconfig`` with a client-side limit of
    ``qps``/``burst``. kube-scheduler, with the contender's feature gates and ``gates`` (the
    workload's, e.g. ``GenericWorkload``): returns once its ``/readyz`` answers (leader
    election off). The example (``python -m examples.scheduler`` of ``example_repo``, with
    that checkout's kdispatch; no gates): returns at once (it has no readiness endpoint)."""
    folder.mkdir(parents=True, exist_ok=True)
    if contender.kind == "kube":
        if binary is None:
            raise FileNotFoundError("kube-scheduler's binary is needed for " + contender.name)
        sched = KubeScheduler(
            binary,
            folder,
            kubeconfig,
            (
                f"--kube-api-qps={qps:g}",
                f"--kube-api-burst={burst}",
                "--v=0",
                *feature_gate_flags({**dict(contender.gates), **(gates or {})}),
                *contender.flags,
            ),
        )
        sched.start(ready_timeout)
        assert sched.process is not None
        return Running(sched.process, None, exits_when_settled=False)
    report = folder / f"report-{instance}.json"
    args = [
        sys.executable,
        "-P",  # not the working directory first on sys.path: the example comes from PYTHONPATH
        "-m",
        "examples.scheduler",
        "--kubeconfig",
        str(kubeconfig),
        "--scheduler-name",
        contender.served,
        "--qps",
        f"{qps:g}",
        "--burst",
        str(burst),
        "--max-seconds",
        f"{max_seconds:g}",
        "--no-progress",
        "--json",
        str(report),
        *contender.flags,
    ]
    os.environ["PYTHONPATH"] = str(example_repo)
    proc = Process("example-scheduler", args, folder / f"example-scheduler-{instance}.log")
    return Running(proc, report, exits_when_settled=True)
