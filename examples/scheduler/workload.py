"""The main job's workload: nodes, ResourceClaims and two waves of pods.

* Nodes: 4 cpu / 16 GiB each, labelled with one of three zones; every ``gpu_every``-th node also
  offers 4 ``example.com/gpu`` devices and is tainted so that only pods with claims (which
  tolerate the taint) go there.
* Wave 1 (low priority 0): sized to fill about ``fill`` of the untainted nodes' cpu with mixed pod
  sizes; some select a zone, some reference a ResourceClaim (one claim per pod), and a few are
  unschedulable (a nodeSelector no node matches, or more cpu than any node has).
* Wave 2 (priority 1000, created once wave 1 has been placed): pods of 2.5 times the average size
  (at least 1.5 times the free space wave 1 leaves per node), which mostly fit nowhere and must
  preempt.
* Gangs (``gangs``, none by default): PodGroups ``gang-000``, ... (``scheduling.k8s.io/v1beta1``)
  of ``gang_size`` pods each with ``minCount`` = ``gang_size``, their small pods (100m) shuffled
  into wave 1. The first ``infeasible_gang_share`` of them cannot be placed as a whole: one
  member asks for more cpu than any node has. Each PodGroup and pod is labelled
  ``example.com/gang`` = ``feasible`` or ``infeasible``.

Deterministic for a given seed. Pure module: builds dicts, creates nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from examples.scheduler.resources import GPU_RESOURCE
from kdispatch.testing import make_claim, make_node, make_pod, make_podgroup

NODE_CPU_M = 4000
NODE_MEM_MI = 16384
GPUS_PER_NODE = 4
ZONES = ("zone-a", "zone-b", "zone-c")
ZONE_LABEL = "topology.kubernetes.io/zone"
HIGH_PRIORITY = 1000
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
GANG_LABEL = "example.com/gang"
GANG_POD_CPU_M = 100


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Shape of the workload (shares are fractions of ``pods``)."""

    nodes: int = 500
    pods: int = 5000
    high_priority_share: float = 0.03
    unschedulable_share: float = 0.01
    claim_share: float = 0.02
    zone_share: float = 0.1
    fill: float = 0.9
    gpu_every: int = 10
    seed: int = 1
    gangs: int = 0
    gang_size: int = 4
    infeasible_gang_share: float = 0.2


@dataclass(slots=True)
class Workload:
    """Objects to create: nodes and claims first, then the pod waves in order."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    podgroups: list[dict[str, Any]] = field(default_factory=list)
    waves: list[list[dict[str, Any]]] = field(default_factory=list)

    @property
    def pod_count(self) -> int:
        """Pods in all waves."""
        return sum(len(w) for w in self.waves)


def build_workload(spec: WorkloadSpec) -> Workload:
    """Build the objects of ``spec``."""
    rng = random.Random(spec.seed)
    out = Workload()
    for i in range(spec.nodes):
        node = make_node(
            f"node-{i:04d}", NODE_CPU_M, NODE_MEM_MI, {ZONE_LABEL: ZONES[i % len(ZONES)]}
        )
        if spec.gpu_every and i % spec.gpu_every == 0:
            for key in ("capacity", "allocatable"):
                node["status"][key][GPU_RESOURCE] = str(GPUS_PER_NODE)
            node["spec"]["taints"] = [dict(GPU_TAINT)]
        out.nodes.append(node)

    n_high = round(spec.pods * spec.high_priority_share)
    n_unsched = round(spec.pods * spec.unschedulable_share)
    n_low = max(0, spec.pods - n_high - n_unsched)
    gpu_nodes = -(-spec.nodes // spec.gpu_every) if spec.gpu_every else 0
    n_claims = min(round(spec.pods * spec.claim_share), n_low, gpu_nodes * GPUS_PER_NODE)
    avg = spec.fill * (spec.nodes - gpu_nodes) * NODE_CPU_M / max(1, n_low - n_claims)
    sizes = [max(10, round(avg * f / 10) * 10) for f in (0.5, 0.75, 1.0, 1.25, 1.5)]

    wave1: list[dict[str, Any]] = []
    for i in range(n_low):
        name = f"low-{i:05d}"
        cpu = rng.choice(sizes)
        selector = {ZONE_LABEL: rng.choice(ZONES)} if rng.random() < spec.zone_share else None
        claims: list[str] = []
        if i < n_claims:
            claim = make_claim(f"gpu-{name}")
            out.claims.append(claim)
            claims.append(claim["metadata"]["name"])
            selector = None
        pod = make_pod(name, cpu_m=cpu, mem_mi=cpu * 2, node_selector=selector, claims=claims)
        if claims:
            pod["spec"]["tolerations"] = [dict(GPU_TOLERATION)]
        wave1.append(pod)
    for i in range(n_unsched):
        name = f"unschedulable-{i:04d}"
        if i % 2:
            pod = make_pod(name, cpu_m=100, mem_mi=128, node_selector={ZONE_LABEL: "nowhere"})
        else:
            pod = make_pod(name, cpu_m=NODE_CPU_M * 2, mem_mi=256)
        wave1.append(pod)
    wave1 += _gangs(spec, out)
    rng.shuffle(wave1)
    # larger than the free space wave 1 leaves on a node, so they must preempt
    high_cpu = round(max(2.5 * avg, 1.5 * (1 - spec.fill) * NODE_CPU_M) / 10) * 10
    wave2 = [
        make_pod(f"high-{i:04d}", cpu_m=high_cpu, mem_mi=high_cpu * 2, priority=HIGH_PRIORITY)
        for i in range(n_high)
    ]
    out.waves = [wave1, wave2] if wave2 else [wave1]
    return out


def _gangs(spec: WorkloadSpec, out: Workload) -> list[dict[str, Any]]:
    """The gangs' PodGroups (into ``out``) and their pods (returned)."""
    infeasible = round(spec.gangs * spec.infeasible_gang_share)
    pods: list[dict[str, Any]] = []
    for i in range(spec.gangs):
        group = f"gang-{i:03d}"
        labels = {GANG_LABEL: "infeasible" if i < infeasible else "feasible"}
        out.podgroups.append(make_podgroup(group, min_count=spec.gang_size, labels=labels))
        for j in range(spec.gang_size):
            cpu = NODE_CPU_M * 2 if i < infeasible and j == 0 else GANG_POD_CPU_M
            pods.append(
                make_pod(f"{group}-{j}", cpu_m=cpu, mem_mi=128, labels=labels, pod_group=group)
            )
    return pods
