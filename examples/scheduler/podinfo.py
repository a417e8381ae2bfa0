"""``PodInfo``: the scheduler's parsed, immutable view of one pod.

Parsing (requests, priority, nodeSelector, claims, PodGroup) happens once per pod object so
that the hot filter loop only touches ints and tuples. Pure module: no threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from examples.scheduler.resources import pod_requests
from examples.scheduler.taints import Toleration, pod_tolerations
from kdispatch import Obj, get_path, is_terminating, meta, pod_node_name, uid_of


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod as the scheduler sees it. ``obj`` is the newest observed object (the basis of the
    calls made for it); the other fields are derived from its spec."""

    uid: str
    namespace: str
    name: str
    priority: int
    cpu_m: int
    mem: int
    selector: tuple[tuple[str, str], ...]
    claims: tuple[str, ...]
    tolerations: tuple[Toleration, ...]
    group: str | None
    """``spec.schedulingGroup.podGroupName``: the PodGroup (same namespace) the pod belongs
    to, or None."""
    obj: Obj

    @classmethod
    def of(cls, pod: Obj) -> PodInfo:
        """Parse ``pod``. Raises :class:`~kdispatch.InvalidObjectError` for bad
        identity or
        quantities."""
        m = meta(pod)
        spec = pod.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        priority = spec.get("priority")
        selector = spec.get("nodeSelector")
        cpu_m, mem = pod_requests(pod)
        return cls(
            uid=uid_of(pod),
            namespace=str(m.get("namespace", "default")),
            name=str(m.get("name")),
            priority=priority if isinstance(priority, int) else 0,
            cpu_m=cpu_m,
            mem=mem,
            selector=tuple(sorted(selector.items())) if isinstance(selector, Mapping) else (),
            claims=_claim_names(spec),
            tolerations=pod_tolerations(pod),
            group=_group_name(spec),
            obj=pod,
        )

    def with_obj(self, pod: Obj) -> PodInfo:
        """The same pod with a newer object (the spec fields a scheduler reads are immutable)."""
        return PodInfo(
            self.uid,
            self.namespace,
            self.name,
            self.priority,
            self.cpu_m,
            self.mem,
            self.selector,
            self.claims,
            self.tolerations,
            self.group,
            pod,
        )

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def node(self) -> str | None:
        """``spec.nodeName`` of the newest object."""
        return pod_node_name(self.obj)

    @property
    def terminating(self) -> bool:
        """Whether the newest object has a deletionTimestamp."""
        return is_terminating(self.obj)

    @property
    def nominated_node(self) -> str | None:
        """``status.nominatedNodeName`` of the newest object."""
        nnn = get_path(self.obj, "status", "nominatedNodeName")
        return nnn if isinstance(nnn, str) and nnn else None

    @property
    def group_key(self) -> str | None:
        """``namespace/name`` of the pod's PodGroup, or None."""
        return None if self.group is None else f"{self.namespace}/{self.group}"

    def claim_keys(self) -> tuple[str, ...]:
        """The referenced claims as ``namespace/name`` keys."""
        if not self.claims:
            return ()
        return tuple(f"{self.namespace}/{c}" for c in self.claims)

    def consumer(self) -> dict[str, str]:
        """This pod as a ResourceClaim consumer reference."""
        return {"resource": "pods", "name": self.name, "uid": self.uid}


def _claim_names(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the ResourceClaims a pod spec references by ``resourceClaimName``."""
    names: list[str] = []
    for entry in spec.get("resourceClaims") or ():
        if isinstance(entry, Mapping):
            name = entry.get("resourceClaimName")
            if isinstance(name, str) and name:
                names.append(name)
    return tuple(names)


def _group_name(spec: Mapping[str, Any]) -> str | None:
    """``spec.schedulingGroup.podGroupName`` (Kubernetes 1.37), or None."""
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) and name else None
