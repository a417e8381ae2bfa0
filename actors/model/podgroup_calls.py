"""PodGroup calls: the group's status conditions (``scheduling.k8s.io/v1beta1``, Kubernetes 1.37;
docs/call-types.md, "PodGroups", tells the rules). Pure module: every method but ``send`` runs
on the calling thread and never blocks; ``send`` runs on an executor worker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, Self

from .calls import StatusPatch, check_merge, check_target, newest_basis
from .conditions import (
    CONDITION_STATUSES,
    apply_conditions,
    check_condition,
    check_conditions,
    condition_entries,
    condition_sequence,
    merge_conditions,
    pod_conditions,
)
from .errors import InvalidCallError
from .objects import (
    POD_GROUP,
    Obj,
    ObjectRef,
    as_object,
    is_mapping,
    meta,
    qualified_name_problem,
)
from .pod_calls import DISRUPTION_TARGET

__all__ = [
    "OBSERVED_GENERATION",
    "POD_GROUP_INITIALLY_SCHEDULED",
    "REASON_PREEMPTION_BY_SCHEDULER",
    "REASON_SCHEDULED",
    "REASON_SCHEDULER_ERROR",
    "REASON_UNSCHEDULABLE",
    "PodGroupStatusPatch",
    "check_podgroup_condition",
    "condition_problems",
    "regresses",
]

POD_GROUP_INITIALLY_SCHEDULED: Final = "PodGroupInitiallyScheduled"
"""The condition kube-scheduler sets once a group was placed (``True``) or could not be
(``False``); terminal once ``True``."""
REASON_SCHEDULED: Final = "Scheduled"
REASON_UNSCHEDULABLE: Final = "Unschedulable"
REASON_SCHEDULER_ERROR: Final = "SchedulerError"
REASON_PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
OBSERVED_GENERATION: Final = "observedGeneration"

Condition = Mapping[str, Any]
"""A validated PodGroup condition intent: ``type``, ``status``, ``reason`` (str) and optionally
``message`` (str) and ``observedGeneration`` (int)."""

_INTENT_KEYS: Final = frozenset({"type", "status", "reason", "message", OBSERVED_GENERATION})
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
MAX_REASON_BYTES: Final = 1024
MAX_MESSAGE_BYTES: Final = 32 * 1024


# --------------------------------------------------------------------------- validation


def _shown(value: object) -> str:
    """``value`` as the apiserver quotes it in a message (JSON), or its repr."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def condition_problems(cond: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What kube-apiserver's ``metav1`` condition validation (``ValidateCondition``) refuses in
    ``cond``, as ``(field, problem)`` pairs, ``lastTransitionTime`` aside: ``type`` a qualified
    name, ``status`` ``True``/``False``/``Unknown``, ``observedGeneration`` an int >= 0,
    ``reason`` required (letters, digits, ``_,:``; at most 1 KiB), ``message`` at most 32 KiB.
    The one copy of these rules (the call type and the in-memory apiserver use it). Pure."""
    problems: list[tuple[str, str]] = []
    ctype = cond.get("type")
    if not isinstance(ctype, str) or not ctype:
        problems.append(("type", "Required value"))
    elif (why := qualified_name_problem(ctype)) is not None:
        problems.append(("type", f"Invalid value: {_shown(ctype)}: {why}"))
    status = cond.get("status")
    if not isinstance(status, str) or status not in CONDITION_STATUSES:
        problems.append(
            ("status", f'Unsupported value: {_shown(status)}: supported values: "False", '
             '"True", "Unknown"')
        )  # fmt: skip
    generation = cond.get(OBSERVED_GENERATION, 0)
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        problems.append(
            (OBSERVED_GENERATION, f"Invalid value: {_shown(generation)}: must be an int >= 0")
        )
    reason = cond.get("reason")
    if not isinstance(reason, str) or not reason:
        problems.append(("reason", "Required value"))
    elif not _REASON.match(reason):
        problems.append(
            (
                "reason",
                f"Invalid value: {_shown(reason)}: a condition reason must start with an "
                "alphabetic character, optionally followed by alphanumerics or '_,:', and end "
                "with an alphanumeric or '_'",
            )
        )
    elif len(reason.encode()) > MAX_REASON_BYTES:
        problems.append(("reason", f"Too long: may not be more than {MAX_REASON_BYTES} bytes"))
    message = cond.get("message", "")
    if not isinstance(message, str):
        problems.append(("message", f"Invalid value: {_shown(message)}: must be a string"))
    elif len(message.encode()) > MAX_MESSAGE_BYTES:
        problems.append(("message", f"Too long: may not be more than {MAX_MESSAGE_BYTES} bytes"))
    return problems


def check_podgroup_condition(cond: object) -> Condition:
    """Validate a PodGroup condition intent (:func:`condition_problems`; any key but ``type``,
    ``status``, ``reason``, ``message`` and ``observedGeneration`` is refused) and return a
    read-only copy of it. Raises :class:`InvalidCallError`."""
    if not is_mapping(cond):
        raise InvalidCallError(f"a condition must be a mapping, got {type(cond).__name__}")
    unknown = set(cond) - _INTENT_KEYS
    if unknown:
        raise InvalidCallError(
            f"condition has unsupported keys {sorted(map(str, unknown))}: only type, status, "
            "reason, message and observedGeneration may be given"
        )
    base = check_condition({k: v for k, v in cond.items() if k != OBSERVED_GENERATION})
    problems = condition_problems(cond)
    if problems:
        where, why = problems[0]
        raise InvalidCallError(f"condition {base['type']!r}: {where}: {why}")
    if OBSERVED_GENERATION not in cond:
        return base
    return MappingProxyType({**base, OBSERVED_GENERATION: cond[OBSERVED_GENERATION]})


def _check_conditions(conds: object) -> tuple[Condition, ...]:
    out = check_conditions(conds, check_podgroup_condition)
    if not out:
        raise InvalidCallError("podgroup_status_patch needs at least one condition")
    return out


# --------------------------------------------------------------------------- rules


def _final(intent: Condition) -> bool:
    """Whether ``intent`` is ``PodGroupInitiallyScheduled=True``, which nothing takes back."""
    return bool(intent["type"] == POD_GROUP_INITIALLY_SCHEDULED and intent["status"] == "True")


def _initially_scheduled(obj: Obj | None) -> bool:
    current = pod_conditions(obj).get(POD_GROUP_INITIALLY_SCHEDULED)
    return current is not None and current.get("status") == "True"


def regresses(intent: Condition, obj: Obj | None, basis: Obj | None) -> bool:
    """Whether ``intent`` would take ``PodGroupInitiallyScheduled`` back from ``True`` (as ``obj``,
    the newest PodGroup, or ``basis``, the one the caller decided on, has it): never sent.
    Pure."""
    if intent["type"] != POD_GROUP_INITIALLY_SCHEDULED or intent["status"] == "True":
        return False
    return _initially_scheduled(obj) or (basis is not obj and _initially_scheduled(basis))


def _satisfied(existing: Mapping[str, Any] | None, intent: Condition) -> bool:
    """``existing`` has every field the intent gives, and a generation at least as new."""
    if existing is None:
        return False
    for key, value in intent.items():
        if key == OBSERVED_GENERATION:
            stored = existing.get(key, 0)
            if isinstance(stored, bool) or not isinstance(stored, int) or stored < value:
                return False
        elif existing.get(key) != value:
            return False
    return True


def _generation(obj: Obj) -> int | None:
    """``metadata.generation`` when it is a positive int (the apiserver omits a zero)."""
    generation = meta(obj).get("generation")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation <= 0:
        return None
    return generation


@dataclass(frozen=True, slots=True)
class PodGroupStatusPatch(StatusPatch):
    """Conditions of one PodGroup (docs/call-types.md, "PodGroups"). Build with
    :meth:`for_podgroup`, :meth:`initially_scheduled` or :meth:`disruption_target`, which take
    the PodGroup the caller decided on (the basis). Conditions merge by type, each stamped with
    the basis's ``metadata.generation``; ``PodGroupInitiallyScheduled`` never goes back from
    ``True`` (a call that carries nothing else resolves :class:`~kdispatch.CallStale`); a
    condition the apiserver would refuse raises :class:`~kdispatch.InvalidCallError`. Sent as a
    strategic-merge patch of what still differs, guarded by UID and resourceVersion, in the
    bindings' lane (2).
    """

    call_type: ClassVar[str] = "podgroup_status_patch"
    kind: ClassVar[str] = POD_GROUP
    relevance: ClassVar[int] = 2

    ref: ObjectRef
    conditions: tuple[Condition, ...] = field(hash=False)
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_target(self)
        object.__setattr__(self, "conditions", _check_conditions(self.conditions))

    # ------------------------------------------------------------------ constructors

    @classmethod
    def for_podgroup(cls, podgroup: object, *, conditions: Iterable[Mapping[str, Any]]) -> Self:
        """A status patch for ``podgroup`` (also its basis) setting ``conditions`` (``type``,
        ``status``, ``reason``, optionally ``message``; ``observedGeneration`` defaults to the
        PodGroup's ``metadata.generation``). Raises :class:`~kdispatch.InvalidObjectError` /
        :class:`~kdispatch.InvalidCallError`."""
        pg = as_object(podgroup)  # official-client models and any Mapping
        ref = ObjectRef.of(pg, POD_GROUP)
        generation = _generation(pg)
        stamped = tuple(
            {**c, OBSERVED_GENERATION: generation}
            if generation is not None and is_mapping(c) and OBSERVED_GENERATION not in c
            else c
            for c in condition_sequence(conditions)
        )
        return cls(ref, stamped, basis=pg)

    @classmethod
    def initially_scheduled(
        cls,
        podgroup: object,
        scheduled: bool,
        *,
        reason: str | None = None,
        message: str = "",
    ) -> Self:
        """``PodGroupInitiallyScheduled``: ``True`` (reason ``Scheduled``) when ``scheduled``,
        else ``False`` (reason ``Unschedulable``; kube-scheduler also writes
        ``SchedulerError``). ``message`` replaces the stored one (empty by default). A
        ``False`` never lands on a PodGroup that has it ``True``."""
        if not isinstance(scheduled, bool):
            raise InvalidCallError(f"scheduled must be a bool, got {scheduled!r}")
        if reason is None:
            reason = REASON_SCHEDULED if scheduled else REASON_UNSCHEDULABLE
        condition = {
            "type": POD_GROUP_INITIALLY_SCHEDULED,
            "status": "True" if scheduled else "False",
            "reason": reason,
            "message": message,
        }
        return cls.for_podgroup(podgroup, conditions=(condition,))

    @classmethod
    def disruption_target(
        cls,
        podgroup: object,
        *,
        reason: str = REASON_PREEMPTION_BY_SCHEDULER,
        message: str = "",
        preemptor: str | None = None,
    ) -> Self:
        """``DisruptionTarget=True`` for a group preempted as a whole (reason
        ``PreemptionByScheduler``); the message defaults to naming the ``preemptor`` (e.g.
        ``"pod ns/name"`` or ``"podgroup ns/name"``) when one is given."""
        if preemptor is not None and not isinstance(preemptor, str):
            raise InvalidCallError(f"preemptor must be a str or None, got {preemptor!r}")
        if not message and preemptor:
            message = f"preempted to make room for {preemptor}"
        condition = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": reason,
            "message": message,
        }
        return cls.for_podgroup(podgroup, conditions=(condition,))

    # ------------------------------------------------------------------ rules (pure)

    def merge(self, older: object) -> Self:
        """Conditions merge by type (:func:`~.conditions.merge_conditions`) as if both calls
        were sent in order, so a ``PodGroupInitiallyScheduled=True`` of the older call is final:
        the newer call's ``False`` (or ``Unknown``) for it is dropped, as it would be refused
        once the ``True`` landed. The newer basis is kept."""
        older = check_merge(self, older)
        newer = self.conditions
        if any(_final(c) for c in older.conditions):
            newer = tuple(
                c
                for c in newer
                if c["type"] != POD_GROUP_INITIALLY_SCHEDULED or c["status"] == "True"
            )
        conds = merge_conditions(newer, older.conditions)
        return type(self)(self.ref, conds, basis=newest_basis(self.basis, older.basis))

    def _changes(self, obj: Obj | None) -> tuple[Condition, ...]:
        """The intents to send against ``obj``: not regressing, not satisfied already."""
        current = pod_conditions(obj)
        return tuple(
            c
            for c in self.conditions
            if not regresses(c, obj, self.basis) and not _satisfied(current.get(c["type"]), c)
        )

    def revalidate(self, basis: Obj | None, obj: Obj | None) -> str | None:
        """Stale when every condition of the call :func:`regresses`; a call with other
        conditions is sent without those. Pure."""
        if all(regresses(c, obj, basis) for c in self.conditions):
            status = self.conditions[0]["status"]
            return (
                f"{POD_GROUP_INITIALLY_SCHEDULED} is True, which is final: "
                f"{POD_GROUP_INITIALLY_SCHEDULED}={status} is stale"
            )
        return None

    def is_noop(self, obj: Obj | None) -> bool:
        """Every condition that may be sent is there already (status, reason, message, and a
        generation at least as new; timestamps ignored). Not a no-op when none may be sent:
        that is :meth:`revalidate`'s ``CallStale``."""
        if obj is None or all(regresses(c, obj, self.basis) for c in self.conditions):
            return False
        return not self._changes(obj)

    def apply(self, obj: Obj) -> Obj:
        """The PodGroup once the patch is applied (copy-on-write; ``obj`` itself if a no-op)."""
        changes = self._changes(obj)
        return apply_conditions(obj, changes) if changes else obj

    def status_patch(self, obj: Obj | None, now: str | None = None) -> dict[str, Any] | None:
        """The ``status`` of the strategic-merge patch against ``obj``: the conditions that differ
        (:func:`~.conditions.condition_entries`), none that regresses; None if nothing differs."""
        entries = condition_entries(self._changes(obj), pod_conditions(obj), now)
        return {"conditions": entries} if entries else None
