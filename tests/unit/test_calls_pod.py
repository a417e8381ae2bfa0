"""Pure rules of the pod calls: validation, merge, no-op, apply, precheck and patch computation.

Requests go to a recording fake backend; nothing here starts a thread.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdispatch import testing
from kdispatch.actors.model import pod_calls
from kdispatch.actors.model.calls import UNSET
from kdispatch.actors.model.errors import (
    ApiError,
    ConflictError,
    InvalidCallError,
    InvalidInputError,
    InvalidObjectError,
    NotFoundError,
    ServerError,
)
from kdispatch.actors.model.objects import Obj, ObjectRef
from kdispatch.actors.model.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from tests import backends
from tests.configs import PROPS

NOW = "2030-01-02T03:04:05Z"
REAL_UTC_NOW = pod_calls.utc_now
LTT = "lastTransitionTime"


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_calls.WALL_CLOCK, "now", lambda: NOW)


make_pod = functools.partial(testing.make_pod, "p", "ns", uid="uid-1", rv="7")
"""Pod ``ns/p`` as served at resourceVersion 7."""


def cond(ctype: str, status: str, **extra: str) -> dict[str, str]:
    return {"type": ctype, "status": status, **extra}


REF = ObjectRef("Pod", "ns", "p", "uid-1")


def RecordingBackend(
    obj: Obj | None = None, *, errors: dict[str, list[ApiError]] | None = None
) -> backends.RecordingBackend:
    """A recording backend applying pod status patches with strategic-merge semantics."""
    return backends.RecordingBackend(
        obj, errors=errors, apply_patch=lambda o, p: strategic_status_merge(o, p["status"])
    )


def strategic_status_merge(obj: Obj, patch: Mapping[str, Any]) -> dict[str, Any]:
    """What the apiserver does with a strategic-merge patch of pods/status (the parts we use):
    conditions merged by type field by field, null deletes a key, rv bumped."""
    out = copy.deepcopy(dict(obj))
    status = out.setdefault("status", {})
    for key, value in patch.items():
        if key == "conditions":
            conds = status.setdefault("conditions", [])
            for c in value:
                existing = next((e for e in conds if e.get("type") == c["type"]), None)
                if existing is None:
                    conds.append(dict(c))
                else:
                    existing.update(c)
        elif value is None:
            status.pop(key, None)
        else:
            status[key] = value
    meta = out["metadata"]
    meta["resourceVersion"] = str(int(meta.get("resourceVersion") or "0") + 1)
    return out


def without_volatile(obj: Obj) -> dict[str, Any]:
    """Deep copy minus lastTransitionTime and resourceVersion (set by the server)."""
    out = copy.deepcopy(dict(obj))
    out["metadata"].pop("resourceVersion", None)
    for c in out.get("status", {}).get("conditions", []):
        c.pop(LTT, None)
    return out


# --------------------------------------------------------------------------- validation


class TestValidation:
    @pytest.mark.parametrize(
        ("conditions", "match"),
        [
            ([{"type": "A", "status": True}], "status must be one of"),
            ([{"type": "A", "status": "yes"}], "status must be one of"),
            ([{"type": "A", "status": ["True"]}], "status must be one of"),
            ([{"type": "A"}], "status must be one of"),
            ([{"status": "True"}], "non-empty string 'type'"),
            ([{"type": "", "status": "True"}], "non-empty string 'type'"),
            ([{"type": 3, "status": "True"}], "non-empty string 'type'"),
            ([cond("A", "True"), cond("A", "False")], "given twice"),
            ([{"type": "A", "status": "True", "reason": 5}], "reason must be a str"),
            ([{"type": "A", "status": "True", "message": None}], "message must be a str"),
            ([{"type": "A", "status": "True", LTT: NOW}], "unsupported keys"),
            (["A"], "must be a mapping"),
        ],
    )
    def test_bad_conditions(self, conditions: list[Any], match: str) -> None:
        with pytest.raises(InvalidCallError, match=match):
            PodStatusPatch.for_pod(make_pod(), conditions=conditions)

    def test_single_mapping_instead_of_sequence(self) -> None:
        with pytest.raises(InvalidCallError, match="sequence"):
            PodStatusPatch.for_pod(make_pod(), conditions=cond("A", "True"))  # type: ignore[arg-type]
        with pytest.raises(InvalidCallError, match="sequence"):
            PodStatusPatch(REF, cond("A", "True"))  # type: ignore[arg-type]

    def test_other_sequences_and_mappings_than_list_tuple_dict(self) -> None:
        """Exact lists, tuples and dicts skip the checks against the ABCs; everything beside
        them is still judged by those checks."""

        class Conds(tuple[Mapping[str, str], ...]):
            pass

        class Cond(dict[str, str]):
            pass

        proxy = MappingProxyType(cond("B", "False"))
        for conditions in (Conds([cond("A", "True")]), iter([Cond(type="A", status="True")])):
            call = PodStatusPatch.for_pod(make_pod(), conditions=conditions)
            assert [dict(c) for c in call.conditions] == [cond("A", "True")]
        direct = PodStatusPatch(REF, Conds([proxy]))
        assert [dict(c) for c in direct.conditions] == [cond("B", "False")]
        with pytest.raises(InvalidCallError, match="not one mapping"):
            PodStatusPatch.for_pod(make_pod(), conditions=proxy)  # type: ignore[arg-type]
        for wrong in ("AB", None, 5):  # None and 5 raised a bare TypeError from tuple()
            with pytest.raises(InvalidCallError, match="sequence of condition mappings, got"):
                PodStatusPatch.for_pod(make_pod(), conditions=wrong)  # type: ignore[arg-type]
        for bad in ("AB", b"AB", 5, proxy):
            with pytest.raises(InvalidCallError, match="sequence of condition mappings"):
                PodStatusPatch(REF, bad)  # type: ignore[arg-type]

    def test_nothing_requested(self) -> None:
        with pytest.raises(InvalidCallError, match="at least one"):
            PodStatusPatch.for_pod(make_pod())

    @pytest.mark.parametrize("node", ["Node_1", "", "-a", "a" * 254, 7])
    def test_bad_node_names(self, node: Any) -> None:
        with pytest.raises(InvalidCallError, match="node"):
            PodStatusPatch.for_pod(make_pod(), nominated_node_name=node)
        with pytest.raises(InvalidCallError, match="node"):
            PodBinding.for_pod(make_pod(), node)

    def test_wrong_kind_object(self) -> None:
        claim = {"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "ns", "uid": "u"}}
        with pytest.raises(InvalidObjectError, match="expected a Pod"):
            PodStatusPatch.for_pod(claim, conditions=[cond("A", "True")])
        with pytest.raises(InvalidObjectError):
            PodBinding.for_pod(claim, "n1")
        with pytest.raises(InvalidObjectError):
            PodPreemption.for_pod(claim)

    @pytest.mark.parametrize(
        "obj",
        [
            {"kind": "Pod"},
            {"kind": "Pod", "metadata": None},
            {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}},  # no uid
            {"kind": "Pod", "metadata": {"name": "P!", "namespace": "ns", "uid": "u"}},
            "not an object",
        ],
    )
    def test_malformed_objects(self, obj: Any) -> None:
        with pytest.raises(InvalidObjectError):
            PodStatusPatch.for_pod(obj, conditions=[cond("A", "True")])

    def test_ref_of_another_kind(self) -> None:
        claim_ref = ObjectRef("ResourceClaim", "ns", "c", "u")
        with pytest.raises(InvalidCallError, match="applies to Pod"):
            PodStatusPatch(claim_ref, (cond("A", "True"),))
        with pytest.raises(InvalidCallError, match="applies to Pod"):
            PodBinding(claim_ref, "n1")
        with pytest.raises(InvalidCallError, match="ObjectRef"):
            PodBinding("ns/p", "n1")  # type: ignore[arg-type]

    def test_basis_of_another_object(self) -> None:
        with pytest.raises(InvalidCallError, match="basis"):
            PodBinding(REF, "n1", basis=make_pod(uid="other"))

    def test_preemption_validation(self) -> None:
        with pytest.raises(InvalidCallError, match="DisruptionTarget"):
            PodPreemption(REF, cond("Ready", "False"))
        for grace in (-1, True, 1.5):
            with pytest.raises(InvalidCallError, match="grace_period_seconds"):
                PodPreemption(REF, None, grace)  # type: ignore[arg-type]
        for reason in ("", 3):
            with pytest.raises(InvalidCallError, match="reason"):
                PodPreemption.for_pod(make_pod(), reason=reason)
        with pytest.raises(InvalidCallError, match="preemptor"):
            PodPreemption.for_pod(make_pod(), preemptor=5)

    def test_errors_are_input_errors(self) -> None:
        assert issubclass(InvalidCallError, InvalidInputError)
        assert issubclass(InvalidCallError, ValueError)

    def test_calls_are_immutable_and_isolated(self) -> None:
        conditions = [cond("A", "True", reason="r")]
        call = PodStatusPatch.for_pod(make_pod(), conditions=conditions)
        conditions[0]["status"] = "False"  # the caller's dict, not the call's
        assert call.conditions[0]["status"] == "True"
        with pytest.raises(TypeError):
            call.conditions[0]["status"] = "False"  # type: ignore[index]
        with pytest.raises(dataclasses.FrozenInstanceError):
            call.nominated_node_name = "n"  # type: ignore[misc]
        assert not hasattr(call, "__dict__")

    def test_basis_is_not_part_of_equality_or_repr(self) -> None:
        a = PodBinding.for_pod(make_pod(rv="1"), "n1")
        b = PodBinding.for_pod(make_pod(rv="2"), "n1")
        assert a == b and hash(a) == hash(b)
        assert a.basis is not None and "basis" not in repr(a)
        assert PodBinding(REF, "n1").basis is None

    def test_class_attributes(self) -> None:
        assert (PodStatusPatch.call_type, PodStatusPatch.relevance) == ("pod_status_patch", 1)
        assert (PodBinding.call_type, PodBinding.relevance) == ("pod_binding", 2)
        assert (PodPreemption.call_type, PodPreemption.relevance) == ("pod_preemption", 3)
        assert PodPreemption.exclusive and not PodBinding.exclusive
        assert not PodStatusPatch.exclusive


# --------------------------------------------------------------------------- status patch


def patch(*conds: dict[str, str], nnn: Any = UNSET, pod: Obj | None = None) -> PodStatusPatch:
    return PodStatusPatch.for_pod(pod or make_pod(), conditions=conds, nominated_node_name=nnn)


class TestStatusPatchMerge:
    def test_conditions_merge_by_type_newer_wins(self) -> None:
        older = patch(cond("A", "False", reason="old"), cond("B", "True"))
        newer = patch(cond("A", "True", reason="new"), cond("C", "False"))
        merged = newer.merge(older)
        assert [dict(c) for c in merged.conditions] == [
            cond("A", "True", reason="new"),
            cond("B", "True"),
            cond("C", "False"),
        ]

    def test_unspecified_fields_of_a_type_are_filled_by_the_older_call(self) -> None:
        older = patch(cond("PodScheduled", "False", reason="Unschedulable", message="0/3"))
        newer = patch(cond("PodScheduled", "False", message="0/4"))
        merged = newer.merge(older)
        assert [dict(c) for c in merged.conditions] == [
            cond("PodScheduled", "False", reason="Unschedulable", message="0/4")
        ]

    def test_nominated_node_name(self) -> None:
        assert patch(cond("A", "True")).merge(patch(nnn="n1")).nominated_node_name == "n1"
        assert patch(nnn="n2").merge(patch(nnn="n1")).nominated_node_name == "n2"
        assert patch(nnn=None).merge(patch(nnn="n1")).nominated_node_name is None
        assert patch(cond("A", "True")).merge(patch(cond("B", "True"))).nominated_node_name is UNSET

    def test_merge_keeps_newest_basis(self) -> None:
        old, new = make_pod(rv="3"), make_pod(rv="9")
        assert patch(nnn="a", pod=old).merge(patch(nnn="b", pod=new)).basis is new
        assert patch(nnn="a", pod=new).merge(patch(nnn="b", pod=old)).basis is new
        assert (
            PodStatusPatch(REF, nominated_node_name="a").merge(patch(nnn="b", pod=old)).basis is old
        )

    def test_merge_refuses_other_objects_and_types(self) -> None:
        other = PodStatusPatch.for_pod(make_pod(uid="uid-2"), nominated_node_name="n")
        with pytest.raises(InvalidCallError, match="cannot merge"):
            patch(nnn="n").merge(other)
        with pytest.raises(InvalidCallError, match="cannot merge"):
            patch(nnn="n").merge(PodBinding(REF, "n"))


class TestStatusPatchNoop:
    def test_unknown_object_is_never_noop(self) -> None:
        assert not patch(cond("A", "True")).is_noop(None)

    def test_only_specified_fields_compared(self) -> None:
        pod = make_pod(
            conditions=[
                {
                    **cond("A", "False", reason="Unschedulable", message="m"),
                    LTT: "x",
                    "lastProbeTime": "y",
                }
            ]
        )
        assert patch(cond("A", "False")).is_noop(pod)
        assert patch(cond("A", "False", reason="Unschedulable")).is_noop(pod)
        assert patch(cond("A", "False", reason="Unschedulable", message="m")).is_noop(pod)
        assert not patch(cond("A", "True")).is_noop(pod)
        assert not patch(cond("A", "False", reason="Other")).is_noop(pod)
        assert not patch(cond("A", "False", message="other")).is_noop(pod)
        assert not patch(cond("A", "False"), cond("B", "True")).is_noop(pod)

    def test_an_empty_reason_or_message_is_satisfied_by_an_absent_one(self) -> None:
        """core/v1 PodCondition's reason and message are ``omitempty``: kube-apiserver serves
        a condition patched with ``message: ""`` without the key."""
        pod = make_pod(conditions=[{**cond("A", "True"), LTT: "x"}])
        call = patch(cond("A", "True", reason="", message=""))
        assert call.is_noop(pod)
        assert call.landed(pod)
        assert call.status_patch(pod) is None
        assert not patch(cond("A", "True", message="m")).is_noop(pod)
        stored = make_pod(conditions=[cond("A", "True", message="m")])
        assert not call.is_noop(stored)  # an empty message clears a stored one

    def test_nominated_node_name(self) -> None:
        assert patch(nnn=None).is_noop(make_pod())
        assert not patch(nnn=None).is_noop(make_pod(nominated_node_name="n1"))
        assert patch(nnn="n1").is_noop(make_pod(nominated_node_name="n1"))
        assert not patch(nnn="n2").is_noop(make_pod(nominated_node_name="n1"))
        assert not patch(nnn="n1").is_noop(make_pod())


class TestStatusPatchApply:
    def test_replaces_by_type_and_keeps_transition_time_when_status_unchanged(self) -> None:
        pod = make_pod(
            conditions=[
                {**cond("A", "False", reason="r1"), LTT: "t-a"},
                {**cond("B", "True"), LTT: "t-b"},
            ],
            nominated_node_name="n1",
        )
        before = copy.deepcopy(pod)
        call = patch(
            cond("A", "False", reason="r2"), cond("B", "False"), cond("C", "True"), nnn=None
        )
        out = call.apply(pod)
        assert pod == before  # input untouched
        assert out["status"]["conditions"] == [
            {**cond("A", "False", reason="r2"), LTT: "t-a"},
            cond("B", "False"),  # status changed: the old transition time is gone
            cond("C", "True"),
        ]
        assert "nominatedNodeName" not in out["status"]
        assert out["status"]["phase"] == "Pending"
        assert out["spec"] is pod["spec"]  # copy-on-write: untouched branches are shared

    def test_sets_nominated_node_name(self) -> None:
        out = patch(nnn="n2").apply(make_pod(nominated_node_name="n1"))
        assert out["status"]["nominatedNodeName"] == "n2"

    def test_noop_returns_the_same_object(self) -> None:
        pod = make_pod(conditions=[cond("A", "True")])
        assert patch(cond("A", "True")).apply(pod) is pod

    def test_works_on_pod_without_status(self) -> None:
        pod = make_pod()
        del pod["status"]
        out = patch(cond("A", "True"), nnn="n1").apply(pod)
        assert out["status"] == {"conditions": [cond("A", "True")], "nominatedNodeName": "n1"}


class TestStatusPatchSend:
    def test_sends_only_what_differs(self) -> None:
        pod = make_pod(
            conditions=[
                {**cond("A", "False", reason="r"), LTT: "t-a"},
                {**cond("B", "True", reason="r"), LTT: "t-b"},
            ],
            nominated_node_name="n1",
        )
        backend = RecordingBackend(pod)
        call = patch(
            cond("A", "False", reason="r"),  # unchanged: not sent
            cond("B", "True", reason="r2"),  # reason only: no new transition time
            cond("C", "False"),  # new: transition time now
            nnn="n1",  # unchanged: not sent
        )
        result = call.send(backend, pod)
        assert backend.ops() == ["patch_status"]
        req = backend.requests[0][1]
        assert req == {
            "kind": "Pod",
            "namespace": "ns",
            "name": "p",
            "patch": {
                "status": {
                    "conditions": [
                        cond("B", "True", reason="r2"),
                        {**cond("C", "False"), LTT: NOW},
                    ]
                }
            },
            "uid": "uid-1",
            "resource_version": "7",
            "patch_type": "strategic",
        }
        assert result == backend.obj  # the server's object
        assert result is not None and result["metadata"]["resourceVersion"] == "8"

    def test_status_change_gets_transition_time_and_nnn_clear_is_null(self) -> None:
        pod = make_pod(
            conditions=[{**cond("PodScheduled", "True"), LTT: "t"}], nominated_node_name="n1"
        )
        body = patch(cond("PodScheduled", "False", reason="Unschedulable"), nnn=None).status_patch(
            pod
        )
        assert body == {
            "conditions": [{**cond("PodScheduled", "False", reason="Unschedulable"), LTT: NOW}],
            "nominatedNodeName": None,
        }

    def test_nothing_differs_sends_nothing(self) -> None:
        pod = make_pod(conditions=[cond("A", "True")])
        backend = RecordingBackend(pod)
        assert patch(cond("A", "True")).send(backend, pod) is pod
        assert backend.requests == []

    def test_errors_propagate(self) -> None:
        pod = make_pod()
        backend = RecordingBackend(pod, errors={"patch_status": [ConflictError("rv")]})
        with pytest.raises(ConflictError):
            patch(nnn="n1").send(backend, pod)

    def test_default_clock_is_rfc3339_utc(self) -> None:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", REAL_UTC_NOW())


# --------------------------------------------------------------------------- binding


class TestBinding:
    def test_precheck(self) -> None:
        call = PodBinding(REF, "n1")
        assert call.precheck(None) is None
        assert call.precheck(make_pod()) is None
        assert call.precheck(make_pod(node="n1")) is None
        reason = call.precheck(make_pod(node="n2"))
        assert reason is not None and "'n2'" in reason
        reason = call.precheck(make_pod(terminating=True))
        assert reason is not None and "deleted" in reason

    def test_noop(self) -> None:
        call = PodBinding(REF, "n1")
        assert call.is_noop(make_pod(node="n1"))
        assert not call.is_noop(make_pod(node="n2"))
        assert not call.is_noop(make_pod())
        assert not call.is_noop(None)

    def test_apply(self) -> None:
        pod = make_pod(
            conditions=[
                {**cond("PodScheduled", "False", reason="Unschedulable"), LTT: "t"},
                cond("X", "True"),
            ]
        )
        before = copy.deepcopy(pod)
        out = PodBinding(REF, "n1").apply(pod)
        assert pod == before
        assert out["spec"]["nodeName"] == "n1"
        assert out["spec"]["containers"] == pod["spec"]["containers"]
        assert out["status"]["conditions"] == [cond("PodScheduled", "True"), cond("X", "True")]
        bound = make_pod(node="n1")
        assert PodBinding(REF, "n1").apply(bound) is bound

    def test_send(self) -> None:
        backend = RecordingBackend(make_pod())
        assert PodBinding(REF, "n1").send(backend, make_pod()) is None
        assert backend.requests == [
            ("bind", {"namespace": "ns", "name": "p", "uid": "uid-1", "node": "n1"})
        ]

    def test_conflict_propagates_without_a_read(self) -> None:
        """The executor reads once after any 409; the binding itself sends one request."""
        conflict = ConflictError("already bound")
        backend = RecordingBackend(make_pod(node="n1"), errors={"bind": [conflict]})
        with pytest.raises(ConflictError) as info:
            PodBinding(REF, "n1").send(backend, make_pod())
        assert info.value is conflict
        assert backend.ops() == ["bind"]

    def test_same_pod_on_same_node_after_a_conflict_means_it_landed(self) -> None:
        assert PodBinding(REF, "n1").landed(make_pod(node="n1", rv="12"))

    @pytest.mark.parametrize(
        "server_pod", [make_pod(node="n2"), make_pod(), make_pod(uid="recreated", node="n1")]
    )
    def test_other_conflicts_did_not_land(self, server_pod: Obj) -> None:
        assert not PodBinding(REF, "n1").landed(server_pod)

    def test_other_errors_propagate_without_a_read(self) -> None:
        backend = RecordingBackend(make_pod(node="n1"), errors={"bind": [ServerError("boom")]})
        with pytest.raises(ServerError):
            PodBinding(REF, "n1").send(backend, make_pod())
        assert backend.ops() == ["bind"]


# --------------------------------------------------------------------------- preemption


class TestPreemption:
    def test_for_pod_builds_disruption_target(self) -> None:
        call = PodPreemption.for_pod(make_pod(), preemptor="ns/high", grace_period_seconds=5)
        assert call.condition is not None
        assert dict(call.condition) == {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "preempted to make room for pod ns/high",
        }
        assert call.grace_period_seconds == 5
        custom = PodPreemption.for_pod(make_pod(), reason="R", message="M", preemptor="x")
        assert custom.condition is not None and custom.condition["message"] == "M"
        assert PodPreemption.for_pod(make_pod(), add_condition=False).condition is None

    def test_noop_when_terminating(self) -> None:
        call = PodPreemption.for_pod(make_pod())
        assert call.is_noop(make_pod(terminating=True))
        assert not call.is_noop(make_pod())
        assert not call.is_noop(None)

    def test_merge_newer_wins(self) -> None:
        older = PodPreemption.for_pod(make_pod(), grace_period_seconds=30)
        newer = PodPreemption.for_pod(make_pod(), reason="Other", grace_period_seconds=0)
        assert newer.merge(older) is newer

    def test_apply_marks_terminating(self) -> None:
        pod = make_pod(conditions=[cond("Ready", "True")])
        before = copy.deepcopy(pod)
        call = PodPreemption.for_pod(pod)
        out = call.apply(pod)
        assert pod == before
        assert out["metadata"]["deletionTimestamp"] == "pending"
        assert out["status"]["conditions"][1]["type"] == "DisruptionTarget"
        assert call.is_noop(out)
        bare = PodPreemption.for_pod(pod, add_condition=False).apply(pod)
        assert (
            bare["status"] is pod["status"] and bare["metadata"]["deletionTimestamp"] == "pending"
        )

    def test_send_patches_condition_then_deletes(self) -> None:
        pod = make_pod()
        backend = RecordingBackend(pod)
        call = PodPreemption.for_pod(pod, preemptor="ns/high", grace_period_seconds=0)
        assert call.send(backend, pod) is None
        assert backend.ops() == ["patch_status", "delete"]
        patch_req, delete_req = backend.requests[0][1], backend.requests[1][1]
        assert patch_req["patch"] == {
            "status": {"conditions": [{**dict(call.condition or {}), LTT: NOW}]}
        }
        assert patch_req["uid"] == "uid-1" and patch_req["resource_version"] is None
        assert patch_req["patch_type"] == "strategic"
        assert delete_req == {
            "kind": "Pod",
            "namespace": "ns",
            "name": "p",
            "uid": "uid-1",
            "grace_period_seconds": 0,
        }

    def test_condition_already_present_only_deletes(self) -> None:
        pod = make_pod(conditions=[cond("DisruptionTarget", "True", reason="Earlier")])
        backend = RecordingBackend(pod)
        PodPreemption.for_pod(pod).send(backend, pod)
        assert backend.ops() == ["delete"]

    def test_without_condition_only_deletes(self) -> None:
        backend = RecordingBackend(make_pod())
        PodPreemption.for_pod(make_pod(), add_condition=False).send(backend, None)
        assert backend.ops() == ["delete"]

    def test_not_found_on_patch_is_success_without_delete(self) -> None:
        backend = RecordingBackend(make_pod(), errors={"patch_status": [NotFoundError()]})
        assert PodPreemption.for_pod(make_pod()).send(backend, make_pod()) is None
        assert backend.ops() == ["patch_status"]

    def test_not_found_on_delete_is_success(self) -> None:
        backend = RecordingBackend(make_pod(), errors={"delete": [NotFoundError()]})
        assert PodPreemption.for_pod(make_pod()).send(backend, make_pod()) is None
        assert backend.ops() == ["patch_status", "delete"]

    def test_other_errors_propagate(self) -> None:
        backend = RecordingBackend(make_pod(), errors={"delete": [ConflictError("uid")]})
        with pytest.raises(ConflictError):
            PodPreemption.for_pod(make_pod()).send(backend, make_pod())


# --------------------------------------------------------------------------- properties

TYPES = ["A", "B", "C", "PodScheduled"]
NODES = ["n1", "n2"]

intents = st.builds(
    lambda t, s, r, m: {
        "type": t,
        "status": s,
        **({"reason": r} if r else {}),
        **({"message": m} if m else {}),
    },
    st.sampled_from(TYPES),
    st.sampled_from(["True", "False", "Unknown"]),
    st.sampled_from([None, "r1", "r2"]),
    st.sampled_from([None, "m1"]),
)
nnn_values = st.sampled_from([UNSET, None, *NODES])


@st.composite
def status_patches(draw: st.DrawFn) -> PodStatusPatch:
    conds = draw(st.lists(intents, max_size=4, unique_by=lambda c: c["type"]))
    nnn = draw(nnn_values)
    if not conds and nnn is UNSET:
        nnn = None
    return PodStatusPatch(REF, tuple(conds), nnn)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    existing = draw(st.lists(intents, max_size=4, unique_by=lambda c: c["type"]))
    conditions = [
        {**c, **({LTT: "t0"} if draw(st.booleans()) else {})}
        for c in draw(st.permutations(existing))
    ]
    return make_pod(
        conditions=conditions, nominated_node_name=draw(st.sampled_from([None, *NODES]))
    )


@PROPS
@given(status_patches(), status_patches(), pods())
def test_merge_then_apply_equals_applying_in_order(
    a: PodStatusPatch, b: PodStatusPatch, pod: dict[str, Any]
) -> None:
    sequential = b.apply(a.apply(pod))
    merged = b.merge(a).apply(pod)
    # Transition times may legitimately differ: applied in order, a status that flips and flips
    # back has really transitioned twice, while the merged call never changes it.
    assert without_volatile(merged) == without_volatile(sequential)


@PROPS
@given(status_patches(), status_patches(), status_patches())
def test_merge_is_associative(a: PodStatusPatch, b: PodStatusPatch, c: PodStatusPatch) -> None:
    assert c.merge(b).merge(a) == c.merge(b.merge(a))


@PROPS
@given(status_patches(), pods())
def test_apply_is_pure_and_reaches_the_intent(call: PodStatusPatch, pod: dict[str, Any]) -> None:
    before = copy.deepcopy(pod)
    out = call.apply(pod)
    assert pod == before
    assert call.is_noop(out)
    assert (out is pod) == call.is_noop(pod)
    assert (out == pod) == call.is_noop(pod)


@PROPS
@given(status_patches(), pods())
def test_sent_patch_gives_the_applied_object(call: PodStatusPatch, pod: dict[str, Any]) -> None:
    backend = RecordingBackend(pod)
    result = call.send(backend, pod)
    if call.is_noop(pod):
        assert backend.requests == [] and result is pod
        return
    assert backend.ops() == ["patch_status"]
    assert result is not None
    assert without_volatile(result) == without_volatile(call.apply(pod))
    # a status that changes always carries a fresh transition time
    before = {c["type"]: c for c in pod["status"].get("conditions", [])}
    for c in result["status"].get("conditions", []):
        if c["type"] not in before or before[c["type"]]["status"] != c["status"]:
            assert c[LTT] == NOW


def test_pod_conditions_answers_each_object_whatever_was_read_before() -> None:
    """The one-object memo of pod_conditions never answers for another object, even one
    equal to it."""
    cond = {"type": "PodScheduled", "status": "False"}
    with_cond = testing.make_pod("p", uid="uid-p", conditions=[cond])
    bare = testing.make_pod("p", uid="uid-p")
    same = copy.deepcopy(with_cond)
    for _ in range(2):
        assert pod_calls.pod_conditions(with_cond) == {"PodScheduled": cond}
        assert pod_calls.pod_conditions(with_cond) == {"PodScheduled": cond}
        assert pod_calls.pod_conditions(bare) == {}
        assert pod_calls.pod_conditions(None) == {}
        assert pod_calls.pod_conditions(same) == {"PodScheduled": cond}
        assert pod_calls.pod_conditions(same)["PodScheduled"] is same["status"]["conditions"][0]


class TestLanded:
    """``Call.landed``: what the object read back after a 409 or unanswered retries shows."""

    def test_status_patch_landed_when_its_conditions_and_nomination_are_there(self) -> None:
        call = PodStatusPatch(REF, (cond("PodScheduled", "False", reason="R"),), "n1")
        there = make_pod(conditions=[cond("PodScheduled", "False", reason="R")])
        there = dict(there, status={**there["status"], "nominatedNodeName": "n1"})
        assert call.landed(there)
        assert not call.landed(make_pod(conditions=[cond("PodScheduled", "False", reason="X")]))
        assert not call.landed(make_pod(conditions=[cond("PodScheduled", "False", reason="R")]))
        other = testing.make_pod("p", "ns", uid="other", conditions=there["status"]["conditions"])
        other["status"]["nominatedNodeName"] = "n1"
        assert not call.landed(other)  # the same name, another pod

    def test_preemption_landed_when_the_pod_is_terminating_or_replaced(self) -> None:
        call = PodPreemption(REF)
        assert call.landed(make_pod(terminating=True))
        assert call.landed(testing.make_pod("p", "ns", uid="recreated"))
        assert not call.landed(make_pod())
