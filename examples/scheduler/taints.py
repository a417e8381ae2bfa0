"""Taints and tolerations (the NoSchedule/NoExecute part of upstream's TaintToleration filter).

A node's taints with effect ``NoSchedule`` or ``NoExecute`` keep off every pod that does not
tolerate them. In the main job the GPU nodes are tainted so that only pods with claims (which
tolerate the taint) land there. Pure module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from kdispatch import Obj, get_path

BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


class Taint(NamedTuple):
    """``spec.taints[]`` of a node."""

    key: str
    value: str
    effect: str


class Toleration(NamedTuple):
    """``spec.tolerations[]`` of a pod (``operator`` is ``Equal`` or ``Exists``)."""

    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        """Upstream's ToleratesTaint: effect (empty = any), then key/operator/value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [e for e in value if isinstance(e, Mapping)] if isinstance(value, list) else []


def node_taints(node: Obj) -> tuple[Taint, ...]:
    """The blocking taints of a node."""
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
        for t in _entries(get_path(node, "spec", "taints"))
        if t.get("effect") in BLOCKING_EFFECTS
    )


def pod_tolerations(pod: Obj) -> tuple[Toleration, ...]:
    """The tolerations of a pod."""
    return tuple(
        Toleration(
            str(t.get("key", "")),
            str(t.get("operator", "Equal")),
            str(t.get("value", "")),
            str(t.get("effect", "")),
        )
        for t in _entries(get_path(pod, "spec", "tolerations"))
    )


def tolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> bool:
    """Whether every taint is tolerated by some toleration."""
    return all(any(tol.tolerates(t) for tol in tolerations) for t in taints)
