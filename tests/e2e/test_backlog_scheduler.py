"""The example scheduler's pacing (``max_backlog``): its scheduling threads take the next pod
only while fewer calls than that are unresolved, checked on the server.

The apiserver holds each binding in a turnstile
(:class:`tests.integration.test_backlog.Turnstile`) and the test lets them through one at a
time: the bindings on the server and not yet applied (those that reached the turnstile, less
the ``bind`` records of the request log) never exceed the bound, and the pods beyond it wait
in the queue, undecided. No sleeps: futures, the turnstile
and polling of observable state with deadlines.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from examples.scheduler.api import DispatchedApi
from examples.scheduler.cycle import Scheduler, SchedulerConfig
from examples.scheduler.runner import MAX_BACKLOG, RunConfig
from kdispatch import Dispatcher, DispatcherConfig, ExecutorConfig, InvalidInputError
from kdispatch.testing import InMemoryApiServer, Latency, make_node, make_pod
from kdispatch.testing.waiting import wait_for
from tests.e2e.test_scheduler_example import FakeApi
from tests.integration.test_backlog import WAIT, Turnstile, waiting_threads

BOUND = 3
PODS = 8


@dataclass
class Paced:
    server: InMemoryApiServer
    gate: Turnstile
    dispatcher: Dispatcher
    scheduler: Scheduler

    def unapplied_bindings(self) -> int:
        """Bindings on the server that it has not applied yet (held in the turnstile)."""
        applied = sum(1 for r in self.server.request_log if r.op == "bind")
        return self.gate.arrived - applied

    def bound(self) -> int:
        return self.scheduler.phase_counts()["bound"]


@pytest.fixture
def paced() -> Iterator[Paced]:
    """One scheduling thread paced at ``BOUND``, ``PODS`` pods that fit, bindings held."""
    gate = Turnstile()
    server = InMemoryApiServer(latency=Latency(per_op={"bind": 1.0}), sleep=gate)
    config = DispatcherConfig(executor=ExecutorConfig(workers=8))
    dispatcher = Dispatcher(server, config).start()
    scheduler = Scheduler(DispatchedApi(dispatcher), SchedulerConfig(threads=1, max_backlog=BOUND))
    scheduler.on_node_add(server.create(make_node("n1", 64000, 65536)))
    for i in range(PODS):
        scheduler.on_pod_add(server.create(make_pod(f"p{i}", cpu_m=100)))
    try:
        yield Paced(server, gate, dispatcher, scheduler)
    finally:
        gate.let(100)
        scheduler.stop()
        dispatcher.stop(drain=True, timeout=WAIT)


def paused(p: Paced, submitted: int) -> bool:
    """``submitted`` bindings reached the server and the scheduling thread waits."""
    return p.gate.arrived == submitted and waiting_threads(p.dispatcher) == BOUND


def test_the_backlog_on_the_server_never_exceeds_the_bound(paced: Paced) -> None:
    p = paced
    p.scheduler.start()
    wait_for(lambda: paused(p, BOUND), WAIT, f"{BOUND} bindings held, the thread waiting")
    assert p.unapplied_bindings() == BOUND
    assert p.scheduler.phase_counts()["queued"] == PODS - BOUND  # undecided, not piled up
    for released in range(1, PODS - BOUND + 1):
        p.gate.let(1)
        next_pod = functools.partial(paused, p, BOUND + released)
        wait_for(next_pod, WAIT, "the next pod taken, then the thread waiting")
        assert p.unapplied_bindings() == BOUND
        assert p.dispatcher.backlog == BOUND
    p.gate.let(BOUND)
    wait_for(lambda: p.bound() == PODS, WAIT, "every pod bound")
    assert sum(1 for r in p.server.request_log if r.op == "bind") == PODS
    assert p.scheduler.errors == 0


def test_stop_ends_a_thread_waiting_for_the_backlog(paced: Paced) -> None:
    p = paced
    p.scheduler.start()
    wait_for(lambda: paused(p, BOUND), WAIT, "the thread waiting")
    p.scheduler.stop(timeout=WAIT)  # the bindings are still held: it does not wait for them
    assert not [t for t in threading.enumerate() if t.name.startswith("scheduler-")]
    assert p.gate.arrived == BOUND


def test_bad_bounds_are_refused() -> None:
    for bad in (0, -1, True, 2.5):
        with pytest.raises(InvalidInputError, match="max_backlog"):
            SchedulerConfig(max_backlog=bad)  # type: ignore[arg-type]
    for bad in (-1, 2.5):
        with pytest.raises(InvalidInputError, match="max_backlog"):
            RunConfig(max_backlog=bad)  # type: ignore[arg-type]
    assert RunConfig(max_backlog=0).max_backlog == 0  # unpaced
    assert RunConfig().max_backlog == MAX_BACKLOG


def test_the_main_job_paces_on_the_binding_lane_at_192_by_default() -> None:
    """The defaults the process-dispatcher page names: ``--max-backlog 192`` on the binding
    lane (``--pace-on pod_binding``)."""
    from examples.scheduler.cli import parser

    args = parser().parse_args([])
    assert (args.max_backlog, args.pace_on) == (192, "pod_binding")
    assert (RunConfig().max_backlog, RunConfig().pace_on) == (192, "pod_binding")


def test_pacing_needs_an_api_layer_that_can_wait() -> None:
    with pytest.raises(InvalidInputError, match="wait_backlog"):
        Scheduler(FakeApi(), SchedulerConfig(max_backlog=1))
    Scheduler(FakeApi(), SchedulerConfig())  # unpaced: any API layer


def test_the_benchmarks_pacing_ab_compares_each_variant_with_its_unpaced_twin() -> None:
    from benchmarks.process_executor import _options, evaluate, markdown

    def fig(pps: float, p99: float) -> dict[str, Any]:
        return {
            "loop_submit_us": {"p50": 20.0, "p99": 200.0, "max": 2000.0},
            "pods_per_s": pps,
            "binding_latency_ms": {"p50": p99 / 2, "p99": p99},
            "duplicate_bindings": 0,
            "lost_intents": 0,
            "pods_unsettled": 0,
            "peak_rss_mib": {"scheduler": 100.0, "children": 0.0},
            "cpu_s": {"scheduler": 5.0, "children": 0.0},
        }

    rounds = [
        {
            "inprocess": fig(600, 400),
            "process": fig(900, 300),
            "inprocess_unpaced": fig(500, 800),
            "process_unpaced": fig(1000, 2400),
        }
    ] * 2
    result = evaluate(rounds)
    assert result["pacing_ratios"]["binding_p99"]["rounds"] == [0.125, 0.125]
    assert result["pacing_ratios"]["pods_per_s"]["median"] == 0.9
    assert result["pacing_ratios_inprocess"]["pods_per_s"]["median"] == 1.2
    assert "| child, paced | child, unpaced | paced / unpaced |" in markdown(result, rounds)
    assert _options("process_unpaced", 128) == ("--dispatcher-process", "--max-backlog", "0")
    assert _options("inprocess", 128) == ("--max-backlog", "128")
    assert _options("inprocess", None) == ()


@pytest.mark.parametrize("pace_on", ["pod_binding", "pod_status_patch"])
def test_default_pacing_never_holds_a_binding_behind_status_patches(pace_on: str) -> None:
    """Unfit pods first, their ``PodScheduled=False`` patches held on the server, then pods
    that fit. Paced on the binding lane (the default), the scheduling thread goes on and binds
    every fitting pod while the patches are still held; paced on every lane, it stops behind
    the first held patch and binds nothing (kubernetes#135900 in the scheduling loop)."""
    gate = Turnstile()
    server = InMemoryApiServer(latency=Latency(per_op={"patch_status": 1.0}), sleep=gate)
    dispatcher = Dispatcher(server, DispatcherConfig(executor=ExecutorConfig(workers=8))).start()
    config = SchedulerConfig(
        threads=1, max_backlog=1, pace_on=pace_on, backoff_initial=60.0, backoff_max=60.0
    )
    scheduler = Scheduler(DispatchedApi(dispatcher), config)
    try:
        scheduler.on_node_add(server.create(make_node("n1", 4000, 8192)))
        for i in range(3):
            scheduler.on_pod_add(server.create(make_pod(f"unfit-{i}", cpu_m=8000)))
        fit = [server.create(make_pod(f"fit-{i}", cpu_m=100)) for i in range(4)]
        for pod in fit:
            scheduler.on_pod_add(pod)
        scheduler.start()
        if pace_on == "pod_binding":
            wait_for(lambda: scheduler.phase_counts()["bound"] == 4, WAIT, "every fit pod bound")
            wait_for(lambda: gate.arrived == 3, WAIT, "the three patches held on the server")
            assert not any(r.op == "patch_status" for r in server.request_log)
        else:
            wait_for(
                lambda: gate.arrived == 1 and waiting_threads(dispatcher) == 1,
                WAIT,
                "the first patch held, the thread waiting",
            )
            assert scheduler.phase_counts()["bound"] == 0
        nodes = {
            server.get("Pod", "default", p["metadata"]["name"])["spec"].get("nodeName") for p in fit
        }
        assert nodes == ({"n1"} if pace_on == "pod_binding" else {None})
        gate.let(100)
        wait_for(lambda: scheduler.phase_counts()["bound"] == 4, WAIT, "every fit pod bound")
        assert scheduler.errors == 0
    finally:
        gate.let(100)
        scheduler.stop()
        dispatcher.stop(drain=True, timeout=WAIT)
