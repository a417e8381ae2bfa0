"""Fault and latency injection of the in-memory apiserver (kdispatch.testing.memory_faults):
scripted and seeded random faults, "applied, then failed", injected sleeps, validation."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from kdispatch import (
    ApiConnectionError,
    ApiError,
    ConflictError,
    InvalidInputError,
    InvalidRequestError,
    NotFoundError,
    RequestTimeoutError,
    ServerError,
    TooManyRequestsError,
)
from kdispatch.testing import OPS, FaultPlan, InMemoryApiServer, Latency, make_pod
from kdispatch.testing.memory import Watch
from tests.memory_server import drain, patch, rv, uid

pytestmark = pytest.mark.timeout(30)


class SleepRecorder:
    """Injected ``sleep``: records the requested waits, never sleeps."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self._lock:
            self.calls.append(seconds)


# ----------------------------------------------------------------------------- scripted faults


def test_scripted_faults_fire_in_order(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    server.script("patch_status", "429", "500", "timeout", "conn_reset", "404", "409")
    expected: list[type[ApiError]] = [
        TooManyRequestsError,
        ServerError,
        RequestTimeoutError,
        ApiConnectionError,
        NotFoundError,
        ConflictError,
    ]
    for err_type in expected:
        with pytest.raises(err_type) as info:
            patch(server, pod, {"phase": "Running"})
        assert type(info.value) is err_type
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and rv(stored) == rv(pod), "plain faults apply nothing"
    assert patch(server, pod, {"phase": "Running"})["status"]["phase"] == "Running"
    assert server.fault_counts() == {
        "429": 1,
        "500": 1,
        "timeout": 1,
        "conn_reset": 1,
        "404": 1,
        "409": 1,
    }
    assert [r.outcome for r in server.request_log] == [
        "429",
        "500",
        "timeout",
        "conn_reset",
        "404",
        "409",
        "ok",
    ]
    assert server.pending_faults() == 0


def test_scripted_429_carries_retry_after() -> None:
    server = InMemoryApiServer(faults=FaultPlan(retry_after=1.5))
    pod = server.create(make_pod("p1"))
    server.script("bind", "429")
    with pytest.raises(TooManyRequestsError) as info:
        server.bind("default", "p1", uid=uid(pod), node="n1")
    assert info.value.retry_after == 1.5


def test_scripted_fault_by_name_and_instance(server: InMemoryApiServer) -> None:
    a = server.create(make_pod("a"))
    b = server.create(make_pod("b"))
    server.script("bind", InvalidRequestError("forbidden", status=403), name="b")
    server.bind("default", "a", uid=uid(a), node="n1")  # not the scripted name
    with pytest.raises(InvalidRequestError) as info:
        server.bind("default", "b", uid=uid(b), node="n1")
    assert info.value.status == 403
    server.bind("default", "b", uid=uid(b), node="n1")
    assert server.fault_counts() == {"Invalid": 1}


def test_scripted_get_fault(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    server.script("get", "500")
    with pytest.raises(ServerError):
        server.get("Pod", "default", "p1")
    assert server.get("Pod", "default", "p1")["metadata"]["name"] == "p1"
    assert server.counts() == {
        "bind": 0,
        "create": 0,
        "delete": 0,
        "evict": 0,
        "get": 1,
        "patch": 0,
        "patch_status": 0,
    }


def test_apply_then_fail_applies(
    server: InMemoryApiServer, pod: dict[str, Any], pod_watch: Watch
) -> None:
    server.script("bind", "apply_then_fail")
    with pytest.raises(RequestTimeoutError):
        server.bind("default", "p1", uid=uid(pod), node="n1")
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"
    assert [e.type for e in drain(pod_watch)] == ["MODIFIED"]
    # the retry meets the binding that landed
    with pytest.raises(ConflictError, match='"n1"'):
        server.bind("default", "p1", uid=uid(pod), node="n1")
    server.script("delete", "apply_then_fail")
    with pytest.raises(RequestTimeoutError):
        server.delete("Pod", "default", "p1", uid=uid(pod))
    assert server.get_object("Pod", "default", "p1") is None
    assert server.counts()["bind"] == 0 and server.counts()["delete"] == 0
    assert server.fault_counts() == {"apply_then_fail": 2}


def test_apply_then_fail_on_a_rejected_request_still_times_out(
    server: InMemoryApiServer, pod: dict[str, Any]
) -> None:
    server.script("delete", "apply_then_fail")
    with pytest.raises(RequestTimeoutError):
        server.delete("Pod", "default", "p1", uid="other")
    assert server.get_object("Pod", "default", "p1") is not None


def test_script_rejects_bad_input(server: InMemoryApiServer) -> None:
    with pytest.raises(InvalidInputError):
        server.script("watch", "500")
    with pytest.raises(InvalidInputError):
        server.script("bind", "418")
    assert server.pending_faults() == 0


def test_the_admin_surface_has_neither_faults_nor_latency_nor_a_log() -> None:
    """The admin surface tests set things up with (``create(obj)``, ``update``,
    ``get_object``, ``list``, ``watch``) has neither faults nor latency, and leaves no
    request record: a fault scripted for every op, ``create`` too, stays pending."""
    sleep = SleepRecorder()
    server = InMemoryApiServer(latency=Latency(fixed=1.0), sleep=sleep)
    for op in sorted(OPS):
        server.script(op, "500")
    pod = server.create(make_pod("web-1"))
    pod["metadata"]["labels"] = {"app": "web"}
    server.update(pod)
    assert server.get_object("Pod", "default", "web-1") is not None
    assert len(server.list("Pod").items) == 1
    w = server.watch("Pod", resource_version="0")
    try:
        assert w.next(timeout=5.0) is not None
    finally:
        w.stop()
    assert sleep.calls == []
    assert server.pending_faults() == len(OPS)
    assert server.request_log == [] and server.fault_counts() == {}


# ----------------------------------------------------------------------------- random faults


def _random_run(seed: int, n: int = 60) -> list[str]:
    server = InMemoryApiServer(faults=FaultPlan(rate=0.5), seed=seed)
    pod = server.create(make_pod("p1"))
    for i in range(n):
        with contextlib.suppress(ApiError):
            patch(server, pod, {"i": i})
        server.get("Pod", "default", "p1")  # not in the plan's ops: never faults
    return [r.outcome for r in server.request_log if r.op == "patch_status"]


def test_random_faults_are_seeded() -> None:
    first, again, other = _random_run(7), _random_run(7), _random_run(8)
    assert first == again
    assert first != other
    faults = [o for o in first if o != "ok"]
    assert 10 < len(faults) < 50
    assert set(faults) == {"429", "500", "timeout", "apply_then_fail"}


def test_random_fault_weights_and_ops() -> None:
    plan = FaultPlan(rate=1.0, weights={"conn_reset": 1}, ops=frozenset({"get"}))
    server = InMemoryApiServer(faults=plan)
    pod = server.create(make_pod("p1"))
    for _ in range(3):
        with pytest.raises(ApiConnectionError):
            server.get("Pod", "default", "p1")
    patch(server, pod, {"phase": "Running"})
    assert server.fault_counts() == {"conn_reset": 3}


def test_scripted_before_random() -> None:
    server = InMemoryApiServer(faults=FaultPlan(rate=1.0, weights={"500": 1}))
    pod = server.create(make_pod("p1"))
    server.script("bind", "409")
    with pytest.raises(ConflictError):
        server.bind("default", "p1", uid=uid(pod), node="n1")
    with pytest.raises(ServerError):
        server.bind("default", "p1", uid=uid(pod), node="n1")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 1.5},
        {"rate": -0.1},
        {"rate": 0.5, "weights": {"500": 0}},
        {"weights": {"418": 1}},
        {"retry_after": -1},
        {"ops": frozenset({"watch"})},
        {"ops": "bind"},
    ],
)
def test_fault_plan_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        FaultPlan(**kwargs)


# ----------------------------------------------------------------------------- latency


def test_latency_uses_injected_sleep() -> None:
    sleep = SleepRecorder()
    latency = Latency(fixed=0.02, per_op={"bind": 0.5, "get": 0.0})
    server = InMemoryApiServer(latency=latency, sleep=sleep)
    pod = server.create(make_pod("p1"))  # admin: no latency
    server.get_object("Pod", "default", "p1")
    assert sleep.calls == []
    patch(server, pod, {"phase": "Running"})
    server.bind("default", "p1", uid=uid(pod), node="n1")
    server.get("Pod", "default", "p1")  # per_op 0 overrides fixed: no sleep
    server.delete("Pod", "default", "p1", uid=uid(pod))
    assert sleep.calls == [0.02, 0.5, 0.02]


def test_latency_is_waited_on_the_calling_thread_outside_the_servers_lock() -> None:
    """The wait happens on the calling thread, outside the server's lock: while it waits,
    another thread reads the server (which takes the lock) and gets its answer."""
    seen: dict[str, Any] = {}
    servers: list[InMemoryApiServer] = []

    def sleep(_seconds: float) -> None:
        seen["thread"] = threading.current_thread()
        read: Future[str] = Future()
        reader = threading.Thread(
            target=lambda: read.set_result(servers[0].resource_version), name="reader"
        )
        reader.start()
        try:
            seen["rv"] = read.result(timeout=10)
        finally:
            reader.join(10)

    server = InMemoryApiServer(latency=Latency(fixed=0.5), sleep=sleep)
    servers.append(server)
    server.create(make_pod("p1"))
    server.get("Pod", "default", "p1")
    assert seen["thread"] is threading.current_thread()
    assert seen["rv"] == server.resource_version


def test_latency_jitter_is_seeded_and_bounded() -> None:
    def run(seed: int) -> list[float]:
        sleep = SleepRecorder()
        server = InMemoryApiServer(
            latency=Latency(fixed=0.01, jitter=0.005), seed=seed, sleep=sleep
        )
        for _ in range(20):
            server.get_object("Pod", "default", "x")
            with pytest.raises(NotFoundError):
                server.get("Pod", "default", "x")
        return sleep.calls

    first = run(3)
    assert first == run(3) != run(4)
    assert all(0.01 <= s <= 0.015 for s in first)
    assert len(set(first)) == len(first)


def test_latency_applies_to_faulted_requests() -> None:
    sleep = SleepRecorder()
    server = InMemoryApiServer(latency=Latency(fixed=0.1), sleep=sleep)
    pod = server.create(make_pod("p1"))
    server.script("bind", "500")
    with pytest.raises(ServerError):
        server.bind("default", "p1", uid=uid(pod), node="n1")
    assert sleep.calls == [0.1]


@pytest.mark.parametrize(
    "kwargs",
    [{"fixed": -1}, {"jitter": float("inf")}, {"per_op": {"watch": 1}}, {"per_op": {"get": -1}}],
)
def test_latency_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        Latency(**kwargs)


def test_server_validation() -> None:
    with pytest.raises(InvalidInputError):
        InMemoryApiServer(history=-1)
    with pytest.raises(InvalidInputError):
        InMemoryApiServer(seed="x")  # type: ignore[arg-type]
