"""Instructions kdispatch adds to a status patch over HTTP, counted by callgrind.

``python -m benchmarks.callgrind_overhead [--calls 400] [--base 100] [--rounds 3] [--only http|w2]
[--w2-calls 600] [--w2-base 200] [--w2-contenders kdispatch,upstream_fifo,blocking] [--json PATH]``

Two paths send the same sequential pod status patches (``nominatedNodeName`` flipped, UID and
resourceVersion preconditions, one request each) to ``ApiServerHTTP`` (the in-memory apiserver
over HTTP), which runs in a **separate process that valgrind does not trace**:

* ``direct``: ``KubernetesBackend.patch_status`` (the lean transport, the default) on the
  calling thread, each reply kept as the next patch's basis;
* ``dispatcher``: ``Dispatcher(KubernetesBackend())`` — submit a ``PodStatusPatch``, then
  ``future.result()``, one call at a time (8 executor workers, no QPS limit). Everything the
  process runs is counted: the caller, the actor pool and the executor worker that sends it,
  also reported by thread role (``--separate-threads=yes``).

Method: each path runs in its own client process (``PYTHONHASHSEED=0``) under ``valgrind
--tool=callgrind --trace-children=no`` (callgrind serialises the process's threads and counts
every thread's instructions), once with ``--base`` calls and once with ``--calls`` calls; both
runs do the same start-up, warm-up, reads and shutdown, so the difference of their totals
divided by the difference of their call counts is the instructions per call, with start-up
subtracted. The calls cycle over ``PODS`` pods, so both runs spawn the same actors and the
per-call figure is the steady state of a pod that keeps getting patched (an actor's spawn and
reaping are not in it). Each client checks that every call succeeded with exactly one request
and that the server holds the intended ``nominatedNodeName`` for every pod. Reported:
instructions per call of each path, ``dispatcher/direct`` and the overhead ``dispatcher/direct
- 1`` per round, and their median/min/max over the rounds.

W2 in instructions (``w2``): the W2 workload (:mod:`benchmarks.workloads.throughput`: one status
patch for each of many distinct pods, submitted from one thread as fast as it can, then every
future awaited) on the in-memory apiserver **in the measured process** (no latency, no QPS
limit), so the figure is the whole cost of a call: the contender's machinery plus the
apiserver's work, which is the same for every contender. Contenders: ``kdispatch`` (a
``Dispatcher`` as the W2 contender builds it, 16 executor workers, idle actors never reaped
while measured, and no reaper pass either: a pass walks every live actor and comes every
``reap_interval`` seconds of wall clock, which callgrind and the machine's load stretch, so
their count would follow the load), ``upstream_fifo`` (the model of kube-scheduler's
``APIDispatcher``), ``blocking`` (inline calls on the submitting thread, the floor: the
apiserver's and the call's own work) and, on request, ``kdispatch-no-metrics``,
``kdispatch-no-charging``, ``kdispatch-no-lanes`` and ``kdispatch-no-backlog``: the
``kdispatch`` contender with that feature's per-call work switched off
(:mod:`benchmarks.ablations`), so that the difference is what the feature costs. Start-up is
subtracted the same way: each contender runs once with ``--w2-base`` and once with
``--w2-calls`` calls; both runs create the same ``WARMUP + --w2-calls`` pods, send ``WARMUP``
warm-up calls (awaited), freeze the set-up out of the collector's reach (as W2 does), then
submit the measured calls and await them, check that every one succeeded with one request,
and end with ``os._exit`` (W2's span ends at the last resolution: the contender's shutdown is
not counted). Every call is a new pod, so a
kdispatch call includes its actor's spawn. Reported per round and as median/min/max:
instructions per call of each contender, ``w2_kdispatch_vs_upstream`` and
``w2_kdispatch_vs_inline`` (kdispatch / blocking).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import wait
from pathlib import Path
from typing import Any

from benchmarks.ablations import ABLATIONS, switch_off
from benchmarks.workloads.common import (
    http_server_process,
    publish,
    serve_http,
    spread,
    thread_role,
)

PODS = 16
WORKERS = 8
WARMUP = 50
PATHS = ("direct", "dispatcher")
VALGRIND = "valgrind"
W2_CONTENDERS = ("kdispatch", "upstream_fifo", "blocking")
W2_ABLATED = tuple(f"kdispatch-no-{feature}" for feature in ABLATIONS)
"""The ``kdispatch`` contender with one feature switched off (:mod:`benchmarks.ablations`)."""
W2_KNOWN = W2_CONTENDERS + W2_ABLATED
"""Every W2 contender, in the order they are reported."""
W2_RATIOS = {"w2_kdispatch_vs_upstream": "upstream_fifo", "w2_kdispatch_vs_inline": "blocking"}
"""Summary key → the contender kdispatch's instructions per call are divided by."""


def apiserver() -> Any:
    """The in-memory apiserver with the PODS pods the clients patch."""
    from kdispatch.testing import InMemoryApiServer, make_pod

    mem = InMemoryApiServer(history=1000, request_log_limit=1000)
    for i in range(PODS):
        mem.create(make_pod(f"c{i}", uid=f"uid-c{i}"))
    return mem


def serve() -> None:
    """Child process: serve PODS pods over HTTP until stdin closes."""
    serve_http(apiserver())


def _flip(pod: dict[str, Any]) -> str:
    return "n0" if pod.get("status", {}).get("nominatedNodeName") == "n1" else "n1"


def _thread_roles() -> list[str]:
    """The role of every live thread, in the order the threads were started: valgrind numbers
    threads in that order, from 1, while none has ended (``threading.enumerate()`` lists them
    in that order; native thread ids may wrap around and are not used)."""
    return [thread_role(t.name) for t in threading.enumerate()]


def client(url: str, path: str, calls: int) -> dict[str, Any]:
    """The measured process (under callgrind): ``WARMUP + calls`` sequential status patches
    over ``path``. Main thread (plus the dispatcher's threads)."""
    from kdispatch import (
        Dispatcher,
        DispatcherConfig,
        ExecutorConfig,
        KubernetesBackend,
        Outcome,
        PodStatusPatch,
        RateLimitConfig,
        RegistryConfig,
    )

    total = WARMUP + calls
    backend = KubernetesBackend.for_url(url, workers=WORKERS)
    current = [backend.get("Pod", "default", f"c{k}") for k in range(PODS)]
    intended = [_flip(p) for p in current]
    requests = 0
    threads = _thread_roles()
    try:
        if path == "direct":
            for i in range(total):
                k = i % PODS
                pod = current[k]
                nnn = intended[k] = _flip(pod)
                current[k] = backend.patch_status(
                    "Pod",
                    "default",
                    f"c{k}",
                    {"status": {"nominatedNodeName": nnn}},
                    uid=f"uid-c{k}",
                    resource_version=pod["metadata"]["resourceVersion"],
                    patch_type="strategic",
                )
                requests += 1
        else:
            config = DispatcherConfig(
                rate_limit=RateLimitConfig(qps=math.inf, burst=WORKERS),
                executor=ExecutorConfig(workers=WORKERS),
                registry=RegistryConfig(idle_timeout=3600.0),  # no reaping while measured
            )
            d = Dispatcher(backend, config).start()
            threads = _thread_roles()
            try:
                state = [p.get("status", {}).get("nominatedNodeName") for p in current]
                for i in range(total):
                    k = i % PODS
                    nnn = intended[k] = "n0" if state[k] == "n1" else "n1"
                    state[k] = nnn
                    call = PodStatusPatch.for_pod(current[k], nominated_node_name=nnn)
                    outcome = d.submit(call).result(600)
                    if outcome is not Outcome.SUCCESS:
                        raise RuntimeError(f"call {i} resolved {outcome!r}")
                requests = d.tokens_taken
            finally:
                d.stop(drain=True, timeout=600)
        if requests != total:
            raise RuntimeError(f"{path}: {requests} requests for {total} calls")
        on_server = [
            backend.get("Pod", "default", f"c{k}")["status"].get("nominatedNodeName")
            for k in range(PODS)
        ]
        if on_server != intended:
            raise RuntimeError(f"{path}: server holds {on_server}, intended {intended}")
    finally:
        backend.close()
    return {"path": path, "calls": total, "requests": requests, "threads": threads}


def w2_client(contender: str, calls: int, pods: int) -> dict[str, Any]:
    """The measured process of W2 (under callgrind): ``WARMUP`` warm-up calls, then ``calls``
    status patches on ``contender``, each for a pod of its own, submitted at once and awaited.
    Ends the process with ``os._exit`` once the result is printed. Main thread."""
    from benchmarks.workloads.common import create_pods, freeze_setup, unschedulable
    from benchmarks.workloads.contenders import WORKERS, make_contender
    from kdispatch import (
        Dispatcher,
        DispatcherConfig,
        ExecutorConfig,
        Outcome,
        PodStatusPatch,
        RateLimitConfig,
        RegistryConfig,
    )
    from kdispatch.testing import InMemoryApiServer

    server = InMemoryApiServer()
    objs = create_pods(server, WARMUP + pods, "w2")
    conds = [unschedulable(f"attempt 1 of pod {i}") for i in range(len(objs))]
    submit: Any
    if contender.startswith("kdispatch-no-"):
        switch_off({contender.removeprefix("kdispatch-no-")})
    if contender.startswith("kdispatch"):  # as W2's contender builds it, never reaping
        config = DispatcherConfig(
            rate_limit=RateLimitConfig(qps=math.inf, burst=100),
            executor=ExecutorConfig(workers=WORKERS),
            registry=RegistryConfig(idle_timeout=3600.0),
            reap_interval=3600.0,
        )
        d = Dispatcher(server, config).start()

        def submit(pod: Any, cond: Any) -> Any:
            return d.submit(PodStatusPatch.for_pod(pod, conditions=[cond]))
    else:
        submit = make_contender(contender, server, qps=math.inf).submit_status
    warm = [submit(objs[i], conds[i]) for i in range(WARMUP)]
    wait(warm)
    freeze_setup()
    start = len(server.request_log)
    futures = [submit(objs[i], conds[i]) for i in range(WARMUP, WARMUP + calls)]
    wait(futures)
    outcomes = {f.result() for f in warm + futures}
    requests = len(server.request_log) - start
    if outcomes != {Outcome.SUCCESS} or requests != calls:
        raise RuntimeError(f"w2 {contender}: outcomes {outcomes}, {requests} for {calls} calls")
    return {"contender": contender, "calls": calls, "requests": requests}


_SUMMARY = re.compile(r"^(?:summary|totals):\s*(\d+)", re.MULTILINE)
_THREAD_FILE = re.compile(r"-(\d+)$")


def _instructions(url: str, path: str, calls: int, workdir: Path) -> dict[str, int]:
    """Run one HTTP client under callgrind: its instructions in total and by thread role."""
    args = ["--client", url, "--path", path, "--calls", str(calls)]
    out, stdout = _callgrind(args, workdir / f"callgrind.{path}.{calls}", separate_threads=True)
    roles: list[str] = json.loads(stdout.strip().splitlines()[-1])["threads"]
    by_role: dict[str, int] = {"total": 0}
    parts = sorted(workdir.glob(f"{out.name}-*"))
    if len(parts) != len(roles):  # a thread came or went: the roles cannot be matched
        raise RuntimeError(f"{len(parts)} thread files for {len(roles)} threads ({path}/{calls})")
    for part in parts:
        tid = _THREAD_FILE.search(part.name)
        count = _total(part)
        if tid is None:
            raise RuntimeError(f"no thread number in {part}")
        index = int(tid.group(1)) - 1
        role = roles[index] if index < len(roles) else "other"
        by_role[role] = by_role.get(role, 0) + count
        by_role["total"] += count
    if by_role["total"] == 0:
        raise RuntimeError(f"callgrind wrote no output for {path}/{calls}")
    return by_role


def _w2_instructions(contender: str, calls: int, pods: int, workdir: Path) -> int:
    """Run one W2 client under callgrind: the instructions of all its threads."""
    args = ["--w2-client", contender, "--calls", str(calls), "--pods", str(pods)]
    out, _ = _callgrind(args, workdir / f"callgrind.w2.{contender}.{calls}")
    return _total(out)


def _callgrind(args: list[str], out: Path, *, separate_threads: bool = False) -> tuple[Path, str]:
    """Run ``python -m benchmarks.callgrind_overhead ARGS`` under callgrind, its output in
    ``out`` (one file per thread with ``separate_threads``); that path and its stdout."""
    cmd = [
        VALGRIND,
        "--tool=callgrind",
        "--trace-children=no",
        f"--separate-threads={'yes' if separate_threads else 'no'}",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "benchmarks.callgrind_overhead",
        *args,
    ]
    # a fixed hash seed: the same dict and set layouts, so the same instructions, every run
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"callgrind run {args} failed:\n{proc.stderr[-3000:]}")
    return out, proc.stdout


def _total(part: Path) -> int:
    """The instruction total of one callgrind output file, which is then deleted."""
    match = _SUMMARY.search(part.read_text())
    part.unlink()
    if match is None:
        raise RuntimeError(f"no instruction total in {part}")
    return int(match.group(1))


def run(calls: int, base: int, rounds: int) -> dict[str, Any]:
    """HTTP: start the server process, count every (path, call count) ``rounds`` times."""
    per_round: list[dict[str, Any]] = []
    with (
        http_server_process("benchmarks.callgrind_overhead") as (_, url),
        tempfile.TemporaryDirectory(prefix="kdispatch-callgrind-") as tmp,
    ):
        for r in range(rounds):
            entry: dict[str, Any] = {}
            for path in PATHS if r % 2 == 0 else PATHS[::-1]:
                small = _instructions(url, path, base, Path(tmp))
                large = _instructions(url, path, calls, Path(tmp))
                entry[path] = {
                    "total_base": small["total"],
                    "total_calls": large["total"],
                    "instructions_per_call": (large["total"] - small["total"]) / (calls - base),
                    "per_call_by_thread": {
                        role: (large.get(role, 0) - small.get(role, 0)) / (calls - base)
                        for role in sorted(set(large) | set(small))
                        if role != "total"
                    },
                }
            ratio = (
                entry["dispatcher"]["instructions_per_call"]
                / entry["direct"]["instructions_per_call"]
            )
            entry["dispatcher_vs_direct"] = ratio
            entry["overhead"] = ratio - 1
            per_round.append(entry)
            print(_round_line(r, entry), flush=True)
    summary = {
        **{path: spread([e[path]["instructions_per_call"] for e in per_round]) for path in PATHS},
        "dispatcher_vs_direct": spread([e["dispatcher_vs_direct"] for e in per_round]),
        "overhead": spread([e["overhead"] for e in per_round]),
        "dispatcher_by_thread": {
            role: spread([e["dispatcher"]["per_call_by_thread"].get(role, 0.0) for e in per_round])
            for role in per_round[0]["dispatcher"]["per_call_by_thread"]
        },
    }
    return {"rounds": per_round, "summary": summary}


def run_w2(calls: int, base: int, rounds: int, contenders: list[str]) -> dict[str, Any]:
    """W2: count every (contender, call count) ``rounds`` times, the order of the contenders
    rotating from round to round; the ratios are taken within a round."""
    per_round: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kdispatch-callgrind-w2-") as tmp:
        for r in range(rounds):
            entry: dict[str, Any] = {}
            shift = r % len(contenders)
            for name in contenders[shift:] + contenders[:shift]:
                small = _w2_instructions(name, base, calls, Path(tmp))
                large = _w2_instructions(name, calls, calls, Path(tmp))
                entry[name] = {
                    "total_base": small,
                    "total_calls": large,
                    "instructions_per_call": (large - small) / (calls - base),
                }
            for key, other in W2_RATIOS.items():
                if "kdispatch" in entry and other in entry:
                    entry[key] = (
                        entry["kdispatch"]["instructions_per_call"]
                        / entry[other]["instructions_per_call"]
                    )
            per_round.append(entry)
            print(_w2_round_line(r, entry), flush=True)
    summary: dict[str, Any] = {
        name: spread([e[name]["instructions_per_call"] for e in per_round]) for name in contenders
    }
    for key in W2_RATIOS:
        if key in per_round[0]:
            summary[key] = spread([e[key] for e in per_round])
    return {"rounds": per_round, "summary": summary}


def _w2_round_line(r: int, entry: dict[str, Any]) -> str:
    parts = [
        f"{name} {entry[name]['instructions_per_call'] / 1e3:,.0f}k"
        for name in W2_KNOWN
        if name in entry
    ]
    ratios = [f"{key} {entry[key]:.3f}" for key in W2_RATIOS if key in entry]
    return f"w2 round {r}: " + ", ".join(parts) + " instructions per call; " + ", ".join(ratios)


def _round_line(r: int, entry: dict[str, Any]) -> str:
    return (
        f"round {r}: direct {entry['direct']['instructions_per_call'] / 1e3:,.0f}k, "
        f"dispatcher {entry['dispatcher']['instructions_per_call'] / 1e3:,.0f}k instructions "
        f"per call: {entry['dispatcher_vs_direct']:.3f}x ({entry['overhead']:+.1%})"
    )


def _table(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines: list[str] = []
    if "overhead" in s:
        lines.append("instructions per sequential status patch over HTTP, median (min-max)")
        for path in PATHS:
            lines.append(f"  {path:10s} {_k(s[path])}")
        for role, v in s["dispatcher_by_thread"].items():
            if abs(v["median"]) >= 1000:  # idle threads (timer, reaper) run a few instructions
                lines.append(f"    dispatcher, {role}: {v['median'] / 1e3:,.0f}k")
        o = s["overhead"]
        lines.append(
            f"  kdispatch adds {o['median']:+.1%} ({o['min']:+.1%} to {o['max']:+.1%}) "
            "of a direct call's instructions"
        )
    if "w2" in s:
        lines.append("W2 on the in-memory apiserver, instructions per call, median (min-max)")
        for name, v in s["w2"].items():
            if name in W2_KNOWN:
                lines.append(f"  {name:22s} {_k(v)}")
        for key in W2_RATIOS:
            if key in s["w2"]:
                v = s["w2"][key]
                lines.append(f"  {key}: {v['median']:.3f} ({v['min']:.3f}-{v['max']:.3f})")
    return "\n".join(lines)


def _k(v: dict[str, float]) -> str:
    return f"{v['median'] / 1e3:8,.0f}k ({v['min'] / 1e3:,.0f}k-{v['max'] / 1e3:,.0f}k)"


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--base", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("http", "w2"), default=None)
    parser.add_argument("--w2-calls", type=int, default=600)
    parser.add_argument("--w2-base", type=int, default=200)
    parser.add_argument("--w2-contenders", default=",".join(W2_CONTENDERS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", choices=PATHS, default="direct", help=argparse.SUPPRESS)
    parser.add_argument("--w2-client", choices=W2_KNOWN, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--pods", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve()
        return None
    if args.client is not None:
        print(json.dumps(client(args.client, args.path, args.calls)))
        return None
    if args.w2_client is not None:
        print(json.dumps(w2_client(args.w2_client, args.calls, args.pods)), flush=True)
        sys.stderr.flush()
        os._exit(0)  # W2's span ends at the last resolution: no shutdown in the count
    contenders = [c for c in args.w2_contenders.split(",") if c]
    if not 1 <= args.base < args.calls or not 1 <= args.w2_base < args.w2_calls:
        parser.error("need 1 <= --base < --calls and 1 <= --w2-base < --w2-calls")
    if args.rounds < 1 or not contenders or not set(contenders) <= set(W2_KNOWN):
        parser.error(f"need --rounds >= 1 and --w2-contenders among {W2_KNOWN}")
    load_start = list(os.getloadavg())
    result: dict[str, Any] = {"rounds": [], "summary": {}}
    if args.only != "w2":
        result = run(args.calls, args.base, args.rounds)
    if args.only != "http":
        w2 = run_w2(args.w2_calls, args.w2_base, args.rounds, contenders)
        result["w2_rounds"] = w2["rounds"]
        result["summary"]["w2"] = w2["summary"]
        for key in W2_RATIOS:
            if key in w2["summary"]:
                result["summary"][key] = w2["summary"][key]
    meta = {
        "calls": args.calls,
        "base": args.base,
        "w2_calls": args.w2_calls,
        "w2_base": args.w2_base,
        "w2_contenders": contenders,
        "warmup": WARMUP,
        "pods": PODS,
        "rounds": args.rounds,
        "only": args.only,
        "python": sys.version.split()[0],
        "method": "two call counts per path, difference of callgrind totals (Ir)",
    }
    publish(result, meta, _table, args.json, load_start)
    return result


if __name__ == "__main__":
    main()
