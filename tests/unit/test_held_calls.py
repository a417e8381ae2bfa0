"""Held calls (DESIGN §3 "Call groups across objects") on the pure per-object machine.

A call submitted with ``holds`` is admitted at once but not sent before every token is
released; a failed prerequisite resolves it ``DependencyFailed``. Driven event by event, like
``test_object_state.py`` (whose driver this reuses): no threads, no clock.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.effects import Merged, Ready, Result, Retire
from kdispatch.actors.model.errors import (
    CallCancelled,
    DependencyFailed,
    DispatcherClosed,
    LeadershipLost,
    Outcome,
    ServerError,
)
from kdispatch.actors.model.lifecycle import State
from kdispatch.actors.model.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from tests.factories import cond, pod
from tests.unit.test_object_state import Driver, gate, label, unsched

pytestmark = pytest.mark.timeout(30)


class HeldDriver(Driver):
    """The driver, plus held submissions and the two prerequisite events. Test thread."""

    def submit_held(self, call: Call, *holds: Hashable) -> str:
        self._n += 1
        fut = f"f{self._n}"
        self._take(self.m.submit(call, fut, frozenset(holds)))
        return fut

    def release(self, token: Hashable) -> list[Any]:
        return self._take(self.m.release(token))

    def fail(self, token: Hashable, cause: BaseException) -> list[Any]:
        return self._take(self.m.dependency_failed(token, cause))


@pytest.fixture
def d() -> HeldDriver:
    return HeldDriver()


def test_held_call_is_admitted_but_asks_for_no_grant_until_released(d: HeldDriver) -> None:
    p = pod("a")
    fut = d.submit_held(unsched(p), "t1")
    assert d.outcome(fut) is None
    assert d.readies() == []  # no lane, no token, no worker
    assert d.state() is State.PENDING
    assert d.grant() is None  # a stray grant finds the head held: refunded
    d.release("t1")
    assert d.readies() == [Ready(1, 0.0)]
    d.send_succeeds(fut)


def test_every_token_must_be_released(d: HeldDriver) -> None:
    p = pod("a")
    fut = d.submit_held(unsched(p), "t1", "t2")
    d.release("t1")
    assert d.readies() == [] and d.grant() is None
    d.release("unrelated")
    assert d.readies() == []
    d.release("t2")
    assert d.readies() == [Ready(1, 0.0)]
    d.send_succeeds(fut)


def test_calls_behind_a_held_head_wait_in_order(d: HeldDriver) -> None:
    p = pod("a")
    f_bind = d.submit_held(PodBinding.for_pod(p, "n1"), "claim")
    f_label = d.submit(label(p))  # holds nothing, but one object's calls go in order
    assert d.readies() == [] and d.grant() is None
    d.release("claim")
    assert d.readies() == [Ready(2, 0.0)]
    d.send_succeeds(f_bind, "pod_binding")
    assert d.outcome(f_label) is None


def test_merge_holds_the_union_of_both_entries_holds(d: HeldDriver) -> None:
    p = pod("a")
    f1 = d.submit_held(PodStatusPatch.for_pod(p, conditions=[cond(reason="A")]), "t1")
    f2 = d.submit_held(PodStatusPatch.for_pod(p, nominated_node_name="n2"), "t2")
    assert d.outcome(f1) is Outcome.OVERWRITTEN and Merged("pod_status_patch") in d.last
    d.release("t2")
    assert d.readies() == [] and d.grant() is None  # still held by the older call's t1
    d.release("t1")
    s = d.send()
    assert isinstance(s.call, PodStatusPatch) and s.call.nominated_node_name == "n2"
    d.done_succeeds(s, f2)


def test_a_call_that_supersedes_a_held_one_holds_its_holds(d: HeldDriver) -> None:
    """A held call is superseded as any call is, and the binding superseding it carries its
    intent, so it waits for the patch's prerequisite too (it used to be sent at once)."""
    p = pod("a")
    f_patch = d.submit_held(PodStatusPatch.for_pod(p, nominated_node_name="n1"), "t1")
    f_bind = d.submit(PodBinding.for_pod(p, "n1"))
    assert d.outcome(f_patch) is Outcome.OVERWRITTEN
    assert d.readies() == [] and d.grant() is None  # held by the patch's t1
    d.release("t1")
    d.send_succeeds(f_bind, "pod_binding")


def test_unheld_call_merged_into_a_held_one_waits_with_it(d: HeldDriver) -> None:
    p = pod("a")
    d.submit_held(PodStatusPatch.for_pod(p, conditions=[cond(reason="A")]), "t1")
    f2 = d.submit(PodStatusPatch.for_pod(p, nominated_node_name="n2"))
    assert d.readies() == [] and d.grant() is None
    d.release("t1")
    d.send_succeeds(f2)


def test_held_noop_is_skipped_at_submit(d: HeldDriver) -> None:
    f_noop = d.submit_held(unsched(pod("a", conditions=(cond(),))), "t1")
    assert d.outcome(f_noop) is Outcome.SKIPPED
    assert d.state() is State.IDLE


def test_held_call_made_a_noop_by_the_informer_is_skipped(d: HeldDriver) -> None:
    fut = d.submit_held(unsched(pod("a")), "t1")
    d.observed(pod("a", rv=2, conditions=(cond(),)))
    assert d.outcome(fut) is Outcome.SKIPPED
    assert d.release("t1") == [] and d.state() is State.IDLE


def test_held_call_that_goes_stale_resolves_before_its_release(d: HeldDriver) -> None:
    p = pod("a")
    fut = d.submit_held(unsched(p), "t1")
    d.observed(pod("a", rv=2, node="n1"))
    assert d.outcome(fut) is not None and d.outcome(fut) is not Outcome.SUCCESS
    assert d.release("t1") == [] and d.state() is State.IDLE


def test_failed_prerequisite_resolves_every_call_holding_it(d: HeldDriver) -> None:
    p = pod("a")
    cause = ServerError("claim reservation failed")
    f_bind = d.submit_held(PodBinding.for_pod(p, "n1"), "claim")
    f_label = d.submit_held(label(p), "other")
    d.fail("claim", cause)
    err = d.error(f_bind)
    assert isinstance(err, DependencyFailed) and isinstance(err, CallCancelled)
    assert err.cause is cause and err.call_type == "pod_binding"
    assert "pod_binding" in str(err) and "claim reservation failed" in str(err)
    # it names the object, as every CallOutcomeError with a ref: the message starts with it
    call = PodBinding.for_pod(p, "n1")
    assert err.ref == call.ref and err.uid == call.ref.uid
    assert str(err).startswith(f"{call.ref}: pod_binding not sent: a prerequisite failed")
    assert d.outcome(f_label) is None and d.readies() == []  # still held on "other"
    d.release("other")
    assert d.readies() == [Ready(4, 0.0)]
    s = d.send()
    assert s.call.call_type == "label_patch"


def test_failed_prerequisite_unblocks_the_calls_behind(d: HeldDriver) -> None:
    p = pod("a")
    d.submit_held(PodBinding.for_pod(p, "n1"), "claim")
    f_label = d.submit(label(p))
    d.fail("claim", ServerError())
    assert d.readies() == [Ready(4, 0.0)]
    d.send_succeeds(f_label)


def test_held_preemption_cancels_what_is_pending_and_waits(d: HeldDriver) -> None:
    p = pod("a")
    f_patch = d.submit_held(unsched(p), "t0")
    f_pre = d.submit_held(PodPreemption.for_pod(p, preemptor="hi"), "nominated")
    assert d.outcome(f_patch) is CallCancelled
    assert d.readies() == [] and d.grant() is None
    d.release("nominated")
    d.send_succeeds(f_pre, "pod_preemption")


def test_preempting_a_held_call_resolves_it_cancelled(d: HeldDriver) -> None:
    p = pod("a")
    f_bind = d.submit_held(PodBinding.for_pod(p, "n1"), "claim")
    d.submit(PodPreemption.for_pod(p))
    assert d.outcome(f_bind) is CallCancelled
    assert d.readies() == [Ready(3, 0.0)]


@pytest.mark.parametrize("event", ["deleted", "cancel", "close", "revoke"])
def test_held_calls_resolve_like_any_pending_call(d: HeldDriver, event: str) -> None:
    fut = d.submit_held(unsched(pod("a")), "t1")
    if event == "deleted":
        d.deleted()
        assert d.outcome(fut) is CallCancelled
    elif event == "cancel":
        d.cancel()
        assert d.outcome(fut) is CallCancelled
    elif event == "close":
        d._take(d.m.close())
        assert d.outcome(fut) is DispatcherClosed
    else:
        d._take(d.m.revoke(LeadershipLost("lost")))
        assert d.outcome(fut) is LeadershipLost
    # late prerequisite events are tolerated and do nothing
    assert d.release("t1") == [] and d.fail("t1", ServerError()) == []


def test_release_and_failure_after_retirement_are_tolerated(d: HeldDriver) -> None:
    d.deleted()
    assert d.retires() == [Retire(tombstone=True, final=True)]
    assert d.state() is State.RETIRED
    assert d.release("t1") == [] and d.fail("t1", ServerError()) == []


def test_call_put_back_after_a_retry_is_never_held(d: HeldDriver) -> None:
    p = pod("a")
    f_bind = d.submit_held(PodBinding.for_pod(p, "n1"), "claim")
    d.release("claim")
    s = d.send()
    d.submit_held(label(p), "later")  # a held call of another type queues behind
    d.done(s, Result.RETRY, error=ServerError())
    assert d.readies() == [Ready(2, d.now)]  # the binding is back at the head, sendable
    again = d.send()
    assert again.call.call_type == "pod_binding" and again.attempt == 2
    d.done_succeeds(again, f_bind)
    assert d.grant() is None  # the label patch still waits for "later"


def test_retry_merged_into_a_held_call_of_its_type_waits_with_it(d: HeldDriver) -> None:
    p = pod("a")
    f1 = d.submit(PodStatusPatch.for_pod(p, conditions=[cond(reason="A")]))
    s1 = d.send()
    f2 = d.submit_held(PodStatusPatch.for_pod(p, nominated_node_name="n1"), "t1")
    d.done(s1, Result.RETRY, error=ServerError())
    assert d.outcome(f1) is Outcome.OVERWRITTEN
    assert d.readies() == [] and d.grant() is None
    d.release("t1")
    read = d.send()
    assert read.read
    d.done(read, obj=pod("a", rv=2))
    s2 = d.send()
    assert isinstance(s2.call, PodStatusPatch)
    assert s2.call.nominated_node_name == "n1" and len(s2.call.conditions) == 1
    d.done_succeeds(s2, f2)


# --------------------------------------------------------------------------- behind its own


def submit_behind(d: HeldDriver, call: Call, token: Hashable, *behind: str) -> str:
    """A held call that waits (through ``token``) for the calls of ``behind`` on its object."""
    d._n += 1
    fut = f"f{d._n}"
    d._take(d.m.submit(call, fut, frozenset((token,)), frozenset(behind)))
    return fut


def queued(d: HeldDriver) -> list[str]:
    return [e.call.call_type for e in d.m.queue]


def test_a_held_call_merged_into_an_older_slot_stays_behind_its_prerequisite(
    d: HeldDriver,
) -> None:
    p = pod("a")
    d.submit(label(p, "x"))
    first = d.send()  # in flight: what follows waits
    older = d.submit(gate(p))
    pre = d.submit(label(p, "y"))  # the held call's prerequisite, on the same object
    held = submit_behind(d, unsched(p), "t", pre)  # merges `older`, ahead of `pre`...
    assert d.outcome(older) is Outcome.OVERWRITTEN
    assert queued(d) == ["label_patch", "pod_status_patch"]  # ...but is placed behind it
    d.done(first)
    sent = d.request(p)  # not refunded: the prerequisite goes first
    assert sent.call.call_type == "label_patch" and sent.call == label(p, "y")
    d.done_succeeds(sent, pre)
    assert d.grant() is None  # still held
    d.release("t")
    merged = d.request(p)
    assert {c["type"] for c in merged.call.apply(p)["status"]["conditions"]} == {
        "PodScheduled",
        "QueueGate",
    }
    d.done_succeeds(merged, held)


def test_a_call_put_back_into_a_held_one_stays_behind_that_ones_prerequisite(
    d: HeldDriver,
) -> None:
    p = pod("a")
    d.submit(gate(p))
    first = d.send()
    pre = d.submit(label(p))
    submit_behind(d, unsched(p), "t", pre)
    assert queued(d) == ["label_patch", "pod_status_patch"]
    d.done(first, Result.RETRY, error=ServerError("x"))  # put back, merged into the held one
    assert queued(d) == ["label_patch", "pod_status_patch"]  # not moved ahead of `pre`
    assert d.request(p).call.call_type == "label_patch"


def test_without_a_prerequisite_on_its_object_a_held_merge_keeps_the_older_slot(
    d: HeldDriver,
) -> None:
    p = pod("a")
    d.submit(label(p, "x"))
    d.send()
    d.submit(gate(p))
    d.submit(label(p, "y"))
    submit_behind(d, unsched(p), "t")
    assert queued(d) == ["pod_status_patch", "label_patch"]


def nominate(p: dict[str, Any]) -> PodStatusPatch:
    return PodStatusPatch.for_pod(p, nominated_node_name="n1")


def test_a_held_binding_queues_behind_the_status_patch_it_waits_for(d: HeldDriver) -> None:
    """The preemption chain on one pod: the binding waits (through the victims) for the
    nomination; it supersedes status patches, but not the one it waits for."""
    p = pod("a")
    nominated = d.submit(nominate(p))
    bind = submit_behind(d, PodBinding.for_pod(p, "n1"), "victims", nominated)
    assert queued(d) == ["pod_status_patch", "pod_binding"]
    assert nominated not in d.results
    sent = d.request(p)
    assert sent.call.call_type == "pod_status_patch"
    d.done_succeeds(sent, nominated)
    assert d.grant() is None  # the binding still waits for the victims
    d.release("victims")
    d.done_succeeds(d.request(p), bind)


def test_a_nomination_put_back_after_a_retry_is_not_replaced_by_the_binding_waiting_for_it(
    d: HeldDriver,
) -> None:
    p = pod("a")
    nominated = d.submit(nominate(p))
    first = d.send()  # in flight when the binding arrives
    submit_behind(d, PodBinding.for_pod(p, "n1"), "victims", nominated)
    d.done(first, Result.RETRY, error=ServerError("x"))
    assert nominated not in d.results  # put back at the head, not OVERWRITTEN
    assert queued(d) == ["pod_status_patch", "pod_binding"]
    other = d.submit(nominate(p))  # an unrelated status patch still yields to the binding
    assert d.outcome(other) is Outcome.SKIPPED
