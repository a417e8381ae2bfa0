"""Nominations: pods that preempted others and have room reserved on a node.

A preemptor's ``status.nominatedNodeName`` is set through the API layer without waiting. The
nominator then reads it back with ``view(uid)`` — for the dispatcher that is the observed pod
with the *pending* patch applied (read-your-writes) — so the freed space is reserved at once,
long before the patch reaches the apiserver. Informer events carrying a nominatedNodeName are
recorded too (e.g. nominations made before this scheduler started).

While filtering a node for a pod of priority ``p``, the capacity requested by nominated pods of
priority ``>= p`` on that node (other than the pod itself) counts as used, as upstream does.

Thread-safe; every method may be called from any thread (``refresh`` blocks for one
``view`` round trip, so it is never called from an actor or the informer thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from examples.scheduler.podinfo import PodInfo
from kdispatch import Obj, get_path

Reservations = dict[str, tuple[int, int]]
"""node name → (cpu millicores, memory bytes) reserved for nominated pods."""


class Nominator:
    """Nominated node per pod, read through ``view`` (see module docstring)."""

    def __init__(self, view: Callable[[str], Obj | None]) -> None:
        self._view = view
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, PodInfo]] = {}  # uid -> (node, pod)

    def refresh(self, pod: PodInfo) -> str | None:
        """Scheduling thread. Read the pod's nominatedNodeName through ``view`` (pending
        mutations included) and record it; returns it. A pod the view does not know keeps its
        recorded nomination."""
        obj = self._view(pod.uid)
        if obj is None:
            return self.node_of(pod.uid)
        nnn = get_path(obj, "status", "nominatedNodeName")
        with self._lock:
            if isinstance(nnn, str) and nnn:
                self._pods[pod.uid] = (nnn, pod)
                return nnn
            self._pods.pop(pod.uid, None)
            return None

    def observe(self, pod: PodInfo) -> None:
        """Informer thread. Record a nomination the apiserver shows (an event without one never
        clears a nomination: this scheduler is the only writer and the event may predate its
        pending patch)."""
        nnn = pod.nominated_node
        if nnn is not None:
            with self._lock:
                self._pods[pod.uid] = (nnn, pod)

    def remove(self, uid: str) -> None:
        """Any thread. The pod was placed, gave up or is gone."""
        with self._lock:
            self._pods.pop(uid, None)

    def node_of(self, uid: str) -> str | None:
        """The recorded nominated node of a pod, if any."""
        entry = self._pods.get(uid)
        return entry[0] if entry is not None else None

    def reservations(self, priority: int, exclude: str) -> Reservations:
        """Scheduling thread. Capacity reserved per node for nominated pods of priority
        ``>= priority``, other than ``exclude``."""
        out: Reservations = {}
        with self._lock:
            for uid, (node, pod) in self._pods.items():
                if uid == exclude or pod.priority < priority:
                    continue
                cpu, mem = out.get(node, (0, 0))
                out[node] = (cpu + pod.cpu_m, mem + pod.mem)
        return out

    def __len__(self) -> int:
        return len(self._pods)
