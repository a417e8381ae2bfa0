"""The peer benchmark (``benchmarks.peer``) at its smallest, against the real kube-apiserver:
one run of kube-scheduler and one of the example scheduler, 50 pods each, and the record's
counts checked against what the server has while the control plane still runs; the same for
the gang workload's figures (3 PodGroups of 10 pods behind 10 unfit ones)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from benchmarks.peer_cluster import (
    INITIALLY_SCHEDULED,
    Api,
    condition,
    list_podgroups,
    list_pods,
    request_delta,
    request_totals,
)
from benchmarks.peer_run import Workload, run_one
from benchmarks.peer_schedulers import BY_NAME
from kdispatch.testing.envtest import Binaries

pytestmark = [pytest.mark.realapi, pytest.mark.timeout(300)]

SMOKE = Workload("smoke", "smoke", nodes=5, fit=40, unfit=10, late=True)


def check_against_server(api: Api, rec: dict[str, Any]) -> None:
    """The record's counts are the server's: bound and unschedulable pods, one binding per
    bound pod, and the counters only grew by what was read after the run."""
    pods = list_pods(api)
    fit = [p for p in pods if p["metadata"]["labels"]["peer-group"] == "fit"]
    unfit = [p for p in pods if p["metadata"]["labels"]["peer-group"] == "unfit"]
    assert (len(fit), len(unfit)) == (rec["pods_fit"], rec["pods_unfit"]) == (40, 10)
    bound = [p for p in fit if p["spec"].get("nodeName")]
    assert rec["bound"] == len(bound) == 40
    for pod in bound:
        cond = condition(pod, "PodScheduled")
        assert cond is not None and cond["status"] == "True"
    marked = [p for p in unfit if (condition(p, "PodScheduled") or {}).get("status") == "False"]
    assert rec["unschedulable_marked"] == len(marked) == 10
    assert not any(p["spec"].get("nodeName") for p in unfit)
    assert rec["lost"] == rec["misplaced"] == rec["duplicates"] == 0
    assert rec["requests"]["POST pods/binding"] == 40
    assert rec["requests"]["PATCH pods/status"] >= 10
    assert rec["requests_total"] == sum(rec["requests"].values())
    assert rec["stopped_by"] == "done"
    assert rec["cpu_scheduler_s"] > 0 and rec["cpu_control_plane_s"] > 0
    assert rec["first_bind_s"] is not None and rec["first_bind_s"] <= rec["wall_s"]
    # the bindings counted by the server since start: exactly the record's, or one per pod
    totals = request_delta({}, request_totals(api))
    server_bindings = sum(
        n
        for (verb, res, sub, code), n in totals.items()
        if (verb, res, sub) == ("POST", "pods", "binding") and code == "201"
    )
    assert server_bindings == 40


def run_checked(
    workload: Workload,
    contender: str,
    binaries: Binaries,
    tmp_path: Path,
    check: Callable[[Api, dict[str, Any]], None],
) -> dict[str, Any]:
    """One run of ``contender`` on ``workload``, its record passed to ``check`` while the
    control plane still runs; the run's watch held. Returns the record."""
    checked: list[str] = []

    def on_end(api: Api, rec: dict[str, Any]) -> None:
        check(api, rec)
        checked.append(rec["contender"])

    rec = run_one(
        workload, BY_NAME[contender], binaries, tmp_path / "run", deadline_s=120, on_end=on_end
    )
    assert checked == [contender]
    assert rec["watch_error"] == ""
    return rec


@pytest.mark.parametrize("contender", ["kube-async", "example"])
def test_peer_run_counts_match_the_server(
    contender: str, scheduler_binaries: Binaries, tmp_path: Path
) -> None:
    rec = run_checked(SMOKE, contender, scheduler_binaries, tmp_path, check_against_server)
    if contender == "example":
        assert rec["event_requests"] >= 0
    else:
        assert rec["event_requests"] > 0  # kube-scheduler records Scheduled/FailedScheduling


GANGS = Workload(
    "gang-smoke", "gang smoke", nodes=5, fit=0, unfit=10, late=True, gangs=3, infeasible_gangs=1
)


def _label(pod: dict[str, Any]) -> str:
    label: str = pod["metadata"]["labels"]["peer-group"]
    return label


def check_gangs_against_server(api: Api, rec: dict[str, Any], *, gang_aware: bool) -> None:
    """The gang figures are the server's: feasible gangs fully bound, the infeasible gangs'
    pods bound at the end (the watch saw at least those), the PodGroups' conditions, and the
    PodGroup status writes the counters saw. With ``gang_aware`` (kube-scheduler's
    GangScheduling): no infeasible gang's pod bound, every member of one marked, every
    PodGroup's condition written (True for the feasible, False for the infeasible)."""
    pods = list_pods(api)
    by_group: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        group = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
        if group:
            by_group.setdefault(group, []).append(pod)
    feasible = {g for g, ms in by_group.items() if _label(ms[0]) == "gang"}
    assert (len(by_group), len(feasible)) == (3, 2)
    assert all(len(ms) == 10 for ms in by_group.values())
    gang = rec["gang"]
    assert (gang["gangs"], gang["gangs_feasible"], gang["gang_size"]) == (3, 2, 10)
    fully = [g for g in feasible if all(p["spec"].get("nodeName") for p in by_group[g])]
    assert gang["feasible_fully_bound"] == len(fully) == 2
    assert rec["bound"] == rec["pods_fit"] == 20 and rec["pods_either"] == 10
    bad = [p for g, ms in by_group.items() if g not in feasible for p in ms]
    bad_bound = [p for p in bad if p["spec"].get("nodeName")]
    assert gang["infeasible_pods_bound"] >= len(bad_bound)
    assert gang["completion_s"]["p50"] is not None
    assert gang["completion_s"]["p99"] <= rec["wall_s"]
    assert 0 <= gang["partial_window_s"]["p50"] <= gang["partial_window_s"]["p99"]
    statuses = {
        g["metadata"]["name"]: (condition(g, INITIALLY_SCHEDULED) or {}).get("status")
        for g in list_podgroups(api)
    }
    assert set(statuses) == set(by_group)
    assert gang["podgroups_with_condition"] == sum(bool(s) for s in statuses.values())
    assert gang["feasible_condition_true"] == sum(statuses[g] == "True" for g in feasible)
    assert gang["infeasible_condition_false"] == sum(
        s == "False" for g, s in statuses.items() if g not in feasible
    )
    totals = request_delta({}, request_totals(api))
    writes = sum(
        n
        for (verb, res, sub, _), n in totals.items()
        if (res, sub) == ("scheduling.k8s.io/podgroups", "status") and verb in ("PATCH", "PUT")
    )
    recorded = {**rec["drain_requests"]}
    for key, n in rec["requests"].items():
        recorded[key] = recorded.get(key, 0) + n
    assert writes == sum(
        n for k, n in recorded.items() if k.endswith(" scheduling.k8s.io/podgroups/status")
    )
    assert rec["lost"] == rec["duplicates"] == 0
    assert rec["stopped_by"] == "done"
    if gang_aware:
        assert gang["infeasible_pods_bound"] == 0
        assert all((condition(p, "PodScheduled") or {}).get("status") == "False" for p in bad)
        assert statuses == {g: "True" if g in feasible else "False" for g in by_group}
        assert gang["condition_regressed"] == 0
        assert writes >= 3


@pytest.mark.parametrize("contender", ["kube-async", "example"])
def test_gang_run_counts_match_the_server(
    contender: str, scheduler_binaries: Binaries, tmp_path: Path
) -> None:
    check = partial(check_gangs_against_server, gang_aware=contender == "kube-async")
    run_checked(GANGS, contender, scheduler_binaries, tmp_path, check)
