"""Preemption: choose victims for a pod that fits nowhere, and remember who is waiting for whom.

:func:`select_victims` evaluates nodes (from a random offset, at most ``max_candidates`` nodes
that could help) the upstream way: remove every lower-priority pod, check the preemptor would fit,
then reprieve the removed pods from the highest priority down while it still fits. The candidate
with the lowest highest-victim priority, then the lowest priority sum, then the fewest victims
wins. Pods already being preempted are never chosen again.

:class:`Preemptions` is the guard against upstream bug kubernetes#134249 (dozens of preemption
calls for one pod): a preemptor whose victims are still terminating never preempts again; it
waits, and is re-activated once its last victim is gone.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from examples.scheduler.cache import SchedulerCache
from examples.scheduler.framework import (
    CLAIM_ELSEWHERE,
    NO_DEVICES,
    SELECTOR_MISMATCH,
    UNTOLERATED_TAINT,
)
from examples.scheduler.nominator import Reservations
from examples.scheduler.podinfo import PodInfo

UNRESOLVABLE = frozenset({SELECTOR_MISMATCH, UNTOLERATED_TAINT, CLAIM_ELSEWHERE, NO_DEVICES})
"""Filter failures that evicting pods cannot fix."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node and the pods to evict from it."""

    node: str
    victims: tuple[PodInfo, ...]

    @property
    def rank(self) -> tuple[int, int, int]:
        """Smaller is better: highest victim priority, priority sum, number of victims."""
        prios = [v.priority for v in self.victims]
        return (max(prios), sum(prios), len(prios))


def select_victims(
    pod: PodInfo,
    cache: SchedulerCache,
    reservations: Reservations,
    rng: random.Random,
    max_candidates: int = 100,
) -> Candidate | None:
    """The best node to preempt on, or None. The caller holds the cache lock (so the victims
    are still placed when it marks them). Pods with claims are placed by allocation only and
    never preempt (devices freed by victims are not considered)."""
    if pod.claims:
        return None
    nodes = cache.nodes
    n = len(nodes)
    if n == 0:
        return None
    best: Candidate | None = None
    seen = 0
    start = rng.randrange(n)
    for i in range(n):
        node = nodes[(start + i) % n]
        if not node.admits(pod):
            continue
        lower = [
            p
            for p in node.pods.values()
            if p.priority < pod.priority and not cache.is_victim(p.uid)
        ]
        if not lower:
            continue
        reserved = reservations.get(node.name, (0, 0))
        cpu = node.cpu_free - reserved[0] + sum(p.cpu_m for p in lower)
        mem = node.mem_free - reserved[1] + sum(p.mem for p in lower)
        if cpu < pod.cpu_m or mem < pod.mem:
            continue
        victims: list[PodInfo] = []
        for p in sorted(lower, key=lambda p: -p.priority):
            if cpu - p.cpu_m >= pod.cpu_m and mem - p.mem >= pod.mem:
                cpu -= p.cpu_m  # reprieved: it stays
                mem -= p.mem
            else:
                victims.append(p)
        if not victims:  # fits without evicting anyone: filtering will find it next cycle
            continue
        cand = Candidate(node.name, tuple(victims))
        if best is None or cand.rank < best.rank:
            best = cand
        seen += 1
        if seen >= max_candidates:
            break
    return best


class Preemptions:
    """Preemptors and the victims they wait for. Thread-safe; any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, set[str]] = {}  # preemptor uid -> victim uids still present
        self._by_victim: dict[str, str] = {}  # victim uid -> preemptor uid
        self.started = 0
        """Preemptions started (one per preemptor round)."""

    def start(self, preemptor: str, victims: list[str]) -> None:
        """Record a preemption round. Raises RuntimeError if the preemptor is still waiting
        (a caller bug: it must check :meth:`waiting` first)."""
        with self._lock:
            if self._waiting.get(preemptor):
                raise RuntimeError(f"pod {preemptor} preempted again while its victims live")
            self._waiting[preemptor] = set(victims)
            for v in victims:
                self._by_victim[v] = preemptor
            self.started += 1

    def waiting(self, preemptor: str) -> bool:
        """Whether the preemptor still has victims terminating."""
        with self._lock:
            return bool(self._waiting.get(preemptor))

    def victim_gone(self, victim: str) -> str | None:
        """A victim was deleted (or its preemption failed for good). Returns its preemptor if
        that was the preemptor's last victim (it should be re-activated)."""
        with self._lock:
            preemptor = self._by_victim.pop(victim, None)
            if preemptor is None:
                return None
            left = self._waiting.get(preemptor)
            if left is None:
                return None
            left.discard(victim)
            if left:
                return None
            del self._waiting[preemptor]
            return preemptor

    def forget(self, preemptor: str) -> None:
        """The preemptor is gone or placed: stop tracking its victims."""
        with self._lock:
            for v in self._waiting.pop(preemptor, ()):
                self._by_victim.pop(v, None)
