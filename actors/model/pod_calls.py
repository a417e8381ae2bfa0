"""Pod calls: status patch (conditions, nominatedNodeName), binding, preemption.

Each call is an immutable intent whose rules (merge, no-op, optimistic apply, fail-fast
precheck) are pure functions of the call and an observed pod. The actual request is computed in
:meth:`~kdispatch.Call.send` against the newest observed pod, so a patch only carries
what
still differs at that moment and is guarded by the pod's UID and resourceVersion.

Pure module: no threads, no pykka, no kubernetes. Every method except ``send`` runs on whichever
thread calls it (caller or object actor) and never blocks; ``send`` runs on an executor worker.
"""

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, ClassVar, Final, Self, TypedDict

from loguru import logger

from .backend import ApiBackend, check_grace_period, patch_status_guarded
from .calls import UNSET, Call, UnsetType, check_merge, given
from .errors import InvalidCallError, InvalidObjectError, NotFoundError
from .objects import (
    DELETE,
    POD,
    Obj,
    ObjectRef,
    as_object,
    check_node_name,
    get_path,
    is_mapping,
    is_newer,
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
    "utc_now",
]

CONDITION_STATUSES: Final = frozenset({"True", "False", "Unknown"})
_CONDITION_KEYS: Final = frozenset({"type", "status", "reason", "message"})
LAST_TRANSITION_TIME: Final = "lastTransitionTime"
POD_SCHEDULED: Final = "PodScheduled"
DISRUPTION_TARGET: Final = "DisruptionTarget"

Condition = Mapping[str, str]
"""A validated condition intent: ``type``, ``status`` and optionally ``reason``/``message``."""

ConditionLike = Mapping[str, Any]
"""A condition intent of any call type: a pod's :data:`Condition`, or one whose values are not
all strings (a PodGroup's carries an int ``observedGeneration``). The condition helpers take
these: compiled (setup.py), a ``Mapping[str, str]`` parameter refuses an int value."""


class PreemptionOptions(TypedDict, total=False):
    """The keyword options of a preemption, as :meth:`PodPreemption.for_pod` takes them (and
    documents their defaults); ``preempt`` and ``apreempt`` of a dispatcher or a call group pass
    them on unchanged."""

    reason: str
    message: str
    preemptor: str | None
    grace_period_seconds: int | None
    add_condition: bool


_PREEMPTION_OPTIONS: Final = tuple(PreemptionOptions.__annotations__)
"""The keys, in order (the compiled build's TypedDict keeps no ``__optional_keys__``)."""


def preemption_options(options: PreemptionOptions) -> PreemptionOptions:
    """``options`` if each is a :class:`PreemptionOptions` key; :class:`InvalidCallError`
    naming the accepted ones otherwise (instead of ``for_pod``'s bare ``TypeError``)."""
    unknown = [key for key in options if key not in _PREEMPTION_OPTIONS]
    if unknown:
        raise InvalidCallError(
            f"unknown preemption option {', '.join(map(repr, unknown))}: the options are "
            f"{', '.join(_PREEMPTION_OPTIONS)}"
        )
    return options


_stamp: tuple[int, str] = (-1, "")  # (second, its timestamp): one strftime per second


def utc_now() -> str:
    """The current time as a Kubernetes timestamp (RFC 3339, UTC, second precision). Any
    thread (the cache is one tuple, replaced whole)."""
    global _stamp  # noqa: PLW0603 - a per-second memo, replaced atomically
    second = int(time.time())
    cached = _stamp
    if cached[0] == second:
        return cached[1]
    text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _stamp = (second, text)
    return text


class WallClock:
    """The clock pod calls stamp ``lastTransitionTime`` with, at send time: ``now()`` returns a
    Kubernetes timestamp (:func:`utc_now` unless replaced; tests set a fixed one). The calls read
    it from :data:`WALL_CLOCK` on each use, so a replacement takes effect whether this module
    runs as Python or compiled. Any thread."""

    __slots__ = ("now",)

    def __init__(self, now: Callable[[], str] = utc_now) -> None:
        self.now = now


WALL_CLOCK: Final = WallClock()
"""The one :class:`WallClock` of the pod calls."""


# --------------------------------------------------------------------------- validation


def check_condition(cond: object) -> Condition:
    """Validate a condition intent and return a read-only copy of it.

    It needs ``type`` (non-empty str) and ``status`` (``"True"``, ``"False"`` or ``"Unknown"``);
    ``reason`` and ``message`` are optional strings. Timestamps are set at send time and any
    other key is rejected. Raises :class:`InvalidCallError`.
    """
    if type(cond) is not dict and not is_mapping(cond):
        raise InvalidCallError(f"a condition must be a mapping, got {type(cond).__name__}")
    unknown = set(cond) - _CONDITION_KEYS
    if unknown:
        raise InvalidCallError(
            f"condition has unsupported keys {sorted(map(str, unknown))}: "
            "only type, status, reason and message may be given"
        )
    ctype = cond.get("type")
    if not isinstance(ctype, str) or not ctype:
        raise InvalidCallError(f"condition needs a non-empty string 'type', got {ctype!r}")
    status = cond.get("status")
    if not isinstance(status, str) or status not in CONDITION_STATUSES:
        raise InvalidCallError(
            f"condition {ctype!r}: status must be one of 'True', 'False', 'Unknown', got {status!r}"
        )
    for key in ("reason", "message"):
        if key in cond and not isinstance(cond[key], str):
            raise InvalidCallError(f"condition {ctype!r}: {key} must be a str")
    return MappingProxyType(
        {k: cond[k] for k in ("type", "status", "reason", "message") if k in cond}
    )


_NOT_A_SEQUENCE = (Mapping, str, bytes)
"""Iterables that are not a sequence of conditions (a type tuple built once)."""

_PLAIN_SEQUENCES = (list, tuple)
"""The usual sequences of conditions, recognised by exact type before the ABC checks (each of
those costs about ten times as much)."""


def check_conditions(conds: object) -> tuple[Condition, ...]:
    """Validate a sequence of condition intents (each :func:`check_condition`, no type twice);
    read-only copies. Raises :class:`InvalidCallError`."""
    # exact tuples (what for_pod and merge pass) and lists first, spelled out for mypy to narrow
    if (
        type(conds) is not tuple
        and type(conds) is not list
        and (isinstance(conds, _NOT_A_SEQUENCE) or not isinstance(conds, Iterable))
    ):
        raise InvalidCallError("conditions must be a sequence of condition mappings")
    out = tuple(check_condition(c) for c in conds)
    seen: set[str] = set()
    for c in out:
        if c["type"] in seen:
            raise InvalidCallError(f"condition type {c['type']!r} given twice")
        seen.add(c["type"])
    return out


def _check_node(node: object, what: str) -> str:
    try:
        return check_node_name(node)
    except InvalidObjectError as exc:
        raise InvalidCallError(f"{what}: {exc}") from None


def _check_nominated(nnn: object) -> str | UnsetType | None:
    """A ``nominated_node_name``: a node name, None (clear it) or UNSET (leave it alone)."""
    if nnn is UNSET or nnn is None:
        return nnn
    return _check_node(nnn, "nominated_node_name")


def check_pod_call(call: Call) -> None:
    """Validate ``ref`` and ``basis`` of a call on one object of the call's kind (every pod
    call type, and the PodGroup status patch): ``ref`` of that kind, ``basis`` None or that
    object (same UID, no other kind)."""
    ref, basis = given(call, "ref"), call.basis
    if not isinstance(ref, ObjectRef):
        raise InvalidCallError(f"{call.call_type}: ref must be an ObjectRef, got {ref!r}")
    if ref.kind != call.kind:
        raise InvalidCallError(f"{call.call_type} applies to {call.kind}, not {ref.kind}")
    if basis is not None:
        if not is_mapping(basis):
            raise InvalidCallError(f"{call.call_type}: basis must be an object mapping or None")
        if meta(basis).get("uid") != ref.uid:
            raise InvalidCallError(f"{call.call_type}: basis is not the object of {ref}")
        if basis.get("kind") not in (None, call.kind):
            raise InvalidCallError(f"{call.call_type}: basis is a {basis.get('kind')!r}")


def deleted_or_replaced(ref: ObjectRef, fresh: Obj) -> bool:
    """Whether ``fresh``, the object of ``ref``'s name on the server, shows ``ref``'s object
    deleted: terminating (its deletion accepted), or another object (UID) under its name.
    What "landed" means for a deletion. Pure."""
    return meta(fresh).get("uid") != ref.uid or is_terminating(fresh)


def newest_basis(newer: Obj | None, older: Obj | None) -> Obj | None:
    """The basis a merged call keeps: the newer of the two (by resourceVersion), either when
    the other is None. Pure; any thread."""
    if newer is None:
        return older
    if older is None or is_newer(newer, older):
        return newer
    return older


# --------------------------------------------------------------------------- conditions


_NO_CONDITIONS: Final[Mapping[str, Mapping[str, Any]]] = MappingProxyType({})
# The last object pod_conditions() read, and its answer: the rules read the same object's
# conditions up to three times per call (revalidate, is_noop, status_patch). One tuple,
# replaced whole, so any thread reads a consistent pair; it keeps one object alive.
_last_conditions: tuple[object, Mapping[str, Mapping[str, Any]]] = (None, _NO_CONDITIONS)


def pod_conditions(obj: Obj | None) -> Mapping[str, Mapping[str, Any]]:
    """``status.conditions`` of an object, by type (malformed entries ignored). The answer
    may be shared with other readers of the same object: read it, never change it."""
    global _last_conditions  # noqa: PLW0603 - a one-object memo, replaced atomically
    last = _last_conditions
    if last[0] is obj:
        return last[1]
    status = obj.get("status") if type(obj) is dict else get_path(obj, "status")
    conds = status.get("conditions") if type(status) is dict else get_path(status, "conditions")
    by_type: Mapping[str, Mapping[str, Any]] = _NO_CONDITIONS
    if type(conds) is list or type(conds) is tuple:
        by_type = {c["type"]: c for c in conds if is_mapping(c) and isinstance(c.get("type"), str)}
    _last_conditions = (obj, by_type)
    return by_type


def condition_satisfied(existing: Mapping[str, Any] | None, intent: ConditionLike) -> bool:
    """Whether ``existing`` already has every field the intent specifies."""
    if existing is None:
        return False
    for key, value in intent.items():
        if existing.get(key) != value:
            return False
    return True


def conditions_satisfied(obj: Obj, intents: Iterable[ConditionLike]) -> bool:
    """Whether every intent is :func:`condition_satisfied` by the conditions of ``obj``."""
    current = pod_conditions(obj)
    if not current:
        return not intents
    for intent in intents:
        if not condition_satisfied(current.get(intent["type"]), intent):
            return False
    return True


def apply_conditions(obj: Obj, intents: Iterable[ConditionLike], *, replace: bool = False) -> Obj:
    """``obj`` with the condition intents applied by type (``obj`` itself if nothing changes).

    ``replace=False`` merges the intent's fields into an existing condition (strategic-merge
    semantics of a status patch); ``replace=True`` replaces it whole (what the apiserver does on
    binding). ``lastTransitionTime`` is kept when the status does not change and dropped when it
    does (the real time is only known once the server applied it).
    """
    raw = get_path(obj, "status", "conditions")
    current: list[Any] = list(raw) if isinstance(raw, (list, tuple)) else []
    index = {
        c["type"]: i
        for i, c in enumerate(current)
        if is_mapping(c) and isinstance(c.get("type"), str)
    }
    changed = False
    for intent in intents:
        i = index.get(intent["type"])
        if i is None:
            index[intent["type"]] = len(current)
            current.append(dict(intent))
            changed = True
            continue
        old = current[i]
        same_status = old.get("status") == intent["status"]
        if replace:
            new = dict(intent)
            if same_status and LAST_TRANSITION_TIME in old:
                new[LAST_TRANSITION_TIME] = old[LAST_TRANSITION_TIME]
        else:
            new = {**old, **intent}
            if not same_status:
                new.pop(LAST_TRANSITION_TIME, None)
        if new != old:
            current[i] = new
            changed = True
    return with_path(obj, ("status", "conditions"), current) if changed else obj


def merge_conditions(
    newer: tuple[ConditionLike, ...], older: tuple[ConditionLike, ...]
) -> tuple[ConditionLike, ...]:
    """Condition intents merged by type, as if ``older`` then ``newer`` had been sent: for a
    type in both, ``newer``'s fields win and ``older``'s fill the keys it leaves out; ``older``'s
    order is kept and ``newer``'s other types are appended. The one merge of condition intents
    (pod and PodGroup status patches). Pure; any thread."""
    by_type = {c["type"]: c for c in newer}
    older_types = {c["type"] for c in older}
    return tuple(
        MappingProxyType({**c, **by_type[c["type"]]}) if c["type"] in by_type else c for c in older
    ) + tuple(c for c in newer if c["type"] not in older_types)


def condition_entries(
    intents: Iterable[ConditionLike],
    current: Mapping[str, Mapping[str, Any]],
    now: str | None = None,
) -> list[dict[str, Any]]:
    """The ``status.conditions`` entries of a strategic-merge patch that brings ``current``
    (conditions by type, see :func:`pod_conditions`) to the ``intents``: one per intent not
    :func:`condition_satisfied` already, with ``lastTransitionTime`` set to ``now`` (default
    :data:`WALL_CLOCK`, read once) where the condition is new or its status changes; where the
    status stays, the merge keeps the stored time. Pure but for the clock; any thread."""
    stamp: str | None = now
    entries: list[dict[str, Any]] = []
    for intent in intents:
        old = current.get(intent["type"])
        if condition_satisfied(old, intent):
            continue
        entry = dict(intent)
        if old is None or old.get("status") != intent["status"]:
            if stamp is None:
                stamp = WALL_CLOCK.now()
            entry[LAST_TRANSITION_TIME] = stamp
        entries.append(entry)
    return entries


def _norm_node(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


# --------------------------------------------------------------------------- calls


@dataclass(frozen=True, slots=True)
class PodStatusPatch(Call):
    """Pod conditions (merged by type) and/or ``status.nominatedNodeName`` (set or cleared).

    Sent as a strategic-merge patch of ``pods/status`` carrying only what still differs from the
    newest trusted pod, guarded by its UID and resourceVersion. Staleness (kubernetes#139602):
    a patch setting ``PodScheduled`` to anything but ``True`` never lands on a pod that is bound,
    nor on one whose ``PodScheduled=True`` its caller had not seen; it resolves
    :class:`~kdispatch.CallStale` instead, whichever way the newer pod arrived
    (informer, the caller's own basis, a 409's re-read, a binding through this dispatcher).
    Build with :meth:`for_pod`.
    """

    # Quoted ClassVars, and no __future__ annotations in this module: see Call.
    call_type: "ClassVar[str]" = "pod_status_patch"
    kind: "ClassVar[str]" = POD
    relevance: "ClassVar[int]" = 1

    ref: ObjectRef
    conditions: tuple[Condition, ...] = ()
    nominated_node_name: str | UnsetType | None = UNSET
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_pod_call(self)
        object.__setattr__(self, "conditions", check_conditions(given(self, "conditions")))
        nnn = _check_nominated(given(self, "nominated_node_name"))
        if not self.conditions and nnn is UNSET:
            raise InvalidCallError(
                "pod_status_patch needs at least one condition or a nominated_node_name"
            )

    def __hash__(self) -> int:
        return hash((self.call_type, self.ref))

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
        if type(conditions) not in _PLAIN_SEQUENCES and isinstance(conditions, Mapping):
            raise InvalidCallError("conditions must be a sequence of conditions, not one mapping")
        nnn = _check_nominated(nominated_node_name)
        return cls(ref, tuple(conditions), nnn, basis=pod)

    def merge(self, older: object) -> Self:
        """Conditions merge by type: this call's fields win, the older call fills the gaps (its
        other condition types, and a reason/message this call leaves unspecified), exactly as if
        both had been sent in order; the older call's order is kept, new types are appended.
        nominatedNodeName is this call's if set, else the older one's."""
        older = check_merge(self, older)
        conds = merge_conditions(self.conditions, older.conditions)
        nnn = self.nominated_node_name
        if nnn is UNSET:
            nnn = older.nominated_node_name
        return type(self)(self.ref, conds, nnn, basis=newest_basis(self.basis, older.basis))

    def revalidate(self, basis: Obj | None, obj: Obj | None) -> str | None:
        """Stale when the patch would un-schedule a pod that is scheduled: ``PodScheduled`` set
        to anything but ``True`` on a bound pod, or on a pod whose ``PodScheduled=True`` is not
        in ``basis`` (the caller decided before it). Pure."""
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
        nnn = self.nominated_node_name
        if nnn is UNSET:
            return False
        return _norm_node(nnn) != _norm_node(get_path(obj, "status", "nominatedNodeName"))

    def is_noop(self, obj: Obj | None) -> bool:
        """Every condition already has the intended status/reason/message (timestamps ignored)
        and nominatedNodeName (if set) already has the intended value (None ≡ absent)."""
        if obj is None or not conditions_satisfied(obj, self.conditions):
            return False
        return self.nominated_node_name is UNSET or not self._nnn_differs(obj)

    def landed(self, fresh: Obj) -> bool:
        """``fresh`` is this pod with every condition and the nominatedNodeName of this patch
        (:meth:`is_noop`)."""
        return meta(fresh).get("uid") == self.ref.uid and self.is_noop(fresh)

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
        """The ``status`` part of the strategic-merge patch against ``obj``: only the conditions
        that differ (with ``lastTransitionTime = now`` where the status changes) and
        ``nominatedNodeName`` if it differs (None clears it). None when nothing differs."""
        conds = condition_entries(self.conditions, pod_conditions(obj), now)
        body: dict[str, Any] = {}
        if conds:
            body["conditions"] = conds
        if self._nnn_differs(obj):
            body["nominatedNodeName"] = self.nominated_node_name or None
        return body or None

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        """Patch what still differs from ``obj`` (the trusted pod) with the object-shaped body
        ``{"status": status_patch(obj)}``, guarded by UID and resourceVersion; returns the
        server's pod, or ``obj`` when nothing differs (no request). Runs on an executor worker
        thread."""
        return patch_status_guarded(backend, self.ref, self.status_patch(obj), obj, "strategic")


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
        check_pod_call(self)
        _check_node(given(self, "node"), "node")

    def __hash__(self) -> int:
        return hash((self.call_type, self.ref))

    @classmethod
    def for_pod(cls, pod: object, node: object) -> Self:
        """A binding of ``pod`` (also its basis) to ``node`` (a node name)."""
        pod = as_object(pod)  # official-client models and any Mapping
        return cls(ObjectRef.of(pod, POD), _check_node(node, "node"), basis=pod)

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
        """Create the binding (one request, UID precondition). A 409 propagates: the executor
        re-reads the pod once and :meth:`landed` decides. Runs on an executor worker
        thread."""
        del obj
        ref = self.ref
        backend.bind(ref.namespace, ref.name, uid=ref.uid, node=self.node)
        return None


@dataclass(frozen=True, slots=True)
class PodPreemption(Call):
    """Preempt (delete) a victim pod, optionally marking it with a ``DisruptionTarget``
    condition first. Exclusive: it cancels every other pending call of the pod.

    The deletion carries a UID precondition, so a re-created pod of the same name is never hit;
    NotFound at either step means the pod is already gone, which is success. The condition is
    patched only when the trusted pod lacks ``DisruptionTarget=True``: a retry (the actor
    re-reads the pod after an ambiguous failure) keeps the existing condition and its
    ``lastTransitionTime``.
    """

    call_type: "ClassVar[str]" = "pod_preemption"
    kind: "ClassVar[str]" = POD
    relevance: "ClassVar[int]" = 3
    exclusive: "ClassVar[bool]" = True

    ref: ObjectRef
    condition: Condition | None = None
    grace_period_seconds: int | None = None
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_pod_call(self)
        if self.condition is not None:
            cond = check_condition(self.condition)
            if cond["type"] != DISRUPTION_TARGET:
                raise InvalidCallError(
                    f"pod_preemption condition must be {DISRUPTION_TARGET!r}, got {cond['type']!r}"
                )
            object.__setattr__(self, "condition", cond)
        check_grace_period(given(self, "grace_period_seconds"), InvalidCallError)

    def __hash__(self) -> int:
        return hash((self.call_type, self.ref))

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

    def is_noop(self, obj: Obj | None) -> bool:
        """The pod is already terminating: its deletion is under way."""
        return is_terminating(obj)

    def landed(self, fresh: Obj) -> bool:
        """The deletion landed: ``fresh`` is this pod terminating, or another pod of its name
        (:func:`deleted_or_replaced`)."""
        return deleted_or_replaced(self.ref, fresh)

    def apply(self, obj: Obj) -> Obj:
        """The pod marked terminating (``deletionTimestamp = "pending"`` unless already set)
        with the condition applied (copy-on-write)."""
        out = obj
        if self.condition is not None:
            out = apply_conditions(out, (self.condition,))
        if not is_terminating(out):
            out = with_path(out, ("metadata", "deletionTimestamp"), "pending")
        return out

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        """Patch the condition (UID precondition only) unless ``obj`` (the trusted pod) already
        has it with the same status, then delete with a UID precondition: one or two requests.
        NotFound at either step is success. Returns None. Runs on an executor worker thread."""
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
