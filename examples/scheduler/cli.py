"""Command line of the main job: ``python -m examples.scheduler``.

Parses the options into a :class:`~examples.scheduler.runner.RunConfig`, runs it with a progress
bar on stderr, prints the summary table on stdout and optionally writes the figures as JSON.
Exit status: 0 when the run verified clean (no duplicate binding, no lost intent), 1 otherwise,
2 for bad options, 3 when the replica lost its leader lease (``--leader-elect``), 130 when
interrupted. SIGTERM ends the run gracefully (drain, then release the lease).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from examples.common import add_config_options, config_from_args, configure, option_names
from examples.scheduler.ha import LOST_EXIT_STATUS, LeaderElect
from examples.scheduler.report import summary_table, write_json
from examples.scheduler.runner import RunConfig, run
from kdispatch import ApiError, InvalidInputError


def parser() -> argparse.ArgumentParser:
    """The argument parser (also used for ``--help``)."""
    p = argparse.ArgumentParser(
        prog="python -m examples.scheduler",
        description="A threaded scheduler on kdispatch: schedules pods on an embedded "
        "apiserver (or a real cluster) and reports what the API calls cost.",
    )
    d = RunConfig()
    add_config_options(
        p,
        d,
        helps={
            "nodes": "nodes to create (embedded)",
            "pods": "pods to create (embedded)",
            "latency_ms": "apiserver latency per request (embedded; default %(default)s)",
            "qps": "client-side rate limit, requests/s (0 = unlimited, the default)",
            "burst": "rate limiter burst",
            "faults": "share of requests failing with injected faults (embedded)",
        },
    )
    modes = p.add_mutually_exclusive_group()
    modes.add_argument(
        "--pre-kep",
        dest="api",
        action="store_const",
        const="pre-kep",
        help="kube-scheduler before KEP-5229 instead of the dispatcher: status patches and "
        "preemptions block the scheduling threads, bindings run on binding threads",
    )
    modes.add_argument(
        "--all-blocking",
        dest="api",
        action="store_const",
        const="all-blocking",
        help="every API call (bindings too) blocks the scheduling thread that makes it",
    )
    p.add_argument(
        "--binding-threads",
        type=int,
        default=None,
        help="binding threads of --pre-kep (default: --workers, the same thread budget)",
    )
    p.add_argument(
        "--gc-freeze",
        action="store_true",
        help="the dispatcher freezes the garbage collector's long-lived objects after warm-up",
    )
    p.add_argument(
        "--kubeconfig", metavar="PATH", help="schedule the pending pods of a real cluster instead"
    )
    p.add_argument(
        "--dispatcher-process",
        action="store_true",
        help="run the dispatcher (actors, executor, HTTP client) in a child process, off the "
        "scheduling threads' interpreter lock (needs --kubeconfig)",
    )
    p.add_argument(
        "--scheduler-name",
        default=None,
        help="spec.schedulerName to serve (default: default-scheduler embedded, "
        "kdispatch-example with --kubeconfig)",
    )
    add_config_options(
        p,
        d,
        helps={
            "threads": "scheduling threads",
            "workers": "dispatcher executor threads (parallel requests)",
            "max_seconds": "stop at this deadline even if pods are still pending",
            "max_backlog": "pacing (the dispatcher only): a scheduling thread takes its next "
            "pod only while fewer calls than this are unresolved in the lane of --pace-on and "
            "above (0: never waits; default %(default)s)",
            "pace_on": "the lane pacing counts, with the lanes above it: pod_binding (the "
            "default: never waits for status patches), pod_preemption, or pod_status_patch "
            "(every lane but the Events')",
        },
    )
    p.add_argument(
        "--pod-initial-backoff-seconds",
        type=float,
        default=d.backoff_initial,
        help="backoff after a pod's first failed cycle; it doubles per failure "
        "(default %(default)s)",
    )
    p.add_argument(
        "--pod-max-backoff-seconds",
        type=float,
        default=d.backoff_max,
        help="the longest backoff (default %(default)s)",
    )
    p.add_argument(
        "--pod-max-in-unschedulable-pods-duration",
        type=float,
        default=d.unschedulable_max,
        help="seconds a pod that nothing fit waits for a cluster event (a node added or "
        "changed, a pod deleted, a binding failed) before it is retried anyway "
        "(default %(default)s)",
    )
    workload = ("high_priority_share", "unschedulable_share", "claim_share", "fill", "seed")
    add_config_options(
        p, d, *workload, helps={"fill": "share of the cluster's cpu wave 1 asks for"}
    )
    add_config_options(
        p,
        d,
        helps={
            "gangs": "gang PodGroups to add to the workload (embedded; default %(default)s)",
            "gang_size": "pods per gang, its minCount (default %(default)s)",
            "infeasible_gang_share": "share of the gangs that cannot be placed as a whole: one "
            "member asks for more cpu than any node has (default %(default)s)",
        },
    )
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--verbose", action="store_true", help="debug logs on stderr")
    _ha_options(p)
    return p


def _ha_options(p: argparse.ArgumentParser) -> None:
    """High availability (see :mod:`examples.scheduler.ha`)."""
    d = LeaderElect()
    g = p.add_argument_group("high availability")
    g.add_argument(
        "--leader-elect",
        action="store_true",
        help="campaign for a Lease and schedule only while leading",
    )
    g.add_argument("--lease-duration", type=float, default=d.lease_duration, metavar="S")
    g.add_argument("--renew-deadline", type=float, default=d.renew_deadline, metavar="S")
    g.add_argument("--retry-period", type=float, default=d.retry_period, metavar="S")
    g.add_argument("--lease-name", default=d.lease_name)
    g.add_argument("--lease-namespace", default=d.lease_namespace)
    g.add_argument("--identity", default="", help="replica name (default: host_pid)")


RENAMED = {
    "backoff_initial": "--pod-initial-backoff-seconds",
    "backoff_max": "--pod-max-backoff-seconds",
    "unschedulable_max": "--pod-max-in-unschedulable-pods-duration",
}
"""The :class:`RunConfig` fields set from an option of another name (kube-scheduler's)."""


def _run_config(args: argparse.Namespace) -> RunConfig:
    """The options as a :class:`RunConfig` (most options carry a field's name; the others are
    :data:`RENAMED`)."""
    return config_from_args(
        RunConfig,
        args,
        api=args.api or "async",
        backoff_initial=args.pod_initial_backoff_seconds,
        backoff_max=args.pod_max_backoff_seconds,
        unschedulable_max=args.pod_max_in_unschedulable_pods_duration,
        leader_elect=config_from_args(LeaderElect, args) if args.leader_elect else None,
    )


def main(argv: Sequence[str] | None = None, *, started: float | None = None) -> int:
    """Run the main job; returns the exit status. ``started``: when the command started
    (``time.monotonic()``; default: now), the start of the report's ``command_s``."""
    started = time.monotonic() if started is None else started
    p = parser()
    args = p.parse_args(argv)
    options = option_names(p, **RENAMED)
    cfg = configure(partial(_run_config, args), verbose=args.verbose, options=options)
    if isinstance(cfg, int):
        return cfg
    if args.json and not _writable(args.json):  # say so now, not after the whole run
        print(f"error: --json {args.json}: cannot write there", file=sys.stderr)
        return 2
    try:
        fig = run(cfg, stream=None if args.no_progress else sys.stderr, command_started=started)
    except KeyboardInterrupt:  # during set-up, before the run could summarise itself
        print("interrupted", file=sys.stderr)
        return 130
    except TimeoutError as err:  # an informer never synced (InformerSyncTimeout): say why
        print(f"error: {err}", file=sys.stderr)
        return 1
    except InvalidInputError as err:  # set-up refused: a broken kubeconfig, a bad scheduler name
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ApiError as err:  # the first list refused (a 401, a 403): set-up stopped it all
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(summary_table(fig))
    for problem in fig.get("problems", []):
        print(f"problem: {problem}")
    if args.json:
        try:
            write_json(args.json, fig)
        except OSError as err:
            print(f"error: --json {args.json}: {err}", file=sys.stderr)
            return 1
    if fig["stopped_by"] == "interrupt":
        return 130
    if fig["stopped_by"] == "leadership_lost":
        return LOST_EXIT_STATUS
    return 0 if fig["verdict_ok"] else 1


def _writable(path: str) -> bool:
    """Whether ``--json``'s file can be written: its directory exists and is writable, and
    the path is not a directory."""
    target = Path(path)
    parent = target.parent
    return not target.is_dir() and parent.is_dir() and os.access(parent, os.W_OK)
