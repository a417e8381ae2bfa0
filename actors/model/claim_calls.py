"""ResourceClaim calls (DRA): allocation and consumer reservations, :class:`ClaimStatusPatch`.
Pure module: every method but ``send`` runs on the calling thread and never blocks; ``send``
runs on an executor worker.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, Self

from .calls import UNSET, StatusPatch, UnsetType, check_merge, check_target, newest_basis
from .errors import InvalidCallError, InvalidObjectError
from .objects import (
    DELETE,
    RESOURCE_CLAIM,
    Obj,
    ObjectRef,
    as_object,
    check_json,
    check_uid,
    get_path,
    is_collection,
    is_mapping,
    with_path,
)

__all__ = ["UNSET", "ClaimStatusPatch", "check_consumer"]

_CONSUMER_KEYS: Final = frozenset({"apiGroup", "resource", "name", "uid"})

Consumer = Mapping[str, str]
"""A consumer reference as in ``status.reservedFor``: ``resource``, ``name``, ``uid`` and
optionally ``apiGroup`` (empty or absent for core resources such as pods)."""

Reservation = tuple[str, Consumer | None]
"""``(consumer uid, consumer ref)`` to reserve, or ``(consumer uid, None)`` to unreserve."""


def check_consumer(consumer: object) -> Consumer:
    """Validate a consumer reference and return a read-only copy. Raises
    :class:`InvalidCallError`."""
    if not isinstance(consumer, Mapping):
        raise InvalidCallError(
            f"a consumer reference must be a mapping, got {type(consumer).__name__}"
        )
    unknown = set(consumer) - _CONSUMER_KEYS
    if unknown:
        raise InvalidCallError(
            f"consumer reference has unsupported keys {sorted(map(str, unknown))}: "
            "only apiGroup, resource, name and uid may be given"
        )
    for key in ("resource", "name", "uid"):
        value = consumer.get(key)
        if not isinstance(value, str) or not value:
            raise InvalidCallError(f"consumer reference needs a non-empty string {key!r}")
    if not isinstance(consumer.get("apiGroup", ""), str):
        raise InvalidCallError("consumer reference apiGroup must be a str")
    _check_consumer_uid(consumer["uid"])
    return MappingProxyType(
        {k: consumer[k] for k in ("apiGroup", "resource", "name", "uid") if k in consumer}
    )


def _check_consumer_uid(uid: object) -> str:
    try:
        return check_uid(uid)
    except InvalidObjectError as exc:
        raise InvalidCallError(f"consumer {exc}") from None


def _thaw(value: Any) -> Any:
    """A deep plain-JSON copy (dicts and lists) of ``value``."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


def _check_allocation(allocation: object) -> Mapping[str, Any]:
    """A plain-JSON copy of ``allocation``, a mapping. Raises :class:`InvalidCallError`."""
    if not is_mapping(allocation):
        raise InvalidCallError(
            f"allocation must be a mapping, None or UNSET, got {type(allocation).__name__}"
        )
    try:
        copy: Mapping[str, Any] = check_json(allocation, "allocation")
    except InvalidObjectError as exc:
        raise InvalidCallError(str(exc)) from None
    return copy


def _check_reservations(reservations: object) -> tuple[Reservation, ...]:
    if not is_collection(reservations):
        raise InvalidCallError("reservations must be a sequence of (consumer uid, ref|None) pairs")
    out: list[Reservation] = []
    seen: set[str] = set()
    for item in reservations:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidCallError(f"a reservation must be a (uid, ref|None) pair, got {item!r}")
        uid = _check_consumer_uid(item[0])
        if uid in seen:
            raise InvalidCallError(f"consumer {uid!r} given twice")
        seen.add(uid)
        consumer = None if item[1] is None else check_consumer(item[1])
        if consumer is not None and consumer["uid"] != uid:
            raise InvalidCallError(f"reservation key {uid!r} differs from its ref's uid")
        out.append((uid, consumer))
    return tuple(out)


def _reserved_for(obj: Obj | None) -> list[Any]:
    entries = get_path(obj, "status", "reservedFor")
    return list(entries) if isinstance(entries, list | tuple) else []


def _entry_uid(entry: Any) -> str | None:
    uid = entry.get("uid") if is_mapping(entry) else None
    return uid if isinstance(uid, str) else None


@dataclass(frozen=True, slots=True)
class ClaimStatusPatch(StatusPatch):
    """Allocation and reservation changes for one ResourceClaim. Build with :meth:`for_claim`.

    ``allocation``: a mapping sets ``status.allocation``, None removes it (deallocate),
    :data:`UNSET` leaves it alone. ``reservations``: ``(consumer uid, ref)`` reserves,
    ``(consumer uid, None)`` unreserves; one entry per consumer. Pending changes merge by
    consumer UID, newer wins. Sent as a JSON merge patch of ``resourceclaims/status`` computed
    against the newest trusted claim (``reservedFor`` always complete: a merge patch replaces a
    list whole), guarded by UID and resourceVersion.
    """

    call_type: "ClassVar[str]" = "claim_status_patch"
    kind: "ClassVar[str]" = RESOURCE_CLAIM
    relevance: "ClassVar[int]" = 1
    patch_type = "merge"

    ref: ObjectRef
    allocation: Mapping[str, Any] | UnsetType | None = field(default=UNSET, hash=False)
    reservations: tuple[Reservation, ...] = field(default=(), hash=False)
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_target(self)
        allocation = self.allocation
        if allocation is not UNSET and allocation is not None:
            object.__setattr__(self, "allocation", _check_allocation(allocation))
        object.__setattr__(self, "reservations", _check_reservations(self.reservations))
        if allocation is UNSET and not self.reservations:
            raise InvalidCallError("claim_status_patch needs an allocation or reservation change")

    @classmethod
    def for_claim(
        cls,
        claim: object,
        *,
        allocate: object = UNSET,
        deallocate: object = False,
        reserve: Iterable[Mapping[str, Any]] = (),
        unreserve: Iterable[str] = (),
    ) -> Self:
        """A status patch for ``claim`` (also its basis).

        ``allocate``: the allocation to set, a mapping of plain JSON (str keys; dicts, lists,
        str, int, finite float, bool, None; a tuple is sent as a list); ``deallocate=True``
        removes it (not both).
        ``reserve``: consumer refs to add to ``reservedFor``; ``unreserve``: consumer uids to
        remove (a uid may not be in both). Raises :class:`InvalidCallError` /
        :class:`InvalidObjectError`.
        """
        claim = as_object(claim)  # official-client models and any Mapping
        ref = ObjectRef.of(claim, RESOURCE_CLAIM)
        if not isinstance(deallocate, bool):
            raise InvalidCallError("deallocate must be a bool")
        allocation: Mapping[str, Any] | UnsetType | None = None if deallocate else UNSET
        if allocate is not UNSET:
            if not is_mapping(allocate):
                raise InvalidCallError(
                    "allocate must be an allocation mapping (use deallocate=True to remove one)"
                )
            if deallocate:
                raise InvalidCallError("allocate and deallocate are mutually exclusive")
            allocation = allocate
        if not is_collection(reserve):
            raise InvalidCallError("reserve takes an iterable of consumer references")
        if not is_collection(unreserve):
            raise InvalidCallError("unreserve takes an iterable of consumer uids")
        reservations: list[Reservation] = []
        for consumer in reserve:
            checked = check_consumer(consumer)
            reservations.append((checked["uid"], checked))
        reserved = {uid for uid, _ in reservations}
        for item in unreserve:
            if is_mapping(item):
                raise InvalidCallError("unreserve takes consumer uids, not consumer references")
            uid = _check_consumer_uid(item)
            if uid in reserved:
                raise InvalidCallError(f"consumer {uid!r} is both reserved and unreserved")
            reservations.append((uid, None))
        if allocation is UNSET and not reservations:
            raise InvalidCallError(
                "nothing requested: give allocate, deallocate, reserve or unreserve"
            )
        return cls(ref, allocation, tuple(reservations), basis=claim)

    def merge(self, older: object) -> Self:
        """Allocation: this call's if set, else the older one's. Reservations merge by consumer
        uid, this call's entry winning (older order kept, new consumers appended)."""
        older = check_merge(self, older)
        newer = dict(self.reservations)
        older_uids = {uid for uid, _ in older.reservations}
        merged = tuple((uid, newer.get(uid, ref)) for uid, ref in older.reservations) + tuple(
            r for r in self.reservations if r[0] not in older_uids
        )
        allocation = self.allocation if self.allocation is not UNSET else older.allocation
        return type(self)(self.ref, allocation, merged, basis=newest_basis(self.basis, older.basis))

    def _allocation_differs(self, obj: Obj | None) -> bool:
        if self.allocation is UNSET:
            return False
        return self.allocation != (get_path(obj, "status", "allocation") or None)

    def _new_reserved_for(self, obj: Obj | None) -> list[Any] | None:
        """``status.reservedFor`` with the reservation changes applied, or None if unchanged."""
        if not self.reservations:
            return None
        current = _reserved_for(obj)
        unreserve = {uid for uid, ref in self.reservations if ref is None}
        kept = [e for e in current if _entry_uid(e) not in unreserve]
        present = {_entry_uid(e) for e in kept}
        added = [
            _thaw(ref) for uid, ref in self.reservations if ref is not None and uid not in present
        ]
        if len(kept) == len(current) and not added:
            return None
        return kept + added

    def is_noop(self, obj: Obj | None) -> bool:
        """The allocation (if set) already equals ``status.allocation`` (None ≡ absent), every
        reserved consumer is in ``status.reservedFor`` and every unreserved one is absent."""
        if obj is None:
            return False
        return not self._allocation_differs(obj) and self._new_reserved_for(obj) is None

    def apply(self, obj: Obj) -> Obj:
        """The claim once the patch is applied (copy-on-write; ``obj`` itself if a no-op)."""
        out = obj
        if self._allocation_differs(obj):
            alloc = self.allocation
            out = with_path(
                out, ("status", "allocation"), DELETE if alloc is None else _thaw(alloc)
            )
        reserved_for = self._new_reserved_for(obj)
        if reserved_for is not None:
            out = with_path(out, ("status", "reservedFor"), reserved_for or DELETE)
        return out

    def status_patch(self, obj: Obj | None) -> dict[str, Any] | None:
        """The ``status`` of the JSON merge patch against ``obj``: the keys that change
        (``reservedFor`` complete; None removes a key); None when nothing changes."""
        body: dict[str, Any] = {}
        if self._allocation_differs(obj):
            body["allocation"] = _thaw(self.allocation) if self.allocation is not None else None
        reserved_for = self._new_reserved_for(obj)
        if reserved_for is not None:
            body["reservedFor"] = _thaw(reserved_for) or None
        return body or None
