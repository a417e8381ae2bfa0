"""The call type registry: built-ins, validation at registration, user call types."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import pytest

from kdispatch import (
    BUILTIN_CALL_TYPES,
    ApiBackend,
    Call,
    CallTypeRegistrationError,
    CallTypeRegistry,
    ClaimStatusPatch,
    EventRecord,
    InvalidCallError,
    InvalidInputError,
    KindTable,
    Obj,
    ObjectRef,
    PodBinding,
    PodEviction,
    PodGroupStatusPatch,
    PodPreemption,
    PodStatusPatch,
    UnknownCallTypeError,
    default_call_types,
    get_path,
)
from kdispatch.actors.model.kinds import DEFAULT_KINDS
from kdispatch.actors.model.objects import with_path
from tests.factories import InertCall, InertRules, UserBinding, call_types_with, user_call

POD_REF = ObjectRef("Pod", "ns", "p", "uid-1")


def user_types() -> CallTypeRegistry:
    """The built-in call types, with the test kinds (Widget, QuotaReservation) known."""
    return call_types_with("Widget", "QuotaReservation")


@dataclass(frozen=True, slots=True)
class QuotaReservation(InertCall):
    """A user call type for a custom resource: reserve an amount of a quota."""

    call_type = "quota_reservation"
    kind = "QuotaReservation"
    relevance = 1

    amount: int

    def is_noop(self, obj: Obj | None) -> bool:
        return bool(get_path(obj, "status", "reserved") == self.amount)

    def apply(self, obj: Obj) -> Obj:
        return obj if self.is_noop(obj) else with_path(obj, ("status", "reserved"), self.amount)

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        ref = self.ref
        return backend.patch_status(
            ref.kind,
            ref.namespace,
            ref.name,
            {"reserved": self.amount},
            uid=ref.uid,
            resource_version=None,
            patch_type="merge",
        )


BUILTINS = [  # call type, class, kind, relevance (lane), exclusive; in registration order
    ("pod_status_patch", PodStatusPatch, "Pod", 1, False),
    ("pod_binding", PodBinding, "Pod", 2, False),
    ("pod_preemption", PodPreemption, "Pod", 3, True),
    ("claim_status_patch", ClaimStatusPatch, "ResourceClaim", 1, False),
    ("pod_eviction", PodEviction, "Pod", 3, True),  # eviction shares the deletion lane
    ("event_record", EventRecord, "Event", 0, False),  # Events ride the best-effort lane 0
    ("podgroup_status_patch", PodGroupStatusPatch, "PodGroup", 2, False),
]


class TestDefaultRegistry:
    def test_builtins(self) -> None:
        registry = default_call_types()
        assert registry.types() == sorted(name for name, *_ in BUILTINS)
        assert registry.relevances() == [3, 2, 1, 0]
        assert tuple(cls for _, cls, *_ in BUILTINS) == BUILTIN_CALL_TYPES

    @pytest.mark.parametrize(("name", "cls", "kind", "relevance", "exclusive"), BUILTINS)
    def test_builtin_spec(
        self, name: str, cls: type[Call], kind: str, relevance: int, exclusive: bool
    ) -> None:
        spec = default_call_types().spec(name)
        assert (spec.cls, spec.kind, spec.relevance) == (cls, kind, relevance)
        assert spec.exclusive is exclusive

    def test_each_call_is_fresh(self) -> None:
        first, second = user_types(), user_types()
        first.register(QuotaReservation)
        assert "quota_reservation" in first.types()
        assert "quota_reservation" not in second.types()

    def test_check_accepts_builtin_calls(self) -> None:
        registry = user_types()
        call = PodBinding(POD_REF, "n1")
        assert registry.check(call) is call

    def test_check_rejects_non_calls_and_unregistered_types(self) -> None:
        registry = user_types()
        with pytest.raises(InvalidCallError, match="expected a Call"):
            registry.check({"call_type": "pod_binding"})
        with pytest.raises(UnknownCallTypeError, match="quota_reservation"):
            registry.check(QuotaReservation(ObjectRef("QuotaReservation", "ns", "q", "u"), 3))

    def test_check_judges_subclasses_of_registered_types_by_their_own_class(self) -> None:
        """Registered classes skip the check against the ``Call`` ABC; a subclass of one is
        a Call, but not a registered type."""

        @dataclass(frozen=True, slots=True)
        class Binding(PodBinding):
            pass

        registry = user_types()
        with pytest.raises(UnknownCallTypeError, match="pod_binding"):
            registry.check(Binding(POD_REF, "n1"))
        with pytest.raises(UnknownCallTypeError, match="pod_binding"):
            CallTypeRegistry().check(PodBinding(POD_REF, "n1"))


class TestRegistration:
    def test_user_call_type_for_a_custom_kind(self) -> None:
        registry = user_types()
        spec = registry.register(QuotaReservation)
        assert (spec.call_type, spec.kind, spec.relevance, spec.exclusive) == (
            "quota_reservation",
            "QuotaReservation",
            1,  # same relevance as the status patches, but another kind: fine
            False,
        )
        call = QuotaReservation(ObjectRef("QuotaReservation", "team-a", "gpus", "q-1"), 4)
        assert registry.check(call) is call
        assert registry.spec("quota_reservation").cls is QuotaReservation
        assert call.basis is None

    def test_duplicate_type(self) -> None:
        registry = user_types()
        with pytest.raises(CallTypeRegistrationError, match="already registered"):
            registry.register(PodBinding)
        with pytest.raises(CallTypeRegistrationError, match="already registered"):
            registry.register(user_call("pod_binding", relevance=9))

    @pytest.mark.parametrize("relevance", [None, 0, -1, True, False, 1.5, "2"])
    def test_missing_or_bad_relevance(self, relevance: Any) -> None:
        registry = user_types()
        with pytest.raises(CallTypeRegistrationError, match="relevance"):
            registry.register(user_call("widget_patch", relevance=relevance))

    def test_equal_relevance_on_same_kind_is_allowed(self) -> None:
        """Relevance is only a lane: two types of one kind may share it."""
        registry = user_types()
        registry.register(user_call("pod_label_patch", kind="Pod", relevance=2))
        assert registry.spec("pod_label_patch").supersedes == frozenset()

    @pytest.mark.parametrize(
        ("supersedes", "exclusive", "match"),
        [
            (frozenset({"pod_label_patch"}), False, "supersedes itself"),
            (frozenset({"no_such_call"}), False, "not registered"),
            (frozenset({"claim_status_patch"}), False, "cannot supersede"),
            (frozenset({"pod_preemption"}), False, "exclusive"),
            (frozenset({"pod_status_patch"}), True, "drop 'supersedes'"),
            ("pod_status_patch", False, "frozenset of call type names"),
        ],
    )
    def test_contradictory_supersession_is_refused(
        self, supersedes: Any, exclusive: bool, match: str
    ) -> None:
        registry = user_types()
        before = registry.types()
        cls = user_call("pod_label_patch", kind="Pod", relevance=4)
        cls.supersedes = supersedes
        cls.exclusive = exclusive
        with pytest.raises(CallTypeRegistrationError, match=match):
            registry.register(cls)
        assert registry.types() == before  # a failed registration changes nothing

    def test_supersession_is_acyclic_by_construction(self) -> None:
        """Only registered types can be superseded, so no two types supersede each other."""
        registry = user_types()
        later = user_call("pod_label_patch", kind="Pod")
        later.supersedes = frozenset({"pod_binding"})
        registry.register(later)
        assert "pod_label_patch" not in registry.spec("pod_binding").supersedes

    def test_unknown_type(self) -> None:
        with pytest.raises(UnknownCallTypeError, match="no_such_call"):
            user_types().spec("no_such_call")

    @pytest.mark.parametrize("cls", [dict, object, "pod_binding", PodBinding(POD_REF, "n1")])
    def test_non_call_classes(self, cls: Any) -> None:
        with pytest.raises(CallTypeRegistrationError, match="not a Call subclass"):
            user_types().register(cls)

    def test_missing_name_or_kind(self) -> None:
        with pytest.raises(CallTypeRegistrationError, match="call_type"):
            user_types().register(user_call(""))
        with pytest.raises(CallTypeRegistrationError, match="kind"):
            user_types().register(user_call("x", kind=""))

    def test_unknown_kind_is_refused_and_names_register_kind(self) -> None:
        with pytest.raises(CallTypeRegistrationError, match=r"kdispatch\.register_kind"):
            default_call_types().register(user_call("gadget_patch", kind="Gadget"))
        assert "gadget_patch" not in default_call_types().types()

    def test_abstract_send_is_refused(self) -> None:
        @dataclass(frozen=True, slots=True)
        class NoSend(InertRules):
            call_type = "no_send"
            relevance = 1

        with pytest.raises(CallTypeRegistrationError, match="does not implement send"):
            default_call_types().register(NoSend)  # type: ignore[type-abstract]

    @pytest.mark.parametrize("method", ["merge", "send"])
    def test_method_that_is_not_callable_is_refused(self, method: str) -> None:
        cls = user_call(f"broken_{method}", kind="Pod")
        setattr(cls, method, None)
        with pytest.raises(CallTypeRegistrationError, match=rf"\.{method} must be a method"):
            default_call_types().register(cls)

    def test_wrong_kind_submitted(self) -> None:
        registry = user_types()
        widget = user_call("widget_patch")
        registry.register(widget)
        call = widget(ObjectRef("Pod", "ns", "p", "u"))  # type: ignore[call-arg]
        with pytest.raises(InvalidCallError, match="applies to Widget"):
            registry.check(call)

    @pytest.mark.parametrize("ref", ["ns/p", None, ("Widget", "ns", "p", "u")])
    def test_a_ref_that_is_not_an_object_ref_is_refused(self, ref: Any) -> None:
        """A user call type need not validate its fields (docs/call-types.md's example does
        not): the registry's check refuses the ref at submit, never an AttributeError."""
        registry = user_types()
        widget = user_call("widget_patch")
        registry.register(widget)
        with pytest.raises(InvalidCallError, match="ref must be an ObjectRef"):
            registry.check(widget(ref))  # type: ignore[call-arg]


@pytest.mark.parametrize("patch", [["merge"], {"merge": 1}, "json", None])
def test_a_kind_with_a_malformed_patch_flavour_is_refused(patch: Any) -> None:
    with pytest.raises(InvalidInputError, match="patch must be 'strategic' or 'merge'"):
        KindTable(()).register("QuotaClaim", "example.io", "v1", "quotaclaims", patch=patch)


def test_a_registry_pickles_with_its_types_and_kinds() -> None:
    """A ProcessDispatcher sends its registry to the child: it crosses without its lock, with
    its call types (by reference: importable classes), and keeps taking registrations; the
    process-wide kind table stays the receiving process's own, another table crosses whole."""
    shared = default_call_types()
    shared.register(UserBinding)
    crossed = pickle.loads(pickle.dumps(shared))
    assert crossed.types() == shared.types()
    assert crossed.spec("user_binding") == shared.spec("user_binding")
    assert crossed._kinds is DEFAULT_KINDS
    own = call_types_with("QuotaReservation")
    own.register(QuotaReservation)  # known to this registry's kind table only
    copy = pickle.loads(pickle.dumps(own))
    assert copy.spec("quota_reservation").cls is QuotaReservation
    assert "QuotaReservation" in copy._kinds and "QuotaReservation" not in DEFAULT_KINDS
    copy.register(UserBinding)  # a fresh lock; the original is untouched
    assert "user_binding" in copy.types() and "user_binding" not in own.types()
    assert copy.check(UserBinding(POD_REF, "node-1")) is not None
