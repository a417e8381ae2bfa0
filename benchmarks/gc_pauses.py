"""GC pauses at scale: the longest single ``submit()`` with 1k, 10k and 100k live object actors,
each holding a pending call, with and without ``RuntimeConfig.gc_freeze``.

    python -m benchmarks.gc_pauses --json benchmarks/results/gc_pauses.json [--repeat 3]
    python -m benchmarks.gc_pauses --one 10000 gc_freeze     # one measurement, one JSON line

Every measurement runs in a fresh interpreter. The embedded apiserver holds ``size`` pods and
never answers while the measurement runs (its latency waits on a gate opened at the end), so
every call stays pending: ``workers`` of them in flight, the rest queued in the executor.

1. *fill*: one status patch per pod is submitted from the caller's thread, spawning one object
   actor per pod; each ``submit()`` is timed on its own (the call is built before the clock
   starts). RSS before and after, divided by ``size``, is the memory per actor with a pending
   call (the actor, its call, its future and the executor's queue entry; no collection is forced
   before the second reading, so that the next phase starts in the collector's natural state).
2. *steady*: with every actor live and pending, one more status patch per pod (a new message,
   merged into the pending call; the replaced one resolves ``overwritten``), timed the same way.
   This is the scheduling loop at scale: its longest single submit is the headline.

Full (generation 2) collections are timed through ``gc.callbacks`` in both phases. Variants:
``default`` (``RuntimeConfig()``), ``gc_freeze`` (``RuntimeConfig(gc_freeze=True)``: freeze at
start and after every collection, plus one ``freeze_gc()`` once the fill is done),
``young_50k`` (``gc_young_threshold=50_000`` alone), ``gc_freeze_groups`` (``gc_freeze`` with every
call submitted through its pod's open call group: ``size`` live groups),
``gc_freeze_live_groups`` (the same groups, filled the same way, but the steady submits are plain
``dispatcher.submit`` calls: what live groups cost the calls that are not steps), and
``collector_off``,
a diagnostic floor rather than an option: ``RuntimeConfig()`` with the cyclic collector
disabled (``gc.disable()``) for the whole measurement, so whatever its longest submit still
shows is not the collector (it is the interpreter lock's switch interval: a submit that loses
the lock to the actor pool, busy with the submits before it, gets it back after
``sys.getswitchinterval()``, 5 ms by default).
Targets: longest submit ≤ 5 ms at 10k and ≤ 20 ms at 100k; ≤ 3 KiB per actor. ``--repeat N``
runs N rounds (every size and variant once per round) and reports the median with min-max.
Benchmark-only code.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from benchmarks.workloads.common import percentile, spread, unschedulable
from examples.gcwatch import GcWatch
from kdispatch import (
    CallGroup,
    Dispatcher,
    DispatcherConfig,
    ExecutorConfig,
    PodStatusPatch,
    RateLimitConfig,
    RuntimeConfig,
)
from kdispatch.testing import InMemoryApiServer, Latency, make_pod

ROOT = Path(__file__).resolve().parents[1]
SIZES = (1_000, 10_000, 100_000)
VARIANTS: dict[str, RuntimeConfig] = {
    "default": RuntimeConfig(),
    "gc_freeze": RuntimeConfig(gc_freeze=True),
    "young_50k": RuntimeConfig(gc_young_threshold=50_000),
    "collector_off": RuntimeConfig(),
    "gc_freeze_groups": RuntimeConfig(gc_freeze=True),
    "gc_freeze_live_groups": RuntimeConfig(gc_freeze=True),
}
COLLECTOR_OFF = "collector_off"
"""The variant that runs with ``gc.disable()`` (see the module docstring)."""
GROUPED = frozenset({"gc_freeze_groups", "gc_freeze_live_groups"})
"""Variants whose fill goes through one open call group per pod (``dispatcher.group(owner=pod)``,
never sealed while measured), so ``size`` groups are live: the cost of groups at scale."""
PLAIN_STEADY = frozenset({"gc_freeze_live_groups"})
"""Grouped variants whose steady submits are plain ``dispatcher.submit`` calls: what live groups
cost the calls that are not steps (each is merged into its pod's pending step all the same)."""
TARGET_MAX_SUBMIT_MS = {10_000: 5.0, 100_000: 20.0}
TARGET_KIB_PER_ACTOR = 3.0
WORKERS = 16


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def _timed_submits(
    targets: Sequence[Dispatcher | CallGroup], calls: list[PodStatusPatch]
) -> list[float]:
    """Caller thread. Submit each call through its target (the dispatcher, or its pod's
    group); seconds each submit took."""
    out = []
    clock = time.perf_counter
    for target, call in zip(targets, calls, strict=True):
        t0 = clock()
        target.submit(call)
        out.append(clock() - t0)
    return out


def _phase(seconds: list[float], watch: GcWatch) -> dict[str, Any]:
    gcs = watch.summary()
    gen2 = gcs["gen2"]
    return {
        "young_max_ms": max(gcs["gen0"]["max_ms"], gcs["gen1"]["max_ms"]),
        "gen1_collections": gcs["gen1"]["collections"],
        "submits": len(seconds),
        "submit_p50_us": round(percentile(seconds, 0.5) * 1e6, 1),
        "submit_p99_us": round(percentile(seconds, 0.99) * 1e6, 1),
        "submit_max_ms": round(max(seconds) * 1000, 3),
        "gen2_collections": gen2["collections"],
        "gen2_max_ms": gen2["max_ms"],
        "gen2_total_ms": gen2["total_ms"],
    }


def _wait(gate: threading.Event) -> None:
    """Request thread: the apiserver's latency lasts until the gate opens."""
    gate.wait()


FIGURES: dict[str, tuple[str, str]] = {
    "steady_max_submit_ms": ("steady", "submit_max_ms"),
    "steady_submit_p50_us": ("steady", "submit_p50_us"),
    "steady_submit_p99_us": ("steady", "submit_p99_us"),
    "steady_gen2_max_ms": ("steady", "gen2_max_ms"),
    "fill_max_submit_ms": ("fill", "submit_max_ms"),
    "fill_gen2_max_ms": ("fill", "gen2_max_ms"),
}
"""Summary figure → (phase, figure of that phase)."""


def measure(size: int, variant: str) -> dict[str, Any]:
    """One measurement in this interpreter (see the module docstring)."""
    gate = threading.Event()
    server = InMemoryApiServer(
        latency=Latency(fixed=1.0), sleep=lambda _s: _wait(gate), request_log_limit=1000
    )
    pods = [server.create(make_pod(f"gc-{i}")) for i in range(size)]
    first = [PodStatusPatch.for_pod(p, conditions=[unschedulable("attempt 1")]) for p in pods]
    second = [PodStatusPatch.for_pod(p, conditions=[unschedulable("attempt 2")]) for p in pods]
    dispatcher = Dispatcher(
        server,
        DispatcherConfig(
            rate_limit=RateLimitConfig(qps=math.inf),
            executor=ExecutorConfig(workers=WORKERS),
            runtime=VARIANTS[variant],
        ),
    )
    gc.collect()
    if variant == COLLECTOR_OFF:
        gc.disable()
    rss0 = _rss()
    watch = GcWatch().install()
    try:
        dispatcher.start()
        # the caller keeps what it submits through: its groups (not bound methods, whose
        # 48 bytes each would be counted as the groups' memory)
        targets: list[Dispatcher | CallGroup]
        if variant in GROUPED:
            targets = [dispatcher.group(owner=p) for p in pods]
        else:
            targets = [dispatcher] * size
        fill = _timed_submits(targets, first)
        dispatcher.view(pods[-1]["metadata"]["uid"], timeout=120.0)  # the actors caught up
        rss1 = _rss()
        fill_figures = _phase(fill, watch)
        live = dispatcher.live_actors
        if variant in PLAIN_STEADY:  # after the memory reading, taken with the groups held
            targets = [dispatcher] * size
        if VARIANTS[variant].gc_freeze:
            dispatcher.freeze_gc()  # warm-up done: every actor is live
        watch.reset()
        steady = _timed_submits(targets, second)
        steady_figures = _phase(steady, watch)
    finally:
        watch.uninstall()
        gate.set()
        dispatcher.stop(drain=False, timeout=60.0)
        if variant == COLLECTOR_OFF:
            gc.enable()
    return {
        "size": size,
        "variant": variant,
        "live_actors": live,
        "kib_per_actor": round((rss1 - rss0) / size / 1024, 3),
        "fill": fill_figures,
        "steady": steady_figures,
        "max_submit_ms": max(fill_figures["submit_max_ms"], steady_figures["submit_max_ms"]),
        "gen2_max_ms": max(fill_figures["gen2_max_ms"], steady_figures["gen2_max_ms"]),
    }


def _one(size: int, variant: str, timeout: float) -> dict[str, Any]:
    """One measurement in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gc_pauses", "--one", str(size), variant],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{size} {variant} failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per size and variant: median and min-max over the rounds of the headline figures, the
    ratio of each variant's longest steady submit to the default's in the same round, and the
    targets judged on the medians."""
    out: dict[str, Any] = {}
    sizes = sorted({r["size"] for r in runs})
    for size in sizes:
        per: dict[str, Any] = {}
        mine = [r for r in runs if r["size"] == size]
        for variant in VARIANTS:
            rs = [r for r in mine if r["variant"] == variant]
            if not rs:
                continue
            fig: dict[str, Any] = {
                key: spread([r[phase][name] for r in rs]) for key, (phase, name) in FIGURES.items()
            }
            fig["kib_per_actor"] = spread([r["kib_per_actor"] for r in rs])
            defaults = {r["round"]: r for r in mine if r["variant"] == "default"}
            ratios = [
                r["steady"]["submit_max_ms"] / defaults[r["round"]]["steady"]["submit_max_ms"]
                for r in rs
                if r["round"] in defaults and defaults[r["round"]]["steady"]["submit_max_ms"]
            ]
            if variant != "default" and ratios:
                fig["steady_max_submit_vs_default"] = spread(ratios)
            target = TARGET_MAX_SUBMIT_MS.get(size)
            fig["targets"] = {
                "max_submit_ms": None
                if target is None
                else {
                    "target": target,
                    "met": fig["steady_max_submit_ms"]["median"] <= target,
                },
                "kib_per_actor": {
                    "target": TARGET_KIB_PER_ACTOR,
                    "met": fig["kib_per_actor"]["median"] <= TARGET_KIB_PER_ACTOR,
                },
            }
            per[variant] = fig
        out[str(size)] = per
    return out


def _range(s: dict[str, float], fmt: str = "{:,.1f}") -> str:
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"


def markdown(summary: dict[str, Any]) -> str:
    """The summary as a markdown table: median (min-max over the rounds)."""
    lines = [
        "| live actors | variant | longest submit ms | submit p50 µs | submit p99 µs "
        "| longest full GC ms | vs default | fill: longest submit ms | KiB per actor |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, per in summary.items():
        for variant, f in per.items():
            ratio = f.get("steady_max_submit_vs_default")
            lines.append(
                f"| {int(size):,} | {variant} | {_range(f['steady_max_submit_ms'])} "
                f"| {_range(f['steady_submit_p50_us'])} | {_range(f['steady_submit_p99_us'])} "
                f"| {_range(f['steady_gen2_max_ms'])} "
                f"| {'-' if ratio is None else _range(ratio, '{:.3f}')} "
                f"| {_range(f['fill_max_submit_ms'])} "
                f"| {_range(f['kib_per_actor'], '{:.2f}')} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every measurement (or ``--one``); exit status 0."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.gc_pauses", description=__doc__)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", type=int, default=3, help="rounds")
    p.add_argument("--one", nargs=2, metavar=("SIZE", "VARIANT"))
    args = p.parse_args(argv)
    if args.one:
        size, variant = int(args.one[0]), args.one[1]
        if variant not in VARIANTS:
            p.error(f"unknown variant {variant!r}; known: {list(VARIANTS)}")
        print(json.dumps(measure(size, variant)))
        return 0
    if not args.json:
        p.error("--json is required (or --one)")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    runs = []
    for i in range(max(1, args.repeat)):
        for size in sizes:
            # the order alternates from round to round, so drift of the machine spreads evenly
            for variant in variants if i % 2 == 0 else variants[::-1]:
                r = _one(size, variant, timeout=900)
                r["round"] = i
                runs.append(r)
                print(
                    f"round {i + 1} {size} {variant}: longest submit "
                    f"{r['steady']['submit_max_ms']:.1f} ms, full GC {r['gen2_max_ms']:.1f} ms, "
                    f"{r['kib_per_actor']:.2f} KiB/actor",
                    file=sys.stderr,
                    flush=True,
                )
    summary = summarise(runs)
    report = {
        "summary": summary,
        "runs": runs,
        "meta": {
            "rounds": args.repeat,
            "workers": WORKERS,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "gc_thresholds": gc.get_threshold(),
            "load_avg_at_end": os.getloadavg(),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    }
    Path(args.json).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
