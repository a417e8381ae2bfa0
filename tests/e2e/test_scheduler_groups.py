"""The scheduler example's ordered operations, checked on the apiserver's request log: a pod's
claim reservations land before its binding even when a claim write is retried, a deleted pod's
pending claim writes and binding are never sent, a preemptor's nomination precedes each victim's
DELETE, and a pod whose binding keeps failing is reported unschedulable instead of holding the
run until its deadline. The async mode uses kdispatch call groups; ``--pre-kep`` (and the other
modes without groups) chains the same steps with done-callbacks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from examples.scheduler.api import DispatchedApi
from examples.scheduler.cycle import SCHEDULER_ERROR, Phase, Scheduler, SchedulerConfig
from examples.scheduler.runner import run
from examples.scheduler.steps import ChainedSteps
from kdispatch import (
    CallCancelled,
    CallFailed,
    DependencyFailed,
    Dispatcher,
    DispatcherConfig,
    InvalidRequestError,
    Outcome,
    PodStatusPatch,
    RateLimitConfig,
)
from kdispatch.testing import FaultPlan, InMemoryApiServer, RequestRecord, make_claim, make_pod
from kdispatch.testing.httpserver import ApiServerHTTP
from tests.clocks import ManualClock
from tests.e2e.test_scheduler_example import FakeApi, config_for, node
from tests.e2e.test_scheduler_peer import _pod

pytestmark = pytest.mark.timeout(90)

MODES = [
    pytest.param({"api": "async"}, id="async"),
    pytest.param({"api": "async", "dispatcher_process": True}, id="async-process"),
    pytest.param({"api": "pre-kep"}, id="pre-kep"),
    pytest.param({"api": "all-blocking"}, id="all-blocking"),
]
"""The async mode orders steps by call groups, the other three by :class:`ChainedSteps`."""


def _log(mem: InMemoryApiServer) -> list[RequestRecord]:
    return list(mem.request_log)


def _first(log: list[RequestRecord], op: str, name: str, outcome: str = "ok") -> int:
    return next(i for i, r in enumerate(log) if (r.op, r.name, r.outcome) == (op, name, outcome))


@pytest.mark.parametrize("mode", MODES)
def test_claims_are_reserved_before_the_binding_also_when_a_claim_write_is_retried(
    tmp_path: Path, mode: dict[str, Any]
) -> None:
    mem = InMemoryApiServer(faults=FaultPlan(retry_after=0.02))
    mem.create(node("n0", gpus=4))
    pods = [f"p{i}" for i in range(4)]
    for name in pods:
        mem.create(make_claim(f"{name}-gpu"))
        mem.create(_pod(name, cpu=100, claims=[f"{name}-gpu"]))
        mem.script("patch_status", "429", "500", "429", name=f"{name}-gpu")
    with ApiServerHTTP(mem) as srv:
        fig = run(config_for(tmp_path, srv.url, workers=4, **mode), stream=None)
    assert fig["stopped_by"] == "done" and fig["verdict_ok"], fig["verdict"]
    assert fig["pods_bound"] == len(pods)
    log = _log(mem)
    for name in pods:
        claim = f"{name}-gpu"
        faults = [r.outcome for r in log if r.name == claim and r.op == "patch_status"]
        assert faults[:3] == ["429", "500", "429"]  # retried ...
        reserved = _first(log, "patch_status", claim)
        assert _first(log, "bind", name) > reserved  # ... and still before the binding
        pod = mem.get_object("Pod", "default", name)
        landed = mem.get_object("ResourceClaim", "default", claim)
        assert pod is not None and landed is not None
        assert [r["uid"] for r in landed["status"]["reservedFor"]] == [pod["metadata"]["uid"]]


def test_a_deleted_pods_pending_claim_writes_and_binding_are_never_sent() -> None:
    mem = InMemoryApiServer(faults=FaultPlan(retry_after=2.0))  # the 429 says: retry in 2 s
    n0 = mem.create(node("n0", gpus=2))
    claim = mem.create(make_claim("p-gpu"))
    other = mem.create(make_claim("p-gpu2"))
    pod = mem.create(make_pod("p", cpu_m=100, claims=["p-gpu", "p-gpu2"], uid="u-p"))
    mem.script("patch_status", "429", name="p-gpu")
    mem.script("patch_status", "429", name="p-gpu2")
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=math.inf, burst=1))
    with Dispatcher(mem, config) as dispatcher:
        api = DispatchedApi(dispatcher)
        sched = Scheduler(api, SchedulerConfig(threads=1))
        sched.on_node_add(n0)
        for obj in (claim, other):
            api.on_add(obj)
            sched.on_claim_add(obj)
        api.on_add(pod)
        sched.on_pod_add(pod)
        assert sched.step()  # the cycle: both claim writes go out, the binding is held
        for name in ("p-gpu", "p-gpu2"):
            mem.wait_for_request("patch_status", name=name)  # met its 429: waits 2 s
        assert [(r.op, r.outcome) for r in _log(mem)] == [("patch_status", "429")] * 2
        record = sched.record("u-p")
        assert record is not None and record.phase is Phase.BINDING

        gone = mem.remove("Pod", "default", "p")
        api.on_delete(gone)  # the informer's event: the pod's call group is cancelled
        sched.on_pod_delete(gone)
        assert sched.step(timeout=10)  # the binding's continuation
        assert sched.phase_counts()["gone"] == 1 and sched.errors == 0
        [bind] = [i for i in sched.tracker.snapshot() if i.kind == "bind"]
        assert isinstance(bind.future.exception(), CallCancelled)  # withdrawn, unsent
        intents = sched.tracker.snapshot()
        reserves = [i.future.exception() for i in intents if "reserve" in i.expect]
        assert len(reserves) == 2 and all(isinstance(e, CallCancelled) for e in reserves)
        releases = [i.future.result(timeout=5) for i in intents if "unreserve" in i.expect]
        assert releases == [Outcome.SKIPPED] * 2  # nothing landed: nothing to release
    sent = [(r.op, r.name, r.outcome) for r in _log(mem) if r.op != "get"]  # reads aside
    assert sent == [
        ("patch_status", "p-gpu", "429"),
        ("patch_status", "p-gpu2", "429"),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_the_nomination_precedes_every_victims_delete(tmp_path: Path, mode: dict[str, Any]) -> None:
    mem = InMemoryApiServer(faults=FaultPlan(retry_after=0.05))
    mem.create(node("n0", cpu=1000))
    victims = ["low-a", "low-b"]
    for name in victims:
        mem.create(_pod(name, cpu=450, node="n0"))
    mem.create(_pod("high", cpu=900, priority=100))
    mem.script("patch_status", "429", "500", name="high")  # the nomination is retried
    with ApiServerHTTP(mem) as srv:
        fig = run(config_for(tmp_path, srv.url, workers=4, **mode), stream=None)
    assert fig["stopped_by"] == "done" and fig["verdict_ok"], fig["verdict"]
    assert (fig["pods_bound"], fig["pods_preempted"]) == (1, 2)
    log = _log(mem)
    assert [r.outcome for r in log if r.name == "high" and r.op == "patch_status"][:2] == [
        "429",
        "500",
    ]
    nominated = _first(log, "patch_status", "high")
    for name in victims:
        touched = [i for i, r in enumerate(log) if r.name == name]
        assert touched and min(touched) > nominated
        assert _first(log, "delete", name) > nominated
    high = mem.get_object("Pod", "default", "high")
    assert high is not None and high["spec"]["nodeName"] == "n0"


def test_a_pod_whose_binding_keeps_failing_is_unschedulable_with_its_status() -> None:
    clock = ManualClock(100.0)
    api = FakeApi()
    sched = Scheduler(api, SchedulerConfig(threads=1, max_bind_failures=3), clock=clock)
    sched.on_node_add(node("n1", cpu=1000))
    obj = make_pod("p", cpu_m=100, uid="u-p")
    sched.on_pod_add(obj)
    for failures in range(1, 4):
        while not any(f for c, f in api.calls if c.call_type == "pod_binding" and not f.done()):
            if not sched.step():  # backing off
                clock.now += 100.0
        [(_, fut)] = [(c, f) for c, f in api.calls if c.call_type == "pod_binding" and not f.done()]
        fut.set_exception(CallFailed("refused", uid="u-p", call_type="pod_binding"))
        assert sched.step()  # the continuation
        record = sched.record("u-p")
        assert record is not None and record.bind_failures == failures
    assert sched.unschedulable() == ["default/p"] and sched.errors == 0
    [patch] = api.of_type("pod_status_patch")
    assert isinstance(patch, PodStatusPatch)
    [cond] = patch.conditions
    assert (cond["status"], cond["reason"]) == ("False", SCHEDULER_ERROR)
    assert cond["message"] == "binding rejected: refused"
    assert not sched.settled()  # until the server shows PodScheduled=False
    sched.on_pod_update(patch.apply(obj))
    assert sched.settled()
    assert sched.queue.counts()[:2] == (0, 1)  # backing off as an unschedulable pod


def test_a_batch_run_with_a_pod_that_never_binds_ends_on_its_own(tmp_path: Path) -> None:
    mem = InMemoryApiServer()
    mem.create(node("n0"))
    mem.create(_pod("ok", cpu=100))
    mem.create(_pod("stuck", cpu=100))
    refusals: list[Any] = [InvalidRequestError("binding refused")] * 200
    mem.script("bind", *refusals, name="stuck")
    with ApiServerHTTP(mem) as srv:
        config = config_for(
            tmp_path, srv.url, workers=2, backoff_initial=0.01, backoff_max=1.0, max_seconds=60
        )
        fig = run(config, stream=None)
    assert fig["stopped_by"] == "done" and fig["verdict_ok"], fig["verdict"]
    assert (fig["pods_bound"], fig["pods_unschedulable"]) == (1, 1)
    assert fig["unschedulable_pods"] == ["default/stuck"]
    stuck = mem.get_object("Pod", "default", "stuck")
    assert stuck is not None and stuck["spec"].get("nodeName") is None
    [cond] = [c for c in stuck["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"]) == ("False", SCHEDULER_ERROR)
    assert sum(1 for r in mem.request_log if r.op == "bind" and r.name == "stuck") >= 5


def test_chained_steps_send_a_held_call_only_after_its_prerequisites_succeeded() -> None:
    api = FakeApi()
    pod = make_pod("p", cpu_m=100, uid="u-p")
    with ChainedSteps(api) as steps:
        first = steps.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        held = steps.preempt(make_pod("v", uid="u-v"), preemptor="default/p", after=[first])
        failed = steps.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n2"))
        never = steps.preempt(make_pod("w", uid="u-w"), preemptor="default/p", after=[failed])
    assert [c.call_type for c, _ in api.calls] == ["pod_status_patch"] * 2
    api.calls[0][1].set_result(Outcome.SUCCESS)
    assert [c.ref.name for c in api.of_type("pod_preemption")] == ["v"]
    api.calls[-1][1].set_result(Outcome.SUCCESS)
    assert held.result(timeout=0) is Outcome.SUCCESS
    refused = CallFailed("no", uid="u-p", call_type="pod_status_patch")
    api.calls[1][1].set_exception(refused)
    error = never.exception(timeout=0)
    assert isinstance(error, DependencyFailed) and error.cause is refused
    assert [c.ref.name for c in api.of_type("pod_preemption")] == ["v"]  # "w" never sent

    steps = ChainedSteps(api)
    pending = steps.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n3"))
    dropped = steps.preempt(make_pod("x", uid="u-x"), preemptor="default/p", after=[pending])
    steps.cancel()
    api.calls[-1][1].set_result(Outcome.SUCCESS)
    assert isinstance(dropped.exception(timeout=0), DependencyFailed)
    assert [c.ref.name for c in api.of_type("pod_preemption")] == ["v"]


def test_the_api_layers_say_how_they_order_steps() -> None:
    mem = InMemoryApiServer()
    with Dispatcher(mem, DispatcherConfig()) as dispatcher:
        api = DispatchedApi(dispatcher)
        pod = mem.create(make_pod("p", uid="u-p"))
        group = api.group(pod)
        assert not isinstance(group, ChainedSteps)  # a kdispatch call group
        with group:
            pass
