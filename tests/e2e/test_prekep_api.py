"""The pre-KEP-5229 API layer (``--pre-kep``): status patches block the scheduling thread,
binding-cycle calls run on binding threads, and closing resolves every future exactly once."""

from __future__ import annotations

import threading

import pytest

from examples.scheduler.prekep import PreKepApi
from kdispatch.actors.model.claim_calls import ClaimStatusPatch
from kdispatch.actors.model.errors import DispatcherClosed, InvalidInputError, Outcome
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.testing.memory import InMemoryApiServer, make_claim, make_node, make_pod
from kdispatch.testing.waiting import poll
from tests.backends import GatedBackend

COND = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}


@pytest.fixture
def mem() -> InMemoryApiServer:
    """An apiserver with node n1."""
    server = InMemoryApiServer()
    server.create(make_node("n1", 4000, 8192))
    return server


@pytest.mark.timeout(10)
def test_status_patch_lands_before_submit_returns() -> None:
    mem = InMemoryApiServer()
    pod = mem.create(make_pod("p"))
    api = PreKepApi(mem, binding_threads=2)
    try:
        fut = api.submit(PodStatusPatch.for_pod(pod, conditions=[COND]))
        assert fut.done() and fut.result() is Outcome.SUCCESS
        stored = mem.get_object("Pod", "default", "p")
        assert stored is not None
        assert [c["reason"] for c in stored["status"]["conditions"]] == ["Unschedulable"]
    finally:
        assert api.close(drain=True, timeout=5)


@pytest.mark.timeout(10)
def test_binding_runs_on_a_binding_thread_while_the_caller_goes_on(mem: InMemoryApiServer) -> None:
    pod = mem.create(make_pod("p"))
    gated = GatedBackend(mem, hold="p")
    api = PreKepApi(gated, binding_threads=1)
    try:
        fut = api.submit(PodBinding.for_pod(pod, "n1"))
        assert gated.wait_calls(1) == [("bind", "p")]  # on the wire, held by the gate
        assert not fut.done() and api.outstanding() == 1
        stored = mem.get_object("Pod", "default", "p")
        assert stored is not None and stored["spec"].get("nodeName") is None
        resolved_on: list[str] = []
        fut.add_done_callback(lambda _f: resolved_on.append(threading.current_thread().name))
        gated.gate.set()
        assert fut.result(timeout=5) is Outcome.SUCCESS
        stored = mem.get_object("Pod", "default", "p")
        assert stored is not None and stored["spec"]["nodeName"] == "n1"
        assert resolved_on and resolved_on[0].startswith("binding")
    finally:
        gated.gate.set()
        assert api.close(drain=True, timeout=5)


@pytest.mark.timeout(10)
def test_close_without_drain_abandons_queued_calls_exactly_once(mem: InMemoryApiServer) -> None:
    first = mem.create(make_pod("first"))
    queued = mem.create(make_pod("queued"))
    claim = mem.create(make_claim("c"))
    gated = GatedBackend(mem, hold="first")
    api = PreKepApi(gated, binding_threads=1)
    running = api.submit(PodBinding.for_pod(first, "n1"))
    gated.wait_calls(1)  # the only binding thread is busy
    waiting = [
        api.submit(PodBinding.for_pod(queued, "n1")),
        api.submit(
            ClaimStatusPatch.for_claim(
                claim, reserve=[{"resource": "pods", "name": "x", "uid": "u"}]
            )
        ),
    ]
    calls: list[int] = []
    for fut in [running, *waiting]:
        fut.add_done_callback(lambda _f: calls.append(1))
    closer = threading.Thread(target=lambda: api.close(drain=False, timeout=5))
    closer.start()
    poll(lambda: api.closed, 5, interval=0.001)  # closing; close() itself may still block
    with pytest.raises(DispatcherClosed):
        api.submit(PodBinding.for_pod(queued, "n1"))
    gated.gate.set()  # the running call may finish; the queued ones never start
    closer.join(5)
    assert not closer.is_alive()
    assert running.result(timeout=5) is Outcome.SUCCESS
    for fut in waiting:
        with pytest.raises(DispatcherClosed):
            fut.result(timeout=5)
    assert len(calls) == 3 and api.outstanding() == 0
    stored = mem.get_object("Pod", "default", "queued")
    assert stored is not None and stored["spec"].get("nodeName") is None
    assert ("bind", "queued") not in gated.calls


def test_binding_threads_must_be_a_positive_int() -> None:
    with pytest.raises(InvalidInputError):
        PreKepApi(InMemoryApiServer(), binding_threads=0)
    with pytest.raises(InvalidInputError):
        PreKepApi(InMemoryApiServer(), binding_threads=True)
