"""Filtering and scoring: which nodes can take a pod, and which is best.

Filters: nodeSelector, taints/tolerations, cpu and memory requests (counting capacity reserved
for nominated pods of higher or equal priority), and devices for the pod's unallocated
ResourceClaims (an allocated claim pins the pod to its node). Score: *least allocated* — the
mean of the free cpu and memory fractions the node would have left. Like upstream, a cycle stops
filtering once it has found ``num_feasible_to_find(n)`` feasible nodes, starting where the
previous cycle stopped, so large clusters are not scanned whole for every pod.

Runs on scheduling threads and reads node fields without the cache lock: the winning node is
re-checked by :meth:`SchedulerCache.reserve`. Pure functions otherwise.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter

from examples.scheduler.cache import NodeInfo, SchedulerCache
from examples.scheduler.nominator import Reservations
from examples.scheduler.podinfo import PodInfo
from examples.scheduler.taints import tolerated

MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENTAGE = 5

INSUFFICIENT_CPU = "Insufficient cpu"
INSUFFICIENT_MEMORY = "Insufficient memory"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
UNTOLERATED_TAINT = "node(s) had untolerated taint(s)"
NO_DEVICES = "node(s) cannot allocate all claims"
CLAIM_ELSEWHERE = "node(s) do not hold the pod's allocated claims"
_REASONS = (
    SELECTOR_MISMATCH,
    UNTOLERATED_TAINT,
    CLAIM_ELSEWHERE,
    INSUFFICIENT_CPU,
    INSUFFICIENT_MEMORY,
    NO_DEVICES,
)


def num_feasible_to_find(num_nodes: int) -> int:
    """How many feasible nodes a cycle looks for (upstream's adaptive percentage: 50% minus
    1% per 125 nodes, at least 5% and at least 100 nodes)."""
    if num_nodes < MIN_FEASIBLE_NODES:
        return num_nodes
    percentage = max(MIN_FEASIBLE_PERCENTAGE, 50 - num_nodes // 125)
    return max(MIN_FEASIBLE_NODES, num_nodes * percentage // 100)


@dataclass(slots=True)
class Filtered:
    """Result of filtering: feasible ``(score, node)`` pairs, failure reasons counted over the
    nodes that failed, and how many nodes were looked at."""

    feasible: list[tuple[float, NodeInfo]] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    evaluated: int = 0

    def best(self) -> NodeInfo | None:
        """The feasible node with the highest score (the first of equals, in filter order,
        which rotates per cycle)."""
        if not self.feasible:
            return None
        return max(self.feasible, key=itemgetter(0))[1]

    def ranked(self) -> list[NodeInfo]:
        """Feasible nodes, best score first (ties in filter order)."""
        return [node for _, node in sorted(self.feasible, key=lambda p: -p[0])]


def least_allocated(node: NodeInfo, cpu_free: int, mem_free: int, pod: PodInfo) -> float:
    """0..100: the mean free fraction of cpu and memory left after placing ``pod`` (the
    filter loop ranks by the same sum, unscaled)."""
    cpu = (cpu_free - pod.cpu_m) * node.inv_cpu
    mem = (mem_free - pod.mem) * node.inv_mem
    return 50.0 * (cpu + mem)


class Framework:
    """The filter/score pipeline over a :class:`SchedulerCache`. Thread-safe: its only state is
    the rotating start index (a benign race between threads)."""

    def __init__(self, cache: SchedulerCache) -> None:
        self.cache = cache
        self._start = 0

    def claim_constraints(self, pod: PodInfo) -> tuple[str | None, int, bool]:
        """``(pinned node, devices needed, conflict)`` for the pod's claims: an allocated claim
        pins the node; two claims allocated on different nodes are a conflict."""
        pinned: str | None = None
        needed = 0
        for claim in pod.claim_keys():
            alloc = self.cache.allocation(claim)
            if alloc is None or alloc.owner == pod.uid:
                needed += 1
            elif pinned is None or pinned == alloc.node:
                pinned = alloc.node
            else:
                return pinned, needed, True
        return pinned, needed, False

    def filter(
        self,
        pod: PodInfo,
        reservations: Reservations,
        *,
        limit: int | None = None,
        nodes: tuple[NodeInfo, ...] | None = None,
    ) -> Filtered:
        """Scheduling thread. Feasible nodes for ``pod`` with their scores (stops after
        ``limit``, default :func:`num_feasible_to_find`)."""
        nodes = self.cache.nodes if nodes is None else nodes
        out = Filtered()
        n = len(nodes)
        if n == 0:
            return out
        want = num_feasible_to_find(n) if limit is None else limit
        pinned, needed, conflict = self.claim_constraints(pod)
        if conflict:
            out.reasons[CLAIM_ELSEWHERE] = n
            out.evaluated = n
            return out
        # The hot loop of the scheduler: plain locals and int counters, one pass, no calls
        # for the common case (no taint, no reservation on the node). A nodeSelector narrows
        # the candidates through the cache's label index instead of a per-node check.
        cpu, mem, tolerations = pod.cpu_m, pod.mem, pod.tolerations
        no_cpu = no_mem = no_selector = no_toleration = elsewhere = no_devices = 0
        if pod.selector:
            nodes = self._matching(pod, nodes)
            no_selector = n - len(nodes)
        start = self._start % len(nodes) if nodes else 0
        if cpu > self.cache.most_cpu and pinned is None and not self.cache.tainted:
            return self._fits_nowhere(out, nodes, no_selector, start)
        feasible = out.feasible
        append = feasible.append
        evaluated = no_selector
        for node in chain(nodes[start:], nodes[:start]):
            evaluated += 1
            if node.taints and (not tolerations or not tolerated(node.taints, tolerations)):
                no_toleration += 1
                continue
            if pinned is not None and node.name != pinned:
                elsewhere += 1
                continue
            cpu_free = node.cpu_free
            mem_free = node.mem_free
            if reservations:
                reserved = reservations.get(node.name)
                if reserved is not None:
                    cpu_free -= reserved[0]
                    mem_free -= reserved[1]
            if cpu_free < cpu:
                no_cpu += 1
                continue
            if mem_free < mem:
                no_mem += 1
                continue
            if needed and len(node.free_devices) < needed:
                no_devices += 1
                continue
            # least allocated, unscaled (see least_allocated): free fractions left, summed
            append(((cpu_free - cpu) * node.inv_cpu + (mem_free - mem) * node.inv_mem, node))
            if len(feasible) >= want:
                break
        counts = (no_selector, no_toleration, elsewhere, no_cpu, no_mem, no_devices)
        out.reasons.update({r: c for r, c in zip(_REASONS, counts, strict=True) if c})
        out.evaluated = evaluated
        self._start = start + evaluated - no_selector
        return out

    def _fits_nowhere(
        self, out: Filtered, nodes: tuple[NodeInfo, ...], no_selector: int, start: int
    ) -> Filtered:
        """The filter loop's verdict for a pod asking more cpu than any node has (free cpu is
        at most allocatable), without the loop, when no node is tainted and no claim pins
        the pod: every candidate fails on cpu."""
        if no_selector:
            out.reasons[SELECTOR_MISMATCH] = no_selector
        if nodes:
            out.reasons[INSUFFICIENT_CPU] = len(nodes)
        out.evaluated = no_selector + len(nodes)
        self._start = start + len(nodes)
        return out

    def _matching(self, pod: PodInfo, nodes: tuple[NodeInfo, ...]) -> tuple[NodeInfo, ...]:
        """The nodes satisfying the pod's nodeSelector (through the label index when filtering
        the whole cluster)."""
        if nodes is self.cache.nodes:
            return self.cache.nodes_matching(pod.selector)
        return tuple(node for node in nodes if node.matches(pod.selector))

    @staticmethod
    def failure_message(num_nodes: int, reasons: Counter[str]) -> str:
        """Upstream's FitError text: ``0/500 nodes are available: 3 Insufficient cpu, ...``."""
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        return (
            f"0/{num_nodes} nodes are available: {parts}."
            if parts
            else (f"0/{num_nodes} nodes are available.")
        )
