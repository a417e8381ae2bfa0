"""Status conditions: validating, reading, merging and applying condition intents by type, the
rules the pod and PodGroup status patches share, and the clock that stamps
``lastTransitionTime`` at send time (:data:`WALL_CLOCK`). Pure (but for the clock); any thread.
"""

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final

from .errors import InvalidCallError
from .objects import Obj, get_path, is_collection, is_mapping, with_path

__all__ = [
    "CONDITION_STATUSES",
    "LAST_TRANSITION_TIME",
    "OMITTED_WHEN_EMPTY",
    "WALL_CLOCK",
    "WallClock",
    "check_condition",
    "check_conditions",
    "utc_now",
]

CONDITION_STATUSES: Final = frozenset({"True", "False", "Unknown"})
_CONDITION_KEYS: Final = frozenset({"type", "status", "reason", "message"})
LAST_TRANSITION_TIME: Final = "lastTransitionTime"

Condition = Mapping[str, str]
"""A validated condition intent: ``type``, ``status`` and optionally ``reason``/``message``."""

ConditionLike = Mapping[str, Any]
"""A condition intent of any call type: a pod's :data:`Condition`, or a PodGroup's (whose
``observedGeneration`` is an int)."""

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
    """The clock the status patches stamp ``lastTransitionTime`` with, at send time: ``now()``
    returns a Kubernetes timestamp (:func:`utc_now` unless replaced; tests set a fixed one),
    read from :data:`WALL_CLOCK` on each use. Any thread."""

    __slots__ = ("now",)

    def __init__(self, now: Callable[[], str] = utc_now) -> None:
        self.now = now


WALL_CLOCK: Final = WallClock()
"""The one :class:`WallClock` of the status patches."""


# --------------------------------------------------------------------------- validation


def check_condition(cond: object) -> Condition:
    """A read-only copy of the condition intent ``cond``: ``type`` (non-empty str), ``status``
    (``"True"``, ``"False"`` or ``"Unknown"``), optional ``reason`` and ``message`` (str); any
    other key (timestamps are set at send time) raises :class:`InvalidCallError`."""
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


def condition_sequence(conds: object) -> Iterable[Any]:
    """``conds`` if it is a collection of conditions (a list, tuple, generator ...), else
    :class:`InvalidCallError` (one condition mapping, a str, None ...)."""
    if is_collection(conds):
        return conds
    if is_mapping(conds):
        raise InvalidCallError(
            "conditions must be a sequence of condition mappings, not one mapping"
        )
    raise InvalidCallError(
        f"conditions must be a sequence of condition mappings, got {type(conds).__name__}"
    )


def check_conditions(
    conds: object, check: Callable[[object], ConditionLike] = check_condition
) -> tuple[Condition, ...]:
    """Validate a sequence of condition intents (each by ``check``, no type twice); read-only
    copies. Raises :class:`InvalidCallError`."""
    # exact tuples and lists inline: no extra call on the hot path
    if type(conds) is not tuple and type(conds) is not list:
        conds = condition_sequence(conds)
    out = tuple(map(check, conds))
    seen: set[str] = set()
    for c in out:
        if c["type"] in seen:
            raise InvalidCallError(f"condition type {c['type']!r} given twice")
        seen.add(c["type"])
    return out


# --------------------------------------------------------------------------- rules


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


OMITTED_WHEN_EMPTY: Final = frozenset({"reason", "message"})
"""Condition fields a server leaves out when empty (core/v1 PodCondition's are ``omitempty``):
an empty one in an intent is satisfied by an absent one."""


def condition_satisfied(existing: Mapping[str, Any] | None, intent: ConditionLike) -> bool:
    """Whether ``existing`` already has every field the intent specifies (an empty ``reason``
    or ``message`` ≡ absent)."""
    if existing is None:
        return False
    for key, value in intent.items():
        stored = existing.get(key)
        if stored != value and not (value == "" and stored is None and key in OMITTED_WHEN_EMPTY):
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

    ``replace=False`` merges the intent's fields into an existing condition (a status patch);
    ``replace=True`` replaces it whole (what the apiserver does on binding).
    ``lastTransitionTime`` is kept when the status does not change and dropped when it does.
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
    order is kept and ``newer``'s other types are appended."""
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
    (:func:`pod_conditions`) to the ``intents``: one per intent not satisfied already, with
    ``lastTransitionTime`` set to ``now`` (default :data:`WALL_CLOCK`, read once) where the
    condition is new or its status changes."""
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
