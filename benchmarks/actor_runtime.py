"""Actor runtime benchmark: kdispatch's pooled actors versus pykka's ``ThreadingActor``, in one run.

    python -m benchmarks.actor_runtime --actors 10000 --json PATH
    python -m benchmarks.actor_runtime --quick            # 1,000 actors, for a smoke run

For each runtime, with N actors that count the messages they handle:

* ``start_us_per_actor``: from the first start until every actor has handled its first message
  (a pooled actor has no start of its own: it is made and told a first message);
* ``rss_kib_per_actor``: resident memory growth after starting them (idle, ``gc.collect()``
  before both readings), divided by N;
* ``tell_msgs_per_s``: one thread tells round-robin to all actors (``--msgs-per-actor`` each);
  from the first tell until the last message is handled; the median of 5 rounds. The
  ThreadingActor part is capped at ``--threading-max-msgs`` messages per round (it is two orders
  of magnitude slower), never skipped;
* ``ask_p50_us`` / ``ask_p99_us``: sequential blocking asks to random actors (2,000 pooled;
  500 or 2 s for ThreadingActor);
* ``stop_us_per_actor``: a stop message to every actor, until every actor has stopped.

The pooled runtime runs first, on fresh memory, so its RSS figure is not flattered by memory the
other runtime freed. The JSON holds ``runs`` (one object per runtime), ``ratios`` (pooled divided
by threading, per figure), ``targets`` (the project's targets and whether this run met them) and
``meta``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import itertools
import json
import os
import platform
import random
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol

import pykka

from kdispatch.actors.runtime.pool import Actor, ActorPool

FIGURES = (
    "start_us_per_actor",
    "rss_kib_per_actor",
    "tell_msgs_per_s",
    "ask_p50_us",
    "ask_p99_us",
    "stop_us_per_actor",
)

TARGETS = {
    "tell_ratio_min": 150.0,  # pooled tell_msgs_per_s >= 150 x threading's
    "rss_kib_per_actor_max": 3.0,
    "start_us_per_actor_max": 50.0,
    "stop_us_per_actor_max": 60.0,
}

WAIT_LIMIT = 120.0  # safety bound on any single wait; a healthy run never gets near it


# --------------------------------------------------------------------------- measurement helpers


def rss_kib() -> float:
    """Resident set size of this process in KiB."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1024
    except OSError:  # not Linux: psutil is in the bench extra
        import psutil  # type: ignore[import-untyped,unused-ignore]

        return float(psutil.Process().memory_info().rss) / 1024


def settled_rss_kib() -> float:
    gc.collect()
    return rss_kib()


class Countdown:
    """Counts handled messages without a lock (``itertools.count`` is atomic in CPython) and
    fires ``done`` when the armed target is reached. Arm it before the counted messages are sent.
    """

    def __init__(self) -> None:
        self.done = threading.Event()
        self._next = itertools.count(1).__next__
        self._target = 0

    def arm(self, target: int) -> None:
        """Count from zero towards ``target``. Only while no counted message is in flight."""
        self.done.clear()
        self._next = itertools.count(1).__next__
        self._target = target

    def hit(self) -> None:
        """One message handled. Any thread (an actor's)."""
        if self._next() == self._target:
            self.done.set()

    def wait(self, what: str) -> None:
        if not self.done.wait(WAIT_LIMIT):
            raise RuntimeError(f"benchmark stalled while waiting for {what}")


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


# --------------------------------------------------------------------------- the two runtimes


class Ask(NamedTuple):
    """A message answered through a future (a pooled ask)."""

    value: int
    reply: Future[int]


STOP: Final = object()  # a pooled actor's stop message


class PooledCounter(Actor):
    """Pooled benchmark actor: counts what it handles, answers asks, stops on :data:`STOP`.
    Runs on a pool worker."""

    __slots__ = ("_counter",)

    def __init__(self, pool: ActorPool, counter: Countdown) -> None:
        super().__init__(pool)
        self._counter = counter

    def receive(self, message: Any) -> None:
        if type(message) is Ask:
            message.reply.set_result(message.value)
            return
        if message is STOP:
            self.stop()
        self._counter.hit()


class ThreadingCounter(pykka.ThreadingActor):
    """The same actor on pykka's thread-per-actor runtime (stopped through ``stop()``)."""

    def __init__(self, counter: Countdown) -> None:
        super().__init__()
        self._counter = counter

    def on_start(self) -> None:
        self._counter.hit()

    def on_receive(self, message: Any) -> Any:
        self._counter.hit()
        return message

    def on_stop(self) -> None:
        self._counter.hit()


class Runtime(Protocol):
    """What :func:`measure` does to one runtime's actors; each counts what it handles (its
    start, each told message, its stop) in ``counter``. The benchmark's thread."""

    name: str
    counter: Countdown

    def spawn(self, n: int) -> None: ...
    def tell(self, index: int, message: int) -> None: ...
    def ask(self, index: int, message: int) -> None: ...
    def stop_all(self) -> None: ...


class Pooled:
    """kdispatch's pooled actors on one :class:`ActorPool`: started by a first message."""

    name = "pooled"

    def __init__(self, pool: ActorPool) -> None:
        self.pool = pool
        self.counter = Countdown()
        self.actors: list[PooledCounter] = []

    def spawn(self, n: int) -> None:
        self.actors = [PooledCounter(self.pool, self.counter) for _ in range(n)]
        for actor in self.actors:
            actor.tell(0)

    def tell(self, index: int, message: int) -> None:
        self.actors[index].tell(message)

    def ask(self, index: int, message: int) -> None:
        reply: Future[int] = Future()
        self.actors[index].tell(Ask(message, reply))
        reply.result(WAIT_LIMIT)

    def stop_all(self) -> None:
        for actor in self.actors:
            actor.tell(STOP)


class Threading:
    """pykka ``ThreadingActor``s, one thread each."""

    name = "threading"

    def __init__(self) -> None:
        self.counter = Countdown()
        self.refs: list[pykka.ActorRef[Any]] = []

    def spawn(self, n: int) -> None:
        self.refs = [ThreadingCounter.start(self.counter) for _ in range(n)]

    def tell(self, index: int, message: int) -> None:
        self.refs[index].tell(message)

    def ask(self, index: int, message: int) -> None:
        self.refs[index].ask(message, timeout=WAIT_LIMIT)

    def stop_all(self) -> None:
        for ref in self.refs:
            ref.stop(block=False)


# --------------------------------------------------------------------------- one run


@dataclass
class Bounds:
    """How much work one runtime gets (the ThreadingActor run is bounded)."""

    msgs_per_actor: int
    max_msgs: int | None
    tell_rounds: int
    asks: int
    ask_budget_s: float | None


def measure(runtime: Runtime, n: int, bounds: Bounds) -> dict[str, Any]:
    """Start, load, probe and stop ``n`` actors of ``runtime``; return one ``runs`` entry."""
    counter = runtime.counter
    before = settled_rss_kib()

    counter.arm(n)
    t0 = time.perf_counter()
    runtime.spawn(n)
    counter.wait("starts")
    start_s = time.perf_counter() - t0

    rss_per_actor = (settled_rss_kib() - before) / n

    # tell throughput: round-robin over all actors, until the last message is handled;
    # the median of a few rounds (thread scheduling makes single rounds noisy)
    total = n * bounds.msgs_per_actor
    if bounds.max_msgs is not None:
        total = max(1, min(total, bounds.max_msgs))
    rates: list[float] = []
    for _ in range(bounds.tell_rounds):
        counter.arm(total)
        t0 = time.perf_counter()
        for i in range(total):
            runtime.tell(i % n, i)
        counter.wait("tells")
        rates.append(total / (time.perf_counter() - t0))

    # ask latency: sequential blocking asks to random actors
    rng = random.Random(7)
    latencies: list[float] = []
    deadline = None if bounds.ask_budget_s is None else time.perf_counter() + bounds.ask_budget_s
    for i in range(bounds.asks):
        t1 = time.perf_counter()
        runtime.ask(rng.randrange(n), i)
        latencies.append(time.perf_counter() - t1)
        if deadline is not None and len(latencies) >= 20 and time.perf_counter() > deadline:
            break

    # stop: a stop to every actor, until all have stopped
    counter.arm(n)
    t0 = time.perf_counter()
    runtime.stop_all()
    counter.wait("stops")
    stop_s = time.perf_counter() - t0

    return {
        "runtime": runtime.name,
        "actors": n,
        "start_us_per_actor": start_s / n * 1e6,
        "rss_kib_per_actor": rss_per_actor,
        "tell_msgs_per_s": statistics.median(rates),
        "ask_p50_us": percentile(latencies, 0.50) * 1e6,
        "ask_p99_us": percentile(latencies, 0.99) * 1e6,
        "stop_us_per_actor": stop_s / n * 1e6,
        "tell_msgs": total,
        "tell_msgs_per_s_rounds": rates,
        "asks": len(latencies),
    }


def run_pooled(n: int, workers: int, batch: int, msgs_per_actor: int) -> dict[str, Any]:
    """Measure ``n`` pooled actors on a fresh pool."""
    pool = ActorPool(workers=workers, batch=batch, name="bench-pool")
    pool.start()
    try:
        bounds = Bounds(msgs_per_actor, None, tell_rounds=5, asks=2000, ask_budget_s=None)
        result = measure(Pooled(pool), n, bounds)
    finally:
        pool.stop(timeout=WAIT_LIMIT)
    result["workers"] = workers
    result["batch"] = batch
    return result


def run_threading(n: int, msgs_per_actor: int, max_msgs: int) -> dict[str, Any]:
    """Measure ``n`` ThreadingActors: tells capped at ``max_msgs`` per round, asks at 500 or 2 s."""
    before = set(threading.enumerate())
    bounds = Bounds(msgs_per_actor, max_msgs, tell_rounds=5, asks=500, ask_budget_s=2.0)
    try:
        result = measure(Threading(), n, bounds)
    finally:  # normally all stopped already; only this benchmark's actors are touched
        for ref in pykka.ActorRegistry.get_by_class(ThreadingCounter):
            ref.stop(block=False)
        for thread in set(threading.enumerate()) - before:
            thread.join(WAIT_LIMIT)
    return result


# --------------------------------------------------------------------------- report


def ratios(pooled: dict[str, Any], threaded: dict[str, Any]) -> dict[str, float]:
    """pooled / threading for every figure (tell: higher is better; the others: lower)."""
    return {f: (pooled[f] / threaded[f]) if threaded[f] else float("inf") for f in FIGURES}


def check_targets(pooled: dict[str, Any], r: dict[str, float]) -> dict[str, Any]:
    met = {
        "tell_ratio": r["tell_msgs_per_s"] >= TARGETS["tell_ratio_min"],
        "rss_kib_per_actor": pooled["rss_kib_per_actor"] <= TARGETS["rss_kib_per_actor_max"],
        "start_us_per_actor": pooled["start_us_per_actor"] <= TARGETS["start_us_per_actor_max"],
        "stop_us_per_actor": pooled["stop_us_per_actor"] <= TARGETS["stop_us_per_actor_max"],
    }
    return {**TARGETS, "met": met, "all_met": all(met.values())}


def table(report: dict[str, Any]) -> str:
    runs = report["runs"]
    header = f"{'figure':<22}" + "".join(f"{run['runtime']:>14}" for run in runs) + f"{'ratio':>12}"
    lines = [header, "-" * len(header)]
    for f in FIGURES:
        cells = "".join(f"{run[f]:>14,.1f}" for run in runs)
        lines.append(f"{f:<22}{cells}{report['ratios'][f]:>12.3g}")
    lines.append(
        f"actors: {runs[0]['actors']:,}; ratio = pooled / threading; "
        f"threading tells: {runs[1]['tell_msgs']:,}, asks: {runs[1]['asks']:,}"
    )
    met = report["targets"]["met"]
    lines.append("targets: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in met.items()))
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.actor_runtime",
        description="Pooled actors versus pykka ThreadingActor, side by side.",
    )
    parser.add_argument("--actors", type=int, default=10_000, help="actors per runtime")
    parser.add_argument("--quick", action="store_true", help="1,000 actors (smoke run)")
    parser.add_argument("--json", metavar="PATH", help="write the report here")
    parser.add_argument("--workers", type=int, default=2, help="pool worker threads")
    parser.add_argument("--batch", type=int, default=16, help="pool batch size")
    parser.add_argument("--msgs-per-actor", type=int, default=20, help="tells per pooled actor")
    parser.add_argument(
        "--threading-max-msgs",
        type=int,
        default=10_000,
        help="cap on ThreadingActor tells (it handles a few thousand per second)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.actors = 1_000
    if min(args.actors, args.msgs_per_actor, args.threading_max_msgs) < 1:
        parser.error("--actors, --msgs-per-actor and --threading-max-msgs must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run both runtimes, print the table, write the JSON report; returns the exit status."""
    args = parse_args(argv)
    t0 = time.perf_counter()
    pooled = run_pooled(args.actors, args.workers, args.batch, args.msgs_per_actor)
    threaded = run_threading(args.actors, args.msgs_per_actor, args.threading_max_msgs)
    r = ratios(pooled, threaded)
    report: dict[str, Any] = {
        "runs": [pooled, threaded],
        "ratios": r,
        "targets": check_targets(pooled, r),
        "meta": {
            "python": platform.python_version(),
            "pykka": importlib.metadata.version("pykka"),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "wall_s": round(time.perf_counter() - t0, 2),
        },
    }
    print(table(report))
    print(f"wall time: {report['meta']['wall_s']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
