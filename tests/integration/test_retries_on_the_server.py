"""Retries (docs/concepts.md "Retries", docs/behaviour.md "Retry bookkeeping"), checked on the
in-memory apiserver's request log: the backoff, ``Retry-After`` and the retry budget.

A backoff is checked as a lower bound on the gaps between the logged requests (a busy machine
only makes them longer); the budget runs on a clock that moves only while a request is on the
wire, so where it ends is exact.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import DispatcherConfig
from kdispatch.actors.model.errors import (
    ApiError,
    CallFailed,
    Outcome,
    RequestTimeoutError,
    ServerError,
    TooManyRequestsError,
)
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.backends import T, WrappedBackend
from tests.clocks import ManualClock
from tests.configs import fast

pytestmark = pytest.mark.timeout(60)


def no_jitter(**retry: Any) -> DispatcherConfig:
    """No request-rate limit; the retry policy ``retry`` with delays exactly as computed."""
    return fast(jitter=0.0, **retry)


def sent(server: InMemoryApiServer, name: str) -> list[tuple[str, str]]:
    return [(r.op, r.outcome) for r in server.request_log if r.name == name]


def gaps(server: InMemoryApiServer, name: str, op: str | None = None) -> list[float]:
    """Seconds between one request of ``name`` (of ``op``, where given) and the next."""
    t = [r.t for r in server.request_log if r.name == name and op in (None, r.op)]
    return [b - a for a, b in itertools.pairwise(t)]


class OnTheWire(WrappedBackend):
    """Each request of ``op`` takes ``seconds`` of ``clock`` (the dispatcher's), and the
    ``pause_at``-th waits for :meth:`go` after :attr:`arrived` was set: time moves only while a
    request is on the wire. Requests run on executor workers."""

    def __init__(
        self, inner: InMemoryApiServer, clock: ManualClock, op: str, *, pause_at: int = 0
    ) -> None:
        super().__init__(inner)
        self.clock, self.op, self.pause_at = clock, op, pause_at
        self.count = 0
        self.arrived, self._go = threading.Event(), threading.Event()

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        if op == self.op:
            self.count += 1
            if self.count == self.pause_at:
                self.arrived.set()
                assert self._go.wait(30)
            self.clock.advance(0.125)
        return send()

    def go(self) -> None:
        self._go.set()


# --------------------------------------------------------------------------- backoff


def test_the_backoff_doubles_with_each_failure(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("p1"))
    server.script("bind", "500", "500", "500", name="p1")
    with Dispatcher(server, no_jitter(base_backoff=0.1, max_backoff=1.0)) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
    assert sent(server, "p1") == [("bind", "500")] * 3 + [("bind", "ok")]
    waited = gaps(server, "p1")
    assert all(gap >= want for gap, want in zip(waited, [0.1, 0.2, 0.4], strict=True)), waited


def test_a_failed_re_read_before_a_retry_counts_toward_the_backoff(
    server: InMemoryApiServer,
) -> None:
    """n counts the call's failed requests, the re-reads before its retries included: the
    patch's reply is lost (0.1 s), the re-read meets a 500 (0.2 s), the next one goes."""
    pod = server.create(make_pod("p1"))
    server.script("patch_status", "timeout", name="p1")
    server.script("get", "500", name="p1")
    with Dispatcher(server, no_jitter(base_backoff=0.1, max_backoff=1.0)) as d:
        patch = PodStatusPatch.for_pod(pod, nominated_node_name="n1")
        assert d.submit(patch).result(10) is Outcome.SUCCESS
    assert [op for op, _ in sent(server, "p1")] == ["patch_status", "get", "get", "patch_status"]
    first, second, _ = gaps(server, "p1")
    assert first >= 0.1 and second >= 0.2, (first, second)


def test_a_merge_keeps_the_backoff_the_call_had_reached(server: InMemoryApiServer) -> None:
    """behaviour.md: a merged call is as far along as the further of the two; the backoff after
    the third failure is 0.4 s, not started afresh by the call merged in."""
    pod = server.create(make_pod("p1"))
    server.script("patch_status", "500", "500", "500", name="p1")
    with Dispatcher(server, no_jitter(base_backoff=0.1, max_backoff=1.0)) as d:
        first = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        server.wait_for_request("patch_status", outcome="500")
        server.wait_for_request("get")  # the re-read before the second try
        second = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n2"))
        assert first.result(10) is Outcome.OVERWRITTEN
        assert second.result(10) is Outcome.SUCCESS
    waited = gaps(server, "p1", "patch_status")
    assert len(waited) == 3 and waited[2] >= 0.4, waited
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["status"]["nominatedNodeName"] == "n2"


# --------------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize(
    "error",
    [ServerError("restarting", retry_after=0.4), RequestTimeoutError("slow", retry_after=0.4)],
    ids=["500", "504"],
)
def test_retry_after_on_a_5xx_is_waited_for(server: InMemoryApiServer, error: ApiError) -> None:
    pod = server.create(make_pod("p1"))
    server.script("bind", error, name="p1")
    with Dispatcher(server, no_jitter()) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
    assert [op for op, _ in sent(server, "p1")] == ["bind", "bind"]
    assert gaps(server, "p1")[0] >= 0.4


def test_retry_after_is_capped_by_max_retry_after(server: InMemoryApiServer) -> None:
    """A Retry-After of an hour waits ``max_retry_after`` (0.2 s) only."""
    pod = server.create(make_pod("p1"))
    server.script("bind", TooManyRequestsError("slow down", retry_after=3600), name="p1")
    with Dispatcher(server, no_jitter(max_retry_after=0.2)) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
    assert sent(server, "p1") == [("bind", "TooManyRequests"), ("bind", "ok")]
    assert gaps(server, "p1")[0] >= 0.2


@pytest.mark.parametrize("replacement", ["a patch merged in", "a binding superseding it"])
def test_a_call_that_replaces_one_backing_off_waits_out_its_retry_after(
    server: InMemoryApiServer, replacement: str
) -> None:
    """concepts.md: only that object waits, and a call that replaces the one backing off
    waits it out too (a preemption doing so: tests/integration/test_core_promises.py)."""
    pod = server.create(make_pod("p1"))
    server.script("patch_status", TooManyRequestsError("slow down", retry_after=0.5), name="p1")
    with Dispatcher(server, no_jitter()) as d:
        patch = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        server.wait_for_request("patch_status")
        if replacement == "a patch merged in":
            later = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n2"))
        else:
            later = d.submit(PodBinding.for_pod(pod, "n2"))
        assert later.result(10) is Outcome.SUCCESS
        assert patch.result(10) is Outcome.OVERWRITTEN
    first, *rest = [r for r in server.request_log if r.name == "p1"]
    assert (first.op, first.outcome) == ("patch_status", "TooManyRequests")
    assert rest and all(r.t - first.t >= 0.5 for r in rest), [(r.op, r.t - first.t) for r in rest]


# --------------------------------------------------------------------------- the budget


def test_the_budget_runs_from_the_first_failure_and_no_attempt_starts_after_it(
    server: InMemoryApiServer,
) -> None:
    """Each attempt takes 0.125 s and fails (500), the budget is 0.45 s: the first failure is
    at 0.125 s, so the attempts starting at 0.125, 0.25, 0.375 and 0.5 s go (four retries,
    five requests) and the one at 0.625 s would start past the budget: ``CallFailed``."""
    clock = ManualClock(1000.0)
    pod = server.create(make_pod("p1"))
    server.script("bind", *["500"] * 20, name="p1")
    backend = OnTheWire(server, clock, "bind")
    with Dispatcher(backend, no_jitter(budget=0.45), clock=clock) as d:
        failed = d.submit(PodBinding.for_pod(pod, "n1")).exception(10)
    assert isinstance(failed, CallFailed) and isinstance(failed.cause, ServerError), failed
    assert sent(server, "p1") == [("bind", "500")] * 5


def test_a_merge_never_extends_the_retry_budget(server: InMemoryApiServer) -> None:
    """A patch keeps meeting 500s; a second patch of the pod arrives during its third attempt
    and is merged in. The merged call gives up when the first one's budget ends (after the
    fifth attempt, as above), not a budget later."""
    clock = ManualClock(1000.0)
    pod = server.create(make_pod("p1"))
    server.script("patch_status", *["500"] * 20, name="p1")
    backend = OnTheWire(server, clock, "patch_status", pause_at=3)
    with Dispatcher(backend, no_jitter(budget=0.45), clock=clock) as d:
        first = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        assert backend.arrived.wait(10)  # the third attempt, on the wire
        second = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n2"))
        assert d.view(pod["metadata"]["uid"]) is not None  # the second call was admitted
        backend.go()
        assert first.result(10) is Outcome.OVERWRITTEN
        failed = second.exception(10)
    assert isinstance(failed, CallFailed), failed
    assert [op for op, _ in sent(server, "p1")].count("patch_status") == 5


def test_a_conflict_whose_re_read_times_out_is_not_read_back(server: InMemoryApiServer) -> None:
    """docs/concepts.md, "Every situation": the read-back is for a call one of whose writes
    went unanswered. A 409 is an answer, and the GET after it writes nothing, so when that GET
    times out and the retries run out, the call fails with no read of the pod."""
    pod = server.create(make_pod("p1"))
    server.script("patch_status", "409", name="p1")
    server.script("get", "timeout", name="p1")
    with Dispatcher(server, no_jitter(max_attempts=1)) as d:
        error = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1")).exception(10)
    assert isinstance(error, CallFailed) and isinstance(error.cause, RequestTimeoutError)
    assert [(r.op, r.outcome) for r in server.request_log] == [
        ("patch_status", "409"),
        ("get", "timeout"),
    ]
