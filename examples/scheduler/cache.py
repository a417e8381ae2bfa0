"""The scheduler's assume-cache: nodes, the pods placed on them, and device allocations.

A scheduling cycle filters and scores against a possibly slightly stale read of the nodes
(no lock), then *reserves* its choice with :meth:`SchedulerCache.reserve`, which re-checks the
fit under the cache lock and, if it still fits, places the pod at once ("assumed"). Concurrent
cycles therefore never double-book a node: the second one to reserve the last free capacity
fails and tries its next candidate. An assumed pod becomes *bound* when its binding succeeds or
the informer shows it bound, and is *forgotten* (un-assumed) when its binding fails.

Devices (for ResourceClaims) are counted per node from the ``example.com/gpu`` extended
resource; reserving a pod with unallocated claims picks a free device on the node for each.

Every public method may be called from any thread (scheduling threads, the informer thread,
binding continuations); mutations happen under one lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from examples.scheduler.podinfo import PodInfo
from examples.scheduler.resources import node_allocatable
from examples.scheduler.taints import Taint, node_taints, tolerated
from kdispatch import Obj, meta


class NodeInfo:
    """One node: allocatable and free capacity, its pods and devices. Mutated only under the
    cache lock; scheduling threads read the int fields without it (a stale read is re-checked
    by :meth:`SchedulerCache.reserve`)."""

    __slots__ = (
        "cpu_alloc",
        "cpu_free",
        "devices",
        "free_devices",
        "inv_cpu",
        "inv_mem",
        "labels",
        "mem_alloc",
        "mem_free",
        "name",
        "pods",
        "taints",
    )

    def __init__(
        self,
        name: str,
        labels: Mapping[str, str],
        cpu: int,
        mem: int,
        *,
        devices: int = 0,
        taints: tuple[Taint, ...] = (),
    ) -> None:
        self.name = name
        self.labels: dict[str, str] = dict(labels)
        self.taints = taints
        self.cpu_alloc = self.cpu_free = cpu
        self.mem_alloc = self.mem_free = mem
        self.inv_cpu = 1.0 / cpu if cpu else 0.0  # for scoring without divisions
        self.inv_mem = 1.0 / mem if mem else 0.0
        self.devices = tuple(f"gpu-{i}" for i in range(devices))
        self.free_devices: list[str] = list(self.devices)
        self.pods: dict[str, PodInfo] = {}

    def matches(self, selector: tuple[tuple[str, str], ...]) -> bool:
        """Whether the node's labels satisfy a nodeSelector."""
        labels = self.labels
        return all(labels.get(k) == v for k, v in selector)

    def admits(self, pod: PodInfo) -> bool:
        """nodeSelector and taints: whether the pod may run here at all (capacity aside)."""
        if pod.selector and not self.matches(pod.selector):
            return False
        return not self.taints or tolerated(self.taints, pod.tolerations)

    def _add(self, pod: PodInfo) -> None:
        self.pods[pod.uid] = pod
        self.cpu_free -= pod.cpu_m
        self.mem_free -= pod.mem

    def _remove(self, uid: str) -> PodInfo | None:
        pod = self.pods.pop(uid, None)
        if pod is not None:
            self.cpu_free += pod.cpu_m
            self.mem_free += pod.mem
        return pod


@dataclass(frozen=True, slots=True)
class Allocation:
    """A device allocated to a claim (``namespace/name``) on a node, for the pod ``owner``."""

    claim: str
    node: str
    device: str
    owner: str


class SchedulerCache:
    """Nodes, placed pods (assumed or bound), victims being preempted, and device allocations."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._node_list: tuple[NodeInfo, ...] = ()
        self._placed: dict[str, str] = {}  # pod uid -> node (assumed or bound)
        self._assumed: set[str] = set()
        self._victims: set[str] = set()
        self._claims: dict[str, Allocation] = {}
        self._by_label: dict[tuple[str, str], tuple[NodeInfo, ...]] | None = None
        self._priorities: Counter[int] = Counter()  # priorities of placed pods
        self.most_cpu = 0
        """The largest allocatable cpu (millicores) of any node (of the snapshot)."""
        self.tainted = False
        """Whether any node (of the snapshot) has a taint."""

    # ------------------------------------------------------------------ nodes

    def set_node(self, node: Obj) -> bool:
        """Informer thread. Add or update a node (its pods are kept). Whether something a
        pod's fit depends on changed: a new node, or another allocatable, labels, devices or
        taints."""
        name = str(meta(node).get("name"))
        cpu, mem, devices = node_allocatable(node)
        labels = meta(node).get("labels")
        with self._lock:
            info = NodeInfo(
                name,
                labels if isinstance(labels, Mapping) else {},
                cpu,
                mem,
                devices=devices,
                taints=node_taints(node),
            )
            old = self._nodes.get(name)
            changed = old is None or (
                old.cpu_alloc,
                old.mem_alloc,
                old.labels,
                old.devices,
                old.taints,
            ) != (cpu, mem, info.labels, info.devices, info.taints)
            if old is not None:
                for pod in old.pods.values():
                    info._add(pod)
                used = {a.device for a in self._claims.values() if a.node == name}
                info.free_devices = [d for d in info.devices if d not in used]
            self._nodes[name] = info
            self._nodes_changed()
        return changed

    def remove_node(self, name: str) -> None:
        """Informer thread. Forget a node (its pods stay known by uid until deleted)."""
        with self._lock:
            if self._nodes.pop(name, None) is not None:
                self._nodes_changed()

    def _nodes_changed(self) -> None:
        """Cache lock held. Rebuild the node snapshot and what is derived from it (derived
        first: a lock-free reader sees them no older than the list)."""
        nodes = tuple(self._nodes.values())
        self.most_cpu = max((n.cpu_alloc for n in nodes), default=0)
        self.tainted = any(n.taints for n in nodes)
        self._node_list = nodes
        self._by_label = None

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        """The nodes (an immutable snapshot of the list; the NodeInfos are live). Any thread."""
        return self._node_list

    def nodes_matching(self, selector: tuple[tuple[str, str], ...]) -> tuple[NodeInfo, ...]:
        """The nodes whose labels satisfy a (non-empty) nodeSelector, in node order, from a
        label index rebuilt after node changes. Any thread."""
        index = self._by_label
        if index is None:
            with self._lock:
                index = self._by_label
                if index is None:
                    built: dict[tuple[str, str], list[NodeInfo]] = {}
                    for node in self._node_list:
                        for pair in node.labels.items():
                            built.setdefault(pair, []).append(node)
                    index = self._by_label = {k: tuple(v) for k, v in built.items()}
        first = index.get(selector[0], ())
        if len(selector) == 1:
            return first
        return tuple(node for node in first if node.matches(selector))

    def node(self, name: str) -> NodeInfo | None:
        """A node by name. Any thread."""
        return self._nodes.get(name)

    @contextmanager
    def locked(self) -> Iterator[SchedulerCache]:
        """Hold the cache lock (preemption evaluates and marks victims atomically)."""
        with self._lock:
            yield self

    # ------------------------------------------------------------------ pods

    def reserve(
        self, pod: PodInfo, node_name: str, reserved: tuple[int, int] = (0, 0)
    ) -> list[Allocation] | None:
        """Scheduling thread. Place ``pod`` on ``node_name`` if it still fits, leaving
        ``reserved`` (cpu, mem) free for nominated pods; allocate a free device for each of its
        claims that has none. Returns the new allocations (possibly empty) or None if it does
        not fit (nothing changed)."""
        with self._lock:
            node = self._nodes.get(node_name)
            if node is None or pod.uid in self._placed:
                return None
            if (
                node.cpu_free - reserved[0] < pod.cpu_m
                or node.mem_free - reserved[1] < pod.mem
                or not node.admits(pod)
            ):
                return None
            new: list[Allocation] = []
            unallocated = []
            for claim in pod.claim_keys():
                alloc = self._claims.get(claim)
                if alloc is None:
                    unallocated.append(claim)
                elif alloc.node != node_name:
                    return None
            if len(unallocated) > len(node.free_devices):
                return None
            for claim in unallocated:
                alloc = Allocation(claim, node_name, node.free_devices.pop(0), pod.uid)
                self._claims[claim] = alloc
                new.append(alloc)
            self._place(node, pod)
            self._assumed.add(pod.uid)
            return new

    def forget(self, uid: str) -> None:
        """Binding continuation. Un-assume a pod whose binding failed: free its capacity and
        the devices allocated for it. A pod already confirmed bound is left alone."""
        with self._lock:
            if uid not in self._assumed:
                return
            self._assumed.discard(uid)
            self._unplace(uid)
            self._release_claims(uid)

    def confirm(self, pod: PodInfo, node_name: str) -> None:
        """Binding continuation or informer thread. ``pod`` is bound to ``node_name``: keep it
        there (adding it if this scheduler did not place it)."""
        with self._lock:
            self._assumed.discard(pod.uid)
            current = self._placed.get(pod.uid)
            if current == node_name:
                node = self._nodes.get(node_name)
                if node is not None and pod.uid in node.pods:
                    node.pods[pod.uid] = pod
                return
            if current is not None:
                self._unplace(pod.uid)
            node = self._nodes.get(node_name)
            if node is not None:
                self._place(node, pod)

    def remove(self, uid: str) -> list[Allocation]:
        """Informer thread. A pod was deleted: free its capacity and devices; returns the
        allocations it held (their claims should be deallocated)."""
        with self._lock:
            self._assumed.discard(uid)
            self._victims.discard(uid)
            self._unplace(uid)
            return self._release_claims(uid)

    def _place(self, node: NodeInfo, pod: PodInfo) -> None:
        """Lock held."""
        node._add(pod)
        self._placed[pod.uid] = node.name
        self._priorities[pod.priority] += 1

    def _unplace(self, uid: str) -> None:
        """Lock held."""
        node_name = self._placed.pop(uid, None)
        node = self._nodes.get(node_name) if node_name else None
        if node is not None:
            pod = node._remove(uid)
            if pod is not None:
                self._priorities[pod.priority] -= 1
                if not self._priorities[pod.priority]:
                    del self._priorities[pod.priority]

    def _release_claims(self, owner: str) -> list[Allocation]:
        released = [a for a in self._claims.values() if a.owner == owner]
        for alloc in released:
            del self._claims[alloc.claim]
            node = self._nodes.get(alloc.node)
            if node is not None and alloc.device in node.devices:
                node.free_devices.append(alloc.device)
        return released

    def placed_on(self, uid: str) -> str | None:
        """The node a pod is assumed or bound on. Any thread."""
        return self._placed.get(uid)

    def has_lower_priority(self, priority: int) -> bool:
        """Whether any placed pod has a priority below ``priority`` (a cheap pre-check before
        looking for preemption victims). Any thread."""
        with self._lock:
            return any(p < priority for p in self._priorities)

    def is_assumed(self, uid: str) -> bool:
        """Whether the pod is assumed and its binding not yet confirmed. Any thread."""
        return uid in self._assumed

    # ------------------------------------------------------------------ claims

    def allocation(self, claim: str) -> Allocation | None:
        """The device allocated to a claim (``namespace/name``), if any. Any thread."""
        return self._claims.get(claim)

    def adopt_allocation(self, claim: str, node_name: str, device: str, owner: str) -> None:
        """Informer thread. Record an allocation this scheduler did not make (e.g. it existed
        before it started)."""
        with self._lock:
            if claim in self._claims:
                return
            node = self._nodes.get(node_name)
            if node is not None and device in node.free_devices:
                node.free_devices.remove(device)
            self._claims[claim] = Allocation(claim, node_name, device, owner)

    # ------------------------------------------------------------------ victims

    def mark_victims(self, uids: list[str]) -> None:
        """Preemption (lock held by the caller or not). These pods are being preempted: they
        keep their capacity until deleted but are never chosen as victims again."""
        with self._lock:
            self._victims.update(uids)

    def unmark_victim(self, uid: str) -> None:
        """Preemption continuation: a victim's preemption failed; it may be chosen again."""
        with self._lock:
            self._victims.discard(uid)

    def is_victim(self, uid: str) -> bool:
        """Whether the pod is being preempted. Any thread."""
        return uid in self._victims

    def stats(self) -> dict[str, Any]:
        """Counts for reports. Any thread."""
        with self._lock:
            return {
                "nodes": len(self._nodes),
                "placed": len(self._placed),
                "assumed": len(self._assumed),
                "victims": len(self._victims),
                "claims_allocated": len(self._claims),
            }
