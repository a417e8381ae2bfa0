"""Pure rules of the PodGroup status patch: validation, constructors, merge, no-op,
``observedGeneration``, the never-regressing ``PodGroupInitiallyScheduled``, apply and the
patch; ``send`` against the in-memory apiserver (what it stores). Nothing here starts a
thread."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import kdispatch
from kdispatch.actors.model import pod_calls
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.errors import InvalidCallError, InvalidObjectError
from kdispatch.actors.model.objects import ObjectRef
from kdispatch.actors.model.pod_calls import PodStatusPatch
from kdispatch.actors.model.podgroup_calls import (
    POD_GROUP_INITIALLY_SCHEDULED,
    PodGroupStatusPatch,
    condition_problems,
    regresses,
)
from kdispatch.testing import InMemoryApiServer, make_pod, make_podgroup

NOW = "2030-01-02T03:04:05Z"
LTT = "lastTransitionTime"
PIS = POD_GROUP_INITIALLY_SCHEDULED
DT = "DisruptionTarget"


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_calls.WALL_CLOCK, "now", lambda: NOW)


def group(rv: int = 7, *, generation: int | None = 3, **kw: Any) -> dict[str, Any]:
    """PodGroup ``ns/g`` (a gang of 2) as served at resourceVersion ``rv``."""
    return make_podgroup("g", "ns", min_count=2, uid="uid-g", rv=rv, generation=generation, **kw)


def cond(ctype: str, status: str, reason: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, **extra}


def scheduled(status: str, generation: int | None = None) -> dict[str, Any]:
    """A stored PodGroupInitiallyScheduled condition."""
    out: dict[str, Any] = {
        "type": PIS,
        "status": status,
        "reason": "Scheduled" if status == "True" else "Unschedulable",
        "message": "",
        LTT: "2026-01-01T00:00:00Z",
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


REF = ObjectRef("PodGroup", "ns", "g", "uid-g")


# --------------------------------------------------------------------------- registration


def test_it_is_a_built_in_call_type_exported_from_kdispatch() -> None:
    spec = default_call_types().spec("podgroup_status_patch")
    assert spec.cls is PodGroupStatusPatch is kdispatch.PodGroupStatusPatch
    assert (spec.kind, spec.relevance, spec.exclusive, spec.supersedes) == (
        "PodGroup",
        2,  # the bindings' lane
        False,
        frozenset(),
    )
    assert "PodGroupStatusPatch" in kdispatch.__all__
    info = kdispatch.DEFAULT_KINDS.lookup("PodGroup")
    assert (info.api_version, info.plural, info.namespaced, info.status, info.patch) == (
        "scheduling.k8s.io/v1beta1",
        "podgroups",
        True,
        True,
        "strategic",
    )
    assert info.path("ns", "g", "status") == (
        "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/g/status"
    )


# --------------------------------------------------------------------------- validation


class TestValidation:
    @pytest.mark.parametrize(
        ("condition", "match"),
        [
            ({"type": PIS, "status": "True"}, "reason: Required value"),
            (cond(PIS, "True", reason=""), "reason: Required value"),
            (cond(PIS, "True", reason="no spaces"), "a condition reason must start"),
            (cond(PIS, "True", reason="9Lives"), "a condition reason must start"),
            (cond(PIS, "True", reason="R" * 1025), "Too long"),
            (cond(PIS, "True", message="x" * (32 * 1024 + 1)), "message: Too long"),
            (cond("a/b/c", "True"), "type: Invalid value"),
            (cond("Bad_Prefix/x", "True"), "type: Invalid value"),
            (cond("x" * 64, "True"), "type: Invalid value"),
            (cond("-x", "True"), "type: Invalid value"),
            (cond(PIS, "Maybe"), "status must be one of"),
            (cond(PIS, "True", observedGeneration=-1), "observedGeneration"),
            (cond(PIS, "True", observedGeneration=True), "observedGeneration"),
            (cond(PIS, "True", observedGeneration="3"), "observedGeneration"),
            (cond(PIS, "True", **{LTT: NOW}), "unsupported keys"),
            ({"type": PIS, "status": "True", "reason": 5}, "reason must be a str"),
            ("PodGroupInitiallyScheduled", "must be a mapping"),
        ],
    )
    def test_a_condition_the_apiserver_would_refuse_is_refused_at_construction(
        self, condition: Any, match: str
    ) -> None:
        with pytest.raises(InvalidCallError, match=match):
            PodGroupStatusPatch(REF, (condition,))

    def test_valid_conditions_pass_as_read_only_copies(self) -> None:
        given = [
            cond("example.com/Ready", "Unknown", reason="A:b,C_d", message="m"),
            cond(PIS, "True", observedGeneration=4),
        ]
        call = PodGroupStatusPatch(REF, given)  # type: ignore[arg-type]
        assert [dict(c) for c in call.conditions] == given
        given[1]["status"] = "False"
        assert call.conditions[1]["status"] == "True"
        with pytest.raises(TypeError):
            call.conditions[0]["status"] = "False"  # type: ignore[index]

    @pytest.mark.parametrize(
        ("conditions", "match"),
        [
            ((), "needs at least one condition"),
            ((cond(PIS, "True"), cond(PIS, "False")), "given twice"),
            (cond(PIS, "True"), "sequence of condition"),
            ("PodGroupInitiallyScheduled", "sequence of condition"),
            (None, "sequence of condition"),
        ],
    )
    def test_bad_condition_sequences(self, conditions: Any, match: str) -> None:
        with pytest.raises(InvalidCallError, match=match):
            PodGroupStatusPatch(REF, conditions)

    def test_ref_and_basis_must_be_this_podgroup(self) -> None:
        with pytest.raises(InvalidCallError, match="applies to PodGroup, not Pod"):
            PodGroupStatusPatch(ObjectRef("Pod", "ns", "g", "uid-g"), (cond(PIS, "True"),))
        other = make_podgroup("g", "ns", min_count=2, uid="uid-other")
        with pytest.raises(InvalidCallError, match="basis is not the object"):
            PodGroupStatusPatch(REF, (cond(PIS, "True"),), basis=other)
        with pytest.raises(InvalidObjectError, match="expected a PodGroup"):
            PodGroupStatusPatch.initially_scheduled(make_pod("g", "ns"), True)

    def test_constructor_arguments_are_checked(self) -> None:
        with pytest.raises(InvalidCallError, match="scheduled must be a bool"):
            PodGroupStatusPatch.initially_scheduled(group(), "True")  # type: ignore[arg-type]
        with pytest.raises(InvalidCallError, match="preemptor must be a str"):
            PodGroupStatusPatch.disruption_target(group(), preemptor=3)  # type: ignore[arg-type]
        with pytest.raises(InvalidCallError, match="not one mapping"):
            PodGroupStatusPatch.for_podgroup(group(), conditions=cond(PIS, "True"))  # type: ignore[arg-type]
        with pytest.raises(InvalidCallError, match="reason: Invalid value"):
            PodGroupStatusPatch.initially_scheduled(group(), False, reason="not schedulable")


def test_condition_problems_name_every_field_like_the_apiserver() -> None:
    problems = condition_problems(
        {"type": "a/b/c", "status": "Maybe", "observedGeneration": -1, "message": 3}
    )
    assert [field for field, _ in problems] == [
        "type",
        "status",
        "observedGeneration",
        "reason",
        "message",
    ]
    assert (
        problems[1][1] == 'Unsupported value: "Maybe": supported values: "False", "True", "Unknown"'
    )
    assert problems[3][1] == "Required value"
    assert condition_problems(cond(PIS, "True", message="", observedGeneration=0)) == []


# --------------------------------------------------------------------------- constructors


class TestConstructors:
    def test_observed_generation_is_the_decided_podgroups_generation(self) -> None:
        call = PodGroupStatusPatch.for_podgroup(
            group(generation=5),
            conditions=[cond(PIS, "True"), cond(DT, "True", observedGeneration=2)],
        )
        assert [c.get("observedGeneration") for c in call.conditions] == [5, 2]  # given wins
        assert call.basis is not None and call.basis["metadata"]["generation"] == 5
        assert call.ref == REF

    def test_a_podgroup_without_a_generation_stamps_none(self) -> None:
        call = PodGroupStatusPatch.for_podgroup(
            group(generation=None), conditions=[cond(PIS, "True")]
        )
        assert "observedGeneration" not in call.conditions[0]

    def test_initially_scheduled_true_and_false(self) -> None:
        yes = PodGroupStatusPatch.initially_scheduled(group(), True)
        no = PodGroupStatusPatch.initially_scheduled(group(), False, message="0/3 nodes fit")
        error = PodGroupStatusPatch.initially_scheduled(group(), False, reason="SchedulerError")
        assert dict(yes.conditions[0]) == {
            "type": PIS,
            "status": "True",
            "reason": "Scheduled",
            "message": "",  # replaces an earlier Unschedulable message
            "observedGeneration": 3,
        }
        assert (no.conditions[0]["status"], no.conditions[0]["reason"]) == (
            "False",
            "Unschedulable",
        )
        assert no.conditions[0]["message"] == "0/3 nodes fit"
        assert error.conditions[0]["reason"] == "SchedulerError"

    def test_disruption_target_for_a_group_preempted_as_a_whole(self) -> None:
        call = PodGroupStatusPatch.disruption_target(group(), preemptor="podgroup ns/big")
        assert dict(call.conditions[0]) == {
            "type": DT,
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "preempted to make room for podgroup ns/big",
            "observedGeneration": 3,
        }
        plain = PodGroupStatusPatch.disruption_target(group(), reason="Evicted", message="m")
        assert (plain.conditions[0]["reason"], plain.conditions[0]["message"]) == ("Evicted", "m")


# --------------------------------------------------------------------------- merge


class TestMerge:
    def test_by_type_newer_wins_older_fills_the_gaps(self) -> None:
        older = PodGroupStatusPatch.for_podgroup(
            group(rv=7),
            conditions=[cond(DT, "True", message="old"), cond(PIS, "False", "Unschedulable")],
        )
        newer = PodGroupStatusPatch.for_podgroup(
            group(rv=9, generation=4),
            conditions=[cond(DT, "False", "Cancelled"), cond("example.com/X", "True")],
        )
        merged = newer.merge(older)
        assert [dict(c) for c in merged.conditions] == [
            {
                "type": DT,
                "status": "False",
                "reason": "Cancelled",
                "message": "old",
                "observedGeneration": 4,
            },
            {"type": PIS, "status": "False", "reason": "Unschedulable", "observedGeneration": 3},
            {"type": "example.com/X", "status": "True", "reason": "R", "observedGeneration": 4},
        ]
        assert merged.basis is newer.basis
        assert older.merge(newer).basis is newer.basis  # the newest basis, whichever is newer

    def test_a_pending_true_is_final_a_newer_false_merged_into_it_is_dropped(self) -> None:
        placed = PodGroupStatusPatch.initially_scheduled(group(rv=7), True)
        late = PodGroupStatusPatch.for_podgroup(
            group(rv=7),
            conditions=[cond(PIS, "False", "Unschedulable"), cond(DT, "True", "Preempted")],
        )
        merged = late.merge(placed)
        assert {c["type"]: c["status"] for c in merged.conditions} == {PIS: "True", DT: "True"}
        assert dict(merged.conditions[0])["reason"] == "Scheduled"
        only_false = PodGroupStatusPatch.initially_scheduled(group(rv=7), False, message="late")
        assert [dict(c) for c in only_false.merge(placed).conditions] == [
            dict(c) for c in placed.conditions
        ]
        # the other way round (False pending, True newer) the True wins as usual
        assert placed.merge(only_false).conditions[0]["status"] == "True"

    def test_only_a_call_of_the_same_type_and_object_merges(self) -> None:
        call = PodGroupStatusPatch.initially_scheduled(group(), True)
        other = PodGroupStatusPatch.initially_scheduled(
            make_podgroup("h", "ns", min_count=1, uid="uid-h"), True
        )
        with pytest.raises(InvalidCallError, match="cannot merge"):
            call.merge(other)
        pod = make_pod("p", "ns", uid="uid-g")
        with pytest.raises(InvalidCallError, match="cannot merge"):
            call.merge(PodStatusPatch.for_pod(pod, conditions=[{"type": "A", "status": "True"}]))


# --------------------------------------------------------------------------- no-op


class TestNoop:
    def test_a_stored_condition_with_the_same_fields_is_a_noop_timestamps_aside(self) -> None:
        stored = group(conditions=[scheduled("True", generation=3)])
        call = PodGroupStatusPatch.initially_scheduled(group(), True)
        assert call.is_noop(stored)
        assert call.apply(stored) is stored
        assert call.status_patch(stored) is None

    def test_another_message_or_reason_is_not_a_noop(self) -> None:
        stored = group(conditions=[scheduled("True", generation=3)])
        call = PodGroupStatusPatch.initially_scheduled(group(), True, message="placed")
        assert not call.is_noop(stored)
        assert not call.is_noop(None)

    def test_a_newer_stored_generation_satisfies_an_older_one_never_the_reverse(self) -> None:
        newer_stored = group(generation=5, conditions=[scheduled("True", generation=5)])
        call = PodGroupStatusPatch.initially_scheduled(group(generation=3), True)
        assert call.is_noop(newer_stored)  # never written back to 3 on its own
        older_stored = group(conditions=[scheduled("True", generation=2)])
        assert not call.is_noop(older_stored)
        assert call.status_patch(older_stored) == {
            "conditions": [
                {
                    "type": PIS,
                    "status": "True",
                    "reason": "Scheduled",
                    "message": "",
                    "observedGeneration": 3,
                }
            ]
        }  # status unchanged: no new lastTransitionTime, the merge keeps the stored one
        without = group(conditions=[scheduled("True")])  # the apiserver omits a zero
        assert not call.is_noop(without)


# --------------------------------------------------------------------------- never regress


class TestNeverRegresses:
    @pytest.mark.parametrize("status", ["False", "Unknown"])
    def test_only_a_regression_is_stale_against_the_newest_object(self, status: str) -> None:
        decided = group(rv=7)  # the caller saw no condition
        stored = group(rv=9, conditions=[scheduled("True")])
        call = PodGroupStatusPatch.for_podgroup(decided, conditions=[cond(PIS, status)])
        reason = call.revalidate(call.basis, stored)
        assert reason is not None and "final" in reason and f"{PIS}={status}" in reason
        assert not call.is_noop(stored)  # stale, not skipped
        assert call.status_patch(stored) is None  # never sent
        assert call.apply(stored) is stored  # nor shown

    def test_stale_against_the_decided_object_too(self) -> None:
        decided = group(rv=7, conditions=[scheduled("True")])
        stored = group(rv=9)  # the condition is gone on the server
        call = PodGroupStatusPatch.initially_scheduled(decided, False)
        assert call.revalidate(call.basis, stored) is not None
        assert call.status_patch(stored) is None

    def test_true_and_a_first_false_are_fine(self) -> None:
        stored = group(rv=9, conditions=[scheduled("False")])
        yes = PodGroupStatusPatch.initially_scheduled(group(rv=7), True)
        assert yes.revalidate(yes.basis, stored) is None
        no = PodGroupStatusPatch.initially_scheduled(group(rv=7), False, message="again")
        assert no.revalidate(no.basis, stored) is None
        assert no.status_patch(stored) == {
            "conditions": [
                {
                    "type": PIS,
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "again",
                    "observedGeneration": 3,
                }
            ]
        }

    def test_the_other_conditions_of_the_call_are_still_sent(self) -> None:
        stored = group(rv=9, conditions=[scheduled("True")])
        call = PodGroupStatusPatch.for_podgroup(
            group(rv=7), conditions=[cond(PIS, "False", "Unschedulable"), cond(DT, "True")]
        )
        assert call.revalidate(call.basis, stored) is None
        assert call.status_patch(stored) == {
            "conditions": [
                {"type": DT, "status": "True", "reason": "R", "observedGeneration": 3, LTT: NOW}
            ]
        }
        applied = call.apply(stored)
        assert [(c["type"], c["status"]) for c in applied["status"]["conditions"]] == [
            (PIS, "True"),
            (DT, "True"),
        ]
        with_dt = group(
            rv=10,
            conditions=[scheduled("True"), cond(DT, "True", observedGeneration=3, message="")],
        )
        assert call.is_noop(with_dt)  # what may be sent is there

    def test_the_rule_itself(self) -> None:
        true, false = group(conditions=[scheduled("True")]), group(conditions=[scheduled("False")])
        back = pod_calls.check_condition(cond(PIS, "False"))
        assert regresses(back, true, None)
        assert regresses(back, false, true)
        assert not regresses(back, false, false)
        assert not regresses(back, None, None)
        assert not regresses(pod_calls.check_condition(cond(PIS, "True")), true, true)
        assert not regresses(pod_calls.check_condition(cond(DT, "False")), true, true)


# --------------------------------------------------------------------------- apply and patch


class TestApplyAndPatch:
    def test_apply_merges_by_type_copy_on_write(self) -> None:
        stored = group(conditions=[scheduled("False", generation=3)])
        before = copy.deepcopy(stored)
        call = PodGroupStatusPatch.for_podgroup(
            stored, conditions=[cond(PIS, "True", "Scheduled"), cond(DT, "True")]
        )
        applied = call.apply(stored)
        assert stored == before
        by_type = {c["type"]: c for c in applied["status"]["conditions"]}
        assert by_type[PIS]["status"] == "True" and LTT not in by_type[PIS]  # a new transition
        assert by_type[DT] == {"type": DT, "status": "True", "reason": "R", "observedGeneration": 3}

    def test_the_patch_stamps_a_transition_only_where_the_status_changes(self) -> None:
        stored = group(
            conditions=[
                scheduled("False", generation=3),
                cond(DT, "True", message="", **{LTT: "x"}),
            ]
        )
        call = PodGroupStatusPatch.for_podgroup(
            stored, conditions=[cond(PIS, "True", "Scheduled"), cond(DT, "True", message="m")]
        )
        assert call.status_patch(stored) == {
            "conditions": [
                {
                    "type": PIS,
                    "status": "True",
                    "reason": "Scheduled",
                    "observedGeneration": 3,
                    LTT: NOW,
                },
                {
                    "type": DT,
                    "status": "True",
                    "reason": "R",
                    "message": "m",
                    "observedGeneration": 3,
                },
            ]
        }
        assert call.status_patch(stored, now="then")["conditions"][0][LTT] == "then"  # type: ignore[index]


def test_send_patches_the_status_guarded_by_uid_and_resource_version() -> None:
    server = InMemoryApiServer()
    stored = server.create(make_podgroup("g", "ns", min_count=2, generation=3))
    call = PodGroupStatusPatch.initially_scheduled(stored, False, message="0/2 nodes fit")
    answer = call.send(server, stored)
    assert answer == server.get_object("PodGroup", "ns", "g")
    assert answer is not None
    assert answer["status"]["conditions"] == [
        {
            "type": PIS,
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/2 nodes fit",
            "observedGeneration": 3,
            LTT: NOW,
        }
    ]
    assert answer["spec"] == stored["spec"]
    assert [(r.op, r.kind, r.outcome) for r in server.request_log] == [
        ("patch_status", "PodGroup", "ok")
    ]
    # against the object it was computed on, now outdated: the resourceVersion guard says 409
    again = PodGroupStatusPatch.initially_scheduled(stored, True)
    with pytest.raises(kdispatch.ConflictError):
        again.send(server, stored)
    # nothing to send: no request
    assert call.send(server, answer) is answer
    assert len(server.request_log) == 2
