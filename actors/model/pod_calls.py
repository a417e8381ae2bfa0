"""Pod calls: status patch (conditions, nominatedNodeName), binding, preemption; the condition
rules are :mod:`.conditions`. Pure module: every method but ``send`` runs on the calling thread
and never blocks; ``send`` runs on an executor worker.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self, TypedDict

from loguru import logger

from .backend import ApiBackend, check_grace_period
from .calls import (
    UNSET,
    Call,
    StatusPatch,
    Unset,
    UnsetType,
    check_merge,
    check_target,
    newest_basis,
)
from .conditions import (
    LAST_TRANSITION_TIME,
    WALL_CLOCK,
    Condition,
    WallClock,
    apply_conditions,
    check_condition,
    check_conditions,
    condition_entries,
    condition_sequence,
    conditions_satisfied,
    merge_conditions,
    pod_conditions,
    utc_now,
)
from .errors import InvalidCallError, InvalidObjectError, NotFoundError
from .objects import (
    DELETE,
    POD,
    Obj,
    ObjectRef,
    as_object,
    check_node_name,
    get_path,
    is_dns_subdomain,
    is_terminating,
    meta,
    pod_node_name,
    with_path,
)

__all__ = [
    "UNSET",
    "WALL_CLOCK",
    "PodBinding",
    "PodPreemption",
    "PodStatusPatch",
    "PreemptionOptions",
    "WallClock",
    "check_condition",
    "merge_conditions",
    "pod_conditions",
    "utc_now",
]

POD_SCHEDULED: Final = "PodScheduled"
DISRUPTION_TARGET: Final = "DisruptionTarget"


class PreemptionOptions(TypedDict, total=False):
    """The keyword options of a preemption, as :meth:`PodPreemption.for_pod` takes them (with
    their defaults); a dispatcher's or a call group's ``preempt`` passes them on unchanged."""

    reason: str
    message: str
    preemptor: str | None
    grace_period_seconds: int | None
    add_condition: bool


_PREEMPTION_OPTIONS: Final = tuple(PreemptionOptions.__annotations__)


def preemption_options(options: PreemptionOptions) -> PreemptionOptions:
    """``options`` if each is a :class:`PreemptionOptions` key; :class:`InvalidCallError`
    naming the accepted ones otherwise."""
    unknown = [key for key in options if key not in _PREEMPTION_OPTIONS]
    if unknown:
        raise InvalidCallError(
            f"unknown preemption option {', '.join(map(repr, unknown))}: the options are "
            f"{', '.join(_PREEMPTION_OPTIONS)}"
        )
    return options


def _check_node(node: object, what: str) -> str:
    if is_dns_subdomain(node):  # valid: no extra call
        return node
    try:
        return check_node_name(node)  # raises, naming the node
    except InvalidObjectError as exc:
        raise InvalidCallError(f"{what}: {exc}") from None


def _check_nominated(nnn: object) -> str | UnsetType | None:
    """A ``nominated_node_name``: a node name, None (clear it) or UNSET (leave it alone)."""
    if nnn is UNSET or nnn is None:
        return nnn
    return _check_node(nnn, "nominated_node_name")


def _nominated_node(pod: Obj | None) -> str | None:
    """``status.nominatedNodeName`` of a pod, or None when absent or empty."""
    node = get_path(pod, "status", "nominatedNodeName")
    return node if isinstance(node, str) and node else None


# --------------------------------------------------------------------------- calls


class DeletionRules(Call):
    """The rules of a call that deletes its pod (:class:`PodPreemption`, ``PodEviction``).
    Pure."""

    __slots__ = ()

    def is_noop(self, obj: Obj | None) -> bool:
        """The pod is already terminating: its deletion is under way."""
        return is_terminating(obj)

    def landed(self, fresh: Obj) -> bool:
        """``fresh``, the object of this pod's name on the server, shows the pod deleted
        (terminating, or another UID under its name)."""
        return meta(fresh).get("uid") != self.ref.uid or is_terminating(fresh)

    def apply(self, obj: Obj) -> Obj:
        """The pod marked terminating (``deletionTimestamp = "pending"`` unless already set;
        copy-on-write)."""
        if is_terminating(obj):
            return obj
        return with_path(obj, ("metadata", "deletionTimestamp"), "pending")


@dataclass(frozen=True, slots=True)
class PodStatusPatch(StatusPatch):
    """Pod conditions (merged by type) and/or ``status.nominatedNodeName`` (set or cleared).
    Build with :meth:`for_pod`.

    Sent as a strategic-merge patch of ``pods/status`` carrying only what still differs from the
    newest trusted pod, guarded by its UID and resourceVersion. Staleness (kubernetes#139602):
    a patch setting ``PodScheduled`` to anything but ``True`` never lands on a pod that is bound,
    nor on one whose ``PodScheduled=True`` its caller had not seen, however the newer pod
    arrived; it resolves :class:`~kdispatch.CallStale` instead.
    """

    call_type: "ClassVar[str]" = "pod_status_patch"
    kind: "ClassVar[str]" = POD
    relevance: "ClassVar[int]" = 1

    ref: ObjectRef
    conditions: tuple[Condition, ...] = field(default=(), hash=False)
    nominated_node_name: str | UnsetType | None = UNSET
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_target(self)
        conditions = check_conditions(self.conditions)
        object.__setattr__(self, "conditions", conditions)
        if _check_nominated(self.nominated_node_name) is UNSET and not conditions:
            raise InvalidCallError(
                "pod_status_patch needs at least one condition or a nominated_node_name"
            )

    @classmethod
    def for_pod(
        cls,
        pod: object,
        *,
        conditions: Iterable[Mapping[str, Any]] = (),
        nominated_node_name: object = UNSET,
    ) -> Self:
        """A status patch for ``pod`` (also its basis). ``nominated_node_name=None`` clears it.
        Raises :class:`InvalidObjectError` / :class:`InvalidCallError`."""
        pod = as_object(pod)  # official-client models and any Mapping
        ref = ObjectRef.of(pod, POD)
        if TYPE_CHECKING:  # __post_init__ checks it; no cast() call on the hot path
            assert isinstance(nominated_node_name, str | Unset | None)
        return cls(ref, tuple(condition_sequence(conditions)), nominated_node_name, basis=pod)

    def merge(self, older: object) -> Self:
        """Conditions merge by type as if both calls were sent in order (:func:`merge_conditions`);
        nominatedNodeName is this call's if set, else the older one's."""
        older = check_merge(self, older)
        conds = merge_conditions(self.conditions, older.conditions)
        nnn = self.nominated_node_name
        if nnn is UNSET:
            nnn = older.nominated_node_name
        return type(self)(self.ref, conds, nnn, basis=newest_basis(self.basis, older.basis))

    def revalidate(self, basis: Obj | None, obj: Obj | None) -> str | None:
        """Stale when the patch would un-schedule a scheduled pod: ``PodScheduled`` not ``True``
        on a bound pod, or on one whose ``PodScheduled=True`` is not in ``basis``. Pure."""
        for intent in self.conditions:
            if intent["type"] == POD_SCHEDULED:
                break
        else:
            return None
        status = intent["status"]
        if status == "True":
            return None
        node = pod_node_name(obj)
        if node is None and basis is not obj:
            node = pod_node_name(basis)
        if node is not None:
            return f"pod is bound to node {node!r}: {POD_SCHEDULED}={status} is stale"
        current = pod_conditions(obj).get(POD_SCHEDULED)
        if current is not None and current.get("status") == "True":
            seen = pod_conditions(basis).get(POD_SCHEDULED) if basis is not None else None
            if seen is None or seen.get("status") != "True":
                return f"{POD_SCHEDULED}=True is newer than the state this patch was decided on"
        return None

    def _nnn_differs(self, obj: Obj | None) -> bool:
        nnn = self.nominated_node_name  # a node name, None or UNSET (__post_init__)
        return nnn is not UNSET and nnn != _nominated_node(obj)

    def is_noop(self, obj: Obj | None) -> bool:
        """Every condition already has the intended status/reason/message (timestamps ignored)
        and nominatedNodeName (if set) already has the intended value (None ≡ absent)."""
        if obj is None or (self.conditions and not conditions_satisfied(obj, self.conditions)):
            return False
        return not self._nnn_differs(obj)

    def apply(self, obj: Obj) -> Obj:
        """The pod once the patch is applied (copy-on-write; ``obj`` itself if a no-op)."""
        if self.is_noop(obj):
            return obj
        out = apply_conditions(obj, self.conditions)
        if self._nnn_differs(obj):
            nnn = self.nominated_node_name
            out = with_path(out, ("status", "nominatedNodeName"), nnn if nnn else DELETE)
        return out

    def status_patch(self, obj: Obj | None, now: str | None = None) -> dict[str, Any] | None:
        """The ``status`` of the strategic-merge patch against ``obj``: the conditions that differ
        (:func:`condition_entries`) and ``nominatedNodeName`` if it differs (None clears it);
        None when nothing differs."""
        body: dict[str, Any] = {}
        if self.conditions:
            conds = condition_entries(self.conditions, pod_conditions(obj), now)
            if conds:
                body["conditions"] = conds
        if self._nnn_differs(obj):
            body["nominatedNodeName"] = self.nominated_node_name or None
        return body or None


@dataclass(frozen=True, slots=True)
class PodBinding(Call):
    """Bind a pod to a node (``pods/binding``). Build with :meth:`for_pod`.

    It supersedes a pending status patch. A 409 whose one re-read shows the same pod already
    bound to the same node is success, and so is such a pod read back after the last attempts
    went unanswered: an earlier attempt landed and only its reply was lost (:meth:`landed`).
    """

    call_type: "ClassVar[str]" = "pod_binding"
    kind: "ClassVar[str]" = POD
    relevance: "ClassVar[int]" = 2
    supersedes: "ClassVar[frozenset[str]]" = frozenset({"pod_status_patch"})
    reads_object: "ClassVar[bool]" = False

    ref: ObjectRef
    node: str
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_target(self)
        _check_node(self.node, "node")

    @classmethod
    def for_pod(cls, pod: object, node: object) -> Self:
        """A binding of ``pod`` (also its basis) to ``node`` (a node name)."""
        pod = as_object(pod)  # official-client models and any Mapping
        if TYPE_CHECKING:  # __post_init__ checks it; no cast() call on the hot path
            assert isinstance(node, str)
        return cls(ObjectRef.of(pod, POD), node, basis=pod)

    def precheck(self, obj: Obj | None) -> str | None:
        """Fail fast for a terminating pod or a pod bound to another node."""
        if is_terminating(obj):
            return f"pod {self.ref.namespace}/{self.ref.name} is being deleted"
        bound = pod_node_name(obj)
        if bound is not None and bound != self.node:
            return (
                f"pod {self.ref.namespace}/{self.ref.name} is already bound to node {bound!r}, "
                f"not {self.node!r}"
            )
        return None

    def is_noop(self, obj: Obj | None) -> bool:
        """Already bound to the same node."""
        return pod_node_name(obj) == self.node

    def apply(self, obj: Obj) -> Obj:
        """``spec.nodeName`` set and ``PodScheduled=True`` (copy-on-write)."""
        if self.is_noop(obj):
            return obj
        out = with_path(obj, ("spec", "nodeName"), self.node)
        scheduled = MappingProxyType({"type": POD_SCHEDULED, "status": "True"})
        return apply_conditions(out, (scheduled,), replace=True)

    def landed(self, fresh: Obj) -> bool:
        """``fresh`` is this pod, bound to this node."""
        return meta(fresh).get("uid") == self.ref.uid and pod_node_name(fresh) == self.node

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        """Create the binding (one request, UID precondition); a 409 propagates (the executor
        re-reads the pod and :meth:`landed` decides). Executor worker thread."""
        del obj
        ref = self.ref
        backend.bind(ref.namespace, ref.name, uid=ref.uid, node=self.node)
        return None


@dataclass(frozen=True, slots=True)
class PodPreemption(DeletionRules):
    """Preempt (delete) a victim pod, optionally marking it with a ``DisruptionTarget``
    condition first. Exclusive: it cancels every other pending call of the pod.

    The deletion carries a UID precondition (a re-created pod of the same name is never hit);
    NotFound at either step is success. The condition is patched only when the trusted pod
    lacks ``DisruptionTarget=True``, so a retry keeps its ``lastTransitionTime``.
    """

    call_type: "ClassVar[str]" = "pod_preemption"
    kind: "ClassVar[str]" = POD
    relevance: "ClassVar[int]" = 3
    exclusive: "ClassVar[bool]" = True

    ref: ObjectRef
    condition: Condition | None = field(default=None, hash=False)
    grace_period_seconds: int | None = None
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_target(self)
        if self.condition is not None:
            cond = check_condition(self.condition)
            if cond["type"] != DISRUPTION_TARGET:
                raise InvalidCallError(
                    f"pod_preemption condition must be {DISRUPTION_TARGET!r}, got {cond['type']!r}"
                )
            object.__setattr__(self, "condition", cond)
        check_grace_period(self.grace_period_seconds, InvalidCallError)

    @classmethod
    def for_pod(
        cls,
        pod: object,
        *,
        reason: object = "PreemptionByScheduler",
        message: object = "",
        preemptor: object = None,
        grace_period_seconds: object = None,
        add_condition: bool = True,
    ) -> Self:
        """A preemption of ``pod`` (also its basis). With ``add_condition`` a
        ``DisruptionTarget=True`` condition with ``reason`` and ``message`` (default: naming the
        ``preemptor``, e.g. ``"ns/name"``) is patched before the deletion."""
        pod = as_object(pod)  # official-client models and any Mapping
        ref = ObjectRef.of(pod, POD)
        condition: dict[str, Any] | None = None
        if add_condition:
            if not isinstance(reason, str) or not reason:
                raise InvalidCallError("reason must be a non-empty str")
            if preemptor is not None and not isinstance(preemptor, str):
                raise InvalidCallError("preemptor must be a str or None")
            if not message and preemptor:
                message = f"preempted to make room for pod {preemptor}"
            condition = {"type": DISRUPTION_TARGET, "status": "True", "reason": reason}
            if message:
                condition["message"] = message
        return cls(
            ref, condition, check_grace_period(grace_period_seconds, InvalidCallError), basis=pod
        )

    def apply(self, obj: Obj) -> Obj:
        """The pod with the condition applied, marked terminating (copy-on-write)."""
        if self.condition is not None:
            obj = apply_conditions(obj, (self.condition,))
        return DeletionRules.apply(self, obj)

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        """Patch the condition (UID precondition) unless ``obj`` has it with that status, then
        delete with a UID precondition; NotFound is success. Executor worker thread."""
        ref = self.ref
        try:
            cond = self.condition
            if cond is not None:
                existing = pod_conditions(obj).get(cond["type"])
                if existing is None or existing.get("status") != cond["status"]:
                    entry = {**cond, LAST_TRANSITION_TIME: WALL_CLOCK.now()}
                    backend.patch_status(
                        POD,
                        ref.namespace,
                        ref.name,
                        {"status": {"conditions": [entry]}},
                        uid=ref.uid,
                        resource_version=None,
                        patch_type="strategic",
                    )
            backend.delete(
                POD,
                ref.namespace,
                ref.name,
                uid=ref.uid,
                grace_period_seconds=self.grace_period_seconds,
            )
        except NotFoundError:
            logger.bind(uid=ref.uid, call_type=self.call_type).debug(
                "preemption victim already gone"
            )
        return None
