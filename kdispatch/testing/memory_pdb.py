"""PodDisruptionBudgets of the in-memory apiserver: when may a pod be evicted?

The real apiserver reads a PDB's ``status.disruptionsAllowed``, which the disruption controller
keeps up to date. The emulator has no controllers, so it computes the same figures from the
pods it stores at the moment of the eviction, in this simple documented way:

* **matching pods**: pods in the PDB's namespace, not terminating, whose labels match
  ``spec.selector`` (``matchLabels``/``matchExpressions``; a PDB without a selector matches
  nothing);
* **healthy**: matching pods that are bound (``spec.nodeName`` set), not in phase ``Succeeded``
  or ``Failed``, with condition ``Ready=True``;
* **expected**: the number of matching pods;
* **desired healthy**: ``minAvailable`` (an int, or ``"N%"`` of expected rounded up), or
  expected minus ``maxUnavailable`` (an int, or a percentage of expected rounded up), or 0
  when the PDB gives neither;
* **disruptions allowed**: ``max(0, healthy - desired healthy)``.

An eviction of a pod is then decided like upstream's eviction REST handler:

* a pod that is unbound, already terminating, or in phase ``Pending``, ``Succeeded`` or
  ``Failed`` is deleted without looking at budgets (upstream's ``canIgnorePDB``: a bound pod
  that no kubelet has started yet is still ``Pending``);
* a pod matched by more than one PDB is refused with 500 (upstream does not support that);
* a healthy pod needs ``disruptions allowed >= 1`` from its PDB, else 429
  "Cannot evict pod as it would violate the pod's disruption budget.";
* an unhealthy (not Ready) bound pod may go when the budget is currently met
  (``healthy >= desired healthy``), upstream's default ``IfHealthyBudget`` policy, or always
  under ``spec.unhealthyPodEvictionPolicy: AlwaysAllow``.

Pure module: no threads, no pykka, no kubernetes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from kdispatch.actors.model.errors import DisruptionBudgetError, InvalidRequestError, ServerError

from .memory_select import label_selector_matches

PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."

Json = Mapping[str, Any]


def _labels(obj: Json) -> Mapping[str, Any]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _terminating(pod: Json) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _phase(pod: Json) -> object:
    return (pod.get("status") or {}).get("phase")


def _ready(pod: Json) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def is_healthy(pod: Json) -> bool:
    """Bound, not finished, not terminating, and Ready=True."""
    return (
        bool((pod.get("spec") or {}).get("nodeName"))
        and _phase(pod) not in ("Succeeded", "Failed")
        and not _terminating(pod)
        and _ready(pod)
    )


def _scaled(value: object, expected: int, what: str) -> int:
    """An int, or ``"N%"`` of ``expected`` rounded up (as upstream's GetScaledValueFromIntOrPercent
    with roundUp)."""
    if isinstance(value, bool):
        raise InvalidRequestError(f"{what} must be an int or a percentage")
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(int(value[:-1]) * expected / 100)
    raise InvalidRequestError(f"{what} must be an int or a percentage, got {value!r}")


def selects(pdb: Json, pod: Json) -> bool:
    """Whether ``pdb`` protects ``pod`` (same namespace, selector matches)."""
    pdb_ns = (pdb.get("metadata") or {}).get("namespace")
    pod_ns = (pod.get("metadata") or {}).get("namespace")
    selector = (pdb.get("spec") or {}).get("selector")
    return pdb_ns == pod_ns and label_selector_matches(selector, _labels(pod))


def disruption_status(pdb: Json, pods: Iterable[Json]) -> dict[str, int]:
    """The PDB's ``status`` figures computed from ``pods`` (see the module)."""
    matching = [p for p in pods if not _terminating(p) and selects(pdb, p)]
    expected = len(matching)
    healthy = sum(1 for p in matching if is_healthy(p))
    spec = pdb.get("spec") or {}
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected, "minAvailable")
    elif spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, "maxUnavailable"))
    else:
        desired = 0
    return {
        "expectedPods": expected,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "disruptionsAllowed": max(0, healthy - desired),
    }


def check_eviction(pod: Json, pdbs: Iterable[Json], pods: Iterable[Json]) -> None:
    """Raise unless ``pod`` may be evicted now (see the module for the rules):
    :class:`DisruptionBudgetError` (429) when a budget forbids it, :class:`ServerError` (500)
    when several PDBs match."""
    if (
        not (pod.get("spec") or {}).get("nodeName")
        or _terminating(pod)
        or _phase(pod) in ("Pending", "Succeeded", "Failed")
    ):
        return
    matching = [pdb for pdb in pdbs if selects(pdb, pod)]
    if not matching:
        return
    if len(matching) > 1:
        raise ServerError(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support."
        )
    pdb = matching[0]
    status = disruption_status(pdb, list(pods))
    name = (pdb.get("metadata") or {}).get("name")
    if is_healthy(pod):
        if status["disruptionsAllowed"] >= 1:
            return
    else:
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
        if policy == "AlwaysAllow" or status["currentHealthy"] >= status["desiredHealthy"]:
            return
    raise DisruptionBudgetError(
        f"{PDB_MESSAGE} The disruption budget {name} needs {status['desiredHealthy']} healthy "
        f"pods and has {status['currentHealthy']} currently"
    )
