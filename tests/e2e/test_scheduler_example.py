"""The scheduler example: its parts one by one, then whole runs (async, --pre-kep,
--all-blocking, real client).

Runs are small (tens of nodes, a few hundred pods, millisecond latency) and end on their own;
they verify themselves against the apiserver's final state, and these tests check that
verification too (it must catch a lost intent and a duplicate binding).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from examples.scheduler.cache import SchedulerCache
from examples.scheduler.cli import main
from examples.scheduler.cycle import Phase, Scheduler, SchedulerConfig
from examples.scheduler.framework import SELECTOR_MISMATCH, Framework, num_feasible_to_find
from examples.scheduler.ha import LeaderElect
from examples.scheduler.nominator import Nominator
from examples.scheduler.podinfo import PodInfo
from examples.scheduler.preemption import Preemptions, select_victims
from examples.scheduler.queue import SchedulingQueue
from examples.scheduler.report import write_json
from examples.scheduler.resources import GPU_RESOURCE, cpu_millis, mem_bytes
from examples.scheduler.runner import RunConfig, run
from examples.scheduler.steps import ChainedSteps, GangSteps, PerPodGang, Steps
from examples.scheduler.tracker import BIND, STATUS, Tracker
from examples.scheduler.verify import verify
from examples.scheduler.workload import WorkloadSpec, build_workload
from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.errors import (
    CallFailed,
    InvalidInputError,
    InvalidObjectError,
    Outcome,
    UnauthorizedError,
)
from kdispatch.actors.model.objects import Obj
from kdispatch.actors.model.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import (
    InMemoryApiServer,
    RequestRecord,
    make_claim,
    make_node,
    make_pod,
)
from kdispatch.testing.waiting import wait_for
from tests.clocks import ManualClock
from tests.factories import settled

pytestmark = pytest.mark.timeout(60)

JSON_KEYS = {
    "command_s",
    "drain_s",
    "pods_bound",
    "pods_total",
    "pods_per_s",
    "calls_sent",
    "duplicate_bindings",
    "lost_intents",
    "pods_unschedulable",
    "pods_preempted",
    "calls_sent_by_type",
    "calls_merged",
    "calls_skipped",
    "calls_cancelled",
    "submit_latency_ms",
    "binding_latency_ms",
    "wall_s",
}


def pod_info(name: str, cpu: int, prio: int = 0, **kw: Any) -> PodInfo:
    """The scheduler's view of a pod made by :func:`kdispatch.testing.make_pod`."""
    return PodInfo.of(make_pod(name, cpu_m=cpu, mem_mi=64, priority=prio, uid=f"u-{name}", **kw))


def node(name: str, cpu: int = 4000, gpus: int = 0, **labels: str) -> dict[str, Any]:
    obj = make_node(name, cpu, 16384, labels)
    if gpus:
        obj["status"]["allocatable"][GPU_RESOURCE] = str(gpus)
    return obj


# --------------------------------------------------------------------------- parts


def test_quantities() -> None:
    assert cpu_millis("100m") == 100
    assert cpu_millis("1.5") == 1500
    assert cpu_millis(2) == 2000
    assert mem_bytes("128Mi") == 128 * 2**20
    assert mem_bytes("1G") == 10**9
    assert mem_bytes("1e3") == 1000
    for bad in ("", "abc", "1Qi", True, None):
        with pytest.raises(InvalidObjectError):
            cpu_millis(bad)


def test_pod_info_parses_requests_priority_selector_and_claims() -> None:
    info = pod_info("a", 250, 7, node_selector={"zone": "z1"}, claims=["gpu-a"])
    assert (info.cpu_m, info.mem, info.priority) == (250, 64 * 2**20, 7)
    assert info.selector == (("zone", "z1"),)
    assert info.claim_keys() == ("default/gpu-a",)


def test_queue_orders_by_priority_then_fifo_and_runs_tasks_first() -> None:
    q = SchedulingQueue(ManualClock(100.0))
    q.add("low", 0)
    q.add("high-1", 10)
    q.add("high-2", 10)
    assert not q.add("low", 0)  # one entry per pod
    ran: list[str] = []
    q.post(lambda: ran.append("task"))
    task = q.pop(timeout=0)
    assert callable(task)
    task()
    assert ran == ["task"]
    assert [q.pop(timeout=0) for _ in range(3)] == ["high-1", "high-2", "low"]
    assert q.pop(timeout=0) is None


def test_queue_backoff_activate_and_remove() -> None:
    clock = ManualClock(100.0)
    q = SchedulingQueue(clock)
    q.backoff("a", 0, 5.0)
    q.backoff("b", 0, 1.0)
    q.backoff("gone", 0, 1.0)
    q.remove("gone")
    assert q.counts() == (0, 2, 0)
    assert q.pop(timeout=0) is None
    clock.now += 1.0
    assert q.pop(timeout=0) == "b"
    assert q.pop(timeout=0) is None
    assert q.activate("a", 0)
    assert not q.activate("a", 0)  # no longer backing off
    assert q.pop(timeout=0) == "a"
    q.close()
    assert q.pop() is None


def test_cache_concurrent_reserves_never_double_book() -> None:
    cache = SchedulerCache()
    cache.set_node(node("n1", cpu=1000))
    pods = [pod_info(f"p{i}", 300) for i in range(8)]
    barrier = threading.Barrier(len(pods))
    results: dict[str, bool] = {}

    def reserve(p: PodInfo) -> None:
        barrier.wait()
        results[p.uid] = cache.reserve(p, "n1") is not None

    threads = [threading.Thread(target=reserve, args=(p,)) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results.values()) == 3
    n1 = cache.node("n1")
    assert n1 is not None and n1.cpu_free == 100
    winner = next(uid for uid, ok in results.items() if ok)
    cache.forget(winner)
    assert n1.cpu_free == 400
    loser = next(p for p in pods if not results[p.uid])
    cache.confirm(loser, "n1")  # bound by someone else: placed without a fit check
    assert n1.cpu_free == 100 and cache.placed_on(loser.uid) == "n1"
    assert cache.has_lower_priority(1) and not cache.has_lower_priority(0)


def test_cache_allocates_devices_for_claims_and_releases_them() -> None:
    cache = SchedulerCache()
    cache.set_node(node("gpu", gpus=1))
    a = pod_info("a", 100, claims=["ca"])
    b = pod_info("b", 100, claims=["cb"])
    allocs = cache.reserve(a, "gpu")
    assert allocs is not None and [x.device for x in allocs] == ["gpu-0"]
    assert cache.reserve(b, "gpu") is None  # no free device
    cache.forget(a.uid)
    assert cache.allocation("default/ca") is None
    allocs = cache.reserve(b, "gpu")
    assert allocs is not None and allocs[0].claim == "default/cb"
    assert [x.claim for x in cache.remove(b.uid)] == ["default/cb"]


def test_framework_filters_selector_taints_and_capacity_and_scores_least_allocated() -> None:
    cache = SchedulerCache()
    cache.set_node(node("busy", zone="a"))
    cache.set_node(node("idle", zone="a"))
    cache.set_node(node("other", zone="b"))
    tainted = node("tainted", zone="a")
    tainted["spec"]["taints"] = [{"key": "gpu", "effect": "NoSchedule"}]
    cache.set_node(tainted)
    assert cache.reserve(pod_info("filler", 3000), "busy") is not None
    fw = Framework(cache)
    result = fw.filter(pod_info("x", 500, node_selector={"zone": "a"}), {})
    assert [n.name for n in result.ranked()] == ["idle", "busy"]
    tolerant = make_pod("t", cpu_m=500, uid="u-t", node_selector={"zone": "a"})
    tolerant["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    names = {n.name for n in fw.filter(PodInfo.of(tolerant), {}).ranked()}
    assert names == {"idle", "busy", "tainted"}
    big = fw.filter(pod_info("big", 1500, node_selector={"zone": "a"}), {"idle": (3000, 0)})
    assert not big.feasible
    msg = Framework.failure_message(4, big.reasons)
    assert msg == (
        "0/4 nodes are available: 2 Insufficient cpu, "
        "1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint(s)."
    )
    assert num_feasible_to_find(50) == 50
    assert num_feasible_to_find(500) == 230
    assert num_feasible_to_find(100_000) == 5000


def test_a_pod_larger_than_every_node_gets_the_filter_loops_verdict() -> None:
    """Without a taint in the cluster, a pod asking more cpu than any node has is refused by
    every candidate node at once; the result is the one the filter loop gives (which runs
    once a node is tainted)."""
    cache = SchedulerCache()
    for i in range(6):
        cache.set_node(node(f"n{i}", zone="a" if i < 4 else "b"))
    fw = Framework(cache)
    huge = pod_info("huge", 100_000, node_selector={"zone": "a"})
    quick = fw.filter(huge, {})
    assert (dict(quick.reasons), quick.evaluated) == (
        {"Insufficient cpu": 4, "node(s) didn't match Pod's node affinity/selector": 2},
        6,
    )
    tainted = node("t", zone="c")
    tainted["spec"]["taints"] = [{"key": "gpu", "effect": "NoSchedule"}]
    cache.set_node(tainted)
    assert cache.tainted
    looped = fw.filter(huge, {})
    expected = quick.reasons + Counter({SELECTOR_MISMATCH: 1})  # the tainted node's zone
    assert (looped.reasons, looped.evaluated) == (expected, 7)


def test_nominator_reads_pending_nominations_through_view() -> None:
    preemptor = pod_info("pre", 1000, 100)
    seen: dict[str, dict[str, Any]] = {}

    def view(uid: str) -> dict[str, Any] | None:
        return seen.get(uid)

    nominator = Nominator(view)
    assert nominator.refresh(preemptor) is None
    seen[preemptor.uid] = {**preemptor.obj, "status": {"nominatedNodeName": "n1"}}
    assert nominator.refresh(preemptor) == "n1"
    assert nominator.reservations(50, "someone")["n1"][0] == 1000
    assert nominator.reservations(200, "someone") == {}  # higher priority ignores it
    assert nominator.reservations(50, preemptor.uid) == {}  # never reserves against itself
    nominator.remove(preemptor.uid)
    assert nominator.node_of(preemptor.uid) is None


def test_select_victims_keeps_all_it_can_and_prefers_lowest_priority() -> None:
    cache = SchedulerCache()
    cache.set_node(node("n1"))
    cache.set_node(node("n2"))
    for name, cpu, prio in (("a", 1000, 0), ("b", 1000, 0), ("c", 1000, 0), ("d", 800, 0)):
        assert cache.reserve(pod_info(name, cpu, prio), "n1") is not None
    for name, cpu, prio in (("e", 1900, 5), ("f", 1900, 5)):
        assert cache.reserve(pod_info(name, cpu, prio), "n2") is not None
    cand = select_victims(pod_info("pre", 1000, 10), cache, {}, random.Random(0))
    assert cand is not None
    assert cand.node == "n1"
    assert [v.name for v in cand.victims] == ["d"]
    cache.mark_victims([v.uid for v in cand.victims])
    again = select_victims(pod_info("pre2", 1000, 10), cache, {}, random.Random(0))
    assert again is not None and "d" not in [v.name for v in again.victims]
    assert select_victims(pod_info("low", 1000, 0), cache, {}, random.Random(0)) is None


def test_preemptions_guard_against_preempting_again_while_victims_live() -> None:
    p = Preemptions()
    p.start("pre", ["v1", "v2"])
    assert p.waiting("pre")
    with pytest.raises(RuntimeError):
        p.start("pre", ["v3"])
    assert p.victim_gone("v1") is None
    assert p.victim_gone("v2") == "pre"
    assert not p.waiting("pre")
    p.start("pre", ["v3"])  # allowed once the earlier victims are gone
    assert p.started == 2


def test_verify_catches_lost_intents_and_duplicate_bindings() -> None:
    tracker = Tracker()
    for i, outcome in ((1, Outcome.SUCCESS), (2, Outcome.SUCCESS), (3, None)):  # u3 unresolved
        tracker.record(
            BIND,
            f"u{i}",
            f"default/p{i}",
            expect={"node": "n1"},
            future=settled(outcome),
            submit_seconds=0.0,
        )
    pods = {
        "u1": {"metadata": {"uid": "u1"}, "spec": {"nodeName": "n1"}},
        "u2": {"metadata": {"uid": "u2"}, "spec": {}},  # success, but not bound: lost
        "u3": {"metadata": {"uid": "u3"}, "spec": {}},
    }
    log = [RequestRecord("bind", "Pod", "default", "p1", "u1", "ok", 0.0)] * 2
    result = verify(tracker.snapshot(), pods, {}, log)
    assert result.duplicate_bindings == 1
    assert result.unresolved == 1
    assert result.lost_intents == 2  # u2 not reflected, u3 never resolved
    clean = verify(tracker.snapshot()[:1], pods, {}, log[:1])
    assert (clean.duplicate_bindings, clean.lost_intents) == (0, 0)


def test_workload_shape() -> None:
    wl = build_workload(
        WorkloadSpec(nodes=20, pods=200, high_priority_share=0.05, claim_share=0.05)
    )
    assert len(wl.nodes) == 20 and wl.pod_count == 200
    assert len(wl.waves[1]) == 10 and all(p["spec"]["priority"] == 1000 for p in wl.waves[1])
    assert len(wl.claims) == 8  # capped by the devices: 2 GPU nodes x 4
    tainted = [n for n in wl.nodes if n["spec"].get("taints")]
    assert len(tainted) == 2
    claim_pods = [p for p in wl.waves[0] if p["spec"].get("resourceClaims")]
    assert len(claim_pods) == 8 and all(p["spec"]["tolerations"] for p in claim_pods)
    assert sum(1 for p in wl.waves[0] if p["metadata"]["name"].startswith("unsched")) == 2


def test_run_config_rejects_bad_values() -> None:
    for bad in ({"nodes": 0}, {"faults": 2.0}, {"qps": -1}, {"fill": 0}, {"threads": True}):
        with pytest.raises(InvalidInputError):
            RunConfig(**bad)
    assert main(["--nodes", "0", "--no-progress"]) == 2
    # backoffs as kube-scheduler validates them: a first one, and a longest one no shorter
    for backoffs in ({"backoff_initial": 0}, {"backoff_initial": 5.0, "backoff_max": 2.0}):
        with pytest.raises(InvalidInputError, match="backoff"):
            RunConfig(**backoffs)
        with pytest.raises(InvalidInputError, match="backoff"):
            SchedulerConfig(**backoffs)
    assert main(["--pod-initial-backoff-seconds", "20", "--no-progress"]) == 2


class FakeApi:
    """A :class:`SchedulerApi` whose futures the test resolves; ``view`` applies the pending
    calls to the last object it was given, like the dispatcher's read-your-writes view."""

    mode = "fake"

    def __init__(self) -> None:
        self.calls: list[tuple[Call, Future[Outcome]]] = []
        self.objects: dict[str, Obj] = {}

    def submit(self, call: Call) -> Future[Outcome]:
        fut: Future[Outcome] = Future()
        fut.set_running_or_notify_cancel()
        self.calls.append((call, fut))
        return fut

    def preempt(self, pod: Obj, *, preemptor: str) -> Future[Outcome]:
        return self.submit(PodPreemption.for_pod(pod, preemptor=preemptor))

    def group(self, owner: Obj) -> Steps:
        return ChainedSteps(self)

    def gang(self, owner: Obj, members: int) -> GangSteps:
        return PerPodGang(self)

    def view(self, uid: str) -> Obj | None:
        obj = self.objects.get(uid)
        for call, fut in self.calls:
            if obj is not None and call.ref.uid == uid and not fut.done():
                obj = call.apply(obj)
        return obj

    def of_type(self, call_type: str) -> list[Call]:
        return [c for c, _ in self.calls if c.call_type == call_type]

    def on_add(self, obj: Any) -> None: ...
    def on_update(self, obj: Any) -> None: ...
    def on_delete(self, obj: Any) -> None: ...
    def stats(self) -> dict[str, Any]:
        return {"sent": {}, "outcomes": {}, "retries": 0, "tokens_taken": 0}

    def outstanding(self) -> int:
        return sum(1 for _, f in self.calls if not f.done())

    def close(self, *, drain: bool, timeout: float) -> bool:
        return True


def test_pending_nomination_reserves_room_and_preemptor_never_preempts_twice() -> None:
    clock = ManualClock(100.0)
    api = FakeApi()
    sched = Scheduler(api, SchedulerConfig(threads=1), clock=clock)
    sched.on_node_add(node("n1", cpu=1000))
    victim = make_pod("victim", cpu_m=1000, uid="u-victim")
    victim["spec"]["nodeName"] = "n1"
    sched.on_pod_add(victim)
    preemptor = make_pod("pre", cpu_m=1000, priority=100, uid="u-pre")
    api.objects["u-pre"] = preemptor
    sched.on_pod_add(preemptor)

    assert sched.step()  # no fit: nominate n1 (patch pending, not waited), victim held on it
    (patch,) = api.of_type("pod_status_patch")
    assert isinstance(patch, PodStatusPatch) and patch.nominated_node_name == "n1"
    assert sched.nominator.node_of("u-pre") == "n1"  # read back through view()
    assert api.of_type("pod_preemption") == []
    api.calls[0][1].set_result(Outcome.SUCCESS)  # the nomination landed: now the victim
    assert [c.ref.name for c in api.of_type("pod_preemption")] == ["victim"]
    api.objects["u-pre"] = patch.apply(preemptor)

    clock.now += 10  # retry while the victim is still terminating: wait, never preempt again
    assert sched.step()
    assert len(api.of_type("pod_preemption")) == 1 and sched.preemptions.started == 1

    sched.on_pod_delete(victim)  # the victim is gone: n1 is free, the preemptor woken
    sched.queue.remove("u-pre")  # let a lower-priority pod's cycle run first
    sched.on_pod_add(make_pod("low", cpu_m=500, uid="u-low"))
    assert sched.step()
    assert api.of_type("pod_binding") == []  # the room on n1 is reserved for the preemptor
    record = sched.record("u-low")
    assert record is not None and record.attempts == 1

    sched.queue.add("u-pre", 100)
    assert sched.step()
    (binding,) = api.of_type("pod_binding")
    assert isinstance(binding, PodBinding) and (binding.ref.name, binding.node) == ("pre", "n1")
    api.calls[-1][1].set_result(Outcome.SUCCESS)
    assert sched.step()  # the binding continuation
    pre = sched.record("u-pre")
    assert pre is not None and pre.phase is Phase.BOUND
    assert sched.errors == 0


def test_failed_binding_unassumes_and_requeues_with_backoff() -> None:
    clock = ManualClock(100.0)
    api = FakeApi()
    sched = Scheduler(api, SchedulerConfig(threads=1), clock=clock)
    sched.on_node_add(node("n1", cpu=1000))
    sched.on_pod_add(make_pod("p", cpu_m=600, uid="u-p"))
    assert sched.step()
    assert len(api.of_type("pod_binding")) == 1
    n1 = sched.cache.node("n1")
    assert n1 is not None and n1.cpu_free == 400  # assumed at once
    api.calls[-1][1].set_exception(CallFailed("gave up", uid="u-p", call_type="pod_binding"))
    assert sched.step()  # continuation: un-assume, back off
    assert n1.cpu_free == 1000 and not sched.cache.is_assumed("u-p")
    assert not sched.step()  # backing off
    clock.now += 1.0
    assert sched.step()
    assert len(api.of_type("pod_binding")) == 2


# --------------------------------------------------------------------------- whole runs


def check_clean(fig: dict[str, Any]) -> None:
    """A run's figures show a clean run: it finished, and nothing was duplicated, lost,
    left unresolved or unsettled (any cluster, the real one included)."""
    assert fig["stopped_by"] == "done"
    assert fig["duplicate_bindings"] == 0
    assert fig["lost_intents"] == 0, fig["problems"]
    assert fig["unresolved_futures"] == 0
    assert fig["closed_at_stop"] == 0
    assert fig["scheduler_errors"] == 0
    assert fig["pods_unsettled"] == 0


def _check_clean(fig: dict[str, Any]) -> None:
    check_clean(fig)
    # every pod left unschedulable is one built not to fit anywhere
    assert all(key.startswith("default/unschedulable-") for key in fig["unschedulable_pods"])
    assert fig["verdict_ok"] and fig["verdict"].startswith("OK: ")
    assert (
        fig["pods_bound"] + fig["pods_preempted"] + fig["pods_unschedulable"] == (fig["pods_total"])
    )


@pytest.mark.timeout(90)
def test_async_run_with_preemption_claims_and_faults(tmp_path: Path) -> None:
    fig = run(
        RunConfig(
            nodes=20,
            pods=200,
            latency_ms=1.0,
            faults=0.05,
            high_priority_share=0.05,
            claim_share=0.05,
            fill=0.8,
            workers=8,
            max_seconds=60,
            seed=3,
        ),
        stream=None,
    )
    _check_clean(fig)
    assert fig["mode"] == "async"
    assert fig["pods_total"] == 200
    assert fig["pods_unschedulable"] == 2
    assert fig["pods_preempted"] > 0
    assert fig["victims"] == fig["pods_preempted"]
    assert fig["max_preemptions_per_victim"] == 1  # each victim preempted exactly once
    assert fig["calls_sent_by_type"]["claim_status_patch"] >= 8
    assert sum(fig["faults_injected"].values()) > 0 and fig["retries"] > 0
    path = tmp_path / "run.json"
    write_json(path, fig)
    assert set(json.loads(path.read_text())) >= JSON_KEYS


@pytest.mark.timeout(90)
def test_cli_all_blocking_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "blocking.json"
    args = ["--nodes", "10", "--pods", "80", "--all-blocking", "--latency-ms", "0", "--fill", "0.8"]
    assert main([*args, "--json", str(path), "--no-progress"]) == 0
    fig = json.loads(path.read_text())
    _check_clean(fig)
    assert fig["mode"] == "all-blocking"
    assert fig["calls_merged"] == 0  # nothing to merge when every call blocks
    out = capsys.readouterr().out
    assert "pods bound" in out and "lost intents" in out


@pytest.mark.timeout(90)
def test_cli_pre_kep_run_reports_requests_and_the_scheduling_loop(tmp_path: Path) -> None:
    path = tmp_path / "prekep.json"
    args = ["--nodes", "10", "--pods", "80", "--pre-kep", "--binding-threads", "3"]
    args += ["--latency-ms", "1", "--fill", "0.8", "--claim-share", "0.05"]
    assert main([*args, "--json", str(path), "--no-progress"]) == 0
    fig = json.loads(path.read_text())
    _check_clean(fig)
    assert fig["mode"] == "pre-kep" and fig["binding_threads"] == 3
    assert fig["pods_bound"] + fig["pods_unschedulable"] + fig["pods_preempted"] == 80
    # requests are the apiserver's count, by op, not the layer's call attempts
    assert fig["requests"] == sum(fig["requests_by_op"].values())
    assert fig["requests_by_op"]["bind"] >= fig["pods_bound"]
    loop = fig["loop_submit_us"]
    assert loop["samples"] > 0 and loop["p50"] <= loop["p99"] <= loop["max"]
    assert set(fig["gc_pauses"]) == {"gen0", "gen1", "gen2"}


def test_run_config_rejects_unknown_api_modes() -> None:
    with pytest.raises(InvalidInputError):
        RunConfig(api="sync")
    with pytest.raises(InvalidInputError):
        RunConfig(api="pre-kep", binding_threads=0)


@pytest.mark.timeout(90)
def test_kubeconfig_run_schedules_pending_pods_over_http(tmp_path: Path) -> None:
    mem = InMemoryApiServer()
    for i in range(4):
        mem.create(node(f"n{i}", gpus=2 if i == 0 else 0))
    mem.create(make_claim("gpu-c"))
    for i in range(30):
        obj = make_pod(f"p{i}", cpu_m=200, claims=["gpu-c"] if i == 0 else ())
        obj["spec"]["schedulerName"] = "kdispatch-example"
        mem.create(obj)
    other = make_pod("not-ours", cpu_m=100)  # default-scheduler: left alone
    mem.create(other)
    with ApiServerHTTP(mem) as srv:
        config = config_for(tmp_path, srv.url, token="t0k", workers=4, max_seconds=60)
        fig = run(config, stream=None)
    _check_clean(fig)
    assert (fig["pods_total"], fig["pods_bound"]) == (30, 30)
    not_ours = mem.get_object("Pod", "default", "not-ours")
    assert not_ours is not None and not_ours["spec"].get("nodeName") is None
    claim = mem.get_object("ResourceClaim", "default", "gpu-c")
    p0 = mem.get_object("Pod", "default", "p0")
    assert claim is not None and p0 is not None
    assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == "n0"
    assert p0["spec"]["nodeName"] == "n0"
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [p0["metadata"]["uid"]]


@pytest.mark.timeout(90)
def test_dispatcher_process_run_schedules_pending_pods_over_http(tmp_path: Path) -> None:
    mem = InMemoryApiServer()
    _pending_pods(mem, 40, cpu_m=200)
    with ApiServerHTTP(mem) as srv:
        cfg = config_for(tmp_path, srv.url, workers=4, max_seconds=60, dispatcher_process=True)
        fig = run(cfg, stream=None)
    _check_clean(fig)
    assert fig["mode"] == "async-process"
    assert (fig["pods_total"], fig["pods_bound"]) == (40, 40)
    bound = [mem.get_object("Pod", "default", f"p{i}") for i in range(40)]
    assert all(p is not None and p["spec"].get("nodeName") for p in bound)
    writers = {r.writer for r in mem.request_log if r.op == "bind"}
    assert len(writers) == 1 and next(iter(writers)).startswith("kdispatch-scheduler/")


def kubeconfig_file(tmp_path: Path, url: str, token: str | None = None) -> str:
    """A kubeconfig in ``tmp_path`` for the server at ``url``, with a bearer ``token`` or
    without credentials."""
    path = tmp_path / "kubeconfig"
    user = "{}" if token is None else f"{{token: {token}}}"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: t, cluster: {{server: "{url}"}}}}]\n'
        f"users: [{{name: u, user: {user}}}]\n"
        "contexts: [{name: c, context: {cluster: t, user: u}}]\n"
        "current-context: c\n"
    )
    return str(path)


def config_for(tmp_path: Path, url: str, token: str | None = None, **kw: Any) -> RunConfig:
    """The example's :class:`RunConfig` (``kw``) for the server at ``url``, through a
    :func:`kubeconfig_file` in ``tmp_path``."""
    return RunConfig(kubeconfig=kubeconfig_file(tmp_path, url, token), **kw)


def _pending_pods(mem: InMemoryApiServer, count: int, cpu_m: int = 100) -> None:
    """Three nodes and ``count`` pending pods of the example's scheduler."""
    for i in range(3):
        mem.create(node(f"n{i}"))
    for i in range(count):
        obj = make_pod(f"p{i}", cpu_m=cpu_m)
        obj["spec"]["schedulerName"] = "kdispatch-example"
        mem.create(obj)


def _replica_a(tmp_path: Path, url: str, retry_period: float, **kw: Any) -> RunConfig:
    """Replica ``a`` of the example for the server at ``url``, its dispatcher in a child
    process, electing a leader on short timings (``retry_period``); ``kw``: more settings."""
    return config_for(
        tmp_path,
        url,
        max_seconds=60,
        dispatcher_process=True,
        identity="a",
        leader_elect=LeaderElect(
            lease_duration=4.0, renew_deadline=3.0, retry_period=retry_period, identity="a"
        ),
        **kw,
    )


@pytest.mark.timeout(90)
def test_dispatcher_process_with_leader_election_leads_then_binds_every_pod(
    tmp_path: Path,
) -> None:
    mem = InMemoryApiServer()
    _pending_pods(mem, 30)
    with ApiServerHTTP(mem) as srv:
        cfg = _replica_a(tmp_path, srv.url, retry_period=0.5, workers=4)
        fig = run(cfg, stream=None)
    _check_clean(fig)
    assert fig["mode"] == "async-process"
    assert (fig["pods_total"], fig["pods_bound"]) == (30, 30)
    lease = mem.leases.get("kube-system", "kdispatch-scheduler")
    assert lease["spec"]["holderIdentity"] == ""  # a clean end releases it
    assert {w.writer for w in mem.leases.writes} == {"kdispatch-scheduler/a"}
    assert {r.writer for r in mem.request_log if r.op == "bind"} == {"kdispatch-scheduler/a"}


@pytest.mark.timeout(90)
def test_dispatcher_process_replica_that_loses_its_lease_stops_binding(tmp_path: Path) -> None:
    """Another replica takes the lease mid-run: the elector sees it at its next retry, the
    child's gate closes and the process dispatcher is revoked; the run ends
    ``leadership_lost`` with pods left unbound and the command exits with status 3 (like
    kube-scheduler), the lease is left to its new holder, and nothing of the replica (its
    child process included) binds anything once the run returned."""
    mem = InMemoryApiServer()
    _pending_pods(mem, 200)
    statuses: list[int] = []
    path = tmp_path / "lost.json"
    with ApiServerHTTP(mem) as srv:
        args = ["--kubeconfig", kubeconfig_file(tmp_path, srv.url), "--dispatcher-process"]
        args += ["--scheduler-name", "kdispatch-example", "--identity", "a", "--leader-elect"]
        args += ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.2"]
        args += ["--max-seconds", "60", "--workers", "2", "--qps", "20", "--burst", "1"]
        args += ["--json", str(path), "--no-progress"]
        runner = threading.Thread(target=lambda: statuses.append(main(args)))
        runner.start()
        try:
            wait_for(  # poll the server: wait until binding is under way
                lambda: any(r.op == "bind" for r in mem.request_log),
                30.0,
                "the replica to bind a pod",
                interval=0.05,
            )
            mem.leases.patch(
                "kube-system", "kdispatch-scheduler", {"spec": {"holderIdentity": "b"}}
            )
        finally:
            runner.join(80)
        assert not runner.is_alive()
        binds_at_end = sum(1 for r in mem.request_log if r.op == "bind")
    assert statuses == [3]
    fig = json.loads(path.read_text())
    assert fig["stopped_by"] == "leadership_lost"
    assert fig["mode"] == "async-process"
    assert 0 < fig["pods_bound"] < 200  # qps 20: most were still to be sent
    assert fig["duplicate_bindings"] == 0
    assert sum(1 for r in mem.request_log if r.op == "bind") == binds_at_end
    lease = mem.leases.get("kube-system", "kdispatch-scheduler")
    assert lease["spec"]["holderIdentity"] == "b"  # a lost lease is not released


def test_dispatcher_process_needs_a_kubeconfig() -> None:
    with pytest.raises(InvalidInputError, match="kubeconfig"):
        RunConfig(dispatcher_process=True)
    with pytest.raises(InvalidInputError):
        RunConfig(dispatcher_process=True, kubeconfig="k", api="pre-kep")


@pytest.mark.timeout(90)
def test_the_report_gives_the_commands_wall_time_with_the_drain() -> None:
    """``command_s`` runs from the command's start (here: an hour before ``run`` was called,
    standing for the imports and set-up) to the end of the drain of every call and Event:
    it holds the scheduling window and the drain after it, and no Event was cut short."""
    from examples.scheduler.report import summary_table

    started = time.monotonic() - 3600.0
    config = RunConfig(nodes=10, pods=80, latency_ms=0.0, fill=0.8, workers=8, seed=2)
    fig = run(config, stream=None, command_started=started)
    _check_clean(fig)
    assert fig["drained"] is True
    assert not any(key.endswith(":closed") for key in fig["calls_outcomes"])  # nothing cut
    assert fig["events_sent"] > 0 and fig["events_dropped"] == 0
    assert fig["command_s"] >= 3600.0 + fig["wall_s"] + fig["drain_s"]
    assert "command wall time, start to drained (s)" in summary_table(fig)


@pytest.mark.timeout(60)
def test_a_refused_first_list_ends_the_run_with_the_error_and_nothing_left_running(
    tmp_path: Path,
) -> None:
    """A wrong token: the informers' first list is refused (401), ``run`` raises
    ``UnauthorizedError`` at once, and everything set-up started is stopped (the autouse
    fixture finds no thread left)."""
    mem = InMemoryApiServer()
    _pending_pods(mem, 3)
    with ApiServerHTTP(mem, token="right") as srv, pytest.raises(UnauthorizedError):
        run(config_for(tmp_path, srv.url, token="wrong", max_seconds=30), stream=None)
    assert not any(r.op == "bind" for r in mem.request_log)


def test_a_json_path_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json`` into a directory that does not exist: exit 2 with an ``error:`` line, at
    once (not a traceback after the whole run, with the exit status of a failed check)."""
    path = tmp_path / "missing" / "run.json"
    assert main(["--nodes", "2", "--pods", "4", "--no-progress", "--json", str(path)]) == 2
    captured = capsys.readouterr()
    assert "error: --json" in captured.err and captured.out == ""


@pytest.mark.timeout(60)
def test_a_refused_first_list_gives_an_error_line_and_exit_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong token in the kubeconfig: the command says why on stderr, no traceback."""
    mem = InMemoryApiServer()
    _pending_pods(mem, 1)
    with ApiServerHTTP(mem, token="right") as srv:
        kubeconfig = kubeconfig_file(tmp_path, srv.url, token="wrong")
        args = ["--kubeconfig", kubeconfig, "--no-progress", "--max-seconds", "30"]
        assert main(args) == 1
    assert "error: list" in capsys.readouterr().err


@pytest.mark.timeout(90)
def test_all_blocking_keeps_the_client_side_rate_limit() -> None:
    """``--qps`` with ``--all-blocking``: every request waits for one token bucket, as with
    ``--pre-kep``, instead of the rate being recorded in the settings and ignored."""
    config = RunConfig(
        nodes=10, pods=40, latency_ms=0.0, fill=0.8, api="all-blocking", qps=40, burst=1
    )
    fig = run(config, stream=None)
    _check_clean(fig)
    binds = fig["requests_by_op"]["bind"]
    assert binds >= 30 and fig["wall_s"] >= 0.8 * (binds - 1) / 40


@pytest.mark.timeout(90)
def test_the_embedded_workload_names_the_scheduler_of_scheduler_name() -> None:
    """``--scheduler-name`` on the embedded apiserver: the pods it creates name that
    scheduler, so the run schedules them (before, none was its own: nothing bound, the run
    waited for its deadline and said OK)."""
    config = RunConfig(nodes=10, pods=40, latency_ms=0.0, fill=0.8, scheduler_name="mine")
    fig = run(config, stream=None)
    _check_clean(fig)
    assert fig["stopped_by"] == "done" and fig["pods_bound"] > 0
    assert fig["pods_unsettled"] == 0


def test_the_active_window_ends_with_a_binding_found_applied_on_its_retry() -> None:
    """A binding that resolved SKIPPED (its first attempt applied, the answer lost, the retry
    found the pod on its node) placed the pod, and ``pods_bound`` counts it: it ends the
    active window as a SUCCESS does, so ``pods_per_s`` is not 0 when every binding did that;
    a status patch found to be a no-op still does not stretch it."""
    clock = ManualClock()
    tracker = Tracker(clock=clock)
    binding: Future[Outcome] = Future()
    patch: Future[Outcome] = Future()
    tracker.record(
        BIND, "u1", "default/p1", expect={"node": "n1"}, future=binding, submit_seconds=0.0
    )
    tracker.record(
        STATUS,
        "u2",
        "default/p2",
        expect={"reason": "Unschedulable"},
        future=patch,
        submit_seconds=0.0,
    )
    clock.advance(2.0)
    binding.set_result(Outcome.SKIPPED)
    clock.advance(3.0)
    patch.set_result(Outcome.SKIPPED)
    assert tracker.active_window() == 2.0


@pytest.mark.timeout(120)
def test_a_run_the_deadline_cuts_short_is_incomplete_not_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--max-seconds`` stopping a run with pods left unsettled: no duplicate and nothing
    lost, but the work was not done, so the verdict is not OK and the exit status says so."""
    # 20 pods a second at most (one token each): 2,000 pods cannot settle within 1 s
    args = ["--nodes", "20", "--pods", "2000", "--qps", "20", "--burst", "1"]
    args += ["--max-seconds", "1", "--no-progress", "--json", str(tmp_path / "fig.json")]
    assert main(args) == 1
    fig = json.loads((tmp_path / "fig.json").read_text())
    assert fig["stopped_by"] == "deadline"
    assert fig["pods_unsettled"] > 0
    assert (fig["duplicate_bindings"], fig["lost_intents"]) == (0, 0), fig["problems"]
    assert not fig["verdict_ok"]
    assert fig["verdict"].startswith("INCOMPLETE: ")
    assert fig["verdict"].endswith(" unsettled (stopped at the deadline)")
    assert f"verdict: {fig['verdict']}" in capsys.readouterr().out
