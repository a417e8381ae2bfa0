"""``pod_eviction``: pods/eviction through the dispatcher, honouring PodDisruptionBudgets.

Checked on the server: which pods are gone, and which requests it answered how."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kdispatch import PodEviction
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallFailed,
    DisruptionBudgetError,
    InvalidCallError,
    InvalidInputError,
    Outcome,
)
from kdispatch.actors.model.pod_calls import PodStatusPatch
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_pdb, make_pod
from tests.backends import GatedBackend, T, WrappedBackend
from tests.configs import fast
from tests.factories import ready_pod

pytestmark = pytest.mark.timeout(60)

BACKOFF = {"base_backoff": 0.001, "max_backoff": 0.005}
CONFIG = fast(max_attempts=4, **BACKOFF)


def _evictions(server: InMemoryApiServer) -> list[tuple[str, str]]:
    return [(r.name, r.outcome) for r in server.request_log if r.op == "evict"]


class FreesAfter(WrappedBackend):
    """Forwards to the server; after ``n`` PDB refusals, a third ready pod appears, so the
    budget allows one disruption again. Executor worker threads."""

    def __init__(self, server: InMemoryApiServer, n: int) -> None:
        super().__init__(server)
        self.server, self.n, self.refusals = server, n, 0

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        try:
            return send()
        except DisruptionBudgetError:
            self.refusals += 1
            if self.refusals == self.n:
                ready_pod(self.server, "spare")
            raise


def test_eviction_deletes_the_pod_when_the_budget_allows(server: InMemoryApiServer) -> None:
    a = ready_pod(server, "a")
    ready_pod(server, "b")
    server.create(make_pdb("web", match_labels={"app": "web"}, max_unavailable=1))
    with Dispatcher(server, CONFIG) as d:
        assert d.submit(PodEviction.for_pod(a)).result(timeout=10) is Outcome.SUCCESS
    assert server.get_object("Pod", "default", "a") is None
    assert server.get_object("Pod", "default", "b") is not None
    assert _evictions(server) == [("a", "ok")]


def test_a_pdb_refusal_is_retried_until_the_budget_frees(server: InMemoryApiServer) -> None:
    a, _ = ready_pod(server, "a"), ready_pod(server, "b")
    server.create(make_pdb("web", match_labels={"app": "web"}, min_available=2))
    backend = FreesAfter(server, 2)
    with Dispatcher(backend, CONFIG) as d:
        assert d.submit(PodEviction.for_pod(a)).result(timeout=10) is Outcome.SUCCESS
    assert server.get_object("Pod", "default", "a") is None
    assert _evictions(server) == [("a", "DisruptionBudget")] * 2 + [("a", "ok")]


def test_a_budget_that_never_frees_fails_typed(server: InMemoryApiServer) -> None:
    a = ready_pod(server, "a")
    server.create(make_pdb("web", match_labels={"app": "web"}, min_available=1))
    with Dispatcher(server, CONFIG) as d:
        exc = d.submit(PodEviction.for_pod(a)).exception(timeout=10)
    assert isinstance(exc, CallFailed)
    assert isinstance(exc.cause, DisruptionBudgetError)
    assert server.get_object("Pod", "default", "a") is not None  # the budget held
    assert _evictions(server) == [("a", "DisruptionBudget")] * 4  # CONFIG.retry.max_attempts


def test_eviction_cancels_the_pods_pending_calls(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("a"))
    backend = GatedBackend(server, hold="a")
    with Dispatcher(backend, CONFIG) as d:
        try:
            first = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
            backend.wait_calls(1)  # in flight, held at the gate
            cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            pending = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond]))
            eviction = d.submit(PodEviction.for_pod(pod))
            with pytest.raises(CallCancelled):
                pending.result(timeout=10)
        finally:
            backend.gate.set()
        assert first.result(timeout=10) is Outcome.SUCCESS  # in flight: cannot be recalled
        assert eviction.result(timeout=10) is Outcome.SUCCESS
    assert [op for op, _ in backend.calls] == ["patch_status", "evict"]  # never the 2nd patch
    assert server.get_object("Pod", "default", "a") is None


def test_eviction_over_http_with_the_official_client(server: InMemoryApiServer) -> None:
    a = ready_pod(server, "a")
    server.create(make_pdb("web", match_labels={"app": "web"}, min_available=1))
    with (
        ApiServerHTTP(server) as srv,
        KubernetesBackend.for_url(srv.url) as backend,
        Dispatcher(backend, CONFIG) as d,
    ):
        exc = d.submit(PodEviction.for_pod(a, grace_period_seconds=0)).exception(timeout=10)
        assert isinstance(exc, CallFailed) and isinstance(exc.cause, DisruptionBudgetError)
        ready_pod(server, "b")
        assert d.submit(PodEviction.for_pod(a)).result(timeout=10) is Outcome.SUCCESS
    assert server.get_object("Pod", "default", "a") is None


def test_bad_eviction_input_is_refused_at_the_call_site(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("a"))
    with pytest.raises(InvalidCallError):
        PodEviction.for_pod(pod, grace_period_seconds=-1)
    claim = {"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "d", "uid": "u"}}
    with pytest.raises(InvalidInputError):  # InvalidObjectError: not a Pod
        PodEviction.for_pod(claim)


def test_a_pdb_refusal_is_retried_within_the_time_budget(server: InMemoryApiServer) -> None:
    a, _ = ready_pod(server, "a"), ready_pod(server, "b")
    server.create(make_pdb("web", match_labels={"app": "web"}, min_available=2))
    backend = FreesAfter(server, 12)  # more refusals than any attempt count used to allow
    with Dispatcher(backend, fast(budget=30.0, **BACKOFF)) as d:
        assert d.submit(PodEviction.for_pod(a)).result(timeout=30) is Outcome.SUCCESS
    assert server.get_object("Pod", "default", "a") is None
