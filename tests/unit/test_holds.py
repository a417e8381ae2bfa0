"""``Dependencies`` (the dispatcher's side of held calls) driven directly, with a recording
``tell`` and no actors: which message goes out when, exactly once."""

from __future__ import annotations

from typing import Any

import pytest

from kdispatch.actors.engine.holds import Dependencies, GroupFuture, GroupSteps, Hold, HoldState
from kdispatch.actors.engine.messages import CallFuture, FailDependency, Release
from kdispatch.actors.engine.metrics import Metrics
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallFailed,
    DependencyCycleError,
    InvalidPrerequisiteError,
    Outcome,
)
from kdispatch.actors.model.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from tests.factories import pod

OWNER = object()


class Recorder:
    def __init__(self) -> None:
        self.told: list[tuple[str, Any]] = []

    def __call__(self, uid: str, message: object) -> bool:
        self.told.append((uid, message))
        return True


def make() -> tuple[Dependencies, Recorder, Metrics]:
    told = Recorder()
    metrics = Metrics()
    return Dependencies(OWNER, told, metrics), told, metrics


def future(name: str, call: Any = None) -> CallFuture:
    fut = CallFuture()
    fut.owner = OWNER
    fut.call = call if call is not None else PodBinding.for_pod(pod(name), "n1")
    return fut


def held(deps: Dependencies, name: str, *prereqs: Any, group: Any = None) -> Hold:
    call = PodBinding.for_pod(pod(name), "n1")
    fut = future(name, call)
    hold = deps.hold(call, fut, tuple(prereqs), group)
    assert isinstance(hold, Hold)
    return hold


def test_release_after_every_prerequisite_succeeded() -> None:
    deps, told, metrics = make()
    a, b = future("a"), future("b")
    hold = held(deps, "x", a, b)
    deps.arm(hold)
    assert metrics.value("kdispatch_held_calls", call_type="pod_binding") == 1
    a.set_result(Outcome.SUCCESS)
    assert told.told == []
    b.set_result(Outcome.SKIPPED)
    assert told.told == [("uid-x", Release(hold))]
    assert hold.state is HoldState.RELEASED and deps.held == 0
    assert metrics.value("kdispatch_held_calls", call_type="pod_binding") == 0


def test_the_first_failure_fails_the_hold_once() -> None:
    deps, told, _ = make()
    a, b = future("a"), future("b")
    hold = held(deps, "x", a, b)
    deps.arm(hold)
    error = CallFailed("boom")
    a.set_exception(error)
    b.set_exception(CallFailed("later"))
    assert told.told == [("uid-x", FailDependency(hold, error))]


def test_a_hold_failed_before_it_was_armed_is_told_when_armed() -> None:
    deps, told, _ = make()
    a = future("a")
    hold = held(deps, "x", a)
    cause = CallCancelled("group cancelled")
    assert deps.fail(hold.future, cause)
    assert told.told == []  # the actor does not know the token yet
    deps.arm(hold)
    assert told.told == [("uid-x", FailDependency(hold, cause))]
    a.set_result(Outcome.SUCCESS)  # too late: nothing more
    assert len(told.told) == 1 and not deps.fail(hold.future, cause)


def test_resolved_prerequisites_need_no_hold() -> None:
    deps, _, _ = make()
    done, failed = future("a"), future("b")
    done.set_result(Outcome.SUCCESS)
    error = CallFailed("no")
    failed.set_exception(error)
    call = PodBinding.for_pod(pod("x"), "n1")
    assert deps.hold(call, future("x", call), (done,)) is None
    assert deps.hold(call, future("x", call), (done, failed)) is error


def test_an_overwritten_prerequisite_is_followed_to_its_successor() -> None:
    deps, told, _ = make()
    first = future("c", PodStatusPatch.for_pod(pod("c"), nominated_node_name="n1"))
    hold = held(deps, "x", first)
    deps.arm(hold)
    newer_call = PodStatusPatch.for_pod(pod("c"), nominated_node_name="n2")
    newer = future("c", newer_call)
    first.successor = newer  # what the object's actor does before resolving OVERWRITTEN
    assert first.successor is newer
    first.set_result(Outcome.OVERWRITTEN)
    assert told.told == []  # waits for the newer call
    newer.set_result(Outcome.SUCCESS)
    assert told.told == [("uid-x", Release(hold))]
    assert deps.held == 0


def test_a_future_overwritten_before_it_became_a_prerequisite_is_followed() -> None:
    deps, told, _ = make()
    first = future("c", PodStatusPatch.for_pod(pod("c"), nominated_node_name="n1"))
    newer = future("c", PodStatusPatch.for_pod(pod("c"), nominated_node_name="n2"))
    first.successor = newer
    first.set_result(Outcome.OVERWRITTEN)
    hold = held(deps, "x", first)  # waits for the newer call, not for nothing
    assert hold.prereqs == (newer,)
    deps.arm(hold)
    newer.set_result(Outcome.SUCCESS)
    assert told.told == [("uid-x", Release(hold))]


def test_a_held_call_resolved_first_is_forgotten() -> None:
    deps, told, _ = make()
    a = future("a")
    hold = held(deps, "x", a)
    deps.arm(hold)
    hold.future.set_exception(CallCancelled("object deleted"))
    assert hold.state is HoldState.DONE and deps.held == 0
    a.set_result(Outcome.SUCCESS)
    assert told.told == []


def test_a_held_call_overwritten_while_waiting_keeps_its_hold_until_released() -> None:
    """Merged into a newer call, the held call's token is held by that call: it must still
    be released once the prerequisite succeeded."""
    deps, told, metrics = make()
    a = future("a")
    hold = held(deps, "x", a)
    deps.arm(hold)
    hold.future.set_result(Outcome.OVERWRITTEN)
    assert hold.state is HoldState.WAITING and deps.held == 1
    a.set_result(Outcome.SUCCESS)
    assert told.told == [("uid-x", Release(hold))]
    assert deps.held == 0 and deps._holds == {} and deps._held_on == {}
    assert metrics.value("kdispatch_held_calls", call_type="pod_binding") == 0


class Steps(GroupSteps):
    """A group's steps alone (a ``CallGroup`` keeps more of each)."""

    def _append(self, future: CallFuture) -> None:
        self._steps = (*self.step_futures(), future)


def test_cycles_through_groups_and_objects() -> None:
    deps, _, _ = make()
    g = GroupFuture()
    g.owner = OWNER
    steps = Steps()  # what a CallGroup keeps for the dependencies
    steps.bind(g)
    a = future("a")
    with pytest.raises(DependencyCycleError):
        held(deps, "x", g, group=steps)
    with pytest.raises(DependencyCycleError):
        held(deps, "a", a)  # a prerequisite on the call's own object
    hold = held(deps, "y", g)  # y waits for the group
    deps.arm(hold)
    step = future("y")
    with pytest.raises(DependencyCycleError):  # a step on y would queue behind y's held call
        deps.hold(step.call, step, (), steps)  # type: ignore[arg-type]
    assert deps.hold(a.call, a, (), steps) is None  # type: ignore[arg-type]
    assert steps.step_futures() == (a,)


def test_a_prerequisite_on_the_same_object_is_kept_ahead_unless_it_would_be_merged() -> None:
    deps, _, _ = make()
    binding = future("a")  # a binding of pod a
    status_call = PodStatusPatch.for_pod(pod("a"), nominated_node_name="n1")
    hold = deps.hold(status_call, future("a", status_call), (binding,))
    assert isinstance(hold, Hold) and hold.behind == frozenset({binding})  # kept behind it
    status = future("b", PodStatusPatch.for_pod(pod("b"), nominated_node_name="n1"))
    bind_b = held(deps, "b", status)  # a binding of b waits for the status patch it supersedes
    assert bind_b.behind == frozenset({status})  # queued behind it, not replacing it
    with pytest.raises(DependencyCycleError, match=r"^uid-b: .*submit one call with both"):
        held(deps, "b", future("b"))  # a second binding of b would merge with the first
    evict = PodPreemption.for_pod(pod("c"))
    with pytest.raises(DependencyCycleError, match=r"^uid-c: .*exclusive.*once that call has"):
        deps.hold(evict, future("c", evict), (future("c"),))
    other = held(deps, "d", future("e"))
    assert other.behind == frozenset()


def test_prerequisites_are_this_dispatchers_futures() -> None:
    deps, _, _ = make()
    mine = future("a")
    assert deps.prerequisites([mine, mine]) == (mine,)
    stranger = CallFuture()
    for bad in ("a", [stranger], [object()], mine):
        with pytest.raises(InvalidPrerequisiteError):
            deps.prerequisites(bad)
