"""The gangs of the peer benchmark's ``gang`` workload: PodGroups (``scheduling.k8s.io/v1beta1``,
``gang: {minCount}``) whose pods join them by ``spec.schedulingGroup.podGroupName``, some of
them infeasible as a whole (one member asks for more cpu than any node has), and the figures
of a run per gang, read from the pod and PodGroup watches and the server's final state.

Benchmark-only code; pure functions apart from the bodies' names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.peer_cluster import (
    INITIALLY_SCHEDULED,
    Obj,
    condition,
    pod_body,
    podgroup_body,
)
from benchmarks.peer_stats import p50_p99
from benchmarks.peer_watch import GroupSeen, Seen


@dataclass(frozen=True)
class Gang:
    """One PodGroup and its member pods; ``feasible``: whether the gang fits as a whole
    (an infeasible one has a member asking for more cpu than any node has)."""

    name: str
    members: tuple[str, ...]
    min_count: int
    feasible: bool


def layout(gangs: int, infeasible: int, size: int) -> list[Gang]:
    """``gangs`` gangs of ``size`` pods with minCount ``size``; ``infeasible`` of them, spread
    evenly over the list (the order the pods are created in), cannot fit."""
    bad = {(k * gangs) // infeasible for k in range(infeasible)} if infeasible else set()
    return [
        Gang(
            f"g{i:03d}",
            tuple(f"g{i:03d}-{j:02d}" for j in range(size)),
            size,
            i not in bad,
        )
        for i in range(gangs)
    ]


def members(gangs: list[Gang], *, feasible: bool) -> list[str]:
    """The pods of the feasible (or the infeasible) gangs."""
    return [n for g in gangs if g.feasible == feasible for n in g.members]


def podgroup_bodies(gangs: list[Gang]) -> list[Obj]:
    return [podgroup_body(g.name, g.min_count) for g in gangs]


def pod_bodies(
    gangs: list[Gang], served: str, small: Mapping[str, str], big: Mapping[str, str]
) -> list[Obj]:
    """The members, gang after gang: each asks for ``small``, except the first member of an
    infeasible gang, which asks for ``big``."""
    out = []
    for g in gangs:
        for j, name in enumerate(g.members):
            req = big if j == 0 and not g.feasible else small
            label = "gang" if g.feasible else "gang-infeasible"
            out.append(pod_body(name, served, req["cpu"], req["memory"], label, pod_group=g.name))
    return out


def _bound(pod: Obj | None) -> bool:
    return bool(pod is not None and pod.get("spec", {}).get("nodeName"))


def gang_figures(
    gangs: list[Gang],
    *,
    t0: float,
    seen: Mapping[str, Seen],
    groups_seen: Mapping[str, GroupSeen],
    pods: Mapping[str, Obj],
    groups: Mapping[str, Obj],
) -> dict[str, Any]:
    """Per feasible gang: the scheduler's start (``t0``, monotonic) to its minCount-th member
    seen bound (completion) and its first to its last member seen bound (the partial window),
    both over the gangs that got minCount members bound; the feasible gangs fully bound and
    the pods of infeasible gangs ever bound (the pod watch, or the final state); per PodGroup,
    the start to its first ``PodGroupInitiallyScheduled`` (the PodGroup watch), its final
    status (the server) and whether it went from True to False."""
    feasible = [g for g in gangs if g.feasible]
    infeasible = [g for g in gangs if not g.feasible]
    completion, window = [], []
    for g in feasible:
        times = sorted(t for n in g.members if n in seen and (t := seen[n].bound_at) is not None)
        if len(times) >= g.min_count:
            completion.append(times[g.min_count - 1] - t0)
            window.append(times[-1] - times[0])
    ever_bound = [
        n
        for g in infeasible
        for n in g.members
        if (n in seen and seen[n].node) or _bound(pods.get(n))
    ]
    final = {
        name: (condition(obj, INITIALLY_SCHEDULED) or {}).get("status", "")
        for name, obj in groups.items()
    }

    def appeared(of: list[Gang]) -> list[float]:
        return [
            at - t0
            for g in of
            if g.name in groups_seen and (at := groups_seen[g.name].condition_at) is not None
        ]

    return {
        "gangs": len(gangs),
        "gangs_feasible": len(feasible),
        "gang_size": gangs[0].min_count if gangs else 0,
        "feasible_fully_bound": sum(all(_bound(pods.get(n)) for n in g.members) for g in feasible),
        "completion_s": p50_p99(completion),
        "partial_window_s": p50_p99(window),
        "infeasible_pods_bound": len(ever_bound),
        "infeasible_gangs_with_a_binding": sum(
            any(n in ever_bound for n in g.members) for g in infeasible
        ),
        "podgroups_with_condition": sum(bool(final.get(g.name)) for g in gangs),
        "feasible_condition_true": sum(final.get(g.name) == "True" for g in feasible),
        "infeasible_condition_false": sum(final.get(g.name) == "False" for g in infeasible),
        "condition_regressed": sum(
            groups_seen[g.name].regressed for g in gangs if g.name in groups_seen
        ),
        "condition_s_feasible": p50_p99(appeared(feasible)),
        "condition_s_infeasible": p50_p99(appeared(infeasible)),
    }
