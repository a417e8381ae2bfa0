"""Retries ride out an outage, not just a fault: a 3-second apiserver restart over real HTTP,
Retry-After on a 503, and a budget that ends in ``CallFailed`` when the server stays away."""

from __future__ import annotations

import math
import time

import pytest

from kdispatch import DispatcherConfig, ExecutorConfig, RateLimitConfig, RetryConfig
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.errors import ApiConnectionError, CallFailed, Outcome, ServerError
from kdispatch.actors.model.objects import get_path
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from kdispatch.testing.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


def test_bindings_ride_out_a_three_second_apiserver_restart() -> None:
    """Connection refused for 3 s, then the same apiserver is back on the same port: every
    binding lands exactly once and no future fails (default retry policy)."""
    mem = InMemoryApiServer()
    pods = [mem.create(make_pod(f"p{i}")) for i in range(40)]
    http = ApiServerHTTP(mem).start()
    port = int(http.url.rsplit(":", 1)[1])
    backend = KubernetesBackend.for_url(http.url, workers=8, request_timeout=2.0)
    config = DispatcherConfig(executor=ExecutorConfig(workers=8))  # default retry policy
    restarted: ApiServerHTTP | None = None
    try:
        with Dispatcher(backend, config) as d:
            http.stop()  # the apiserver goes away
            down_at = time.monotonic()
            futures = [d.submit(PodBinding.for_pod(p, "n1")) for p in pods]
            # the outage is real: the executor keeps meeting refused connections
            wait_for(
                lambda: (
                    d.metrics.value(
                        "kdispatch_retries_total", call_type="pod_binding", reason="connection"
                    )
                    >= 40
                ),
                10,
                "40 retries after refused connections",
            )
            remaining = 3.0 - (time.monotonic() - down_at)
            if remaining > 0:
                time.sleep(remaining)  # the outage's length, not a synchronisation
            restarted = ApiServerHTTP(mem, port=port).start()
            assert [f.result(timeout=60) for f in futures] == [Outcome.SUCCESS] * len(pods)
    finally:
        backend.close()
        if restarted is not None:
            restarted.stop()
        http.stop()
    for p in pods:
        stored = mem.get_object("Pod", "default", p["metadata"]["name"])
        assert get_path(stored, "spec", "nodeName") == "n1"
    binds = [r for r in mem.request_log if r.op == "bind" and r.outcome == "ok"]
    assert len(binds) == len(pods)  # exactly once each


def test_retry_after_on_503_is_waited_for() -> None:
    mem = InMemoryApiServer()
    pod = mem.create(make_pod("p1"))
    mem.script("patch_status", ServerError("apiserver is restarting", retry_after=0.5), name="p1")
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf, burst=1),
        retry=RetryConfig(base_backoff=0.001, max_backoff=0.001),
    )
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    with Dispatcher(mem, config) as d:
        assert (
            d.submit(PodStatusPatch.for_pod(pod, conditions=[cond])).result(10) is Outcome.SUCCESS
        )
    tries = [r for r in mem.request_log if r.name == "p1"]
    # the 503, a re-read before the retry (the patch may have applied), then the patch
    assert [(r.op, r.outcome) for r in tries] == [
        ("patch_status", "InternalError"),
        ("get", "ok"),
        ("patch_status", "ok"),
    ]
    assert tries[1].t - tries[0].t >= 0.5


class _Refusing:
    """A backend whose server never answers."""

    def get(self, *a: object, **k: object) -> dict[str, object]:
        raise ApiConnectionError("connection refused")

    def patch_status(self, *a: object, **k: object) -> dict[str, object]:
        raise ApiConnectionError("connection refused")

    def bind(self, *a: object, **k: object) -> None:
        raise ApiConnectionError("connection refused")

    def delete(self, *a: object, **k: object) -> None:
        raise ApiConnectionError("connection refused")


def test_budget_ends_in_call_failed_when_the_server_stays_away() -> None:
    pod = make_pod("p1", uid="uid-p1")
    config = DispatcherConfig(retry=RetryConfig(budget=0.3, base_backoff=0.01, max_backoff=0.05))
    with Dispatcher(_Refusing(), config) as d:
        future = d.submit(PodBinding.for_pod(pod, "n1"))
        with pytest.raises(CallFailed) as info:
            future.result(timeout=10)
    assert isinstance(info.value.cause, ApiConnectionError)
    assert "retry budget" in str(info.value)


def test_retry_delay_policy() -> None:
    retry = RetryConfig(base_backoff=0.005, max_backoff=2.0, jitter=0.2, max_retry_after=30.0)
    assert retry.delay(1) == 0.005
    assert retry.delay(4) == 0.04
    assert retry.delay(20) == 2.0  # capped
    assert 2.0 <= retry.delay(20, rand=0.99) < 2.4  # jitter stretches by up to 20 %
    assert retry.delay(1, retry_after=3.0) == 3.0  # at least Retry-After
    assert retry.delay(1, retry_after=3600.0) == 30.0  # Retry-After is capped
