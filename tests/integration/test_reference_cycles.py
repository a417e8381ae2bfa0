"""Failed requests leave no reference cycles behind: a request's error travels to its call's
future without the frames it passed through, so the memory of a failed attempt is freed when
the last reference goes, not by the cyclic garbage collector, and never kept for good by
``RuntimeConfig(gc_freeze=True)``, which freezes what the collector has not freed."""

from __future__ import annotations

import gc
import math
import threading
from collections.abc import Iterator
from concurrent.futures import wait
from contextlib import ExitStack
from typing import Any, Literal

import pytest
from kubernetes import client as k8s

from kdispatch import (
    DispatcherConfig,
    ExecutorConfig,
    KubernetesBackend,
    PodBinding,
    PodPreemption,
    PodStatusPatch,
    RateLimitConfig,
    RetryConfig,
)
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.errors import ServerError, without_tracebacks
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.adapters.kubernetes import prepare_configuration
from kdispatch.adapters.leader import ClientLeaseClient, ElectionConfig, LeaseElector
from kdispatch.testing import ApiServerHTTP, FaultPlan, InMemoryApiServer, make_node, make_pod

FAULTS = {
    "429": 1.0,
    "500": 1.0,
    "timeout": 1.0,
    "conn_reset": 1.0,
    "apply_then_fail": 1.0,
    "404": 0.3,
    "409": 1.0,
}
"""Every fault kind (fewer 404s: a 404 ends the call, the others are retried)."""


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cyclic collector off while the test runs (what it would free is what is counted);
    everything restored after."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def _ours_in_garbage() -> list[str]:
    """Collect, keeping the garbage: what in it is an error or a frame of this library."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    found = []
    for obj in gc.garbage:
        if isinstance(obj, BaseException):
            found.append(repr(obj))
        elif type(obj).__name__ == "frame" and obj.f_globals.get("__name__", "").startswith(
            "kdispatch"
        ):
            found.append(f"frame of {obj.f_code.co_qualname}")
    gc.set_debug(0)
    gc.garbage.clear()
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["memory", "lean", "client"])
def test_failed_requests_leave_no_reference_cycles(transport: str, no_collector: None) -> None:
    plan = FaultPlan(
        rate=0.5,
        weights=FAULTS,
        retry_after=0.0,
        ops=frozenset({"patch_status", "bind", "delete", "get"}),
    )
    mem = InMemoryApiServer(faults=plan, seed=3)
    mem.create(make_node("n1", 4000, 8192))
    pods = [mem.create(make_pod(f"p-{i}")) for i in range(60)]
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf),
        executor=ExecutorConfig(workers=4),
        retry=RetryConfig(max_attempts=3, budget=5.0),
    )
    with ExitStack() as stack:
        backend: Any = mem
        if transport != "memory":
            srv = stack.enter_context(ApiServerHTTP(mem))
            flavour: Literal["lean", "client"] = "lean" if transport == "lean" else "client"
            backend = KubernetesBackend.for_url(srv.url, transport=flavour, request_timeout=0.3)
            stack.callback(backend.close)
        dispatcher = Dispatcher(backend, config).start()
        stack.callback(dispatcher.stop, timeout=30)
        futures = []
        for i, pod in enumerate(pods):
            patch = PodStatusPatch.for_pod(pod, conditions=[{"type": "Ready", "status": "False"}])
            futures.append(dispatcher.submit(patch))
            last = PodBinding.for_pod(pod, "n1") if i % 3 else PodPreemption.for_pod(pod)
            futures.append(dispatcher.submit(last))
        assert not wait(futures, timeout=90).not_done
        failed = [f.exception() for f in futures if f.exception() is not None]
        assert failed  # the faults reached the calls: there were errors to carry
        del futures, failed, dispatcher
    mem_log = mem.request_log
    assert len(mem_log) > len(pods) * 2  # retries happened
    del mem_log
    assert _ours_in_garbage() == []


@pytest.mark.timeout(10)
def test_without_tracebacks_drops_the_whole_chain() -> None:
    def fail() -> None:
        try:
            raise OSError("connection reset")
        except OSError as exc:
            raise ServerError("500") from exc

    try:
        fail()
    except ServerError as caught:
        error = caught
    context = ValueError("while handling")
    assert error.__cause__ is not None
    error.__cause__.__context__ = context
    context.__context__ = error  # a loop in the chain ends the walk, not the process
    assert error.__traceback__ is not None and error.__cause__.__traceback__ is not None
    assert without_tracebacks(error) is error
    assert error.__traceback__ is None
    assert error.__cause__.__traceback__ is None
    assert str(error) == "500" and str(error.__cause__) == "connection reset"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["lean", "client"])
def test_failed_lists_and_watches_leave_no_reference_cycles(
    transport: Literal["lean", "client"], no_collector: None
) -> None:
    mem = InMemoryApiServer()
    mem.create(make_pod("p-0"))
    errors: list[str] = []
    enough = threading.Event()

    def on_error(error: BaseException) -> None:
        errors.append(type(error).__name__)
        if len(errors) >= 3:
            enough.set()

    with ExitStack() as stack:
        srv = stack.enter_context(ApiServerHTTP(mem, watch_poll=0.05))
        backend = KubernetesBackend.for_url(srv.url, transport=transport, request_timeout=1.0)
        stack.callback(backend.close)
        informer = Informer(
            ClientListWatch(backend, "Pod"),
            name="cycles",
            on_error=on_error,
            backoff_initial=0.01,
            backoff_max=0.05,
        )
        informer.start()
        stack.callback(informer.stop)
        assert informer.wait_for_sync(10)
        srv.stop()  # the server goes: the watch breaks, lists are refused
        assert enough.wait(30), errors
    del informer
    assert _ours_in_garbage() == []


@pytest.mark.timeout(60)
def test_failed_lease_requests_leave_no_reference_cycles(no_collector: None) -> None:
    mem = InMemoryApiServer()
    with ApiServerHTTP(mem) as srv:
        url = srv.url
    # the server is gone: every request of the election is refused, logged and dropped
    api = k8s.ApiClient(prepare_configuration(k8s.Configuration(host=url), 1))
    try:
        elector = LeaseElector(ClientLeaseClient(api), ElectionConfig("sched", identity="me"))
        for _ in range(3):
            elector.step()
        assert not elector.is_leader
    finally:
        api.close()  # type: ignore[no-untyped-call]
    del elector
    assert _ours_in_garbage() == []
