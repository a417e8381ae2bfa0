"""The dispatcher in the scheduler's process vs in a child process, side by side.

    python -m benchmarks.process_executor --repeat 3 --json PATH           # 5,000 pods / 500 nodes
    python -m benchmarks.process_executor --repeat 3 --json PATH --quick   # 1,000 pods / 100 nodes
    python -m benchmarks.process_executor --repeat 3 --json PATH --gc-freeze  # both, --gc-freeze
    python -m benchmarks.process_executor --repeat 3 --json PATH --quick --window-ab
    python -m benchmarks.process_executor --repeat 3 --json PATH --baseline-tree ../main
    python -m benchmarks.process_executor --repeat 3 --json PATH --pacing-ab [--max-backlog N]

Every run starts a fresh ``python -m examples.apiserver`` (the in-memory apiserver seeded with
the pods, served over HTTP in its own process, ``--latency-ms`` per request), then runs
``python -m examples.scheduler --kubeconfig ...`` against it in a fresh interpreter, with the
same scheduling threads, executor workers and QPS (unlimited by default); only
``--dispatcher-process`` differs:

* ``inprocess``: the dispatcher's actors, executor workers and HTTP client are threads of the
  scheduler's process;
* ``process``: they run in a child process (``kdispatch.ProcessDispatcher``,
  its default ``max_in_flight`` window);
* ``process_unbounded`` (with ``--window-ab``): the same with ``max_in_flight=None``, every call
  piped to the child at once (the behaviour before the window), the scheduler started through
  a shim that sets that default; ``window_ratios`` compare ``process`` with it within a round;
* ``process_baseline`` (with ``--baseline-tree PATH``): ``process`` with the scheduler and
  kdispatch of another checkout (``PATH``, e.g. a worktree of the main branch), so a change is
  measured before and after in the same run; ``baseline_ratios`` compare ``process`` with it;
* ``inprocess_unpaced`` and ``process_unpaced`` (with ``--pacing-ab``): both variants with the
  scheduler's pacing off (``--max-backlog 0``: its threads never wait for the dispatcher's
  backlog); ``pacing_ratios`` and ``pacing_ratios_inprocess`` compare each paced variant with
  its unpaced twin within a round. ``--max-backlog N`` sets the paced variants' bound (default:
  the scheduler's).

The apiserver is a separate process in both, so neither variant pays for it inside the
scheduler's interpreter. Within a round the two variants run one after the other (the order
alternates from round to round); ratios (process / in-process) are taken within a round and
reported as the median with the min-max over the rounds. Peak RSS and CPU seconds of the
scheduler process and of its children (the dispatcher process) are sampled with psutil every
0.2 s. A probe process runs next to each scheduler and times a fixed slice of Python work
(about as long as a submit) every 0.5 ms: it competes for the CPUs but shares no interpreter
lock, so its p99 is the floor the machine itself sets at that moment. Targets (on the
median): submit on the scheduling threads p50 ≤ 100 µs and p99 ≤ 1 ms with the process
dispatcher; every run verifies clean (no duplicate binding, no lost intent).
Exit status 0 when every target is met.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

VARIANTS: dict[str, tuple[str, ...]] = {
    "inprocess": (),
    "process": ("--dispatcher-process",),
}
"""Variant name → the scheduler options that set it apart."""

UNBOUNDED = "process_unbounded"
"""The ``--window-ab`` variant: ``process`` with ``max_in_flight=None``."""

BASELINE = "process_baseline"
"""The ``--baseline-tree`` variant: ``process`` run from another checkout."""

UNPACED = {"inprocess_unpaced": "inprocess", "process_unpaced": "process"}
"""The ``--pacing-ab`` variants (``--max-backlog 0``) → the paced variant they twin."""

COMPARED = {
    UNBOUNDED: ("window_ratios", "process"),
    BASELINE: ("baseline_ratios", "process"),
    "inprocess_unpaced": ("pacing_ratios_inprocess", "inprocess"),
    "process_unpaced": ("pacing_ratios", "process"),
}
"""Extra variant → the key of its within-round ratios and the variant compared with it
(that variant / it)."""

RATIOS = (
    "loop_submit_p50",
    "loop_submit_p99",
    "loop_submit_max",
    "pods_per_s",
    "binding_p50",
    "binding_p99",
)
"""Figures compared as process / in-process within a round."""


class Sampler:
    """Peak RSS and the latest CPU seconds of a process and of its children (sampling thread)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self._proc = psutil.Process(pid)
        self._interval = interval
        self._stop = threading.Event()
        self._cpu: dict[int, float] = {}
        self.peak_rss_parent = 0
        self.peak_rss_children = 0
        self.cpu_parent = 0.0
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu_children(self) -> float:
        return sum(self._cpu.values())

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                with self._proc.oneshot():
                    rss = self._proc.memory_info().rss
                    cpu = self._proc.cpu_times()
                children = self._proc.children(recursive=True)
            except psutil.Error:
                return
            self.peak_rss_parent = max(self.peak_rss_parent, rss)
            self.cpu_parent = cpu.user + cpu.system
            total = 0
            for child in children:
                try:
                    total += child.memory_info().rss
                    t = child.cpu_times()
                    self._cpu[child.pid] = t.user + t.system
                except psutil.Error:
                    continue
            self.peak_rss_children = max(self.peak_rss_children, total)


def probe_main(out: str) -> int:
    """``--probe PATH``: time a fixed slice of work every 0.5 ms until SIGTERM, then write its
    p50/p99/max in µs to PATH (the machine's floor, see the module docstring). Prints
    ``ready`` once SIGTERM is handled."""
    # A plain flag: the handler runs on the main thread between two bytecodes, possibly while
    # that thread holds an Event's lock, and Event.set() would then wait for it forever.
    stopped: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    print("ready", flush=True)  # SIGTERM is handled from now on
    samples: list[float] = []
    while not stopped:
        time.sleep(0.0005)
        start = time.perf_counter()
        total = 0
        for i in range(800):
            total += i
        samples.append(time.perf_counter() - start)
    samples.sort()
    n = len(samples)
    figures = {
        "samples": n,
        "p50": round(samples[n // 2] * 1e6, 1) if n else None,
        "p99": round(samples[min(n - 1, int(n * 0.99))] * 1e6, 1) if n else None,
        "max": round(samples[-1] * 1e6, 1) if n else None,
    }
    Path(out).write_text(json.dumps(figures))
    return 0


def windowless_scheduler_main(argv: list[str]) -> int:
    """``--scheduler-unbounded ARGS``: ``python -m examples.scheduler ARGS`` with every
    ``ProcessDispatcher`` built with ``max_in_flight=None`` (the examples import the class from
    ``kdispatch`` when they are first imported, after this swap)."""
    import kdispatch

    base = kdispatch.ProcessDispatcher

    class Unbounded(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("max_in_flight", None)
            super().__init__(*args, **kwargs)

    setattr(kdispatch, "ProcessDispatcher", Unbounded)  # noqa: B010
    from examples.scheduler.cli import main
    from examples.scheduler.ha import install_sigterm

    install_sigterm()
    return main(argv)


def start_apiserver(
    nodes: int, pods: int, latency_ms: float, kubeconfig: Path
) -> subprocess.Popen[str]:
    """``examples.apiserver`` in its own process; returns once it listens."""
    cmd = [
        sys.executable, "-m", "examples.apiserver", "--nodes", str(nodes),
        "--pods", str(pods), "--latency-ms", f"{latency_ms:g}",
        "--write-kubeconfig", str(kubeconfig),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise RuntimeError(f"apiserver did not start (exit {proc.returncode})")
    json.loads(line)
    return proc


def run_variant(name: str, args: argparse.Namespace, nodes: int, pods: int) -> dict[str, Any]:
    """One run: a fresh apiserver, the scheduler against it; its figures."""
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig, out = Path(tmp) / "kubeconfig", Path(tmp) / "run.json"
        api = start_apiserver(nodes, pods, args.latency_ms, kubeconfig)
        load_before = os.getloadavg()[0]
        try:
            entry = (
                ("benchmarks.process_executor", "--scheduler-unbounded")
                if name == UNBOUNDED
                else ("examples.scheduler",)
            )
            cmd = [
                sys.executable, "-m", *entry, "--kubeconfig", str(kubeconfig),
                "--scheduler-name", "default-scheduler", "--threads", str(args.threads),
                "--workers", str(args.workers), "--qps", f"{args.qps:g}",
                "--max-seconds", f"{args.max_seconds:g}", "--no-progress", "--json", str(out),
                *_options(name, args.max_backlog), *(("--gc-freeze",) if args.gc_freeze else ()),
            ]  # fmt: skip
            probe_out = Path(tmp) / "probe.json"
            probe = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.process_executor", "--probe", str(probe_out)],
                stdout=subprocess.DEVNULL,
            )
            sched = subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=args.baseline_tree if name == BASELINE else None,
            )
            sampler = Sampler(sched.pid).start()
            try:
                _, stderr = sched.communicate(timeout=args.max_seconds + 120)
            finally:
                sampler.stop()
                probe.send_signal(signal.SIGTERM)
                try:
                    probe.wait(30)
                except subprocess.TimeoutExpired:
                    probe.kill()  # no figures from it, but no process left behind
                    probe.wait(30)
        finally:
            api.send_signal(signal.SIGTERM)
            api.wait(30)
        if not out.exists():
            raise RuntimeError(f"{name} failed (exit {sched.returncode}):\n{stderr.decode()}")
        fig: dict[str, Any] = json.loads(out.read_text())
        fig["probe_us"] = json.loads(probe_out.read_text()) if probe_out.exists() else None
    fig["exit_status"] = sched.returncode
    fig["load_avg_1m"] = [load_before, os.getloadavg()[0]]
    fig["peak_rss_mib"] = {
        "scheduler": round(sampler.peak_rss_parent / 2**20, 1),
        "children": round(sampler.peak_rss_children / 2**20, 1),
    }
    fig["cpu_s"] = {
        "scheduler": round(sampler.cpu_parent, 2),
        "children": round(sampler.cpu_children, 2),
    }
    return fig


def _options(name: str, max_backlog: int | None) -> tuple[str, ...]:
    """The scheduler options of variant ``name`` (``max_backlog``: the paced ones' bound)."""
    if name in UNPACED:
        return (*VARIANTS[UNPACED[name]], "--max-backlog", "0")
    if name in (UNBOUNDED, BASELINE):
        return VARIANTS["process"]
    paced = () if max_backlog is None else ("--max-backlog", str(max_backlog))
    return (*VARIANTS[name], *paced)


def headline(fig: dict[str, Any]) -> dict[str, float | None]:
    """The compared figures of one run."""
    loop = fig["loop_submit_us"]
    return {
        "loop_submit_p50": loop["p50"],
        "loop_submit_p99": loop["p99"],
        "loop_submit_max": loop["max"],
        "pods_per_s": fig["pods_per_s"],
        "binding_p50": fig["binding_latency_ms"]["p50"],
        "binding_p99": fig["binding_latency_ms"]["p99"],
    }


def _spread(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(values) if values else None,
        "min": min(values, default=None),
        "max": max(values, default=None),
        "rounds": list(values),
    }


def _ratios(
    rounds: list[dict[str, dict[str, Any]]], other: str, this: str = "process"
) -> dict[str, Any]:
    """Per figure, ``this`` / ``other`` within each round, as a spread."""
    out: dict[str, Any] = {}
    for key in RATIOS:
        pairs = [(headline(r[this])[key], headline(r[other])[key]) for r in rounds]
        out[key] = _spread([round(a / b, 3) for a, b in pairs if a is not None and b])
    return out


def evaluate(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per variant and figure the median with its range; per figure the within-round ratio;
    the targets judged on the medians."""
    per_variant: dict[str, dict[str, Any]] = {}
    for name in rounds[0]:
        heads = [headline(r[name]) for r in rounds]
        per_variant[name] = {
            key: _spread([v for h in heads if (v := h[key]) is not None]) for key in RATIOS
        }
    ratios = _ratios(rounds, "inprocess")
    compared = {
        label: _ratios(rounds, other, this)
        for other, (label, this) in COMPARED.items()
        if other in rounds[0]
    }
    p50 = per_variant["process"]["loop_submit_p50"]["median"]
    p99 = per_variant["process"]["loop_submit_p99"]["median"]
    clean = all(
        f["duplicate_bindings"] == 0 and f["lost_intents"] == 0 and f["pods_unsettled"] == 0
        for r in rounds
        for f in r.values()
    )
    targets = {
        "process_loop_submit_p50_us": {"target": 100.0, "value": p50, "met": p50 <= 100.0},
        "process_loop_submit_p99_us": {"target": 1000.0, "value": p99, "met": p99 <= 1000.0},
        "all_runs_clean": {"target": True, "value": clean, "met": clean},
    }
    return {"variants": per_variant, "ratios": ratios, "targets": targets, **compared}


def _r(s: dict[str, Any], fmt: str = ",.0f") -> str:
    if s["median"] is None:
        return "-"
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}-{s['max']:{fmt}})"


def markdown(result: dict[str, Any], rounds: list[dict[str, dict[str, Any]]]) -> str:
    """The results as markdown tables."""
    v, q = result["variants"], result["ratios"]
    labels = {
        "loop_submit_p50": "loop submit p50, µs",
        "loop_submit_p99": "loop submit p99, µs",
        "loop_submit_max": "loop submit max, µs",
        "pods_per_s": "pods/s",
        "binding_p50": "binding p50, ms",
        "binding_p99": "binding p99, ms",
    }
    lines = [
        "| figure (median, range) | in-process | child process | process / in-process |",
        "|---|---:|---:|---:|",
    ]
    for key, label in labels.items():
        lines.append(
            f"| {label} | {_r(v['inprocess'][key])} | {_r(v['process'][key])} "
            f"| {_r(q[key], '.3g')} |"
        )
    for what in ("peak_rss_mib", "cpu_s"):
        for side in ("scheduler", "children"):
            cells = []
            for name in VARIANTS:
                values = [float(r[name][what][side]) for r in rounds]
                cells.append(_r(_spread(values), ",.1f"))
            label = f"{'peak RSS MiB' if what == 'peak_rss_mib' else 'CPU s'}, {side}"
            lines.append(f"| {label} | {cells[0]} | {cells[1]} | |")
    for key in ("p50", "p99"):
        cells = []
        for name in VARIANTS:
            values = [float(p[key]) for r in rounds if (p := r[name].get("probe_us"))]
            cells.append(_r(_spread(values), ",.0f") if values else "-")
        lines.append(f"| probe slice {key}, µs (the machine's floor) | {cells[0]} | {cells[1]} | |")
    dup = {n: sum(r[n]["duplicate_bindings"] for r in rounds) for n in VARIANTS}
    lost = {n: sum(r[n]["lost_intents"] for r in rounds) for n in VARIANTS}
    lines.append(
        f"| dup / lost (all rounds) | {dup['inprocess']} / {lost['inprocess']} "
        f"| {dup['process']} / {lost['process']} | |"
    )
    headers = {UNBOUNDED: ("child, window", "child, unbounded", "window / unbounded")}
    headers[BASELINE] = ("child, this tree", "child, baseline tree", "this / baseline")
    headers["inprocess_unpaced"] = ("in-process, paced", "in-process, unpaced", "paced / unpaced")
    headers["process_unpaced"] = ("child, paced", "child, unpaced", "paced / unpaced")
    for other, (key_of, this) in COMPARED.items():
        if key_of not in result:
            continue
        w, (mine, theirs, ratio) = result[key_of], headers[other]
        lines += [
            "",
            f"| figure (median, range) | {mine} | {theirs} | {ratio} |",
            "|---|---:|---:|---:|",
        ]
        for key, label in labels.items():
            lines.append(
                f"| {label} | {_r(v[this][key])} | {_r(v[other][key])} | {_r(w[key], '.3g')} |"
            )
    lines += ["", "| target | wanted | median | met |", "|---|---:|---:|:---:|"]
    for name, t in result["targets"].items():
        lines.append(f"| {name} | {t['target']} | {t['value']} | {'yes' if t['met'] else 'NO'} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit status 0 when every target is met."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--scheduler-unbounded"]:
        return windowless_scheduler_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m benchmarks.process_executor", description=__doc__)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--quick", action="store_true", help="1,000 pods / 100 nodes")
    p.add_argument("--repeat", type=int, default=3, help="rounds (each runs both variants)")
    p.add_argument("--latency-ms", type=float, default=10.0, help="apiserver latency")
    p.add_argument("--threads", type=int, default=2, help="scheduling threads")
    p.add_argument("--workers", type=int, default=32, help="executor workers")
    p.add_argument("--qps", type=float, default=0.0, help="client QPS (0 = unlimited)")
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument(
        "--gc-freeze",
        action="store_true",
        help="both variants run the scheduler with --gc-freeze",
    )
    p.add_argument(
        "--window-ab",
        action="store_true",
        help=f"also run {UNBOUNDED}: the child process without the max_in_flight window",
    )
    p.add_argument(
        "--baseline-tree",
        metavar="PATH",
        help=f"also run {BASELINE}: the child process with the code of the checkout at PATH",
    )
    p.add_argument(
        "--pacing-ab",
        action="store_true",
        help="also run both variants unpaced (--max-backlog 0 for the scheduler)",
    )
    p.add_argument(
        "--max-backlog",
        type=int,
        default=None,
        metavar="N",
        help="the paced variants' --max-backlog (default: the scheduler's own)",
    )
    p.add_argument("--probe", metavar="PATH", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe:
        return probe_main(args.probe)
    if not args.json:
        p.error("--json PATH is required")
    nodes, pods = (100, 1000) if args.quick else (500, 5000)
    rounds: list[dict[str, dict[str, Any]]] = []
    names = [
        *VARIANTS,
        *((UNBOUNDED,) if args.window_ab else ()),
        *((BASELINE,) if args.baseline_tree else ()),
        *(UNPACED if args.pacing_ab else ()),
    ]
    for i in range(max(1, args.repeat)):
        order = names[i % len(names) :] + names[: i % len(names)]
        runs = {}
        for name in order:
            runs[name] = fig = run_variant(name, args, nodes, pods)
            loop = fig["loop_submit_us"]
            print(
                f"round {i + 1} {name}: {fig['pods_per_s']:,.0f} pods/s, loop submit "
                f"p50 {loop['p50']} / p99 {loop['p99']} / max {loop['max']} µs",
                file=sys.stderr,
                flush=True,
            )
        rounds.append({name: runs[name] for name in names})
    result = evaluate(rounds)
    report = {
        **result,
        "rounds": rounds,
        "meta": {
            "nodes": nodes,
            "pods": pods,
            "latency_ms": args.latency_ms,
            "threads": args.threads,
            "workers": args.workers,
            "qps": args.qps or None,
            "gc_freeze": args.gc_freeze,
            "window_ab": args.window_ab,
            "baseline_tree": args.baseline_tree,
            "pacing_ab": args.pacing_ab,
            "max_backlog": args.max_backlog,
            "repeat": args.repeat,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    }
    Path(args.json).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(markdown(result, rounds))
    return 0 if all(t["met"] for t in result["targets"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
