"""The peer benchmark's gang workload without a server: which gangs are infeasible, what
``--quick`` and ``--scale`` make of it, the per-gang figures from what the watches saw and
the server's final objects, and the report's gang table."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.peer import QUICK
from benchmarks.peer_cluster import INITIALLY_SCHEDULED
from benchmarks.peer_gang import Gang, gang_figures, layout, members, pod_bodies
from benchmarks.peer_report import summary_markdown
from benchmarks.peer_run import BY_WORKLOAD, FIT, UNFIT, _done
from benchmarks.peer_watch import GroupSeen, Seen

pytestmark = pytest.mark.timeout(30)


def test_the_full_size_has_every_fifth_of_100_gangs_infeasible_behind_the_flood() -> None:
    w = BY_WORKLOAD["gang"]
    assert (w.nodes, w.fit, w.unfit, w.late, w.qps, w.burst) == (500, 0, 2000, True, 50.0, 100)
    gangs = layout(w.gangs, w.infeasible_gangs, w.gang_size)
    assert len(gangs) == 100 and {len(g.members) for g in gangs} == {10}
    assert {g.min_count for g in gangs} == {10}
    assert [i for i, g in enumerate(gangs) if not g.feasible] == list(range(0, 100, 5))
    assert w.feature_gates == {"GenericWorkload": True}
    assert w.runtime_config == {"scheduling.k8s.io/v1beta1": True}
    assert BY_WORKLOAD["flood"].feature_gates == BY_WORKLOAD["flood"].runtime_config == {}


def test_quick_keeps_the_gang_size_and_one_infeasible_gang() -> None:
    quick = BY_WORKLOAD["gang"].scaled(*QUICK)
    assert (quick.nodes, quick.fit, quick.unfit) == (50, 0, 80)
    assert (quick.gangs, quick.infeasible_gangs, quick.gang_size) == (4, 1, 10)
    tiny = BY_WORKLOAD["gang"].scaled(0.01, 0.001)
    assert (tiny.gangs, tiny.infeasible_gangs) == (2, 1)
    assert BY_WORKLOAD["flood"].scaled(*QUICK).gangs == 0


def test_one_member_of_an_infeasible_gang_asks_for_more_than_a_node_has() -> None:
    gangs = layout(2, 1, 3)
    bodies = pod_bodies(gangs, "sched", FIT, UNFIT)
    assert [b["spec"]["schedulingGroup"]["podGroupName"] for b in bodies] == ["g000"] * 3 + [
        "g001"
    ] * 3
    cpus = [b["spec"]["containers"][0]["resources"]["requests"]["cpu"] for b in bodies]
    assert cpus == [UNFIT["cpu"], FIT["cpu"], FIT["cpu"]] + [FIT["cpu"]] * 3
    labels = [b["metadata"]["labels"]["peer-group"] for b in bodies]
    assert labels == ["gang-infeasible"] * 3 + ["gang"] * 3


def test_an_infeasible_gangs_member_is_settled_bound_or_marked() -> None:
    done = _done({"a"}, {"u"}, {"x"})
    pods = {"a": Seen(1.0, "n1"), "u": Seen(unschedulable_at=1.0)}
    assert not done(pods)
    assert done(pods | {"x": Seen(2.0, "n2")})
    assert done(pods | {"x": Seen(unschedulable_at=2.0)})
    assert not done(pods | {"x": Seen()})


def _pod(node: str = "") -> dict[str, Any]:
    return {"spec": {"nodeName": node} if node else {}}


def _group(status: str = "") -> dict[str, Any]:
    conds = [{"type": INITIALLY_SCHEDULED, "status": status}] if status else []
    return {"status": {"conditions": conds}}


def test_gang_figures_from_the_watches_and_the_final_state() -> None:
    ok = Gang("ok", ("ok-0", "ok-1"), 2, True)
    slow = Gang("slow", ("slow-0", "slow-1"), 2, True)
    bad = Gang("bad", ("bad-0", "bad-1"), 2, False)
    seen = {
        "ok-0": Seen(11.0, "n1"),
        "ok-1": Seen(12.5, "n2"),
        "slow-0": Seen(13.0, "n1"),  # its second member never bound
        "bad-1": Seen(14.0, "n3"),  # bound once, gone from the final state
    }
    groups_seen = {
        "ok": GroupSeen(10.5, "True", "True"),
        "slow": GroupSeen(16.0, "True", "False", regressed=True),
        "bad": GroupSeen(11.0, "False", "False"),
    }
    pods = {"ok-0": _pod("n1"), "ok-1": _pod("n2"), "slow-0": _pod("n1"), "slow-1": _pod()}
    pods |= {"bad-0": _pod(), "bad-1": _pod()}
    figures = gang_figures(
        [ok, slow, bad],
        t0=10.0,
        seen=seen,
        groups_seen=groups_seen,
        pods=pods,
        groups={"ok": _group("True"), "slow": _group("False"), "bad": _group()},
    )
    assert figures == {
        "gangs": 3,
        "gangs_feasible": 2,
        "gang_size": 2,
        "feasible_fully_bound": 1,
        "completion_s": {"p50": 2.5, "p99": 2.5},
        "partial_window_s": {"p50": 1.5, "p99": 1.5},
        "infeasible_pods_bound": 1,
        "infeasible_gangs_with_a_binding": 1,
        "podgroups_with_condition": 2,
        "feasible_condition_true": 1,
        "infeasible_condition_false": 0,
        "condition_regressed": 1,
        "condition_s_feasible": {"p50": 0.5, "p99": 6.0},
        "condition_s_infeasible": {"p50": 1.0, "p99": 1.0},
    }
    assert members([ok, slow, bad], feasible=False) == ["bad-0", "bad-1"]


def test_the_report_has_a_gang_table_only_for_a_workload_with_gangs() -> None:
    gang = BY_WORKLOAD["gang"].scaled(*QUICK)
    flood = BY_WORKLOAD["flood"].scaled(*QUICK)
    figures = {
        "gangs": 4,
        "gangs_feasible": 3,
        "feasible_fully_bound": 3,
        "completion_s": {"p50": 1.5, "p99": 2.25},
        "infeasible_pods_bound": 9,
    }
    base = {
        "contender": "example",
        "round": 0,
        "stopped_by": "done",
        "lost": 0,
        "duplicates": 0,
        "misplaced": 0,
        "requests": {"POST pods/binding": 30},
    }
    results = {
        "meta": {
            "kubernetes": "v1.37.2",
            "cpus": 2,
            "rounds": 1,
            "started": "now",
            "workloads": [vars(gang), vars(flood)],
            "contenders": {"example": "the example"},
        },
        "records": [base | {"workload": "gang", "gang": figures}, base | {"workload": "flood"}],
    }
    md = summary_markdown(results)
    assert (
        "### gang: 50 nodes, 80 unfit pods first, then 4 PodGroups of 10 pods (1 infeasible)" in md
    )
    assert md.count("Gangs (4 PodGroups, 3 feasible;") == 1
    row = next(line for line in md.splitlines() if line.startswith("| the example | 3 |"))
    assert row.split(" | ")[1:7] == ["3", "1.50", "2.25", "\u2013", "\u2013", "9"]
    flood_part = md.split("### flood")[1]
    assert "Gangs (" not in flood_part
