"""``python -m benchmarks --quick|--full --out DIR``: every workload on every contender.

Writes ``DIR/results.json`` (``meta`` and one record per workload and contender), one PNG chart
per workload and ``DIR/summary.md``. ``--quick`` finishes in a few minutes on 2 cores;
``--full`` runs the sizes of the issue. ``--workloads W1,W4`` and ``--contenders`` narrow a run.
Benchmark-only code.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from loguru import logger

from benchmarks.report import write_report
from benchmarks.workloads import WORKLOADS
from benchmarks.workloads.common import PROFILES, Record
from benchmarks.workloads.contenders import CONTENDERS, WORKERS


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="profile", action="store_const", const="quick")
    size.add_argument("--full", dest="profile", action="store_const", const="full")
    size.add_argument(
        "--tiny",
        dest="profile",
        action="store_const",
        const="tiny",
        help="seconds-long smoke run (numbers meaningless)",
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="e.g. W1,W4")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    args = parser.parse_args(argv)
    args.profile = args.profile or "quick"
    for name, known in (("workloads", WORKLOADS), ("contenders", CONTENDERS)):
        chosen = [x.strip() for x in getattr(args, name).split(",") if x.strip()]
        unknown = [x for x in chosen if x not in known]
        if unknown:
            parser.error(f"unknown {name}: {unknown}; known: {list(known)}")
        setattr(args, name, chosen)
    return args


def run(
    profile_name: str,
    out: Path,
    workloads: list[str] | None = None,
    contenders: list[str] | None = None,
) -> dict[str, Any]:
    """Run the benchmarks and write every output into ``out``; return the results dict."""
    profile = PROFILES[profile_name]
    workloads = workloads or list(WORKLOADS)
    contenders = contenders or list(CONTENDERS)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    records: list[Record] = []
    for wid in workloads:
        for name in contenders:
            t0 = time.perf_counter()
            records.append(WORKLOADS[wid].run(profile, name))
            gc.collect()
            logger.info("{} {}: {:.1f} s", wid, name, time.perf_counter() - t0)
    results: dict[str, Any] = {
        "meta": {
            "profile": profile.name,
            "sizes": profile.as_dict(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "workers": WORKERS,
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg()[0],
            "duration_s": time.perf_counter() - started,
            "contenders": contenders,
        },
        "records": records,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1, allow_nan=False, default=str))
    write_report(results, out)
    return results


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    args = _parse(argv)
    logger.remove()
    logger.add(sys.stderr, level="INFO", format="{time:HH:mm:ss} {message}")
    run(args.profile, args.out, args.workloads, args.contenders)
    logger.info("wrote {}", args.out / "summary.md")


if __name__ == "__main__":
    main()
