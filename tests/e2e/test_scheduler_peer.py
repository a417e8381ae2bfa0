"""The scheduler example as a peer of kube-scheduler, checked on the server: its Events
(Scheduled, FailedScheduling, Preempted), its queue (no attempt limit; a new node retries
unschedulable pods at once), the pre-KEP baseline's one client-side rate limit, and a report
that counts only its own pods."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples.scheduler.cycle import Phase, Scheduler, SchedulerConfig
from examples.scheduler.queue import SchedulingQueue
from examples.scheduler.runner import run
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_node, make_pod
from tests.clocks import ManualClock
from tests.e2e.test_scheduler_example import FakeApi, config_for

pytestmark = pytest.mark.timeout(90)

OURS = "kdispatch-example"


def _pod(name: str, *, cpu: int, priority: int = 0, node: str | None = None, **kw: Any) -> Any:
    obj = make_pod(name, cpu_m=cpu, priority=priority, uid=f"u-{name}", **kw)
    obj["spec"]["schedulerName"] = OURS
    if node is not None:
        obj["spec"]["nodeName"] = node
    return obj


def _events(mem: InMemoryApiServer) -> list[dict[str, Any]]:
    items = mem.list("Event").items
    return items


def test_events_on_the_server(tmp_path: Path) -> None:
    """Scheduled for every pod bound, FailedScheduling for the pod that fits nowhere and for
    the preemptor, Preempted on the victim (related to the preemptor), as kube-scheduler
    records them; the unfit pod's PodScheduled=False is on the server when the run ends."""
    mem = InMemoryApiServer()
    mem.create(make_node("n0", 1000, 4096))
    mem.create(_pod("low", cpu=800, node="n0"))  # bound before we start: a victim
    mem.create(_pod("high", cpu=600, priority=100))
    mem.create(_pod("small", cpu=100))
    mem.create(_pod("huge", cpu=100_000))
    with ApiServerHTTP(mem) as srv:
        fig = run(config_for(tmp_path, srv.url, workers=4), stream=None)
    assert fig["stopped_by"] == "done" and fig["verdict_ok"], fig["verdict"]
    assert (fig["pods_bound"], fig["pods_unschedulable"], fig["pods_preempted"]) == (2, 1, 1)
    events = _events(mem)
    by = Counter((e["regarding"]["name"], e["reason"]) for e in events)
    assert by[("high", "Scheduled")] == 1 and by[("small", "Scheduled")] == 1
    assert by[("huge", "FailedScheduling")] == 1  # its repeats are one Event's series
    assert by[("high", "FailedScheduling")] >= 1  # the cycle that preempted
    assert by[("low", "Preempted")] == 1
    for e in events:
        assert e["apiVersion"] == "events.k8s.io/v1"
        assert e["reportingController"] == OURS
        assert e["reportingInstance"].startswith(f"{OURS}-")
        assert (e["type"], e["action"]) == {
            "Scheduled": ("Normal", "Binding"),
            "FailedScheduling": ("Warning", "Scheduling"),
            "Preempted": ("Normal", "Preempting"),
        }[e["reason"]]
    [scheduled] = [
        e for e in events if e["reason"] == "Scheduled" and e["regarding"]["name"] == "high"
    ]
    assert scheduled["note"] == "Successfully assigned default/high to n0"
    [preempted] = [e for e in events if e["reason"] == "Preempted"]
    assert preempted["note"] == "Preempted by pod u-high on node n0"
    assert preempted["related"]["name"] == "high"
    [failed] = [e for e in events if e["regarding"]["name"] == "huge"]
    assert failed["note"].startswith("0/1 nodes are available: 1 Insufficient cpu")
    huge = mem.get_object("Pod", "default", "huge")
    assert huge is not None
    [cond] = [c for c in huge["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")


def test_unschedulable_pods_wait_for_cluster_events_and_are_retried_without_limit() -> None:
    """Like kube-scheduler's unschedulable pods: a pod that nothing fit is not retried on a
    timer of seconds but when a cluster event may make it fit, or after
    ``unschedulable_max`` (podMaxInUnschedulablePodsDuration), every time."""
    clock = ManualClock(100.0)
    api = FakeApi()
    sched = Scheduler(api, SchedulerConfig(threads=1), clock=clock)
    sched.on_node_add(make_node("n1", 1000, 4096))
    sched.on_pod_add(make_pod("big", cpu_m=2000, uid="u-big"))
    sched.on_pod_add(make_pod("odd", cpu_m=100, uid="u-odd", node_selector={"zone": "x"}))
    waits = []
    for _ in range(12):  # far beyond the old limit of 5 attempts
        while sched.step():
            pass
        record = sched.record("u-big")
        assert record is not None and record.phase is Phase.UNSCHEDULABLE
        due = min(e[0] for e in sched.queue._backoff) - clock.now
        waits.append(round(due, 3))
        clock.now += due
    assert set(waits) == {300.0}
    assert len(api.of_type("pod_status_patch")) >= 12  # PodScheduled=False every cycle
    assert len(api.of_type("event_record")) >= 12  # one FailedScheduling occurrence each
    sched.on_node_update(make_node("n1", 1000, 4096))  # nothing changed: nobody moves
    assert sched.queue.counts()[:2] == (0, 2)
    while sched.step():
        pass
    assert sched.queue.counts()[:2] == (0, 2)  # both wait
    # a bound pod deleted frees room: retries the pod that lacked cpu, not the one whose
    # selector no node matches
    gone = make_pod("gone", cpu_m=100, uid="u-gone")
    gone["spec"]["nodeName"] = "n1"
    sched.on_pod_delete(gone)
    assert sched.queue.counts()[:2] == (1, 1)
    while sched.step():
        pass
    # a node added retries both at once, without waiting out the backoff
    sched.on_node_add(make_node("n2", 4000, 4096, {"zone": "x"}))
    assert sched.queue.counts()[:2] == (2, 0)
    while sched.step():
        pass
    bound = {c.ref.name: c.node for c in api.of_type("pod_binding")}  # type: ignore[attr-defined]
    assert bound == {"big": "n2", "odd": "n2"}


def test_queue_move_unschedulable_only_moves_what_the_event_may_help() -> None:
    clock = ManualClock(100.0)
    q = SchedulingQueue(clock)
    q.backoff("cpu", 0, 5.0, unschedulable=True, on_pod_delete=True)
    q.backoff("selector", 0, 5.0, unschedulable=True, on_pod_delete=False)
    q.backoff("bind-failure", 0, 5.0)
    assert q.move_unschedulable(pod_deleted=True) == 1
    assert q.pop(0) == "cpu"
    assert q.move_unschedulable(pod_deleted=False) == 1
    assert q.pop(0) == "selector"
    assert q.pop(0) is None  # the binding failure still backs off
    q.close()


def test_pre_kep_sends_every_request_through_one_client_side_limiter(tmp_path: Path) -> None:
    """--pre-kep with --qps 40 --burst 5: bindings, status patches and Events together go
    through one limiter: about qps + burst requests in any second at most, and the run lasts
    as long as the bucket makes it."""
    mem = InMemoryApiServer()
    for i in range(3):
        mem.create(make_node(f"n{i}", 4000, 16384))
    for i in range(50):
        mem.create(_pod(f"p{i}", cpu=100))
    mem.create(_pod("huge", cpu=100_000))
    qps, burst = 40, 5
    with ApiServerHTTP(mem) as srv:
        cfg = config_for(tmp_path, srv.url, api="pre-kep", qps=qps, burst=burst, workers=8)
        fig = run(cfg, stream=None)
    assert fig["stopped_by"] == "done" and fig["verdict_ok"], fig["verdict"]
    log = [r for r in mem.request_log if r.op != "get"]
    ops = Counter(r.op for r in log)
    assert ops["bind"] == 50 and ops["create"] >= 50 and ops["patch_status"] >= 1
    times = sorted(r.t for r in log)
    busiest = max(sum(1 for t in times[i:] if t - start < 1.0) for i, start in enumerate(times))
    # A token bucket bounds when requests may leave, not when the server logs them: a thread
    # woken late by a loaded machine sends its request into the next second (seen: 47 of 46).
    # +4 absorbs that; requests through a second limiter (Events, say) would add up to qps.
    assert busiest <= qps + burst + 4, busiest
    assert times[-1] - times[0] >= (len(times) - burst) / qps - 0.2


def test_report_counts_only_its_own_pods(tmp_path: Path) -> None:
    """Nine pods another scheduler bound are none of ours: the report counts the five pods
    with our schedulerName, and pods/s is over our own active window."""
    mem = InMemoryApiServer()
    mem.create(make_node("n0", 16000, 16384))
    for i in range(9):
        other = make_pod(f"other-{i}", cpu_m=100, uid=f"u-other-{i}")
        other["spec"]["schedulerName"] = "default-scheduler"
        other["spec"]["nodeName"] = "n0"
        mem.create(other)
    for i in range(5):
        mem.create(_pod(f"p{i}", cpu=100))
    with ApiServerHTTP(mem) as srv:
        fig = run(config_for(tmp_path, srv.url, workers=4), stream=None)
    assert (fig["pods_total"], fig["pods_bound"], fig["pods_bound_by_others"]) == (5, 5, 0)
    assert 0 < fig["active_s"] <= fig["wall_s"]
    # active_s is rounded to the millisecond, pods/s is not: a window of a few ms moves it
    half_ms = 0.0005
    fastest = 5 / max(fig["active_s"] - half_ms, 1e-9)
    assert 5 / (fig["active_s"] + half_ms) - 0.05 <= fig["pods_per_s"] <= fastest + 0.05
    assert fig["verdict"] == "OK: 5 bound, 0 unschedulable, 0 duplicates, 0 lost"


def test_an_unchanged_unschedulable_status_is_not_patched_again() -> None:
    """Like kube-scheduler: a retry that fails the same way sends no status patch while the
    pod already shows that condition (and the last one submitted was the same); the
    FailedScheduling occurrence is recorded every cycle. A different condition on the server
    is patched again."""
    clock = ManualClock(100.0)
    api = FakeApi()
    sched = Scheduler(api, SchedulerConfig(threads=1), clock=clock)
    sched.on_node_add(make_node("n1", 1000, 4096))
    pod = make_pod("big", cpu_m=2000, uid="u-big")
    sched.on_pod_add(pod)

    def cycle() -> None:
        clock.now += 300.0
        while sched.step():
            pass

    cycle()
    [patch] = api.of_type("pod_status_patch")
    [cond] = patch.conditions  # type: ignore[attr-defined]
    shown = {**pod, "status": {"conditions": [{**cond, "lastTransitionTime": "t"}]}}
    sched.on_pod_update(shown)
    for _ in range(3):
        cycle()
    assert len(api.of_type("pod_status_patch")) == 1
    assert len(api.of_type("event_record")) == 4
    other = {**pod, "status": {"conditions": [{**cond, "message": "something else"}]}}
    sched.on_pod_update(other)
    cycle()
    assert len(api.of_type("pod_status_patch")) == 2


def test_a_changed_node_or_a_failed_binding_moves_the_pods_that_nothing_fit() -> None:
    """The cluster events that may make a waiting pod fit: a node whose allocatable grew (an
    update that changes nothing moves nobody), and a binding that failed (the room its pod
    was assumed on is free again)."""
    clock = ManualClock(100.0)
    api = FakeApi()
    sched = Scheduler(api, SchedulerConfig(threads=1, max_bind_failures=99), clock=clock)
    sched.on_node_add(make_node("n1", 1000, 4096))
    sched.on_pod_add(make_pod("small", cpu_m=1000, uid="u-small"))
    sched.on_pod_add(make_pod("big", cpu_m=1000, uid="u-big"))
    while sched.step():
        pass
    assert sched.queue.counts()[:2] == (0, 1)  # one bound (binding pending), one waits
    sched.on_node_update(make_node("n1", 1000, 4096))
    assert sched.queue.counts()[:2] == (0, 1)  # the same node again: nobody moves
    [future] = [f for c, f in api.calls if c.call_type == "pod_binding"]
    future.set_exception(RuntimeError("refused"))  # the binding failed: its room is free
    while sched.step():
        pass
    bindings = api.of_type("pod_binding")
    assert len(bindings) == 2  # the waiting pod was retried at once, and fit
    assert {b.ref.name for b in bindings} == {"small", "big"}
    sched.on_pod_add(make_pod("huge", cpu_m=2000, uid="u-huge"))
    while sched.step():
        pass
    assert sched.queue.counts()[0] == 0  # nothing fits it: it waits
    sched.on_node_update(make_node("n1", 4000, 4096))  # the node grew: it moves at once
    assert sched.queue.counts()[0] == 1
