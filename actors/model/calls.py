"""The call model: what a call is (an immutable intent for one object, docs/concepts.md), and
the validated registry of call types. Pure module: every method of a call runs on the calling
thread and must not block, except :meth:`Call.send`.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, Self, TypeVar, cast

from .backend import ApiBackend, patch_status_guarded
from .errors import CallTypeRegistrationError, InvalidCallError, UnknownCallTypeError
from .kinds import DEFAULT_KINDS, KindTable, PatchType
from .objects import Obj, ObjectRef, as_object, is_mapping, is_newer, meta


class Unset(enum.Enum):
    """Type of :data:`UNSET`."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET
"""Sentinel for an optional call field that was not specified (distinct from None, which
means "clear")."""

UnsetType = Literal[Unset.UNSET]
"""Annotation for fields that may hold :data:`UNSET`."""

BEST_EFFORT: Final = 0
"""The relevance (executor lane) of ``best_effort`` call types, below every other lane."""


class Call(ABC):
    """An intent for one object. Immutable; subclasses are frozen (slotted) dataclasses whose
    first field is ``ref`` (the object); ``basis`` is the object the caller decided on, or None.

    Class attributes, validated by :class:`CallTypeRegistry` (docs/call-types.md, "How types
    interact"):

    * ``call_type`` — unique name, e.g. ``"pod_binding"`` (also the metrics label);
    * ``kind`` — the object kind it applies to (``"Pod"``, or a registered kind);
    * ``relevance`` — a positive int: the executor lane (orders objects, never calls of one
      object); :data:`BEST_EFFORT` (0) is the lane of ``best_effort`` types only;
    * ``best_effort`` — Events: their own lane and token bucket, dropped unsent when full;
    * ``supersedes`` — call types of the same kind this one replaces (``OVERWRITTEN`` when
      pending, ``SKIPPED`` when arriving later); other types queue behind, both sent in order;
    * ``exclusive`` — preemptions and evictions: cancels every pending call, none queues behind;
    * ``reads_object`` — the request is computed from the object (re-read after an ambiguous
      failure); False for requests that only carry preconditions (a binding);
    * ``keyed_by_name`` — ``ref.uid`` is only the actor's key, made from the name, never the
      server's UID (Events): the object read back under the call's name is the call's own.
    """

    __slots__ = ()

    call_type: ClassVar[str]
    kind: ClassVar[str]
    relevance: ClassVar[int]
    supersedes: ClassVar[frozenset[str]] = frozenset()
    exclusive: ClassVar[bool] = False
    reads_object: ClassVar[bool] = True
    best_effort: ClassVar[bool] = False
    keyed_by_name: ClassVar[bool] = False

    ref: ObjectRef
    basis: Obj | None = None

    # ------------------------------------------------------------------ rules (pure)

    def merge(self, older: Self) -> Self:
        """Combine with an older pending call of the same type: newer values win, the older
        call fills the gaps. Default: the newer call replaces the older one."""
        del older
        return self

    @abstractmethod
    def is_noop(self, obj: Obj | None) -> bool:
        """Whether sending this call against ``obj`` (the newest observed object, None if
        unknown) would change nothing."""

    @abstractmethod
    def apply(self, obj: Obj) -> Obj:
        """The object as it will be once this call succeeded (optimistic view). Never mutates
        ``obj``; returns ``obj`` itself when nothing changes."""

    def precheck(self, obj: Obj | None) -> str | None:
        """A reason why this call can never succeed against ``obj`` (fail fast), or None.
        Example: a binding for a pod that is already bound elsewhere or terminating."""
        del obj
        return None

    def revalidate(self, basis: Obj | None, obj: Obj | None) -> str | None:
        """Staleness: a reason why the intent, decided on ``basis``, no longer applies to
        ``obj`` (the newest object the call would be sent against), or None to rebase on it.
        Checked at submit, on every newer object, after a 409 and before the request is
        computed. A reason resolves the call :class:`~kdispatch.CallStale`, nothing sent.
        Default: always rebase."""
        del basis, obj
        return None

    def landed(self, fresh: Obj) -> bool:
        """Whether ``fresh``, the object of this call's name just read from the server, shows
        that this call took effect (an attempt landed whose reply was lost). Asked after a 409
        (``fresh`` has this call's UID, unless the call is keyed by name: an Event) and before
        a call one of whose requests went unanswered resolves ``CallFailed`` (``fresh`` may be
        another object of the name). True resolves the call ``SUCCESS``. Default: False. Pure."""
        del fresh
        return False

    # ------------------------------------------------------------------ I/O (executor thread)

    @abstractmethod
    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        """Perform the request(s) for this intent against ``obj`` (newest observed object).
        Executor worker thread, where it may block for its requests (or the actor's own turn:
        ``ExecutorConfig.inline_sends``). Every request takes a rate-limiter token. With
        :attr:`reads_object`, ``obj`` is an object the actor trusts (never None). Returns the
        object the server answered with, if any. Raises :class:`~kdispatch.ApiError`."""

    def describe(self) -> str:
        """Short human description for logs."""
        return f"{self.call_type} {self.ref.namespace}/{self.ref.name}"


class StatusPatch(Call):
    """A call sent as one patch of its object's ``status``: :meth:`status_patch` of the
    trusted object, in the flavour ``patch_type``, guarded by UID and resourceVersion."""

    __slots__ = ()

    patch_type: ClassVar[PatchType] = "strategic"

    @abstractmethod
    def status_patch(self, obj: Obj | None) -> dict[str, Any] | None:
        """The ``status`` of the patch against ``obj``; None when nothing differs. Pure."""

    def landed(self, fresh: Obj) -> bool:
        """``fresh`` is this object with this patch applied (:meth:`is_noop`)."""
        return meta(fresh).get("uid") == self.ref.uid and self.is_noop(fresh)

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        """Patch :meth:`status_patch` of ``obj`` (the trusted object), guarded by UID and
        resourceVersion; the server's object, or ``obj`` when nothing differs (no request).
        Executor worker thread."""
        status = self.status_patch(obj)
        return patch_status_guarded(backend, self.ref, status, obj, self.patch_type)


CallT = TypeVar("CallT", bound=Call)


def given(call: object, name: str) -> object:
    """The field ``name`` of ``call`` typed ``object``, to validate and narrow (a call of a type
    not known yet, as :func:`check_merge`'s ``older``). Any thread."""
    return getattr(call, name)


def check_merge(newer: CallT, older: object) -> CallT:
    """``older``, if it may merge into ``newer``: a call of the same type for the same object.
    Raises :class:`InvalidCallError` otherwise. Any thread."""
    if type(older) is not type(newer) or given(older, "ref") != newer.ref:
        what = older.describe() if isinstance(older, Call) else type(older).__name__
        raise InvalidCallError(f"cannot merge {what} into {newer.describe()}")
    return older


def check_target(call: Call) -> None:
    """Validate ``ref`` and ``basis`` of a call on one object of the call's kind: ``ref`` of
    that kind, ``basis`` None or that object (same UID, no other kind). Raises
    :class:`InvalidCallError`. Any thread."""
    ref: object = call.ref
    if not isinstance(ref, ObjectRef):
        raise InvalidCallError(f"{call.call_type}: ref must be an ObjectRef, got {ref!r}")
    if ref.kind != call.kind:
        raise InvalidCallError(f"{call.call_type} applies to {call.kind}, not {ref.kind}")
    basis = call.basis
    if basis is not None:
        if type(basis) is not dict and not is_mapping(basis):
            raise InvalidCallError(f"{call.call_type}: basis must be an object mapping or None")
        if meta(basis).get("uid") != ref.uid:
            raise InvalidCallError(f"{call.call_type}: basis is not the object of {ref}")
        if basis.get("kind") not in (None, call.kind):
            raise InvalidCallError(f"{call.call_type}: basis is a {basis.get('kind')!r}")


def newest_basis(newer: Obj | None, older: Obj | None) -> Obj | None:
    """The basis a merged call keeps: the newer of the two (by resourceVersion), either when
    the other is None. Pure; any thread."""
    if newer is None:
        return older
    if older is None or is_newer(newer, older):
        return newer
    return older


@dataclass(frozen=True, slots=True)
class CallTypeSpec:
    """A registered call type."""

    call_type: str
    kind: str
    relevance: int
    exclusive: bool
    supersedes: frozenset[str]
    cls: type[Call]


class CallTypeRegistry:
    """Validated registry of call types (kinds from ``kinds``, default
    :data:`~kdispatch.DEFAULT_KINDS`). Thread-safe; lookup is a dict get.

    Registration raises :class:`CallTypeRegistrationError` for anything but a complete Call
    subclass of a known kind with a positive relevance and a free name, and for contradictory
    supersession (docs/call-types.md). A type supersedes only types registered before it.
    """

    def __init__(
        self, call_classes: Iterable[type[Call]] = (), *, kinds: KindTable | None = None
    ) -> None:
        if kinds is not None and not isinstance(kinds, KindTable):
            raise CallTypeRegistrationError(f"kinds must be a KindTable, got {kinds!r}")
        self._kinds = kinds if kinds is not None else DEFAULT_KINDS
        self._lock = threading.Lock()
        self._by_type: dict[str, CallTypeSpec] = {}
        self._by_class: dict[type[object], CallTypeSpec] = {}  # the same specs, by class
        for cls in call_classes:
            self.register(cls)

    def register(self, cls: type[Call]) -> CallTypeSpec:
        """Register a call class. Raises :class:`CallTypeRegistrationError`."""
        if not isinstance(cls, type) or not issubclass(cls, Call):
            raise CallTypeRegistrationError(f"{cls!r} is not a Call subclass")
        call_type = getattr(cls, "call_type", None)
        kind = getattr(cls, "kind", None)
        relevance = getattr(cls, "relevance", None)
        if not isinstance(call_type, str) or not call_type:
            raise CallTypeRegistrationError(f"{cls.__name__} has no call_type")
        if not isinstance(kind, str) or not kind:
            raise CallTypeRegistrationError(f"{cls.__name__} has no kind")
        best_effort = getattr(cls, "best_effort", False) is True
        lowest = BEST_EFFORT if best_effort else 1
        if isinstance(relevance, bool) or not isinstance(relevance, int) or relevance < lowest:
            raise CallTypeRegistrationError(
                f"{cls.__name__}.relevance must be a positive int, got {relevance!r}"
            )
        if best_effort and (relevance != BEST_EFFORT or cls.exclusive):
            raise CallTypeRegistrationError(
                f"{cls.__name__} is best_effort: its relevance must be BEST_EFFORT (0) and it "
                "cannot be exclusive"
            )
        _check_methods(cls)
        if kind not in self._kinds:
            raise CallTypeRegistrationError(
                f"{cls.__name__}.kind {kind!r} is not in the kind table: register it first "
                "with kdispatch.register_kind(kind, group, version, plural)"
            )
        declared: object = getattr(cls, "supersedes", frozenset())
        if not isinstance(declared, frozenset | set | tuple) or not all(
            isinstance(n, str) for n in declared
        ):
            raise CallTypeRegistrationError(
                f"{cls.__name__}.supersedes must be a frozenset of call type names"
            )
        supersedes = frozenset(declared)
        exclusive = bool(cls.exclusive)
        if exclusive and supersedes:
            raise CallTypeRegistrationError(
                f"{cls.__name__} is exclusive (it cancels every other call): drop 'supersedes'"
            )
        if call_type in supersedes:
            raise CallTypeRegistrationError(
                f"{call_type!r} supersedes itself: calls of one type merge instead"
            )
        spec = CallTypeSpec(call_type, kind, relevance, exclusive, supersedes, cls)
        with self._lock:
            if call_type in self._by_type:
                raise CallTypeRegistrationError(f"call type {call_type!r} is already registered")
            for name in sorted(supersedes):
                other = self._by_type.get(name)
                if other is None:
                    raise CallTypeRegistrationError(
                        f"{call_type!r} supersedes {name!r}, which is not registered "
                        "(register it first)"
                    )
                if other.kind != kind:
                    raise CallTypeRegistrationError(
                        f"{call_type!r} ({kind}) cannot supersede {name!r} ({other.kind})"
                    )
                if other.exclusive:
                    raise CallTypeRegistrationError(
                        f"{call_type!r} cannot supersede {name!r}: it is exclusive"
                    )
            self._by_type = {**self._by_type, call_type: spec}
            self._by_class = {**self._by_class, cls: spec}
        return spec

    def __getstate__(self) -> dict[str, object]:
        """Pickle support (a :class:`~kdispatch.ProcessDispatcher` sends the registry to its
        child): the registered types without the lock. The process-wide
        :data:`~kdispatch.DEFAULT_KINDS` crosses as a reference to the receiving process's own
        table; the call classes cross by reference, so they must be importable there."""
        kinds = None if self._kinds is DEFAULT_KINDS else self._kinds
        return {"kinds": kinds, "by_type": self._by_type, "by_class": self._by_class}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle: a fresh lock, the same registered types."""
        kinds = state["kinds"]
        self._kinds = kinds if kinds is not None else DEFAULT_KINDS
        self._lock = threading.Lock()
        self._by_type = state["by_type"]
        self._by_class = state["by_class"]

    def spec(self, call_type: str) -> CallTypeSpec:
        """The spec of a registered call type; :class:`UnknownCallTypeError` otherwise."""
        try:
            return self._by_type[call_type]
        except KeyError:
            raise UnknownCallTypeError(f"unknown call type {call_type!r}") from None

    def check(self, call: object) -> Call:
        """Validate a submitted call: a registered type whose ref is an :class:`ObjectRef` of
        its kind. Raises :class:`InvalidCallError` / :class:`UnknownCallTypeError`."""
        spec = self._by_class.get(type(call))
        if spec is None:  # not a registered class: only now the ABC check (~10x a dict get)
            if not isinstance(call, Call):
                raise InvalidCallError(f"expected a Call, got {type(call).__name__}")
            raise UnknownCallTypeError(f"call type {call.call_type!r} is not registered")
        if TYPE_CHECKING:  # a registered class is a Call subclass; no cast() call on the hot path
            assert isinstance(call, Call)
        ref = getattr(call, "ref", None)
        if not isinstance(ref, ObjectRef):
            raise InvalidCallError(f"{spec.call_type}: ref must be an ObjectRef, got {ref!r}")
        if ref.kind != spec.kind:
            raise InvalidCallError(f"{spec.call_type} applies to {spec.kind}, not {ref.kind}")
        return call

    def relevances(self) -> list[int]:
        """Distinct relevances of all registered types, highest first (the executor lanes)."""
        return sorted({s.relevance for s in self._by_type.values()}, reverse=True)

    def types(self) -> list[str]:
        """Registered call type names."""
        return sorted(self._by_type)


_METHODS: Final = ("merge", "is_noop", "apply", "precheck", "revalidate", "send")
"""The methods every call type must have (the rules and ``send``)."""


_ABSTRACT: Final = ("apply", "is_noop", "send")
"""The abstract methods of :class:`Call`, also found by identity when not overridden."""


def _check_methods(cls: type[Call]) -> None:
    """Refuse a call class whose rules or ``send`` are still abstract or not callable."""
    inherited = {name for name in _ABSTRACT if getattr(cls, name, None) is getattr(Call, name)}
    abstract = sorted(inherited.union(getattr(cls, "__abstractmethods__", ())))
    if abstract:
        raise CallTypeRegistrationError(f"{cls.__name__} does not implement {', '.join(abstract)}")
    for name in _METHODS:
        if not callable(getattr(cls, name, None)):
            raise CallTypeRegistrationError(
                f"{cls.__name__}.{name} must be a method, got {getattr(cls, name, None)!r}"
            )


def plain_basis(call: Call) -> Call:
    """``call`` with its ``basis`` as a plain dict: another Mapping (kopf's live ``Body``) is
    snapshotted at submission. Plain dicts pass untouched. Any thread."""
    basis = getattr(call, "basis", None)
    if basis is None or type(basis) is dict:
        return call
    if isinstance(call, type) or not dataclasses.is_dataclass(call):
        return call
    if not any(f.name == "basis" and f.init for f in dataclasses.fields(call)):
        return call
    return cast("Call", dataclasses.replace(call, basis=as_object(basis)))
