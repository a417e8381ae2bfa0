"""Pure rules of the ResourceClaim status call: validation, merge by consumer uid, no-op, apply
and merge-patch computation against a recording fake backend."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdispatch.actors.model.calls import UNSET
from kdispatch.actors.model.claim_calls import ClaimStatusPatch
from kdispatch.actors.model.errors import (
    ApiError,
    ConflictError,
    InvalidCallError,
    InvalidObjectError,
)
from kdispatch.actors.model.objects import Obj, ObjectRef
from kdispatch.testing.memory_patch import json_merge
from tests import backends
from tests.configs import PROPS

REF = ObjectRef("ResourceClaim", "ns", "claim", "cuid-1")
ALLOC = {
    "devices": {
        "results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "d0"}]
    }
}
ALLOC2 = {
    "devices": {
        "results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "d1"}]
    }
}


def consumer(uid: str, name: str | None = None) -> dict[str, str]:
    return {"resource": "pods", "name": name or f"pod-{uid}", "uid": uid}


def make_claim(
    *,
    uid: str = "cuid-1",
    rv: str = "3",
    allocation: Mapping[str, Any] | None = None,
    reserved: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "claim", "namespace": "ns", "uid": uid, "resourceVersion": rv},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {},
    }
    if allocation is not None:
        claim["status"]["allocation"] = copy.deepcopy(dict(allocation))
    if reserved is not None:
        claim["status"]["reservedFor"] = reserved
    return claim


def json_merge_bump(obj: Obj, patch: dict[str, Any]) -> Obj:
    """The apiserver's answer to a merge patch: RFC 7386, resourceVersion bumped."""
    out: dict[str, Any] = json_merge(copy.deepcopy(obj), copy.deepcopy(patch))
    out["metadata"]["resourceVersion"] = str(int(out["metadata"]["resourceVersion"]) + 1)
    return out


def RecordingBackend(
    obj: Obj | None, *, fail_patch: ApiError | None = None
) -> backends.RecordingBackend:
    """A recording backend applying claim status patches as JSON merge patches."""
    errors = {"patch_status": [fail_patch]} if fail_patch is not None else None
    return backends.RecordingBackend(obj, errors=errors, apply_patch=json_merge_bump)


# --------------------------------------------------------------------------- validation


class TestValidation:
    def test_nothing_requested(self) -> None:
        with pytest.raises(InvalidCallError, match="nothing requested"):
            ClaimStatusPatch.for_claim(make_claim())
        with pytest.raises(InvalidCallError, match="needs an allocation or reservation"):
            ClaimStatusPatch(REF)

    def test_allocate_and_deallocate_are_exclusive(self) -> None:
        with pytest.raises(InvalidCallError, match="mutually exclusive"):
            ClaimStatusPatch.for_claim(make_claim(), allocate=ALLOC, deallocate=True)

    def test_allocate_none_is_rejected(self) -> None:
        with pytest.raises(InvalidCallError, match="deallocate=True"):
            ClaimStatusPatch.for_claim(make_claim(), allocate=None)

    def test_uid_both_reserved_and_unreserved(self) -> None:
        with pytest.raises(InvalidCallError, match="both reserved and unreserved"):
            ClaimStatusPatch.for_claim(make_claim(), reserve=[consumer("u1")], unreserve=["u1"])

    def test_duplicate_consumers(self) -> None:
        with pytest.raises(InvalidCallError, match="given twice"):
            ClaimStatusPatch.for_claim(make_claim(), reserve=[consumer("u1"), consumer("u1")])
        with pytest.raises(InvalidCallError, match="given twice"):
            ClaimStatusPatch.for_claim(make_claim(), unreserve=["u1", "u1"])

    @pytest.mark.parametrize(
        ("ref", "match"),
        [
            ({"resource": "pods", "name": "p"}, "'uid'"),
            ({"resource": "", "name": "p", "uid": "u"}, "'resource'"),
            ({"resource": "pods", "uid": "u"}, "'name'"),
            ({"resource": "pods", "name": "p", "uid": "u", "apiGroup": 1}, "apiGroup"),
            ({"resource": "pods", "name": "p", "uid": "u", "kind": "Pod"}, "unsupported keys"),
            ({"resource": "pods", "name": "p", "uid": "bad uid!"}, "uid"),
            ("u1", "mapping"),
        ],
    )
    def test_bad_consumer_refs(self, ref: Any, match: str) -> None:
        with pytest.raises(InvalidCallError, match=match):
            ClaimStatusPatch.for_claim(make_claim(), reserve=[ref])

    def test_single_values_instead_of_iterables(self) -> None:
        with pytest.raises(InvalidCallError, match="iterable of consumer references"):
            ClaimStatusPatch.for_claim(make_claim(), reserve=consumer("u1"))  # type: ignore[arg-type]
        with pytest.raises(InvalidCallError, match="iterable of consumer uids"):
            ClaimStatusPatch.for_claim(make_claim(), unreserve="u1")

    def test_bad_unreserve_uid(self) -> None:
        with pytest.raises(InvalidCallError, match="uid"):
            ClaimStatusPatch.for_claim(make_claim(), unreserve=[""])

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"unreserve": [consumer("u1")]}, "uids, not consumer references"),
            ({"unreserve": [["u1"]]}, "invalid uid: got a list"),
            ({"unreserve": [None]}, "invalid uid None"),
            ({"reserve": 5}, "iterable of consumer references"),
            ({"unreserve": 5}, "iterable of consumer uids"),
            ({"reserve": None}, "iterable of consumer references"),
        ],
    )
    def test_wrong_element_or_container_types_are_typed(
        self, kwargs: dict[str, Any], match: str
    ) -> None:
        """These raised a bare TypeError (unhashable, not iterable) before the uid check."""
        with pytest.raises(InvalidCallError, match=match):
            ClaimStatusPatch.for_claim(make_claim(), **kwargs)

    def test_reservation_key_must_match_ref_uid(self) -> None:
        with pytest.raises(InvalidCallError, match="differs"):
            ClaimStatusPatch(REF, reservations=(("u1", consumer("u2")),))
        with pytest.raises(InvalidCallError, match="pair"):
            ClaimStatusPatch(REF, reservations=(("u1",),))  # type: ignore[arg-type]

    def test_bad_allocation(self) -> None:
        with pytest.raises(InvalidCallError, match="allocation must be a mapping"):
            ClaimStatusPatch(REF, allocation=["x"])  # type: ignore[arg-type]
        with pytest.raises(InvalidCallError, match="allocate must be"):
            ClaimStatusPatch.for_claim(make_claim(), allocate="x")

    @pytest.mark.parametrize(
        ("allocation", "match"),
        [
            (
                {"devices": {"results": {"gpu-0"}}},
                r"allocation\.devices\.results: 'set' is not a JSON type",
            ),
            ({1: "x"}, "allocation: key 1 is not a str"),
            (
                {"devices": {"count": float("nan")}},
                r"allocation\.devices\.count: nan is not a JSON",
            ),
            ({"devices": [object()]}, r"allocation\.devices\[0\]: 'object' is not a JSON type"),
        ],
    )
    def test_an_allocation_that_is_not_plain_json_is_refused_up_front(
        self, allocation: Any, match: str
    ) -> None:
        """It used to fail on an executor worker when serialized, or to be stored rewritten
        ({1: ...} as {"1": ...}, never equal to the call's own allocation again)."""
        with pytest.raises(InvalidCallError, match=match):
            ClaimStatusPatch.for_claim(make_claim(), allocate=allocation)
        with pytest.raises(InvalidCallError, match=match):
            ClaimStatusPatch(REF, allocation=allocation)

    def test_a_tuple_in_the_allocation_is_sent_as_a_list(self) -> None:
        call = ClaimStatusPatch.for_claim(make_claim(), allocate={"devices": {"results": ()}})
        assert call.allocation == {"devices": {"results": []}}

    def test_wrong_kind_and_malformed_objects(self) -> None:
        pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
        with pytest.raises(InvalidObjectError, match="expected a ResourceClaim"):
            ClaimStatusPatch.for_claim(pod, deallocate=True)
        with pytest.raises(InvalidObjectError, match="metadata"):
            ClaimStatusPatch.for_claim({"kind": "ResourceClaim"}, deallocate=True)
        with pytest.raises(InvalidCallError, match="applies to ResourceClaim"):
            ClaimStatusPatch(ObjectRef("Pod", "ns", "p", "u"), None)
        with pytest.raises(InvalidCallError, match="basis"):
            ClaimStatusPatch(REF, None, basis=make_claim(uid="other"))

    def test_immutable_and_isolated_from_caller(self) -> None:
        alloc = copy.deepcopy(ALLOC)
        ref = consumer("u1")
        call = ClaimStatusPatch.for_claim(make_claim(), allocate=alloc, reserve=[ref])
        alloc["devices"]["results"][0]["device"] = "changed"
        ref["name"] = "changed"
        assert call.allocation == ALLOC
        assert call.reservations == (("u1", consumer("u1")),)
        with pytest.raises(dataclasses.FrozenInstanceError):
            call.allocation = None  # type: ignore[misc]
        assert ClaimStatusPatch.call_type == "claim_status_patch"
        assert (ClaimStatusPatch.kind, ClaimStatusPatch.relevance) == ("ResourceClaim", 1)

    def test_for_claim_layout(self) -> None:
        call = ClaimStatusPatch.for_claim(
            make_claim(), deallocate=True, reserve=[consumer("a")], unreserve=["b"]
        )
        assert call.allocation is None
        assert call.reservations == (("a", consumer("a")), ("b", None))
        assert call.basis is not None and call.ref == REF
        assert ClaimStatusPatch.for_claim(make_claim(), unreserve=["b"]).allocation is UNSET


# --------------------------------------------------------------------------- rules


def claim_patch(
    *,
    allocate: Any = UNSET,
    deallocate: bool = False,
    reserve: tuple[str, ...] = (),
    unreserve: tuple[str, ...] = (),
    claim: Obj | None = None,
) -> ClaimStatusPatch:
    return ClaimStatusPatch.for_claim(
        claim or make_claim(),
        allocate=allocate,
        deallocate=deallocate,
        reserve=[consumer(u) for u in reserve],
        unreserve=unreserve,
    )


class TestMerge:
    def test_reservations_merge_by_consumer_uid_newer_wins(self) -> None:
        older = claim_patch(reserve=("a", "b"), unreserve=("c",))
        newer = claim_patch(reserve=("c", "d"), unreserve=("a",))
        merged = newer.merge(older)
        assert merged.reservations == (
            ("a", None),
            ("b", consumer("b")),
            ("c", consumer("c")),
            ("d", consumer("d")),
        )

    def test_allocation_newer_if_set(self) -> None:
        assert claim_patch(reserve=("a",)).merge(claim_patch(allocate=ALLOC)).allocation == ALLOC
        assert claim_patch(allocate=ALLOC2).merge(claim_patch(allocate=ALLOC)).allocation == ALLOC2
        assert claim_patch(deallocate=True).merge(claim_patch(allocate=ALLOC)).allocation is None
        assert claim_patch(allocate=ALLOC).merge(claim_patch(deallocate=True)).allocation == ALLOC
        assert claim_patch(reserve=("a",)).merge(claim_patch(unreserve=("b",))).allocation is UNSET

    def test_merge_refuses_another_claim(self) -> None:
        other = claim_patch(reserve=("a",), claim=make_claim(uid="cuid-2"))
        with pytest.raises(InvalidCallError, match="cannot merge"):
            claim_patch(reserve=("a",)).merge(other)

    def test_merge_keeps_newest_basis(self) -> None:
        old, new = make_claim(rv="3"), make_claim(rv="8")
        assert (
            claim_patch(reserve=("a",), claim=old)
            .merge(claim_patch(reserve=("b",), claim=new))
            .basis
            is new
        )


class TestNoop:
    def test_rules(self) -> None:
        claim = make_claim(allocation=ALLOC, reserved=[consumer("a")])
        assert not claim_patch(reserve=("a",)).is_noop(None)
        assert claim_patch(allocate=ALLOC).is_noop(claim)
        assert not claim_patch(allocate=ALLOC2).is_noop(claim)
        assert claim_patch(deallocate=True).is_noop(make_claim())
        assert not claim_patch(deallocate=True).is_noop(claim)
        assert claim_patch(reserve=("a",), unreserve=("b",)).is_noop(claim)
        assert not claim_patch(reserve=("b",)).is_noop(claim)
        assert not claim_patch(unreserve=("a",)).is_noop(claim)


class TestApply:
    def test_allocate_and_reserve(self) -> None:
        claim = make_claim(reserved=[consumer("a"), consumer("b")])
        before = copy.deepcopy(claim)
        out = claim_patch(allocate=ALLOC, reserve=("c", "a"), unreserve=("b",)).apply(claim)
        assert claim == before
        assert out["status"]["allocation"] == ALLOC
        assert out["status"]["reservedFor"] == [consumer("a"), consumer("c")]
        assert out["spec"] is claim["spec"]

    def test_deallocate_and_unreserve_everything_removes_keys(self) -> None:
        claim = make_claim(allocation=ALLOC, reserved=[consumer("a")])
        out = claim_patch(deallocate=True, unreserve=("a",)).apply(claim)
        assert out["status"] == {}

    def test_malformed_reserved_for_entries_are_kept(self) -> None:
        claim = make_claim(reserved=[{"uid": ["odd"]}, "junk", consumer("a")])  # type: ignore[list-item,dict-item]
        out = claim_patch(reserve=("b",), unreserve=("a",)).apply(claim)
        assert out["status"]["reservedFor"] == [{"uid": ["odd"]}, "junk", consumer("b")]

    def test_noop_returns_same_object(self) -> None:
        claim = make_claim(allocation=ALLOC, reserved=[consumer("a")])
        assert claim_patch(allocate=ALLOC, reserve=("a",)).apply(claim) is claim

    def test_applied_allocation_is_a_private_copy(self) -> None:
        call = claim_patch(allocate=ALLOC)
        out = call.apply(make_claim())
        out["status"]["allocation"]["devices"]["results"].clear()
        assert call.allocation == ALLOC


class TestSend:
    def test_patch_carries_only_changed_keys_with_preconditions(self) -> None:
        claim = make_claim(allocation=ALLOC, reserved=[consumer("a")])
        backend = RecordingBackend(claim)
        result = claim_patch(allocate=ALLOC, reserve=("b",)).send(backend, claim)
        assert backend.requests == [
            (
                "patch_status",
                {
                    "kind": "ResourceClaim",
                    "namespace": "ns",
                    "name": "claim",
                    "patch": {"status": {"reservedFor": [consumer("a"), consumer("b")]}},
                    "uid": "cuid-1",
                    "resource_version": "3",
                    "patch_type": "merge",
                },
            )
        ]
        assert result == backend.obj and result is not None
        assert result["metadata"]["resourceVersion"] == "4"

    def test_deallocate_and_unreserve_last_send_nulls(self) -> None:
        claim = make_claim(allocation=ALLOC, reserved=[consumer("a")])
        body = claim_patch(deallocate=True, unreserve=("a",)).status_patch(claim)
        assert body == {"allocation": None, "reservedFor": None}

    def test_nothing_changes_sends_nothing(self) -> None:
        claim = make_claim(reserved=[consumer("a")])
        backend = RecordingBackend(claim)
        assert claim_patch(reserve=("a",)).send(backend, claim) is claim
        assert backend.requests == []

    def test_errors_propagate(self) -> None:
        backend = RecordingBackend(make_claim(), fail_patch=ConflictError("rv"))
        with pytest.raises(ConflictError):
            claim_patch(allocate=ALLOC).send(backend, make_claim())


# --------------------------------------------------------------------------- properties

UIDS = ["a", "b", "c", "d"]


@st.composite
def claim_patches(draw: st.DrawFn) -> ClaimStatusPatch:
    allocation = draw(st.sampled_from([UNSET, None, ALLOC, ALLOC2]))
    uids = draw(st.lists(st.sampled_from(UIDS), unique=True, max_size=4))
    reservations = tuple((u, consumer(u) if draw(st.booleans()) else None) for u in uids)
    if allocation is UNSET and not reservations:
        allocation = None
    return ClaimStatusPatch(REF, allocation, reservations)


@st.composite
def claims(draw: st.DrawFn) -> dict[str, Any]:
    reserved = draw(st.lists(st.sampled_from(UIDS), unique=True, max_size=4))
    return make_claim(
        allocation=draw(st.sampled_from([None, ALLOC, ALLOC2])),
        reserved=[consumer(u) for u in reserved] if reserved else None,
    )


def canonical(claim: Obj) -> tuple[Any, frozenset[str]]:
    """Allocation and the set of reserved consumer uids (reservedFor's order is not meaningful)."""
    status = claim.get("status", {})
    return status.get("allocation"), frozenset(r["uid"] for r in status.get("reservedFor", []))


@PROPS
@given(claim_patches(), claim_patches(), claims())
def test_merge_then_apply_equals_applying_in_order(
    a: ClaimStatusPatch, b: ClaimStatusPatch, claim: dict[str, Any]
) -> None:
    assert canonical(b.merge(a).apply(claim)) == canonical(b.apply(a.apply(claim)))


@PROPS
@given(claim_patches(), claim_patches(), claim_patches())
def test_merge_is_associative(
    a: ClaimStatusPatch, b: ClaimStatusPatch, c: ClaimStatusPatch
) -> None:
    assert c.merge(b).merge(a) == c.merge(b.merge(a))


@PROPS
@given(claim_patches(), claims())
def test_apply_is_pure_reaches_intent_and_matches_the_sent_patch(
    call: ClaimStatusPatch, claim: dict[str, Any]
) -> None:
    before = copy.deepcopy(claim)
    out = call.apply(claim)
    assert claim == before
    assert call.is_noop(out)
    assert (out is claim) == call.is_noop(claim)
    backend = RecordingBackend(claim)
    result = call.send(backend, claim)
    if call.is_noop(claim):
        assert backend.requests == []
        return
    assert result is not None
    result = copy.deepcopy(dict(result))
    result["metadata"]["resourceVersion"] = claim["metadata"]["resourceVersion"]
    assert result == out  # the server's merge-patch result is exactly the optimistic view


def test_landed_when_the_reservation_is_there_on_this_claim() -> None:
    """``Call.landed``: the claim read back shows the reservation (and is this claim)."""
    call = claim_patch(reserve=("u1",))
    assert call.landed(make_claim(reserved=[consumer("u1")]))
    assert not call.landed(make_claim())
    assert not call.landed(make_claim(uid="other", reserved=[consumer("u1")]))
