"""PodGroups (``scheduling.k8s.io/v1beta1``) in the in-memory apiserver: what kube-apiserver
v1.37.2 admits, defaults and keeps, for the fields a scheduler touches.

Checked against the real server (``tests/realapi/test_real_podgroups.py`` runs the same
requests against both):

* **create** (the API request): the status is reset to ``{}`` (a client's conditions are
  dropped), ``spec.disruptionMode`` defaults to ``{"single": {}}`` and ``spec.priority`` to 0;
  ``metadata.generation`` is the client's, or absent: kube-apiserver neither sets nor bumps a
  PodGroup's generation;
* **spec**: ``schedulingPolicy`` holds exactly one of ``basic: {}`` and ``gang: {minCount}``,
  ``minCount`` an int >= 1 (0 counts as missing). On update the policy's kind is fixed:
  ``basic`` is immutable, ``gang`` can neither be set nor cleared; ``minCount`` may change;
* **updates** of the object keep the stored status and generation; updates of ``status`` keep
  the spec (the callers in :mod:`kdispatch.testing.memory` do that part);
* **status**: every condition passes ``metav1``'s condition validation
  (:func:`kdispatch.actors.model.podgroup_calls.condition_problems`, the rules the call type checks
  its intents with) and has a ``lastTransitionTime``; it is stored as the Go type serializes
  it: with a ``message`` (empty when none was given), without an ``observedGeneration`` of 0.

A refusal is 422 ``Invalid``, worded as kube-apiserver words it:
``PodGroup.scheduling.k8s.io "g1" is invalid: status.conditions[0].reason: Required value``
(several problems in brackets, comma-separated).

Not modelled: the ``scheduling.k8s.io/podgroup-protection`` finalizer the real server adds on
create (with no controller-manager to remove it, a deleted PodGroup stays terminating there;
the emulator removes it at once), and the other spec fields' feature-gated rules.

Pure module: no threads, no pykka, no kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdispatch.actors.model.errors import InvalidRequestError
from kdispatch.actors.model.objects import POD_GROUP
from kdispatch.actors.model.podgroup_calls import condition_problems

__all__ = ["POD_GROUP", "admit_podgroup", "prepare_podgroup_create"]

Json = dict[str, Any]
Problem = tuple[str, str]

QUALIFIED_KIND = "PodGroup.scheduling.k8s.io"
_POLICIES = ("basic", "gang")


def prepare_podgroup_create(obj: Json) -> Json:
    """``obj`` (an owned copy a create request carries) as kube-apiserver stores it: status
    reset, ``disruptionMode`` and ``priority`` defaulted. Validate it with
    :func:`admit_podgroup` after."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec = {**spec}
        spec.setdefault("disruptionMode", {"single": {}})
        spec.setdefault("priority", 0)
        obj["spec"] = spec
    obj["status"] = {}
    return obj


def admit_podgroup(new: Json, old: Mapping[str, Any] | None) -> Json:
    """``new``, the PodGroup about to be stored (``old``: the stored one, None on create), as
    it may be stored: its generation is ``old``'s. Raises :class:`InvalidRequestError` (422)
    for a spec or status kube-apiserver refuses."""
    problems = _spec_problems(new.get("spec"), None if old is None else old.get("spec"))
    problems += _status_problems(new.get("status"))
    if problems:
        name = (new.get("metadata") or {}).get("name", "")
        raise InvalidRequestError(_message(name, problems))
    new = _serialized(new)
    if old is None:
        return new
    meta = dict(new.get("metadata") or {})
    generation = (old.get("metadata") or {}).get("generation")
    if generation is None:
        meta.pop("generation", None)
    else:
        meta["generation"] = generation
    return {**new, "metadata": meta}


def _serialized(obj: Json) -> Json:
    """``obj`` as the apiserver serves it back: every condition has a ``message`` (the Go
    field is not ``omitempty``) and no ``observedGeneration`` of 0 (it is)."""
    status = obj.get("status")
    if not isinstance(status, dict) or not isinstance(status.get("conditions"), list):
        return obj
    conditions: list[Any] = status["conditions"]
    served = []
    for cond in conditions:
        entry = {"message": "", **cond}
        if entry.get("observedGeneration") == 0:
            del entry["observedGeneration"]
        served.append(entry)
    if served == conditions:
        return obj
    return {**obj, "status": {**status, "conditions": served}}


def _message(name: str, problems: list[Problem]) -> str:
    parts = [f"{where}: {why}" for where, why in problems]
    listed = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return f'{QUALIFIED_KIND} "{name}" is invalid: {listed}'


def _policy(spec: object) -> Mapping[str, Any]:
    policy = spec.get("schedulingPolicy") if isinstance(spec, Mapping) else None
    return policy if isinstance(policy, Mapping) else {}


def _spec_problems(spec: object, old_spec: object) -> list[Problem]:
    where = "spec.schedulingPolicy"
    policy = _policy(spec)
    chosen = [p for p in _POLICIES if policy.get(p) is not None]
    problems: list[Problem] = []
    if not chosen:
        problems.append((where, 'Invalid value: "": must specify one of: `basic`, `gang`'))
    elif len(chosen) > 1:
        problems.append(
            (where, 'Invalid value: "{basic, gang}": must specify exactly one of: `basic`, `gang`')
        )
    gang = policy.get("gang")
    if gang is not None:
        count = gang.get("minCount") if isinstance(gang, Mapping) else None
        if count is None or count == 0:
            problems.append((f"{where}.gang.minCount", "Required value"))
        elif isinstance(count, bool) or not isinstance(count, int) or count < 1:
            problems.append(
                (f"{where}.gang.minCount", f"Invalid value: {count!r}: must be greater than or "
                 "equal to 1")
            )  # fmt: skip
    if old_spec is None:
        return problems
    old = _policy(old_spec)
    if policy.get("basic") != old.get("basic"):
        problems.append((f"{where}.basic", "Invalid value: null: field is immutable"))
    if old.get("gang") is not None and gang is None:
        problems.append((f"{where}.gang", "Invalid value: null: field cannot be cleared once set"))
    elif old.get("gang") is None and gang is not None:
        problems.append((f"{where}.gang", "Invalid value: null: field cannot be set once created"))
    return problems


def _status_problems(status: object) -> list[Problem]:
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return []
    problems: list[Problem] = []
    for i, cond in enumerate(conditions):
        where = f"status.conditions[{i}]"
        if not isinstance(cond, Mapping):
            problems.append((where, "Invalid value: must be an object"))
            continue
        found = condition_problems(cond)
        ltt = cond.get("lastTransitionTime")
        if not isinstance(ltt, str) or not ltt:  # in the apiserver's order: before the reason
            at = next((i for i, (f, _) in enumerate(found) if f in ("reason", "message")), None)
            found.insert(len(found) if at is None else at, ("lastTransitionTime", "Required value"))
        problems += [(f"{where}.{field}", why) for field, why in found]
    return problems
