"""Short spellings of the :mod:`kdispatch.testing` object factories used across the tests.

The one home of test objects is :func:`kdispatch.testing.make_pod` (and ``make_condition``,
``make_node``, ``make_claim``, ``make_pdb``); these forward to it with the tests' defaults: a
UID derived from the name and a served resourceVersion. ``ready_pod`` creates a healthy pod on a
server, ``user_call`` a minimal user call class (an :class:`InertCall`).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.call_types import BUILTIN_CALL_TYPES
from kdispatch.actors.model.calls import Call, CallTypeRegistry
from kdispatch.actors.model.errors import Outcome
from kdispatch.actors.model.kinds import KindTable
from kdispatch.actors.model.objects import Obj, ObjectRef
from kdispatch.testing.memory import InMemoryApiServer
from kdispatch.testing.memory_objects import make_condition, make_pod

cond = make_condition
"""A pod condition: :func:`kdispatch.testing.make_condition`."""


def pod(
    name: str = "p",
    uid: str | None = None,
    rv: int = 1,
    *,
    namespace: str = "default",
    node: str | None = None,
    conditions: tuple[dict[str, Any], ...] = (),
    nnn: str | None = None,
    terminating: bool = False,
) -> dict[str, Any]:
    """A served Pod: :func:`kdispatch.testing.make_pod` with ``uid`` defaulting to
    ``uid-<name>``, resourceVersion ``rv`` and a ``status.conditions`` list."""
    return make_pod(
        name,
        namespace,
        uid=uid or f"uid-{name}",
        rv=rv,
        node=node,
        conditions=conditions,
        nominated_node_name=nnn,
        terminating=terminating,
    )


def ready_pod(server: InMemoryApiServer, name: str, *, node: str = "n1") -> dict[str, Any]:
    """Creates pod ``name`` (labelled ``app=web``) on ``server``, bound to ``node``, Running and
    Ready (healthy for a PodDisruptionBudget); returns it as stored."""
    return server.create(
        make_pod(
            name,
            labels={"app": "web"},
            node=node,
            phase="Running",
            conditions=[{"type": "Ready", "status": "True"}],
        )
    )


@dataclass(frozen=True, slots=True)
class InertRules(Call):
    """The rules of a user call type of the tests, on Pod unless a subclass says otherwise:
    never a no-op, applies nothing; ``send`` is still abstract. Subclasses name ``call_type``
    and ``relevance``; ``basis`` is keyword-only, so their own fields follow ``ref``."""

    kind: ClassVar[str] = "Pod"

    ref: ObjectRef
    basis: Obj | None = field(default=None, compare=False, repr=False, kw_only=True)

    def is_noop(self, obj: Obj | None) -> bool:
        return False

    def apply(self, obj: Obj) -> Obj:
        return obj


@dataclass(frozen=True, slots=True)
class InertCall(InertRules):
    """:class:`InertRules` that sends nothing. Subclasses override the rules they exercise."""

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        return None


@dataclass(frozen=True, slots=True)
class UserBinding(InertRules):
    """A user call type of the tests that binds its pod to ``node`` (one ``pods/binding``,
    none of :class:`~kdispatch.PodBinding`'s rules). At module level, so a
    ``ProcessDispatcher``'s child can load it."""

    call_type: ClassVar[str] = "user_binding"
    relevance: ClassVar[int] = 2

    node: str

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        del obj
        backend.bind(self.ref.namespace, self.ref.name, uid=self.ref.uid, node=self.node)
        return None


def user_call(name: str, *, kind: str = "Widget", relevance: Any = 1) -> type[Call]:
    """A minimal call class with the given class attributes (``relevance=None``: none)."""

    @dataclass(frozen=True, slots=True)
    class UserCall(InertCall):
        call_type: ClassVar[str] = name

    UserCall.kind = kind
    if relevance is not None:
        UserCall.relevance = relevance
    return UserCall


def call_types_with(*kinds: str) -> CallTypeRegistry:
    """The built-in call types, checked against a fresh kind table that also holds ``kinds``
    (test custom resources in the ``example.io/v1`` group), so registering a user call type
    for them leaves the process-wide kind table alone."""
    table = KindTable()
    for kind in kinds:
        table.register(kind, "example.io", "v1", f"{kind.lower()}s")
    return CallTypeRegistry(BUILTIN_CALL_TYPES, kinds=table)


def settled(outcome: Outcome | BaseException | None) -> Future[Outcome]:
    """A call's future already resolved with ``outcome`` (an exception fails it), or still
    pending for ``None``."""
    fut: Future[Outcome] = Future()
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    elif outcome is not None:
        fut.set_result(outcome)
    return fut
