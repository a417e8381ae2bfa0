"""``backlog`` and ``wait_backlog``: the back-pressure a caller opts into, on both dispatchers.

The apiserver holds each binding in a turnstile (its ``sleep``) that lets through exactly as
many as the test allows, so the backlog is known at every step; a waiting thread's answer
arrives on a future. Synchronisation is by futures, the turnstile and polling of observable
state with deadlines; never by sleeping.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import pytest

from kdispatch import (
    Dispatcher,
    DispatcherConfig,
    DispatcherLike,
    EventRecorder,
    ExecutorConfig,
    InvalidInputError,
    KubernetesBackend,
    Outcome,
    PodBinding,
    PodStatusPatch,
    ProcessDispatcher,
    RetryConfig,
    UnknownCallTypeError,
)
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, Latency, make_pod
from kdispatch.testing.waiting import wait_for
from tests.integration.test_process_dispatcher import HeldSleep

WAIT = 30.0
"""Upper bound of any single wait (as in tests/integration/test_process_dispatcher.py)."""


class Turnstile(HeldSleep):
    """The server's ``sleep``: every request with a latency (the bindings) waits until the
    test lets it through, one per :meth:`let`; ``arrived`` counts those that reached it."""

    def __init__(self) -> None:
        super().__init__()
        self._passes = threading.Semaphore(0)

    def __call__(self, _seconds: float) -> None:
        with self._cond:
            self.arrived += 1
            self._cond.notify_all()
        assert self._passes.acquire(timeout=WAIT), "never let through"

    def let(self, n: int = 1) -> None:
        self._passes.release(n)


@dataclass
class Setup:
    server: InMemoryApiServer
    gate: Turnstile
    make: Callable[[], Dispatcher | ProcessDispatcher]


@pytest.fixture(params=["inprocess", "process"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    """A started dispatcher of each kind (4 executor workers) against a server whose bindings
    wait in the turnstile; everything still held is let through at the end."""
    gate = Turnstile()
    server = InMemoryApiServer(latency=Latency(per_op={"bind": 1.0}), sleep=gate)
    config = DispatcherConfig(executor=ExecutorConfig(workers=4), retry=RetryConfig(budget=5.0))
    with ApiServerHTTP(server) as http:
        make: Callable[[], Dispatcher | ProcessDispatcher]
        if request.param == "inprocess":
            make = functools.partial(Dispatcher, server, config)
        else:
            factory = functools.partial(KubernetesBackend.for_url, http.url, workers=4)
            make = functools.partial(ProcessDispatcher, factory, config)
        try:
            yield Setup(server, gate, make)
        finally:
            gate.let(100)


def held_bindings(s: Setup, d: DispatcherLike, n: int) -> list[Future[Outcome]]:
    """``n`` bindings, each on the server, held in the turnstile."""
    pods = [s.server.create(make_pod(f"p{i}")) for i in range(n)]
    futures: list[Future[Outcome]] = [d.submit(PodBinding.for_pod(p, "node-1")) for p in pods]
    s.gate.wait_arrived(n)
    return futures


def waiter(
    d: DispatcherLike, below: int, timeout: float | None = None, call_type: str | None = None
) -> Future[bool]:
    """``d.wait_backlog(below, timeout, call_type=call_type)`` on a thread of its own; its
    answer."""
    answer: Future[bool] = Future()

    def run() -> None:
        answer.set_result(d.wait_backlog(below, timeout, call_type=call_type))

    threading.Thread(target=run, name="backlog-waiter", daemon=True).start()
    return answer


def waiting_threads(d: DispatcherLike) -> int:
    """The highest bound a thread waits for (0: none)."""
    waiting = getattr(d, "_backlog")._waiting  # noqa: B009
    return max((below for below, _level in waiting), default=0)


def test_backlog_counts_unresolved_calls_but_not_events(setup: Setup) -> None:
    with setup.make().start() as d:
        assert d.backlog == 0
        futures = held_bindings(setup, d, 3)
        assert d.backlog == 3
        event = EventRecorder(d, controller="test").event(
            setup.server.get("Pod", "default", "p0"), reason="Scheduled", action="Binding", note="n"
        )
        assert event is not None
        assert d.backlog == 3  # the Event is best effort: never part of the backlog
        setup.gate.let(3)
        assert {f.result(WAIT) for f in futures} == {Outcome.SUCCESS}
        event.exception(WAIT)  # sent or dropped: resolved either way
        wait_for(lambda: d.backlog == 0 and d.outstanding == 0, WAIT, "nothing unresolved")


def test_wait_returns_at_once_below_the_bound(setup: Setup) -> None:
    with setup.make().start() as d:
        assert d.wait_backlog(1) is True  # nothing submitted
        futures = held_bindings(setup, d, 2)
        assert d.wait_backlog(3, timeout=WAIT) is True
        assert waiting_threads(d) == 0
        setup.gate.let(2)
        assert {f.result(WAIT) for f in futures} == {Outcome.SUCCESS}


def test_a_resolution_wakes_the_waiting_thread(setup: Setup) -> None:
    with setup.make().start() as d:
        futures = held_bindings(setup, d, 3)
        answer = waiter(d, below=3)
        wait_for(lambda: waiting_threads(d) == 3, WAIT, "the thread waits")
        assert not answer.done()  # nothing resolved: the backlog is still 3
        setup.gate.let(1)
        assert answer.result(WAIT) is True
        assert d.backlog <= 2
        assert waiting_threads(d) == 0  # it left no trace
        setup.gate.let(2)
        assert {f.result(WAIT) for f in futures} == {Outcome.SUCCESS}


def test_each_thread_waits_for_its_own_bound(setup: Setup) -> None:
    with setup.make().start() as d:
        futures = held_bindings(setup, d, 3)
        low, high = waiter(d, below=1), waiter(d, below=3)
        wait_for(lambda: waiting_threads(d) == 3, WAIT, "both threads wait")
        setup.gate.let(1)
        assert high.result(WAIT) is True
        wait_for(lambda: waiting_threads(d) == 1, WAIT, "only the low bound is left")
        assert not low.done()
        setup.gate.let(2)
        assert low.result(WAIT) is True
        assert {f.result(WAIT) for f in futures} == {Outcome.SUCCESS}


def test_wait_times_out_while_nothing_resolves(setup: Setup) -> None:
    with setup.make().start() as d:
        futures = held_bindings(setup, d, 2)
        assert d.wait_backlog(2, timeout=0.05) is False
        assert d.wait_backlog(1, timeout=0.05) is False
        assert waiting_threads(d) == 0
        setup.gate.let(2)
        assert {f.result(WAIT) for f in futures} == {Outcome.SUCCESS}


def test_stop_wakes_a_waiting_thread(setup: Setup) -> None:
    d = setup.make().start()
    held_bindings(setup, d, 2)
    answer = waiter(d, below=1)
    wait_for(lambda: waiting_threads(d) == 1, WAIT, "the thread waits")
    setup.gate.let(2)  # released while the stop drains
    assert d.stop(drain=True, timeout=WAIT)
    assert answer.result(WAIT) is True
    assert d.backlog == 0


@pytest.mark.parametrize("below", [0, -1, True, 1.5, "3", None])
def test_bad_bound_is_refused(setup: Setup, below: object) -> None:
    with pytest.raises(InvalidInputError, match="below"):  # checked before anything else
        setup.make().wait_backlog(below, timeout=1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan, math.inf, "1", True])
def test_bad_timeout_is_refused(setup: Setup, timeout: object) -> None:
    with pytest.raises(InvalidInputError, match="timeout"):
        setup.make().wait_backlog(1, timeout=timeout)  # type: ignore[arg-type]


def test_a_timeout_longer_than_any_lock_can_wait_is_no_limit(setup: Setup) -> None:
    """A finite timeout above ``threading.TIMEOUT_MAX`` waits like None."""
    with setup.make().start() as d:
        futures = held_bindings(setup, d, 2)
        answer = waiter(d, 1, timeout=1e12)
        wait_for(lambda: waiting_threads(d) == 1, WAIT, "the waiter waits")
        setup.gate.let(2)
        assert answer.result(WAIT) is True
        assert {f.result(WAIT) for f in futures} == {Outcome.SUCCESS}


class TwoTurnstiles:
    """The server's ``sleep`` with one turnstile for bindings (latency 1.0) and one for status
    patches (latency 2.0), so a test lets each kind through on its own."""

    def __init__(self) -> None:
        self.bind, self.patch = Turnstile(), Turnstile()

    def __call__(self, seconds: float) -> None:
        (self.bind if seconds == 1.0 else self.patch)(seconds)


@pytest.fixture(params=["inprocess", "process"])
def lanes(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[InMemoryApiServer, TwoTurnstiles, DispatcherLike]]:
    """A started dispatcher of each kind whose bindings and status patches each wait in a
    turnstile of their own; everything still held is let through at the end."""
    gates = TwoTurnstiles()
    latency = Latency(per_op={"bind": 1.0, "patch_status": 2.0})
    server = InMemoryApiServer(latency=latency, sleep=gates)
    config = DispatcherConfig(executor=ExecutorConfig(workers=8), retry=RetryConfig(budget=5.0))
    with ApiServerHTTP(server) as http:
        d: DispatcherLike
        if request.param == "inprocess":
            d = Dispatcher(server, config)
        else:
            factory = functools.partial(KubernetesBackend.for_url, http.url, workers=8)
            d = ProcessDispatcher(factory, config)
        try:
            with d.start():
                yield server, gates, d
        finally:
            gates.bind.let(100)
            gates.patch.let(100)


def test_pacing_on_the_binding_lane_never_waits_for_status_patches(
    lanes: tuple[InMemoryApiServer, TwoTurnstiles, DispatcherLike],
) -> None:
    """Status patches held on the server count in the backlog of their lane, not in the
    binding lane's: a thread paced on bindings goes on once the bindings resolved, while a
    thread paced on every lane still waits for the patches (kubernetes#135900 in the
    caller's loop)."""
    server, gates, d = lanes
    unfit = [server.create(make_pod(f"unfit-{i}")) for i in range(3)]
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    patches = [d.submit(PodStatusPatch.for_pod(p, conditions=[unschedulable])) for p in unfit]
    gates.patch.wait_arrived(3)
    fit = [server.create(make_pod(f"fit-{i}")) for i in range(2)]
    bindings = [d.submit(PodBinding.for_pod(p, "node-1")) for p in fit]
    gates.bind.wait_arrived(2)
    assert (d.backlog, d.backlog_at(), d.backlog_at("pod_status_patch")) == (5, 5, 5)
    assert d.backlog_at("pod_binding") == 2
    assert d.backlog_at("pod_preemption") == 0  # no deletion pending: the lane above is empty
    assert d.wait_backlog(1, timeout=WAIT, call_type="pod_preemption") is True
    on_bindings = waiter(d, below=1, call_type="pod_binding")
    on_everything = waiter(d, below=1)
    wait_for(lambda: waiting_threads(d) == 1 and len(_levels(d)) == 2, WAIT, "both wait")
    assert not on_bindings.done()
    gates.bind.let(2)
    assert on_bindings.result(WAIT) is True
    assert {f.result(WAIT) for f in bindings} == {Outcome.SUCCESS}
    assert [
        server.get("Pod", "default", p["metadata"]["name"])["spec"]["nodeName"] for p in fit
    ] == [
        "node-1",
        "node-1",
    ]
    assert not any(f.done() for f in patches)  # still on the server's turnstile
    assert d.backlog_at("pod_status_patch") == 3
    assert not on_everything.done()
    gates.patch.let(3)
    assert on_everything.result(WAIT) is True
    assert {f.result(WAIT) for f in patches} == {Outcome.SUCCESS}
    wait_for(lambda: d.outstanding == 0, WAIT, "nothing unresolved")


def _levels(d: DispatcherLike) -> list[int]:
    """The lowest relevance each waiting thread counts."""
    return [level for _below, level in getattr(d, "_backlog")._waiting]  # noqa: B009


@pytest.mark.parametrize("call_type", ["no_such_call", 3])
def test_unknown_lane_is_refused(setup: Setup, call_type: object) -> None:
    d = setup.make()
    with pytest.raises(InvalidInputError):
        d.wait_backlog(1, timeout=1.0, call_type=call_type)  # type: ignore[arg-type]
    with pytest.raises(UnknownCallTypeError):
        d.backlog_at("no_such_call")
