"""The scheduler example with PodGroups (Kubernetes 1.37), on the in-memory apiserver: a gang is
bound whole or not at all, its PodGroup gets ``PodGroupInitiallyScheduled``, an unplaceable
gang's members are marked unschedulable with Events, and a basic group's pods are scheduled one
by one. Whole runs of the main job read what the server shows at the end (and its request log:
a pod of an unplaceable gang is never bound, not even for a moment)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from examples.scheduler.api import DispatchedApi
from examples.scheduler.cli import parser
from examples.scheduler.cycle import Scheduler, SchedulerConfig
from examples.scheduler.runner import RunConfig, run, serves
from examples.scheduler.steps import PerPodGang
from examples.scheduler.tracker import GROUP, Intent
from examples.scheduler.verify import verify
from examples.scheduler.workload import GANG_LABEL, NODE_CPU_M, WorkloadSpec, build_workload
from kdispatch import (
    ApiConnectionError,
    CallFailed,
    Dispatcher,
    GangPartiallyBound,
    InvalidRequestError,
    NotFoundError,
    Obj,
    Outcome,
    PodBinding,
)
from kdispatch.testing import InMemoryApiServer, make_podgroup
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.waiting import wait_for
from tests.configs import FAST
from tests.e2e.test_scheduler_example import FakeApi, config_for, node
from tests.e2e.test_scheduler_groups import MODES
from tests.e2e.test_scheduler_peer import OURS, _pod

pytestmark = pytest.mark.timeout(90)

PIS = "PodGroupInitiallyScheduled"


def _condition(obj: Obj | None, kind: str) -> dict[str, Any] | None:
    assert obj is not None
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: dict[str, Any] = cond
            return found
    return None


def _bound(mem: InMemoryApiServer, name: str) -> str | None:
    pod = mem.get_object("Pod", "default", name)
    assert pod is not None
    node_name: str | None = pod["spec"].get("nodeName")
    return node_name


def _gang(mem: InMemoryApiServer, group: str, cpus: list[int], **kw: Any) -> list[str]:
    """A PodGroup (a gang of ``len(cpus)`` unless ``kw`` says otherwise) and its pods."""
    mem.create(make_podgroup(group, **(kw or {"min_count": len(cpus)})))
    names = [f"{group}-{i}" for i in range(len(cpus))]
    for name, cpu in zip(names, cpus, strict=True):
        mem.create(_pod(name, cpu=cpu, pod_group=group))
    return names


def _reasons(mem: InMemoryApiServer) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for event in mem.list("Event").items:
        out.setdefault(event["regarding"]["name"], set()).add(event["reason"])
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_gang_is_bound_whole_an_unplaceable_one_not_at_all_a_basic_group_pod_by_pod(
    tmp_path: Path, mode: dict[str, Any]
) -> None:
    mem = InMemoryApiServer()
    for i in range(3):
        mem.create(node(f"n{i}", cpu=4000))
    fits = _gang(mem, "fits", [1000, 1000, 1000])
    big = _gang(mem, "big", [100, 100, 2 * 4000])  # one member fits nowhere
    basic = _gang(mem, "basic", [100, 2 * 4000], basic=True)
    with ApiServerHTTP(mem) as srv:
        fig = run(config_for(tmp_path, srv.url, workers=4, **mode), stream=None)
    assert fig["stopped_by"] == "done" and fig["verdict_ok"], (fig["verdict"], fig["problems"])
    assert fig["podgroups"] == 3
    assert fig["gangs"]["bound"] == 1 and fig["gangs"]["unschedulable"] >= 1

    # the feasible gang: every member bound, then its PodGroup True/Scheduled
    assert all(_bound(mem, name) for name in fits)
    cond = _condition(mem.get_object("PodGroup", "default", "fits"), PIS)
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "Scheduled")

    # the unplaceable gang: no member ever bound (not one binding request), each marked
    log = list(mem.request_log)
    assert [r for r in log if r.op == "bind" and r.name in big] == []
    cond = _condition(mem.get_object("PodGroup", "default", "big"), PIS)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"].startswith('pod group "default/big": 1 of 3 pods cannot be placed')
    events = _reasons(mem)
    for name in big:
        scheduled = _condition(mem.get_object("Pod", "default", name), "PodScheduled")
        assert scheduled is not None and scheduled["status"] == "False"
        assert scheduled["message"] == cond["message"]
        assert "FailedScheduling" in events[name]

    # the basic group: its pods one by one, no PodGroup status
    assert _bound(mem, basic[0]) and not _bound(mem, basic[1])
    assert _condition(mem.get_object("PodGroup", "default", "basic"), PIS) is None
    assert "Scheduled" in events[basic[0]] and "FailedScheduling" in events[basic[1]]
    assert fig["pods_bound"] == len(fits) + 1


def test_a_member_refused_after_the_release_is_placed_again_and_the_group_then_is_scheduled(
    tmp_path: Path,
) -> None:
    mem = InMemoryApiServer()
    mem.create(node("n0", cpu=4000))
    names = _gang(mem, "g", [500, 500, 500])
    mem.script("bind", InvalidRequestError("binding refused"), name=names[1])  # once
    with ApiServerHTTP(mem) as srv:
        config = config_for(tmp_path, srv.url, workers=4, backoff_initial=0.01)
        fig = run(config, stream=None)
    assert fig["stopped_by"] == "done" and fig["verdict_ok"], (fig["verdict"], fig["problems"])
    assert fig["gangs"] == {"bound": 1, "partially_bound": 1}
    assert all(_bound(mem, name) for name in names)
    binds = [(r.name, r.outcome) for r in mem.request_log if r.op == "bind"]
    assert len(binds) == 4 and binds.count((names[1], "ok")) == 1  # refused once, then bound
    # the group's status: written once, True, after the last member was bound (never False)
    writes = [r for r in mem.request_log if r.name == "g" and r.op == "patch_status"]
    assert [r.outcome for r in writes] == ["ok"]
    cond = _condition(mem.get_object("PodGroup", "default", "g"), PIS)
    assert cond is not None and cond["status"] == "True"
    last_bind = max(i for i, r in enumerate(mem.request_log) if r.op == "bind")
    assert list(mem.request_log).index(writes[0]) > last_bind


def test_gang_members_never_preempt(tmp_path: Path) -> None:
    """A gang of high-priority pods that fits only if a low-priority pod went: alone, such a
    pod preempts it; as a gang, nothing is nominated or deleted and the gang is unschedulable."""
    mem = InMemoryApiServer()
    mem.create(node("n0", cpu=1000))
    mem.create(_pod("low", cpu=800, node="n0"))  # a victim a single preemptor would take
    mem.create(make_podgroup("g", min_count=2))
    names = ["g-0", "g-1"]
    for name in names:
        mem.create(_pod(name, cpu=400, priority=100, pod_group="g"))
    with ApiServerHTTP(mem) as srv:
        fig = run(config_for(tmp_path, srv.url, workers=4), stream=None)
    assert fig["stopped_by"] == "done" and fig["verdict_ok"], (fig["verdict"], fig["problems"])
    assert fig["gangs"]["unschedulable"] >= 1
    assert mem.get_object("Pod", "default", "low") is not None
    assert [r for r in mem.request_log if r.op in ("delete", "evict", "bind")] == []
    for name in names:
        pod = mem.get_object("Pod", "default", name)
        assert pod is not None and not pod["status"].get("nominatedNodeName")
        assert not _bound(mem, name)
    cond = _condition(mem.get_object("PodGroup", "default", "g"), PIS)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Unschedulable")


@pytest.fixture
def stack() -> Iterator[tuple[InMemoryApiServer, Scheduler]]:
    """A scheduler on a dispatcher over the in-memory apiserver, its two scheduling threads
    running; the test delivers the informer events itself."""
    mem = InMemoryApiServer()
    with Dispatcher(mem, FAST) as dispatcher:
        config = SchedulerConfig(threads=2, scheduler_name=OURS)
        sched = Scheduler(DispatchedApi(dispatcher), config)
        sched.start()
        try:
            yield mem, sched
        finally:
            sched.stop()


def _deliver(sched: Scheduler, obj: Obj) -> None:
    """The informers' add event of ``obj`` (to the dispatcher and the scheduler)."""
    api = sched.api
    assert isinstance(api, DispatchedApi)
    api.on_add(obj)
    handler = {"Node": sched.on_node_add, "PodGroup": sched.on_podgroup_add}
    handler.get(obj["kind"], sched.on_pod_add)(obj)


def test_members_wait_for_their_podgroup_and_for_min_count(
    stack: tuple[InMemoryApiServer, Scheduler],
) -> None:
    mem, sched = stack
    sched.podgroups.serve()
    _deliver(sched, mem.create(node("n0")))
    pods = [mem.create(_pod(f"g-{i}", cpu=100, pod_group="g")) for i in range(3)]
    for pod in pods[:2]:
        _deliver(sched, pod)
    wait_for(lambda: sched.phase_counts()["waiting"] == 2, 10, "two waiting for their group")
    _deliver(sched, mem.create(make_podgroup("g", min_count=3)))
    wait_for(
        lambda: sched.phase_counts()["waiting"] == 2 and not sched.busy(),
        10,
        "waiting for one more",
    )
    assert sched.settled()  # waiting is settled: nothing to do until a member comes
    assert [r for r in mem.request_log if r.op != "get"] == []  # no call while waiting
    _deliver(sched, pods[2])
    wait_for(lambda: sched.phase_counts()["bound"] == 3, 10, "the gang bound")
    wait_for(
        lambda: _condition(mem.get_object("PodGroup", "default", "g"), PIS), 10, "the condition"
    )
    assert all(_bound(mem, f"g-{i}") for i in range(3))
    cond = _condition(mem.get_object("PodGroup", "default", "g"), PIS)
    assert cond is not None and cond["status"] == "True"
    assert sched.gangs["bound"] == 1 and sched.errors == 0


def test_a_gang_withdrawn_before_its_release_sends_nothing_and_is_placed_again(
    stack: tuple[InMemoryApiServer, Scheduler],
) -> None:
    """A member's binding is refused at once (the dispatcher already saw the pod deleted, the
    scheduler not yet): the gang is withdrawn before its release, nothing is bound and the
    PodGroup's status is not sent. Once the scheduler sees the deletion and a new member
    comes, the next cycle places the gang again."""
    mem, sched = stack
    sched.podgroups.serve()
    _deliver(sched, mem.create(node("n0")))
    _deliver(sched, mem.create(make_podgroup("g", min_count=2)))
    pods = [mem.create(_pod(f"g-{i}", cpu=100, pod_group="g")) for i in range(2)]
    api = sched.api
    assert isinstance(api, DispatchedApi)
    _deliver(sched, pods[0])
    api.on_delete(pods[1])  # the dispatcher's informer event came first
    sched.on_pod_add(pods[1])
    wait_for(lambda: sched.gangs.get("withdrawn", 0) >= 1, 10, "the gang withdrawn")
    assert [r for r in mem.request_log if r.op in ("bind", "patch_status")] == []
    sched.on_pod_delete(mem.remove("Pod", "default", "g-1"))
    _deliver(sched, mem.create(_pod("g-2", cpu=100, pod_group="g")))
    wait_for(lambda: _bound(mem, "g-0") and _bound(mem, "g-2"), 10, "the gang placed again")
    wait_for(
        lambda: _condition(mem.get_object("PodGroup", "default", "g"), PIS), 10, "the condition"
    )
    cond = _condition(mem.get_object("PodGroup", "default", "g"), PIS)
    assert cond is not None and cond["status"] == "True"
    writes = [r for r in mem.request_log if r.name == "g" and r.op == "patch_status"]
    assert [r.outcome for r in writes] == ["ok"]  # only the placed gang's status
    assert [r.name for r in mem.request_log if r.op == "bind"] in (["g-0", "g-2"], ["g-2", "g-0"])
    assert sched.gangs["bound"] == 1


def test_without_the_podgroup_api_every_pod_is_scheduled_on_its_own(
    stack: tuple[InMemoryApiServer, Scheduler],
) -> None:
    mem, sched = stack  # PodGroups not served: the runner never called serve()
    _deliver(sched, mem.create(node("n0", cpu=4000)))
    for i, cpu in enumerate([100, 100, 2 * 4000]):
        _deliver(sched, mem.create(_pod(f"g-{i}", cpu=cpu, pod_group="g")))
    wait_for(lambda: _bound(mem, "g-0") and _bound(mem, "g-1"), 10, "the two that fit")
    wait_for(lambda: sched.unschedulable() == ["default/g-2"], 10, "the one that does not")
    assert sched.gangs == {} and sched.errors == 0


class _Unserved:
    """A list-watch whose first list meets the 404 of an API that is not served."""

    kind = "PodGroup"

    def list(self) -> tuple[list[Obj], str]:
        raise NotFoundError("the server could not find the requested resource")


class _Unreachable(_Unserved):
    """A list-watch whose apiserver cannot be reached."""

    def list(self) -> tuple[list[Obj], str]:
        raise ApiConnectionError("cannot connect to http://127.0.0.1:1")


def test_serves_tells_a_missing_api_from_a_served_one() -> None:
    from kdispatch.testing import MemoryListWatch

    assert serves(MemoryListWatch(InMemoryApiServer(), "PodGroup"))
    assert not serves(_Unserved())  # type: ignore[arg-type]
    # unreachable: counted as served, so that the informer's sync says why
    assert serves(_Unreachable())  # type: ignore[arg-type]


def test_one_binding_per_pod_where_the_api_layer_has_no_gangs() -> None:
    api = FakeApi()
    group = make_podgroup("g", min_count=3)
    pods = [_pod(f"g-{i}", cpu=100, pod_group="g") for i in range(3)]
    with PerPodGang(api) as gang:
        futures = [gang.submit(PodBinding.for_pod(p, "n0")) for p in pods]
        assert len(api.of_type("pod_binding")) == 3  # sent as submitted, none held
        status = gang.then(_status_true(group))
    assert not gang.future.done()
    api.calls[0][1].set_result(Outcome.SUCCESS)
    api.calls[1][1].set_exception(CallFailed("refused", uid="u-g-1", call_type="pod_binding"))
    api.calls[2][1].set_result(Outcome.SUCCESS)
    error = gang.future.exception()
    assert isinstance(error, GangPartiallyBound)
    assert [r.name for r in error.bound] == ["g-0", "g-2"] and [r.name for r in error.failed] == [
        "g-1"
    ]
    assert len(futures) == 3 and status.exception() is not None  # never submitted
    assert api.of_type("podgroup_status_patch") == []


def _status_true(group: Obj) -> Any:
    from kdispatch import PodGroupStatusPatch

    return PodGroupStatusPatch.initially_scheduled(group, True)


def test_the_workload_has_gangs_a_share_of_them_unplaceable() -> None:
    wl = build_workload(
        WorkloadSpec(nodes=10, pods=50, gangs=5, gang_size=3, infeasible_gang_share=0.4)
    )
    assert [g["spec"]["schedulingPolicy"] for g in wl.podgroups] == [{"gang": {"minCount": 3}}] * 5
    members = [p for p in wl.waves[0] if p["spec"].get("schedulingGroup")]
    assert len(members) == 15
    infeasible = [p for p in members if p["metadata"]["labels"][GANG_LABEL] == "infeasible"]
    assert len(infeasible) == 6
    asks = [p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in infeasible]
    assert asks.count(str(2 * NODE_CPU_M // 1000)) == 2  # one per unplaceable gang
    args = parser().parse_args(["--gangs", "4", "--gang-size", "2"])
    assert (args.gangs, args.gang_size) == (4, 2)


def test_the_main_job_runs_the_gang_workload_and_verifies_the_podgroups() -> None:
    cfg = RunConfig(
        nodes=6,
        pods=60,
        latency_ms=1.0,
        high_priority_share=0.0,  # no preemption: gangs never lose a member here
        gangs=5,
        gang_size=3,
        infeasible_gang_share=0.4,
    )
    fig = run(cfg, stream=None)
    assert fig["stopped_by"] == "done" and fig["verdict_ok"], (fig["verdict"], fig["problems"])
    assert fig["podgroups"] == 5
    assert fig["gangs"]["bound"] == 3 and fig["gangs"]["unschedulable"] >= 2
    assert fig["gang_latency_ms"]["gangs"] == 3
    unplaced = [p for p in fig["unschedulable_pods"] if p.startswith("default/gang-")]
    assert sorted(unplaced) == [f"default/gang-00{i}-{j}" for i in range(2) for j in range(3)]
    assert fig["intents_checked"] > 0


def test_verification_catches_a_podgroup_status_the_server_does_not_show() -> None:
    done: Future[Outcome] = Future()
    done.set_result(Outcome.SUCCESS)
    intent = Intent(
        GROUP, "u-g", "default/g", {"status": "True", "reason": "Scheduled"}, done, 0, 0
    )
    shown = make_podgroup("g", min_count=1, uid="u-g")
    assert verify([intent], {}, {}, None, groups={"u-g": shown}).lost_intents == 1
    shown["status"]["conditions"] = [{"type": PIS, "status": "True", "reason": "Scheduled"}]
    assert verify([intent], {}, {}, None, groups={"u-g": shown}).lost_intents == 0
