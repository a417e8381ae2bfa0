"""Shutdown under load: every future resolves by the deadline and nothing is left running.

``stop(drain=True, timeout)`` with 10,000 pending calls and a slow apiserver resolves each
future either with its real outcome or with :class:`DispatcherClosed`; submits racing with the
stop either raise :class:`DispatcherClosed` or get a future that resolves; the leak fixture in
``conftest.py`` checks threads and actors after each test. The scheduler example (the main job)
exits cleanly with a summary when interrupted with Ctrl-C.
"""

from __future__ import annotations

import math
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import wait
from contextlib import contextmanager
from pathlib import Path

import pytest

from kdispatch.actors.engine.messages import CallFuture
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RetryConfig,
)
from kdispatch.actors.model.errors import DispatcherClosed, InvalidInputError, Outcome
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.testing.memory import InMemoryApiServer, Latency, make_pod
from tests.backends import GatedBackend
from tests.e2e.test_scheduler_example import kubeconfig_file

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]


def _outcome(future: CallFuture) -> object:
    exc = future.exception(timeout=0)
    return type(exc) if exc is not None else future.result(timeout=0)


@pytest.mark.slow
def test_stop_with_ten_thousand_pending_calls_and_a_slow_apiserver() -> None:
    server = InMemoryApiServer(latency=Latency(fixed=0.02))
    pods = [server.create(make_pod(f"p{i}")) for i in range(10_000)]
    # kube-scheduler's client defaults (50 QPS, burst 100): the backlog cannot drain in time
    d = Dispatcher(server, DispatcherConfig(executor=ExecutorConfig(workers=4))).start()
    futures = [d.submit(PodBinding.for_pod(p, f"node-{i % 100}")) for i, p in enumerate(pods)]
    assert d.live_actors == 10_000
    drained: list[bool] = []
    deadline = 1.0
    stopper = threading.Thread(target=lambda: drained.append(d.stop(drain=True, timeout=deadline)))
    stopper.start()
    # every future is resolved by the deadline (plus the time to close 10,000 actors)
    _done, not_done = wait(futures, timeout=deadline + 20)
    stopper.join(timeout=30)
    assert not not_done
    assert not stopper.is_alive() and drained == [False]
    outcomes = [_outcome(f) for f in futures]
    assert set(outcomes) <= {Outcome.SUCCESS, DispatcherClosed}
    succeeded = outcomes.count(Outcome.SUCCESS)
    assert 0 < succeeded < 10_000
    assert outcomes.count(DispatcherClosed) == 10_000 - succeeded
    # a success was answered by the server, so the pod is bound
    bound = {p["metadata"]["name"] for p in server.list("Pod").items if p["spec"].get("nodeName")}
    assert all(
        p["metadata"]["name"] in bound
        for p, o in zip(pods, outcomes, strict=True)
        if o is Outcome.SUCCESS
    )
    assert (d.live_actors, d.outstanding) == (0, 0)
    with pytest.raises(DispatcherClosed):
        d.submit(PodBinding.for_pod(pods[0], "node-0"))


def test_stop_returns_within_its_timeout_whatever_the_backlog() -> None:
    """The promise of ``stop(drain=True, timeout)``: back within ``timeout`` + 0.5 s, even with
    20,000 status patches pending behind a 50 QPS limit, each future resolved exactly once."""
    server = InMemoryApiServer()
    pods = [server.create(make_pod(f"p{i}")) for i in range(20_000)]
    d = Dispatcher(server, DispatcherConfig(rate_limit=RateLimitConfig(qps=50, burst=100))).start()
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    futures = [d.submit(PodStatusPatch.for_pod(p, conditions=[cond])) for p in pods]
    resolutions: list[object] = []
    for future in futures:
        future.add_done_callback(resolutions.append)  # list.append is atomic
    started = time.monotonic()
    drained = d.stop(drain=True, timeout=2.0)
    took = time.monotonic() - started
    assert not drained
    assert took <= 2.5, f"stop(timeout=2) took {took:.2f} s"
    assert all(f.done() for f in futures)
    assert len(resolutions) == len({id(f) for f in resolutions}) == 20_000
    outcomes = [_outcome(f) for f in futures]
    sent = outcomes.count(Outcome.SUCCESS)
    assert 0 < sent < 20_000
    assert outcomes.count(DispatcherClosed) == 20_000 - sent
    counted = d.stats()["outcomes"]
    assert counted == {"pod_status_patch:success": sent, "pod_status_patch:closed": 20_000 - sent}
    assert (d.live_actors, d.outstanding) == (0, 0)


def test_stop_drains_everything_that_fits_before_the_deadline() -> None:
    server = InMemoryApiServer(latency=Latency(fixed=0.002))
    pods = [server.create(make_pod(f"p{i}")) for i in range(500)]
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf, burst=1), executor=ExecutorConfig(workers=8)
    )
    d = Dispatcher(server, config).start()
    futures = [d.submit(PodBinding.for_pod(p, "node-1")) for p in pods]
    assert d.stop(drain=True, timeout=60) is True
    assert {_outcome(f) for f in futures} == {Outcome.SUCCESS}
    assert server.counts()["bind"] == 500


def test_stop_without_drain_under_retries_resolves_everything() -> None:
    """A backlog of calls backing off after 500s is closed at once, not waited for."""
    server = InMemoryApiServer()
    pods = [server.create(make_pod(f"p{i}")) for i in range(200)]
    for p in pods:
        server.script("patch_status", "500", name=p["metadata"]["name"])
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf, burst=1),
        retry=RetryConfig(base_backoff=30.0, max_backoff=30.0),
    )
    d = Dispatcher(server, config).start()
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    futures = [d.submit(PodStatusPatch.for_pod(p, conditions=[cond])) for p in pods]
    assert d.stop(drain=False, timeout=5) is False
    _done, not_done = wait(futures, timeout=0)
    assert not not_done  # resolved when stop() returned
    assert {_outcome(f) for f in futures} == {DispatcherClosed}


class InlineGatedBackend(GatedBackend):
    """A :class:`GatedBackend` whose requests run on the actor's turn
    (``ExecutorConfig(inline_sends=True)``): a request held at the gate holds the actor pool."""

    non_blocking = True


def test_stop_without_drain_reports_the_calls_it_closed_even_when_the_actors_close_them_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``stop(drain=False)`` returns False when it had calls to close, even if the actors
    resolve every one of them ``DispatcherClosed`` before ``stop`` looks at the backlog."""
    backend = InlineGatedBackend(hold="p0")
    pods = [backend.inner.create(make_pod(f"p{i}")) for i in range(6)]
    d = Dispatcher(backend, DispatcherConfig(executor=ExecutorConfig(inline_sends=True))).start()
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    held = d.submit(PodStatusPatch.for_pod(pods[0], conditions=[cond]))
    backend.wait_calls(1)  # p0's request waits at the gate, on the pool's only thread
    queued = [d.submit(PodStatusPatch.for_pod(p, conditions=[cond])) for p in pods[1:]]
    seal = d._seal_groups

    def let_the_actors_close_everything_first(**how: bool) -> None:
        backend.gate.set()
        _done, not_done = wait([held, *queued], timeout=10)
        assert not not_done
        seal(**how)

    monkeypatch.setattr(d, "_seal_groups", let_the_actors_close_everything_first)
    assert d.stop(drain=False, timeout=5) is False
    assert {_outcome(f) for f in queued} == {DispatcherClosed}


def test_submits_racing_with_stop_never_hang() -> None:
    server = InMemoryApiServer(latency=Latency(fixed=0.001))
    pods = [server.create(make_pod(f"p{i}")) for i in range(2_000)]
    d = Dispatcher(server, DispatcherConfig(executor=ExecutorConfig(workers=4))).start()
    futures: list[list[CallFuture]] = [[] for _ in range(4)]
    refused = [0] * 4
    go = threading.Event()

    def submitter(k: int) -> None:
        go.wait(10)
        for p in pods[k::4]:
            try:
                futures[k].append(d.submit(PodBinding.for_pod(p, "node-1")))
            except DispatcherClosed:
                refused[k] += 1

    threads = [threading.Thread(target=submitter, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    go.set()
    stopped = d.stop(drain=True, timeout=0.5)
    for t in threads:
        t.join(timeout=30)
    every = [f for fs in futures for f in fs]
    _done, not_done = wait(every, timeout=10)
    assert not not_done
    assert len(every) + sum(refused) == 2_000
    assert {_outcome(f) for f in every} <= {Outcome.SUCCESS, DispatcherClosed}
    assert isinstance(stopped, bool)
    assert d.outstanding == 0


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -1.0, "30", True])
def test_a_bad_stop_timeout_is_refused_and_stops_nothing(timeout: object) -> None:
    """``stop()`` checks its timeout before it closes anything: the dispatcher still serves,
    and a later ``stop()`` drains it."""
    server = InMemoryApiServer()
    pods = [server.create(make_pod(f"p{i}")) for i in range(2)]
    d = Dispatcher(server).start()
    with pytest.raises(InvalidInputError, match="timeout"):
        d.stop(timeout=timeout)  # type: ignore[arg-type]
    futures = [d.submit(PodBinding.for_pod(p, "node-1")) for p in pods]
    assert d.stop(drain=True, timeout=30) is True
    assert {_outcome(f) for f in futures} == {Outcome.SUCCESS}
    assert [server.get("Pod", "default", f"p{i}")["spec"]["nodeName"] for i in range(2)] == [
        "node-1",
        "node-1",
    ]


def test_stop_without_a_timeout_drains_everything() -> None:
    """``stop(timeout=None)``: no deadline, every call is sent and resolves with its outcome."""
    server = InMemoryApiServer(latency=Latency(fixed=0.002))
    pods = [server.create(make_pod(f"p{i}")) for i in range(100)]
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=2000, burst=1))
    d = Dispatcher(server, config).start()
    futures = [d.submit(PodBinding.for_pod(p, "node-1")) for p in pods]
    assert d.stop(drain=True, timeout=None) is True
    assert {_outcome(f) for f in futures} == {Outcome.SUCCESS}
    assert server.counts()["bind"] == 100


class BlockingOnTheTurn(InMemoryApiServer):
    """Says it never blocks, so requests run on the actors' own turn; its bindings then set
    ``arrived`` and wait for ``gate`` (a turn held by a request)."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__(latency=Latency(per_op={"bind": 1.0}), sleep=self._hold)
        self.gate = gate
        self.arrived = threading.Event()

    def _hold(self, _seconds: float) -> None:
        self.arrived.set()
        self.gate.wait(30)

    @property
    def non_blocking(self) -> bool:
        return True


def test_a_view_still_queued_when_stop_ends_the_pool_is_answered() -> None:
    """A view told to an actor whose turn never came (the one pool worker is held) is answered
    at ``stop()``: None, as for an object no longer tracked, never left waiting."""
    gate = threading.Event()
    server = BlockingOnTheTurn(gate)
    held, viewed = (server.create(make_pod(name)) for name in ("held", "viewed"))
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=math.inf, burst=1))
    d = Dispatcher(server, config).start()
    try:
        cond = {"type": "Example", "status": "True"}
        assert d.submit(PodStatusPatch.for_pod(viewed, conditions=[cond])).result(30) is (
            Outcome.SUCCESS
        )  # the viewed pod has an actor
        binding = d.submit(PodBinding.for_pod(held, "node-1"))  # holds the one pool worker
        assert server.arrived.wait(30)
        reply = d._ask_view(viewed["metadata"]["uid"])  # told, queued behind the held turn
        assert reply is not None and not reply.done()
        d.stop(drain=False, timeout=0)
        assert reply.result(timeout=0) is None
    finally:
        gate.set()
    assert isinstance(binding.exception(30), DispatcherClosed)


def test_concurrent_and_repeated_stops_are_safe() -> None:
    server = InMemoryApiServer(latency=Latency(fixed=0.005))
    pods = [server.create(make_pod(f"p{i}")) for i in range(300)]
    d = Dispatcher(server, DispatcherConfig(executor=ExecutorConfig(workers=2))).start()
    futures = [d.submit(PodBinding.for_pod(p, "node-1")) for p in pods]
    results: list[bool] = []
    stoppers = [
        threading.Thread(target=lambda: results.append(d.stop(drain=True, timeout=0.3)))
        for _ in range(3)
    ]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join(timeout=30)
    assert len(results) == 3
    _done, not_done = wait(futures, timeout=10)
    assert not not_done
    assert isinstance(d.stop(), bool)  # once more, after the fact


# --------------------------------------------------------------------------- the main job


@contextmanager
def _example(*args: str) -> Iterator[subprocess.Popen[str]]:
    """The scheduler example run as ``python -m examples.scheduler *args`` with piped text
    output; killed on exit if it is still running. It starts with SIGINT's default action, as
    from a terminal: a test run from a background job inherits SIGINT ignored, and so would
    the example."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a handled signal is reset to its default across exec, an ignored one stays ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "examples.scheduler", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
@pytest.mark.skipif(
    not (ROOT / "examples" / "scheduler" / "__main__.py").exists(), reason="no scheduler example"
)
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_scheduler_example_exits_cleanly_with_a_summary_on_ctrl_c() -> None:
    args = [
        "--nodes",
        "50",
        "--pods",
        "3000",
        "--qps",
        "50",  # slow enough that the run is still going when interrupted
        "--max-seconds",
        "60",
        "--seed",
        "3",
    ]
    with _example(*args) as proc:
        assert proc.stderr is not None
        # wait for a progress line showing bound pods: the run is in the middle of scheduling
        progress = ""
        while not re.search(r"bound [1-9]", progress):
            ready, _, _ = select.select([proc.stderr], [], [], 60)
            assert ready, "the example printed no progress"
            progress = proc.stderr.readline()
            assert progress, "the example ended before it was interrupted"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode == 130, out  # interrupted mid-run, not finished
    assert re.search(r"stopped by\s+interrupt", out), out
    # the summary reports the run as far as it went, verified
    assert re.search(r"pods bound\s+[1-9]", out), out
    assert re.search(r"duplicate bindings\s+0\n", out), out
    assert re.search(r"lost intents\s+0\n", out), out


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_scheduler_example_against_a_dead_apiserver_says_why_within_five_seconds(
    tmp_path: Path,
) -> None:
    kubeconfig = kubeconfig_file(tmp_path, "http://127.0.0.1:1")
    started = time.monotonic()
    with _example("--kubeconfig", kubeconfig) as proc:
        assert proc.stderr is not None
        line = ""
        while "cannot connect" not in line:
            left = started + 5.0 - time.monotonic()
            ready, _, _ = select.select([proc.stderr], [], [], max(0.0, left))
            assert ready, f"nothing said within 5 s (last line: {line!r})"
            line = proc.stderr.readline()
            assert line, "the example ended without saying why"
        assert "informer nodes not synced" in line
        assert "cannot connect to http://127.0.0.1:1: " in line
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err
