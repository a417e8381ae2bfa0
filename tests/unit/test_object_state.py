"""The per-object rules (DESIGN §3), driven event by event on the pure state machine.

Like h11's ``test_state.py``: no threads, no pykka, no clock. The test is the object's actor
(it feeds events to :class:`ObjectState` and reads the effects) and its executor (it grants,
plays the worker by answering ``Done`` for every ``Send``, and moves a fake ``now``). Futures
are opaque to the machine: here they are plain names, and every ``Resolve`` is recorded once
(a second one fails the test).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.config import RetryConfig
from kdispatch.actors.model.effects import (
    Done,
    Effect,
    Merged,
    Ready,
    Refund,
    Resolve,
    Result,
    Retire,
    Send,
)
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallConflict,
    CallFailed,
    CallStale,
    ConflictError,
    DispatcherClosed,
    InvalidRequestError,
    LeadershipLost,
    ObjectNotFound,
    Outcome,
    RequestTimeoutError,
    ServerError,
    TooManyRequestsError,
)
from kdispatch.actors.model.lifecycle import LIFECYCLE, Input, InvalidTransition, Life, State
from kdispatch.actors.model.object_state import ObjectState
from kdispatch.actors.model.objects import (
    Obj,
    ObjectRef,
    get_path,
    is_newer,
    pod_node_name,
    rv_is_newer,
    uid_and_version,
    with_path,
)
from kdispatch.actors.model.pod_calls import (
    PodBinding,
    PodPreemption,
    PodStatusPatch,
    pod_conditions,
)
from tests.factories import InertCall, cond, pod

pytestmark = pytest.mark.timeout(30)

UID = "uid-a"


class Driver:
    """Feeds events to one ObjectState and records what they resolve. Test thread."""

    def __init__(self, retry: RetryConfig | None = None, uid: str = UID) -> None:
        self.m = ObjectState(uid, retry or RetryConfig(max_attempts=3, max_conflict_retries=2))
        self.now = 100.0
        self.results: dict[str, Any] = {}
        self.last: list[Effect] = []
        self._n = 0

    def _take(self, effects: list[Effect]) -> list[Effect]:
        for e in effects:
            if isinstance(e, Resolve):
                assert e.future not in self.results, f"{e.future} resolved twice"
                self.results[e.future] = e.outcome
        self.last = effects
        return effects

    # events
    def submit(self, call: Call) -> str:
        self._n += 1
        fut = f"f{self._n}"
        self._take(self.m.submit(call, fut))
        return fut

    def grant(self) -> Send | None:
        """A grant: the Send it answers, or None for a Refund (exactly one of them)."""
        effects = self._take(self.m.grant(self.now))
        answers = [e for e in effects if isinstance(e, Send | Refund)]
        assert len(answers) == 1, f"a grant needs exactly one answer, got {effects}"
        answer = answers[0]
        return answer if isinstance(answer, Send) else None

    def send(self) -> Send:
        s = self.grant()
        assert s is not None, f"refunded: {self.last}"
        return s

    def done(
        self,
        send: Send,
        result: Result = Result.SUCCESS,
        obj: Obj | None = None,
        error: BaseException | None = None,
        delay: float = 0.0,
        *,
        applied: bool = True,
    ) -> list[Effect]:
        done = Done(send.call, result, obj, error, delay, applied)
        return self._take(self.m.done(done, self.now))

    def send_succeeds(self, fut: str, call_type: str | None = None) -> None:
        """The next grant sends a call (of ``call_type`` when given) that succeeds and
        resolves ``fut``."""
        s = self.send()
        if call_type is not None:
            assert s.call.call_type == call_type
        self.done_succeeds(s, fut)

    def done_succeeds(self, send: Send, fut: str) -> None:
        """``send`` succeeds, and that resolves ``fut`` SUCCESS."""
        self.done(send)
        assert self.outcome(fut) is Outcome.SUCCESS

    def request(self, obj: Obj) -> Send:
        """The next request of the head call, after the re-read it may need (answered ``obj``)."""
        sent = self.send()
        if sent.read:
            self.done(sent, obj=obj)
            sent = self.send()
        return sent

    def observed(self, obj: Obj) -> list[Effect]:
        return self._take(self.m.observed_event(obj))

    def deleted(self) -> list[Effect]:
        return self._take(self.m.deleted())

    def cancel(self, call_type: str | None = None) -> list[Effect]:
        return self._take(self.m.cancel(call_type))

    # queries
    def outcome(self, fut: str) -> Any:
        """The Outcome, the exception *type*, or None while unresolved."""
        r = self.results.get(fut)
        return r if r is None or isinstance(r, Outcome) else type(r)

    def error(self, fut: str) -> BaseException:
        r = self.results[fut]
        assert isinstance(r, BaseException)
        return r

    def readies(self) -> list[Ready]:
        return [e for e in self.last if isinstance(e, Ready)]

    def retires(self) -> list[Retire]:
        return [e for e in self.last if isinstance(e, Retire)]

    def state(self) -> State:
        return self.m.state


@pytest.fixture
def d() -> Driver:
    return Driver()


def unsched(p: Obj, reason: str = "Unschedulable", message: str = "") -> PodStatusPatch:
    return PodStatusPatch.for_pod(p, conditions=[cond(reason=reason, message=message)])


def gate(p: Obj, status: str = "True") -> PodStatusPatch:
    """A patch of a condition that has nothing to do with scheduling."""
    return PodStatusPatch.for_pod(p, conditions=[cond("QueueGate", status, "Gate")])


def bound(p: Obj, node: str = "n1", rv: int = 2) -> Obj:
    """``p`` as the server shows it once bound to ``node``."""
    out = with_path(p, ("spec", "nodeName"), node)
    out = with_path(out, ("metadata", "resourceVersion"), str(rv))
    conds = [c for c in out["status"]["conditions"] if c["type"] != "PodScheduled"]
    return with_path(out, ("status", "conditions"), [*conds, cond(status="True", reason="")])


# ============================================================ the transitions table


def test_the_lifecycle_table_is_the_machine(d: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row is a rule: without the row that retires a live object on a deletion, a deleted
    object stays live and keeps taking calls."""
    assert LIFECYCLE[(Life.LIVE, Input.DELETED)] is Life.RETIRING
    monkeypatch.delitem(LIFECYCLE, (Life.LIVE, Input.DELETED))
    d.submit(unsched(pod("a")))
    d.deleted()
    assert d.state() is State.IDLE  # its call was cancelled, but the object lives on
    later = d.submit(unsched(pod("a")))
    assert later not in d.results and d.state() is State.PENDING  # and takes new calls
    monkeypatch.undo()
    d2 = Driver()
    d2.submit(unsched(pod("a")))
    d2.deleted()
    assert d2.state() is State.RETIRED  # nothing in flight: retired at once


def test_done_with_nothing_in_flight_is_an_invalid_transition(d: Driver) -> None:
    call = unsched(pod("a"))
    with pytest.raises(InvalidTransition):
        d.m.done(Done(call, Result.SUCCESS), d.now)
    d.submit(call)
    assert d.state() is State.PENDING
    with pytest.raises(InvalidTransition):
        d.m.done(Done(call, Result.SUCCESS), d.now)


def test_done_for_another_call_than_the_one_in_flight_is_invalid(d: Driver) -> None:
    p = pod("a")
    d.submit(unsched(p))
    d.send()
    with pytest.raises(InvalidTransition):
        d.m.done(Done(unsched(p), Result.SUCCESS), d.now)  # equal, but not the one sent


def test_states_through_a_calls_life(d: Driver) -> None:
    p = pod("a")
    assert d.state() is State.IDLE and d.m.idle
    d.submit(unsched(p, reason="A"))
    assert d.state() is State.PENDING and not d.m.idle
    s = d.send()
    assert d.state() is State.IN_FLIGHT
    d.submit(unsched(p, reason="B"))
    assert d.state() is State.IN_FLIGHT_PENDING
    d.done(s, obj=pod("a", rv=2, conditions=(cond(reason="A"),)))
    assert d.state() is State.PENDING
    s = d.send()
    assert d.state() is State.IN_FLIGHT
    d.deleted()
    assert d.state() is State.RETIRING
    d.done(s, Result.NOT_FOUND)
    assert d.state() is State.RETIRED
    # terminal: calls are refused, grants refunded
    f = d.submit(unsched(p))
    assert d.outcome(f) is CallCancelled
    assert d.grant() is None
    assert d.state() is State.RETIRED


# ============================================================ upstream queue behaviour


def test_first_call_asks_for_a_grant_and_is_sent_against_its_basis(d: Driver) -> None:
    p = pod("a")
    call = unsched(p)
    fut = d.submit(call)
    assert d.last == [Ready(1, 0.0)]
    s = d.send()
    assert s == Send(call, p, 1) and not s.read
    assert d.outcome(fut) is None
    d.done_succeeds(s, fut)
    assert d.state() is State.IDLE


def test_noop_call_is_skipped_and_asks_for_nothing(d: Driver) -> None:
    fut = d.submit(unsched(pod("a", conditions=(cond(),))))
    assert d.outcome(fut) is Outcome.SKIPPED
    assert d.readies() == []
    assert d.grant() is None  # a stray grant is refunded
    assert d.state() is State.IDLE


def test_a_basis_older_than_the_version_recalled_is_not_relied_on(d: Driver) -> None:
    """The object's previous actor left idle having seen resourceVersion 5: a call on an
    older copy that shows it done already is re-read and sent, not skipped; one on a copy at
    least that new is judged on it."""
    d.m.inherit(("5", None))
    stale = d.submit(unsched(pod("a", rv=4, conditions=(cond(),))))
    assert d.outcome(stale) is None and d.readies() == [Ready(1, 0.0)]
    fresh = pod("a", rv=6)  # the server moved on: the condition is not there any more
    s = d.request(fresh)
    assert s.obj == fresh and not s.read
    d.done_succeeds(s, stale)
    other = Driver()
    other.m.inherit(("5", None))
    at = other.submit(unsched(pod("a", rv=5, conditions=(cond(),))))
    assert other.outcome(at) is Outcome.SKIPPED


def test_a_binding_the_previous_actor_saw_land_makes_a_stale_basis_read_first(d: Driver) -> None:
    """The previous actor left idle after a binding landed without a reply object, before
    any object showed it: on the caller's copy from before the binding, a
    ``PodScheduled=False`` is not skipped as a no-op; the object is read first, and the
    call is stale on the bound pod."""
    before = pod("a", rv=5, conditions=(cond(),))
    prior = Driver()
    prior.submit(PodBinding.for_pod(before, "n1"))
    prior.done(prior.send())  # landed, no reply object
    legacy = prior.m.legacy()
    assert legacy == ("5", "5")
    d.m.inherit(legacy)
    fut = d.submit(unsched(before))
    assert d.outcome(fut) is None
    read = d.send()
    assert read.read
    d.done(read, obj=bound(before, rv=6))
    assert d.outcome(fut) is CallStale


def test_same_type_merges_and_older_is_overwritten(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(PodStatusPatch.for_pod(p, conditions=[cond(reason="A")]))
    f2 = d.submit(PodStatusPatch.for_pod(p, nominated_node_name="n2"))
    assert d.outcome(f1) is Outcome.OVERWRITTEN
    assert Merged("pod_status_patch") in d.last
    assert d.readies() == []  # the executor already holds the object's Ready
    s = d.send()
    assert isinstance(s.call, PodStatusPatch)
    assert s.call.nominated_node_name == "n2"
    assert [c["reason"] for c in s.call.conditions] == ["A"]
    d.done_succeeds(s, f2)


def test_merge_that_becomes_noop_skips_new_and_removes_pending(d: Driver) -> None:
    p = pod("a", conditions=(cond(reason="A"),))
    f1 = d.submit(unsched(p, reason="B"))
    f2 = d.submit(unsched(p, reason="A"))
    assert d.outcome(f1) is Outcome.OVERWRITTEN
    assert d.outcome(f2) is Outcome.SKIPPED
    assert d.state() is State.IDLE
    assert d.grant() is None


def test_call_arriving_while_one_is_in_flight_waits_and_runs_after(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(unsched(p, reason="A"))
    s1 = d.send()
    f2 = d.submit(unsched(p, reason="B"))
    assert d.readies() == []  # nothing to send while one is in flight
    assert d.grant() is None  # one call per object at a time
    d.done(s1, obj=pod("a", rv=2, conditions=(cond(reason="A"),)))
    assert d.outcome(f1) is Outcome.SUCCESS  # never reported overwritten (#135180)
    assert d.readies() == [Ready(1, 0.0)]
    s2 = d.send()
    assert isinstance(s2.call, PodStatusPatch)
    assert [c["reason"] for c in s2.call.conditions] == ["B"]
    assert s2.obj is not None and s2.obj["metadata"]["resourceVersion"] == "2"
    d.done_succeeds(s2, f2)


def test_noop_is_kept_while_the_same_field_is_in_flight_with_another_value(d: Driver) -> None:
    """Nominate n1 (in flight), then clear: the clear is a no-op against the observed pod but
    not once n1 lands, so it is kept."""
    p = pod("a")
    d.submit(PodStatusPatch.for_pod(p, nominated_node_name="n1"))
    s = d.send()
    clear = d.submit(PodStatusPatch.for_pod(p, nominated_node_name=None))
    assert d.outcome(clear) is None
    d.observed(pod("a", rv=2, conditions=(cond("Ready", "True", ""),)))
    assert d.outcome(clear) is None
    d.done(s, obj=pod("a", rv=3, nnn="n1"))
    s2 = d.send()
    assert s2.call == PodStatusPatch.for_pod(p, nominated_node_name=None)


# ============================================================ informer


def test_informer_update_makes_pending_noop_skipped(d: Driver) -> None:
    fut = d.submit(unsched(pod("a"), reason="A"))
    d.observed(pod("a", rv=5, conditions=(cond(reason="A"),)))
    assert d.outcome(fut) is Outcome.SKIPPED
    assert d.state() is State.IDLE
    assert d.grant() is None


def test_informer_update_rebases_pending_that_still_differs(d: Driver) -> None:
    fut = d.submit(unsched(pod("a"), reason="A"))
    newer = pod("a", rv=7, conditions=(cond(reason="Other"),))
    d.observed(newer)
    s = d.send()
    assert s.obj is newer  # sent against the newest object
    d.done_succeeds(s, fut)


@pytest.mark.parametrize(
    "event",
    [pod("a", rv=3, conditions=(cond(),)), pod("a", rv=9, conditions=(cond(),)), pod("b", rv=20)],
    ids=["older", "same-rv", "other-uid"],
)
def test_informer_event_that_is_not_newer_is_ignored(d: Driver, event: Obj) -> None:
    p = pod("a", rv=9)
    d.submit(unsched(p))
    assert d.observed(event) == []
    s = d.send()
    assert s.obj is p


@dataclass(frozen=True, slots=True)
class JudgedNote(InertCall):
    """A user call type that counts how often elision and staleness judge it."""

    call_type: ClassVar[str] = "judged_note"
    relevance: ClassVar[int] = 1
    judged: ClassVar[list[str]] = []

    def is_noop(self, obj: Obj | None) -> bool:
        self.judged.append("is_noop")
        return False

    def revalidate(self, basis: Obj | None, obj: Obj | None) -> str | None:
        self.judged.append("revalidate")
        return None


def test_a_call_is_judged_once_per_observed_object(d: Driver) -> None:
    """Elision and staleness judge a call at submit; the grant, an informer event that is not
    newer, and the request do not judge it again; a newer object does, once."""
    JudgedNote.judged.clear()
    p = pod("a", rv=4)
    first = d.submit(JudgedNote(ObjectRef.of(p), basis=p))
    assert JudgedNote.judged == ["revalidate", "is_noop"]
    assert d.observed(pod("a", rv=4)) == []  # not newer: nothing judged
    s = d.send()  # judged against this very object already: not again at the grant
    assert s.obj is p and len(JudgedNote.judged) == 2
    d.done_succeeds(s, first)
    JudgedNote.judged.clear()
    d = Driver()  # a fresh object
    second = d.submit(JudgedNote(ObjectRef.of(p), basis=p))
    newer = pod("a", rv=5)
    d.observed(newer)  # newer: judged once more
    assert JudgedNote.judged == ["revalidate", "is_noop", "is_noop", "revalidate"]
    s = d.send()
    assert s.obj is newer and len(JudgedNote.judged) == 4
    d.done_succeeds(s, second)
    assert len(JudgedNote.judged) == 4


def test_informer_event_older_than_a_landed_binding_does_not_undo_it(d: Driver) -> None:
    p = pod("a", rv=2, conditions=(cond(),))
    d.submit(PodBinding.for_pod(p, "n1"))
    d.done(d.send())  # a binding's reply carries no pod
    # the informer lags: rv 3 is a kubelet update from before the binding landed
    d.observed(pod("a", rv=3, conditions=(cond(), cond("Ready", "True", ""))))
    view = d.m.view()
    assert view is not None and pod_node_name(view) == "n1", "read-your-writes lost the binding"
    # a PodScheduled=False patch on that pod is stale (it is bound), never skipped or sent
    fut = d.submit(unsched(p))
    assert d.outcome(fut) is CallStale


# ============================================================ supersession


def test_binding_supersedes_pending_status_patch_and_takes_its_slot(d: Driver) -> None:
    p = pod("a")
    f_patch = d.submit(unsched(p))
    assert d.readies() == [Ready(1, 0.0)]
    f_bind = d.submit(PodBinding.for_pod(p, "n1"))
    assert d.outcome(f_patch) is Outcome.OVERWRITTEN
    assert d.readies() == [Ready(2, 0.0)]  # the more urgent lane is asked for too
    d.send_succeeds(f_bind, "pod_binding")


def test_status_patch_while_a_binding_is_tracked_is_skipped(d: Driver) -> None:
    p = pod("a")
    f_bind = d.submit(PodBinding.for_pod(p, "n1"))
    assert d.outcome(d.submit(gate(p))) is Outcome.SKIPPED  # binding pending
    s = d.send()
    assert d.outcome(d.submit(gate(p))) is Outcome.SKIPPED  # binding in flight
    assert d.state() is State.IN_FLIGHT
    d.done_succeeds(s, f_bind)


@dataclass(frozen=True, slots=True)
class LabelPatch(InertCall):
    """A user's call type on Pod, more urgent than a binding, declaring no supersession."""

    call_type: ClassVar[str] = "label_patch"
    relevance: ClassVar[int] = 4

    value: str = "x"

    def is_noop(self, obj: Obj | None) -> bool:
        return bool(get_path(obj, "metadata", "labels", "l") == self.value)

    def apply(self, obj: Obj) -> Obj:
        return with_path(obj, ("metadata", "labels", "l"), self.value)

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        raise AssertionError("not sent in these tests")


def label(p: Obj, value: str = "x") -> LabelPatch:
    return LabelPatch(ObjectRef.of(p), value, basis=p)


def test_other_type_queues_behind_a_pending_binding_and_both_are_sent_in_order(
    d: Driver,
) -> None:
    p = pod("a")
    f_bind = d.submit(PodBinding.for_pod(p, "n1"))
    f_label = d.submit(label(p))
    assert d.outcome(f_bind) is None and d.outcome(f_label) is None  # never replaced
    assert d.readies() == []  # the head (the binding) is already asked for
    s1 = d.send()
    assert s1.call.call_type == "pod_binding"
    assert d.state() is State.IN_FLIGHT_PENDING
    d.done_succeeds(s1, f_bind)
    assert d.readies() == [Ready(4, 0.0)]
    read = d.send()  # the binding moved the resourceVersion: the label patch re-reads first
    assert read.call.call_type == "label_patch" and read.read
    d.done(read, obj=bound(p, rv=3))
    s2 = d.send()
    assert s2.call.call_type == "label_patch" and not s2.read
    d.done_succeeds(s2, f_label)


def test_binding_takes_the_status_patch_slot_ahead_of_a_queued_call_of_another_type(
    d: Driver,
) -> None:
    p = pod("a")
    f_patch = d.submit(unsched(p))
    f_label = d.submit(label(p))
    f_bind = d.submit(PodBinding.for_pod(p, "n1"))
    assert d.outcome(f_patch) is Outcome.OVERWRITTEN
    assert [e.call.call_type for e in d.m.queue] == ["pod_binding", "label_patch"]
    s = d.send()
    assert s.call.call_type == "pod_binding"
    d.done(s)
    read = d.send()
    assert read.call.call_type == "label_patch" and read.read
    d.done(read, obj=bound(p, rv=3))
    d.done(d.send())
    assert (d.outcome(f_bind), d.outcome(f_label)) == (Outcome.SUCCESS, Outcome.SUCCESS)


# ============================================================ staleness (#139602)


def test_stale_patch_against_a_bound_pod_is_refused_at_submit(d: Driver) -> None:
    before = pod("a")
    d.observed(bound(before))  # the informer already shows it bound
    fut = d.submit(unsched(before))  # decided on the pre-binding snapshot
    assert d.outcome(fut) is CallStale
    assert d.state() is State.IDLE and d.grant() is None


def test_stale_patch_whose_basis_is_bound_is_refused(d: Driver) -> None:
    fut = d.submit(unsched(bound(pod("a"))))
    assert d.outcome(fut) is CallStale


def test_stale_patch_when_pod_scheduled_true_is_newer_than_the_basis(d: Driver) -> None:
    before = pod("a")
    d.observed(pod("a", rv=2, conditions=(cond(status="True", reason=""),)))  # not bound yet
    assert d.outcome(d.submit(unsched(before))) is CallStale
    # a caller that saw PodScheduled=True and decides otherwise is not stale
    seen = pod("a", rv=2, conditions=(cond(status="True", reason=""),))
    assert d.outcome(d.submit(unsched(seen))) is None


def test_pending_patch_goes_stale_when_the_informer_shows_the_pod_bound(d: Driver) -> None:
    p = pod("a")
    fut = d.submit(unsched(p))
    d.observed(bound(p))
    assert d.outcome(fut) is CallStale
    assert d.state() is State.IDLE


def test_patch_goes_stale_after_a_conflict_whose_reread_shows_the_pod_bound(d: Driver) -> None:
    p = pod("a")
    fut = d.submit(unsched(p))
    s = d.send()
    d.done(s, Result.CONFLICT, obj=bound(p), error=ConflictError())
    assert d.outcome(fut) is CallStale  # never re-sent rebased on the bound pod
    assert d.grant() is None


def test_patch_goes_stale_at_grant(d: Driver) -> None:
    """A reply object (here: the server answering another call) shows the pod bound out of
    band; nothing re-validated the queued patch before its grant: the grant does."""
    p = pod("a")
    d.submit(label(p))
    s = d.send()
    fut = d.submit(unsched(p))
    d.done(s, obj=with_path(bound(p, rv=3), ("metadata", "labels", "l"), "x"))
    assert d.outcome(fut) is None
    assert d.grant() is None  # refunded: nothing left to send
    assert d.outcome(fut) is CallStale


def test_pod_scheduled_true_patch_on_a_bound_pod_is_not_stale(d: Driver) -> None:
    p = bound(pod("a"))
    call = PodStatusPatch.for_pod(p, conditions=[cond(status="True", reason="Scheduled")])
    fut = d.submit(call)
    assert d.outcome(fut) is None
    assert d.send().call is call


def test_landed_binding_makes_the_next_patch_reread_instead_of_walking_into_a_409(
    d: Driver,
) -> None:
    p = pod("a")
    f_bind = d.submit(PodBinding.for_pod(p, "n1"))
    d.done(d.send())  # 201, no object: the server's resourceVersion moved on
    assert d.outcome(f_bind) is Outcome.SUCCESS
    assert d.m.rv_stale
    call = gate(p)
    f_patch = d.submit(call)
    read = d.send()
    assert read == Send(call, None, 0, read=True)  # a GET, not the patch at rv 1
    fresh = bound(p, rv=3)
    d.done(read, obj=fresh)
    assert d.outcome(f_patch) is None
    s = d.send()
    assert s.call is call and not s.read and s.obj is fresh and s.attempt == 1
    d.done_succeeds(s, f_patch)


def test_binding_the_informer_showed_before_its_reply_leaves_the_version_trusted(
    d: Driver,
) -> None:
    """The watch event of the bound pod comes before the binding's reply: the observed pod
    shows the binding at its own resourceVersion, so it is not behind and the next patch is
    computed on it without a re-read."""
    p = pod("a")
    f_bind = d.submit(PodBinding.for_pod(p, "n1"))
    s = d.send()
    shown = bound(p, rv=3)
    d.observed(shown)
    d.done(s)  # 201, no object
    assert d.outcome(f_bind) is Outcome.SUCCESS
    assert not d.m.rv_stale and d.m.observed is shown
    call = gate(p)
    f_patch = d.submit(call)
    s = d.send()
    assert s.call is call and not s.read and s.obj is shown
    d.done_succeeds(s, f_patch)


# ============================================================ deletion and preemption


def test_deletion_cancels_everything_pending_and_tombstones(d: Driver) -> None:
    p = pod("a")
    fut = d.submit(PodBinding.for_pod(p, "n1"))
    d.deleted()
    assert d.outcome(fut) is CallCancelled
    assert d.retires() == [Retire(tombstone=True, final=True)]
    assert d.state() is State.RETIRED


def test_deletion_with_call_in_flight_resolves_it_when_done(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(unsched(p, reason="A"))
    s1 = d.send()
    f2 = d.submit(unsched(p, reason="B"))
    d.deleted()
    assert d.outcome(f2) is CallCancelled and d.outcome(f1) is None
    assert d.retires() == [Retire(tombstone=True, final=False)]
    assert d.state() is State.RETIRING
    assert d.outcome(d.submit(unsched(p))) is CallCancelled  # nothing accepted meanwhile
    d.done(s1, Result.NOT_FOUND)
    assert d.outcome(f1) is ObjectNotFound
    assert d.retires() == [Retire(tombstone=False, final=True)]
    assert d.state() is State.RETIRED


@pytest.mark.parametrize("result", [Result.RETRY, Result.CONFLICT])
def test_retry_after_delete_is_cancelled_not_requeued(d: Driver, result: Result) -> None:
    fut = d.submit(unsched(pod("a")))
    s = d.send()
    d.deleted()
    d.done(s, result, error=ServerError())
    assert d.outcome(fut) is CallCancelled
    assert d.state() is State.RETIRED and d.retires()[-1].final


def test_not_found_fails_call_cancels_pending_and_retires(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(unsched(p, reason="A"))
    s1 = d.send()
    f2 = d.submit(unsched(p, reason="B"))
    d.done(s1, Result.NOT_FOUND)
    assert d.outcome(f1) is ObjectNotFound
    assert d.outcome(f2) is CallCancelled
    assert d.retires() == [Retire(tombstone=True, final=True)]


def test_preemption_cancels_pending_and_runs_the_deletion(d: Driver) -> None:
    p = pod("a")
    f_patch = d.submit(unsched(p))
    f_label = d.submit(label(p))
    f_pre = d.submit(PodPreemption.for_pod(p, preemptor="hi"))
    assert d.outcome(f_patch) is CallCancelled and d.outcome(f_label) is CallCancelled
    assert d.readies() == [Ready(3, 0.0)]
    s = d.send()
    assert s.call.call_type == "pod_preemption"
    assert d.outcome(d.submit(PodBinding.for_pod(p, "n1"))) is CallCancelled  # nothing behind
    d.done_succeeds(s, f_pre)
    assert d.retires() == [Retire(tombstone=True, final=True)]
    assert d.state() is State.RETIRED


def test_preemption_while_a_call_is_in_flight_waits_for_it(d: Driver) -> None:
    p = pod("a")
    f_patch = d.submit(unsched(p))
    s = d.send()
    f_pre = d.submit(PodPreemption.for_pod(p))
    assert d.state() is State.IN_FLIGHT_PENDING
    d.done(s, Result.RETRY, error=ServerError())  # the retry would go behind the deletion
    assert d.outcome(f_patch) is CallCancelled
    read = d.send()  # the patch may have landed: the preemption re-reads the pod first
    assert read.call.call_type == "pod_preemption" and read.read
    d.done(read, obj=pod("a", rv=2))
    s = d.send()
    assert s.call.call_type == "pod_preemption" and not s.read
    d.done_succeeds(s, f_pre)


def test_preemption_of_terminating_pod_is_skipped(d: Driver) -> None:
    assert d.outcome(d.submit(PodPreemption.for_pod(pod("a", terminating=True)))) is (
        Outcome.SKIPPED
    )


def test_repeated_preemption_merges_or_waits_behind_the_one_in_flight(d: Driver) -> None:
    """A second preemption while the first is on the wire waits: the pod's deletion is what
    it asked for (SUCCESS), and if the first fails it is sent itself, never SKIPPED on a
    deletion that may not happen."""
    p = pod("a")
    f1 = d.submit(PodPreemption.for_pod(p))
    f2 = d.submit(PodPreemption.for_pod(p, reason="Again"))
    assert d.outcome(f1) is Outcome.OVERWRITTEN
    s = d.send()
    f3 = d.submit(PodPreemption.for_pod(p))
    assert d.outcome(f3) is None
    d.done_succeeds(s, f2)
    assert d.outcome(f3) is Outcome.SUCCESS  # the pod is gone, as it wanted


def test_a_preemption_waiting_behind_a_failed_one_is_sent(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(PodPreemption.for_pod(p))
    s = d.send()
    f2 = d.submit(PodPreemption.for_pod(p, reason="Again"))
    d.done(s, Result.FAILED, error=ServerError())
    assert d.outcome(f1) is CallFailed
    assert d.outcome(f2) is None
    d.done_succeeds(d.send(), f2)


def test_pending_preemption_of_a_deleted_pod_succeeds(d: Driver) -> None:
    p = pod("a")
    f_patch = d.submit(unsched(p))
    s = d.send()
    f_pre = d.submit(PodPreemption.for_pod(p))
    d.deleted()
    assert d.outcome(f_pre) is Outcome.SUCCESS  # the deletion is what it wanted
    d.done(s, Result.NOT_FOUND)
    assert d.outcome(f_patch) is ObjectNotFound


def test_preemption_in_flight_when_pod_deleted_succeeds_on_retry(d: Driver) -> None:
    f_pre = d.submit(PodPreemption.for_pod(pod("a")))
    s = d.send()
    d.deleted()
    d.done(s, Result.RETRY, error=ServerError())
    assert d.outcome(f_pre) is Outcome.SUCCESS


def test_preemption_not_found_is_success(d: Driver) -> None:
    f_pre = d.submit(PodPreemption.for_pod(pod("a")))
    d.done(d.send(), Result.NOT_FOUND)
    assert d.outcome(f_pre) is Outcome.SUCCESS
    assert d.state() is State.RETIRED


class Recorder:
    """A backend that records requests (for a preemption's send)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []

    def patch_status(self, kind: str, ns: str, name: str, patch: Any, **kw: Any) -> Obj:
        self.requests.append(("patch", patch))
        return {}

    def delete(self, kind: str, ns: str, name: str, **kw: Any) -> None:
        self.requests.append(("delete", kw.get("uid")))


def test_retried_preemption_rereads_and_keeps_the_existing_disruption_target(d: Driver) -> None:
    p = pod("a")
    f_pre = d.submit(PodPreemption.for_pod(p, preemptor="default/high"))
    s1 = d.send()
    first = Recorder()
    s1.call.send(first, s1.obj)  # type: ignore[arg-type]
    assert [r[0] for r in first.requests] == ["patch", "delete"]
    # the condition landed, the DELETE got a 429
    d.done(s1, Result.RETRY, error=TooManyRequestsError(), delay=0.0)
    read = d.send()
    assert read.read and read.obj is None  # re-read before the retry
    stamped = {**cond("DisruptionTarget", "True", "PreemptionByScheduler")}
    stamped["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    server = pod("a", rv=2, conditions=(stamped,))
    d.done(read, obj=server)
    s2 = d.send()
    assert s2.call.call_type == "pod_preemption" and s2.obj is server and s2.attempt == 2
    again = Recorder()
    s2.call.send(again, s2.obj)  # type: ignore[arg-type]
    assert again.requests == [("delete", "uid-a")]  # the condition and its time are kept
    assert pod_conditions(s2.obj)["DisruptionTarget"]["lastTransitionTime"] == (
        "2026-01-01T00:00:00Z"
    )
    d.done_succeeds(s2, f_pre)


def test_a_deletion_submitted_once_the_object_is_gone_succeeds_unsent(d: Driver) -> None:
    """The object's deletion was seen while a request was in flight: a preemption submitted
    then got its way (``SUCCESS``, nothing to send); another call is cancelled."""
    d.submit(PodBinding.for_pod(pod("a"), "n1"))
    d.send()
    d.deleted()
    assert d.state() is State.RETIRING
    assert d.outcome(d.submit(PodPreemption.for_pod(pod("a")))) is Outcome.SUCCESS
    assert d.outcome(d.submit(PodStatusPatch.for_pod(pod("a"), nominated_node_name="n"))) is (
        CallCancelled
    )
    assert d.readies() == []


def test_a_request_refused_unhandled_keeps_the_object_trusted(d: Driver) -> None:
    """A status patch's only request got a 429 (refused before it was handled: nothing
    applied): the retry goes out on the object as observed, with no re-read first."""
    p = pod("a")
    fut = d.submit(PodStatusPatch.for_pod(p, nominated_node_name="n1"))
    first = d.send()
    d.done(first, Result.RETRY, error=TooManyRequestsError(), applied=False)
    retry = d.send()
    assert not retry.read and retry.obj is first.obj and retry.attempt == 2
    d.done_succeeds(retry, fut)


def test_after_revoke_a_call_its_request_put_back_and_a_late_submit_resolve_its_error(
    d: Driver,
) -> None:
    """Leadership lost while a binding is on the wire: the binding meets a 500 and is not put
    back to be sent again, and a call told before the revocation but handled after it is not
    queued; both resolve with the revocation's error, and nothing asks for a grant."""
    wire = d.submit(PodBinding.for_pod(pod("a"), "n1"))
    sent = d.send()
    lost = LeadershipLost("lost")
    d._take(d.m.revoke(lost))
    d.done(sent, Result.RETRY, error=ServerError(), delay=0.0)
    assert d.error(wire) is lost and d.readies() == []
    late = d.submit(PodStatusPatch.for_pod(pod("a"), nominated_node_name="n1"))
    assert d.error(late) is lost and d.readies() == []
    assert d.grant() is None  # a Ready it held before is refunded


def test_retried_preemption_whose_reread_finds_the_pod_gone_succeeds(d: Driver) -> None:
    f_pre = d.submit(PodPreemption.for_pod(pod("a")))
    d.done(d.send(), Result.RETRY, error=ServerError())  # the lost DELETE reply
    read = d.send()
    assert read.read
    d.done(read, Result.NOT_FOUND)
    assert d.outcome(f_pre) is Outcome.SUCCESS
    assert d.state() is State.RETIRED


def test_retried_preemption_whose_reread_shows_it_terminating_is_skipped(d: Driver) -> None:
    f_pre = d.submit(PodPreemption.for_pod(pod("a")))
    d.done(d.send(), Result.RETRY, error=ServerError())
    read = d.send()
    d.done(read, obj=pod("a", rv=2, terminating=True))
    assert d.outcome(f_pre) is Outcome.SKIPPED


# ============================================================ caller cancel, precheck, view


def test_caller_cancellation_withdraws_queued_call(d: Driver) -> None:
    fut = d.submit(unsched(pod("a")))
    assert d.cancel("pod_binding") == []  # other type: untouched
    assert d.outcome(fut) is None
    d.cancel(None)
    assert d.outcome(fut) is CallCancelled
    assert d.state() is State.IDLE and d.grant() is None


def test_cancel_cannot_recall_call_in_flight(d: Driver) -> None:
    fut = d.submit(unsched(pod("a")))
    s = d.send()
    assert d.cancel() == []
    d.done_succeeds(s, fut)


@pytest.mark.parametrize(
    "p", [pod("a", node="other"), pod("a", terminating=True)], ids=["bound", "terminating"]
)
def test_binding_for_bound_or_terminating_pod_fails_fast(d: Driver, p: Obj) -> None:
    assert d.outcome(d.submit(PodBinding.for_pod(p, "n1"))) is CallConflict


def test_pending_binding_fails_fast_when_the_informer_shows_it_bound_elsewhere(
    d: Driver,
) -> None:
    p = pod("a")
    fut = d.submit(PodBinding.for_pod(p, "n1"))
    d.observed(bound(p, "n2"))
    assert d.outcome(fut) is CallConflict


def test_binding_already_bound_to_same_node_is_skipped(d: Driver) -> None:
    assert d.outcome(d.submit(PodBinding.for_pod(pod("a", node="n1"), "n1"))) is (Outcome.SKIPPED)


def test_view_applies_in_flight_and_pending_mutations(d: Driver) -> None:
    p = pod("a")
    assert ObjectState(UID, RetryConfig()).view() is None
    d.submit(PodStatusPatch.for_pod(p, nominated_node_name="n3"))
    d.send()
    d.submit(PodBinding.for_pod(p, "n3"))
    view = d.m.view()
    assert view is not None
    assert view["status"]["nominatedNodeName"] == "n3"
    assert view["spec"]["nodeName"] == "n3"
    assert "nodeName" not in p["spec"]  # never mutated


# ============================================================ retries


def test_retry_backs_off_with_a_fake_clock_then_fails_after_max_attempts() -> None:
    d = Driver(RetryConfig(max_attempts=3))
    fut = d.submit(PodBinding.for_pod(pod("a"), "n1"))  # needs no re-read
    for attempt in (1, 2):
        s = d.send()
        assert s.attempt == attempt
        d.done(s, Result.RETRY, error=ServerError("boom"), delay=1.0)
        assert d.readies() == [Ready(2, d.now + 1.0)]
        assert d.state() is State.PENDING
        assert d.grant() is None  # an early grant is refunded and the Ready renewed
        assert d.readies() == [Ready(2, d.now + 1.0)]
        d.now += 1.0
    s = d.send()
    assert s.attempt == 3
    d.done(s, Result.RETRY, error=ServerError("boom"), delay=1.0)
    err = d.error(fut)
    assert isinstance(err, CallFailed) and isinstance(err.cause, ServerError)


def test_retry_budget_exhausted_fails_the_call() -> None:
    d = Driver(RetryConfig(budget=10.0))
    fut = d.submit(PodBinding.for_pod(pod("a"), "n1"))
    # first failure at t=100: the budget ends at 110
    for _ in range(2):
        d.done(d.send(), Result.RETRY, error=ServerError(), delay=5.0)
        assert d.outcome(fut) is None
        d.now += 5.0
    assert d.now == 110.0
    d.done(d.send(), Result.RETRY, error=ServerError(), delay=5.0)  # next try at 115 > 110
    err = d.error(fut)
    assert isinstance(err, CallFailed) and "budget" in str(err)


@pytest.mark.parametrize("landed", [True, False])
def test_retries_run_out_unanswered_then_one_read_decides(landed: bool) -> None:
    """The last attempts ended without an answer (timeouts): before ``CallFailed``, one read
    of the object (``Send.verify``, the call's attempt count unchanged); the pod bound to
    this node resolves ``SUCCESS``, otherwise ``CallFailed`` saying the pod shows it did not
    land, with the last timeout as its cause."""
    d = Driver(RetryConfig(max_attempts=2))
    fut = d.submit(PodBinding.for_pod(pod("a"), "n1"))
    for _ in range(2):
        d.done(d.send(), Result.RETRY, error=RequestTimeoutError("no answer"))
    assert d.outcome(fut) is None
    read = d.send()
    assert (read.read, read.verify, read.attempt) == (True, True, 2)
    fresh = pod("a", rv=9, node="n1" if landed else None)
    d.done(read, Result.SUCCESS, obj=fresh)
    if landed:
        assert d.outcome(fut) is Outcome.SUCCESS
    else:
        err = d.error(fut)
        assert isinstance(err, CallFailed) and isinstance(err.cause, RequestTimeoutError)
        assert "gave up after 2 failed requests" in str(err) and "did not land" in str(err)
    assert d.grant() is None  # nothing left to send


def test_retries_that_were_all_answered_fail_without_a_read() -> None:
    d = Driver(RetryConfig(max_attempts=2))
    fut = d.submit(PodBinding.for_pod(pod("a"), "n1"))
    d.done(d.send(), Result.RETRY, error=TooManyRequestsError("an answer: not applied"))
    d.done(d.send(), Result.RETRY, error=ServerError("an answer: not applied"))
    assert isinstance(d.error(fut), CallFailed)
    assert d.grant() is None  # no read: nothing was left unanswered


def test_a_conflict_whose_re_read_went_unanswered_fails_without_a_read_back() -> None:
    """A 409 refused the attempt's write (an answer: nothing landed), and the one GET after it
    timed out (``applied=False``): the retries run out with no request of the call left
    unanswered, so ``CallFailed`` comes with no read of the object."""
    d = Driver(RetryConfig(max_attempts=1))
    fut = d.submit(PodBinding.for_pod(pod("a"), "n1"))
    d.done(d.send(), Result.RETRY, error=RequestTimeoutError("the re-read"), applied=False)
    err = d.error(fut)
    assert isinstance(err, CallFailed) and isinstance(err.cause, RequestTimeoutError)
    assert d.grant() is None  # no read-back


def test_an_earlier_unanswered_attempt_is_read_back_though_the_last_was_answered() -> None:
    """The first attempt went unanswered (it may have landed, its reply lost), the next got
    500s until the retries ran out: the object is read back before ``CallFailed``."""
    d = Driver(RetryConfig(max_attempts=2))
    fut = d.submit(PodBinding.for_pod(pod("a"), "n1"))
    d.done(d.send(), Result.RETRY, error=RequestTimeoutError("no answer"))
    d.done(d.send(), Result.RETRY, error=ServerError("an answer"))
    assert d.outcome(fut) is None
    read = d.send()
    assert (read.read, read.verify) == (True, True)
    d.done(read, Result.SUCCESS, obj=pod("a", rv=9, node="n1"))  # the first one landed
    assert d.outcome(fut) is Outcome.SUCCESS


def _last_attempt_unanswered(d: Driver, call: Call) -> tuple[str, Send]:
    """``call`` submitted with ``max_attempts=2``; its first attempt goes unanswered (a
    timeout) and its last one is on the wire (after the re-read a call that reads its object
    needs): its future, and that last request."""
    fut = d.submit(call)
    d.done(d.send(), Result.RETRY, error=RequestTimeoutError("no answer"))
    last = d.request(pod("a", rv=2))
    assert (last.read, last.attempt) == (False, 2)
    return fut, last


def _drain_unanswered(d: Driver, read_back: Obj) -> list[tuple[bool, int]]:
    """Grant until nothing is left: every call request goes unanswered, every read shows
    ``read_back``. The requests sent, as ``(read, attempt)``."""
    sent: list[tuple[bool, int]] = []
    while (s := d.grant()) is not None:
        sent.append((s.read, s.attempt))
        if s.read:
            d.done(s, obj=read_back)
        else:
            d.done(s, Result.RETRY, error=RequestTimeoutError("no answer"))
    return sent


@pytest.mark.parametrize("landed", [False, True], ids=["not_landed", "landed"])
@pytest.mark.parametrize("when", ["last_attempt_on_the_wire", "read_back_waiting"])
def test_a_call_of_its_type_waits_for_the_read_back_of_a_call_out_of_retries(
    when: str, landed: bool
) -> None:
    """Both attempts of a binding go unanswered (``max_attempts=2``), and the scheduler binds
    the pod to the same node again meanwhile: while the last attempt is on the wire, or while
    the read-back waits for its grant. The first call is never merged: its read-back is its
    next request and decides it; the second waits behind it, then resolves ``SKIPPED`` when
    the read shows the pod bound, or is sent on its own budget. Never a third binding request
    for the first call. (It used to be merged into the second: the first resolved
    ``OVERWRITTEN`` without the read, the merged call was sent a third time.)"""
    d = Driver(RetryConfig(max_attempts=2))
    p = pod("a")
    first, last = _last_attempt_unanswered(d, PodBinding.for_pod(p, "n1"))
    second = d.submit(PodBinding.for_pod(p, "n1")) if when == "last_attempt_on_the_wire" else ""
    d.done(last, Result.RETRY, error=RequestTimeoutError("no answer"))
    if when == "read_back_waiting":
        assert [r.relevance for r in d.readies()] == [PodBinding.relevance]
        second = d.submit(PodBinding.for_pod(p, "n1"))
    assert d.outcome(first) is None and d.outcome(second) is None
    assert d.state() is State.IN_FLIGHT_PENDING  # the first to read back, the second behind
    read = d.send()
    assert (read.read, read.verify, read.attempt) == (True, True, 2) and read.call is last.call
    assert d.m.queue[0].future == second and d.m.queue[0].retry.attempt == 0  # not merged
    d.done(read, obj=pod("a", rv=9, node="n1" if landed else None))
    if landed:
        assert d.outcome(first) is Outcome.SUCCESS
        assert d.outcome(second) is Outcome.SKIPPED  # the read shows it done: nothing sent
        assert d.grant() is None
        return
    err = d.error(first)
    assert isinstance(err, CallFailed) and isinstance(err.cause, RequestTimeoutError)
    assert "gave up after 2 failed requests" in str(err) and "did not land" in str(err)
    assert d.outcome(second) is None
    # the second call goes on its own budget: two attempts, then its own read-back
    assert _drain_unanswered(d, pod("a", rv=9)) == [(False, 1), (False, 2), (True, 2)]
    err = d.error(second)
    assert isinstance(err, CallFailed) and "gave up after 2 failed requests" in str(err)
    assert d.state() is State.IDLE


def test_a_patch_of_its_type_is_not_merged_into_a_patch_reading_back() -> None:
    """The same for status patches, whose merge would mix the two: the second patch (another
    condition) is sent as it is, on its own budget, after the first one's read-back."""
    d = Driver(RetryConfig(max_attempts=2))
    p = pod("a")
    first, last = _last_attempt_unanswered(d, unsched(p))
    d.done(last, Result.RETRY, error=RequestTimeoutError("no answer"))
    second = d.submit(gate(p))
    read = d.send()
    assert read.verify and read.call is last.call
    d.done(read, obj=pod("a", rv=9))  # the first did not land
    assert isinstance(d.error(first), CallFailed)
    s = d.request(pod("a", rv=9))
    assert (s.read, s.attempt, s.call) == (False, 1, gate(p))
    d.done_succeeds(s, second)


@pytest.mark.parametrize("how", ["deleted", "cancel", "withdraw", "revoke"])
def test_a_read_back_waiting_for_its_grant_is_withdrawn_with_what_waits(how: str) -> None:
    """Whatever withdraws the calls not on the wire withdraws a read-back that waits for its
    grant (no request of it is on the wire): the object gone (the actor retires at once, with
    nothing in flight left), the caller's cancellation or withdrawal (a call of another type
    behind it goes next), the loss of leadership."""
    d = Driver(RetryConfig(max_attempts=2))
    p = pod("a")
    first, last = _last_attempt_unanswered(d, PodBinding.for_pod(p, "n1"))
    d.done(last, Result.RETRY, error=RequestTimeoutError("no answer"))
    behind = d.submit(label(p))
    assert d.state() is State.IN_FLIGHT_PENDING
    if how == "deleted":
        d.deleted()
        assert d.outcome(first) is CallCancelled and d.outcome(behind) is CallCancelled
        assert d.retires() == [Retire(tombstone=True, final=True)]
        assert d.state() is State.RETIRED
        return
    if how == "revoke":
        lost = LeadershipLost("lease lost")
        d._take(d.m.revoke(lost))
        assert d.results[first] is lost and d.results[behind] is lost
        assert d.state() is State.IDLE and d.grant() is None
        return
    if how == "cancel":
        d.cancel(PodBinding.call_type)
    else:
        d._take(d.m.withdraw(first))
    err = d.error(first)
    assert isinstance(err, CallCancelled) and d.outcome(behind) is None
    assert d.state() is State.PENDING
    s = d.request(pod("a", rv=9))  # after a re-read: the unanswered attempts left it untrusted
    assert s.call.call_type == LabelPatch.call_type
    d.done_succeeds(s, behind)


@pytest.mark.parametrize("landed", [False, True], ids=["not_landed", "landed"])
def test_a_preemption_waits_for_the_read_back_of_a_call_out_of_retries(landed: bool) -> None:
    """A preemption that arrives while a binding out of retries waits for its read-back does
    not cancel it: the read decides the binding, then the preemption is sent."""
    d = Driver(RetryConfig(max_attempts=2))
    p = pod("a")
    binding, last = _last_attempt_unanswered(d, PodBinding.for_pod(p, "n1"))
    d.done(last, Result.RETRY, error=RequestTimeoutError("no answer"))
    preemption = d.submit(PodPreemption.for_pod(p))
    assert d.outcome(binding) is None
    read = d.send()
    assert read.verify and read.call is last.call
    d.done(read, obj=pod("a", rv=9, node="n1" if landed else None))
    assert d.outcome(binding) is (Outcome.SUCCESS if landed else CallFailed)
    s = d.request(pod("a", rv=9))
    assert s.call.call_type == PodPreemption.call_type
    d.done_succeeds(s, preemption)


def test_a_read_back_is_asked_for_in_the_lane_of_what_waits_behind_it() -> None:
    """A status patch out of retries waits for its read-back in the status patches' lane; a
    preemption arriving behind it lifts that Ready into the preemptions' lane (the executor
    would otherwise keep the preemption behind every status patch)."""
    d = Driver(RetryConfig(max_attempts=2))
    p = pod("a")
    patch, last = _last_attempt_unanswered(d, gate(p))
    d.done(last, Result.RETRY, error=RequestTimeoutError("no answer"))
    assert [r.relevance for r in d.readies()] == [PodStatusPatch.relevance]
    preemption = d.submit(PodPreemption.for_pod(p))
    assert [r.relevance for r in d.readies()] == [PodPreemption.relevance]
    read = d.send()
    assert read.verify and read.call is last.call
    d.done(read, obj=pod("a", rv=9))
    assert d.outcome(patch) is CallFailed
    d.done_succeeds(d.request(pod("a", rv=9)), preemption)


def test_failed_rereads_count_towards_max_attempts_and_double_the_backoff() -> None:
    """A status patch re-reads its object after a failure: ``max_attempts`` caps the call's
    failed requests, re-reads included, and each failure doubles the next backoff
    (``Send.failures``), whichever request failed."""
    d = Driver(RetryConfig(max_attempts=4))
    fut = d.submit(gate(pod("a")))
    s = d.send()
    assert (s.read, s.failures) == (False, 0)
    d.done(s, Result.RETRY, error=ServerError(), delay=1.0)
    for failures in (1, 2):
        d.now += 10.0
        read = d.send()
        assert read.read and read.failures == failures
        d.done(read, Result.RETRY, error=ServerError(), delay=1.0)
    d.now += 10.0
    d.done(d.send(), Result.SUCCESS, obj=pod("a", rv=5))  # the re-read, at last
    s = d.send()
    assert (s.read, s.attempt, s.failures) == (False, 2, 3)
    d.done(s, Result.RETRY, error=ServerError(), delay=1.0)  # the fourth failed request
    err = d.error(fut)
    assert isinstance(err, CallFailed) and "gave up after 4 failed requests" in str(err)


def test_retry_after_is_waited_for_via_done_delay() -> None:
    d = Driver(RetryConfig())
    fut = d.submit(PodBinding.for_pod(pod("a"), "n1"))
    d.done(d.send(), Result.RETRY, error=ServerError(retry_after=7.0), delay=7.0)
    assert d.readies() == [Ready(2, 107.0)]
    d.now = 106.9
    assert d.grant() is None
    d.now = 107.0
    d.send_succeeds(fut)


def test_merge_keeps_the_backoff_of_the_call_it_replaces() -> None:
    d = Driver(RetryConfig())
    p = pod("a")
    d.submit(PodBinding.for_pod(p, "n1"))
    d.done(d.send(), Result.RETRY, error=ServerError(), delay=3.0)
    d.submit(PodBinding.for_pod(p, "n1"))
    assert d.grant() is None  # still backing off
    d.now += 3.0
    assert d.send().attempt == 2


def test_a_call_that_supersedes_one_backing_off_waits_its_backoff_out(d: Driver) -> None:
    """A binding arrives while a status patch is in flight; the patch then meets a 429 (its
    ``Retry-After`` in ``done.delay``): the binding takes over and waits it out, as when it
    arrives after the 429 (it used to go at once)."""
    p = pod("a")
    patch = d.submit(unsched(p))
    s = d.send()
    binding = d.submit(PodBinding.for_pod(p, "n1"))
    d.done(s, Result.RETRY, error=TooManyRequestsError(retry_after=5.0), delay=5.0)
    assert d.outcome(patch) is Outcome.OVERWRITTEN
    assert d.grant() is None  # still within the patch's Retry-After
    d.now += 5.0
    d.send_succeeds(binding)


@pytest.mark.parametrize("arrives", ["after the 429", "while in flight"])
def test_a_preemption_that_replaces_a_call_backing_off_waits_its_backoff_out(
    d: Driver, arrives: str
) -> None:
    """A preemption cancels a status patch backing off after a 429 (its ``Retry-After`` in
    ``done.delay``) and takes its place: it waits the backoff out, as a superseding call
    does, whether it arrives after the 429 or while the patch is in flight."""
    p = pod("a")
    patch = d.submit(gate(p))
    s = d.send()
    if arrives == "after the 429":
        d.done(s, Result.RETRY, error=TooManyRequestsError(retry_after=5.0), delay=5.0)
        preemption = d.submit(PodPreemption.for_pod(p))
    else:
        preemption = d.submit(PodPreemption.for_pod(p))
        d.done(s, Result.RETRY, error=TooManyRequestsError(retry_after=5.0), delay=5.0)
    assert d.outcome(patch) is CallCancelled
    assert d.grant() is None  # still within the patch's Retry-After
    d.now += 5.0
    assert d.send().call.call_type == "pod_preemption"
    assert d.outcome(preemption) is None


def test_retry_merges_with_call_that_arrived_meanwhile(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(PodStatusPatch.for_pod(p, conditions=[cond(reason="A")]))
    s1 = d.send()
    f2 = d.submit(PodStatusPatch.for_pod(p, nominated_node_name="n1"))
    d.done(s1, Result.RETRY, error=ServerError())
    assert d.outcome(f1) is Outcome.OVERWRITTEN
    read = d.send()
    assert read.read  # the failed patch may have landed: re-read first
    d.done(read, obj=pod("a", rv=2))
    s2 = d.send()
    assert isinstance(s2.call, PodStatusPatch)
    assert s2.call.nominated_node_name == "n1" and len(s2.call.conditions) == 1
    d.done_succeeds(s2, f2)


def test_ambiguous_failure_pauses_noop_elision_and_rereads_once(d: Driver) -> None:
    p = pod("a", rv=1, conditions=(cond(reason="A"),))
    f_lost = d.submit(unsched(p, reason="B"))
    d.done(d.send(), Result.RETRY, error=ServerError())  # maybe applied
    # restoring A is a no-op against what we saw, but the server may hold B now
    f_restore = d.submit(unsched(p, reason="A"))
    assert d.outcome(f_lost) is Outcome.OVERWRITTEN
    assert d.outcome(f_restore) is None
    read = d.send()
    assert read.read and read.obj is None
    d.done(read, obj=pod("a", rv=3, conditions=(cond(reason="B"),)))  # B had landed
    s = d.send()
    assert not s.read and s.obj is not None and s.obj["metadata"]["resourceVersion"] == "3"
    d.done(s, obj=pod("a", rv=4, conditions=(cond(reason="A"),)))
    assert d.outcome(f_restore) is Outcome.SUCCESS
    # a fresh object restored trust: no-ops are elided again
    assert d.outcome(d.submit(unsched(p, reason="A"))) is Outcome.SKIPPED


def test_reread_that_shows_the_intent_already_holds_skips_the_call(d: Driver) -> None:
    p = pod("a")
    fut = d.submit(unsched(p, reason="B"))
    d.done(d.send(), Result.RETRY, error=ServerError())
    d.done(d.send(), obj=pod("a", rv=2, conditions=(cond(reason="B"),)))  # the read
    assert d.outcome(fut) is Outcome.SKIPPED


def test_failed_reread_counts_as_a_retry(d: Driver) -> None:
    fut = d.submit(unsched(pod("a")))
    d.done(d.send(), Result.RETRY, error=ServerError())
    read = d.send()
    d.done(read, Result.RETRY, error=ServerError(), delay=2.0)
    assert d.readies() == [Ready(1, d.now + 2.0)]
    d.now += 2.0
    assert d.send().read  # still no trusted object: read again
    assert d.outcome(fut) is None


def test_retry_resolves_at_once_when_newer_object_shows_it_applied(d: Driver) -> None:
    fut = d.submit(unsched(pod("a", rv=1), reason="B"))
    s = d.send()
    d.observed(pod("a", rv=2, conditions=(cond(reason="B"),)))
    d.done(s, Result.RETRY, error=ServerError(), delay=30.0)
    assert d.outcome(fut) is Outcome.SKIPPED


def test_newer_observed_object_restores_trust_without_a_reread(d: Driver) -> None:
    fut = d.submit(unsched(pod("a", rv=1), reason="B"))
    d.done(d.send(), Result.RETRY, error=ServerError())
    newer = pod("a", rv=5, conditions=(cond(reason="Other"),))
    d.observed(newer)
    s = d.send()
    assert not s.read and s.obj is newer
    d.done_succeeds(s, fut)


# ============================================================ conflicts


def test_conflict_rebases_on_the_fresh_object(d: Driver) -> None:
    fut = d.submit(unsched(pod("a"), reason="A"))
    fresh = pod("a", rv=4, conditions=(cond(reason="X"),))
    d.done(d.send(), Result.CONFLICT, obj=fresh, error=ConflictError())
    s2 = d.send()
    assert s2.obj is fresh and s2.attempt == 2
    d.done_succeeds(s2, fut)


def test_conflict_whose_reread_shows_the_intent_resolves_success(d: Driver) -> None:
    """The 409 path asks the same question as a call whose retries went unanswered
    (``Call.landed``): the intent is on the server, so the call that was sent succeeded."""
    fut = d.submit(unsched(pod("a"), reason="A"))
    fresh = pod("a", rv=4, conditions=(cond(reason="A"),))
    d.done(d.send(), Result.CONFLICT, obj=fresh, error=ConflictError())
    assert d.outcome(fut) is Outcome.SUCCESS
    assert d.grant() is None


def test_conflicts_are_bounded(d: Driver) -> None:
    fut = d.submit(unsched(pod("a"), reason="A"))
    for rv in (4, 5, 6):  # max_conflict_retries=2: the third conflict fails the call
        fresh = pod("a", rv=rv, conditions=(cond(reason="X"),))
        d.done(d.send(), Result.CONFLICT, obj=fresh, error=ConflictError())
    assert d.outcome(fut) is CallConflict


def test_conflict_whose_reread_failed_rereads_before_the_next_attempt(d: Driver) -> None:
    fut = d.submit(unsched(pod("a"), reason="A"))
    d.done(d.send(), Result.CONFLICT, obj=None, error=ConflictError())
    read = d.send()
    assert read.read
    d.done(read, obj=pod("a", rv=4))
    s = d.send()
    assert not s.read and s.obj is not None and s.obj["metadata"]["resourceVersion"] == "4"
    d.done_succeeds(s, fut)


def test_binding_409_that_shows_it_landed_is_success(d: Driver) -> None:
    p = pod("a")
    fut = d.submit(PodBinding.for_pod(p, "n1"))
    d.done(d.send(), Result.RETRY, error=ServerError())  # the reply was lost
    s = d.send()
    assert not s.read  # a binding carries only preconditions: no re-read
    d.done(s, Result.CONFLICT, obj=bound(p, "n1"), error=ConflictError())
    assert d.outcome(fut) is Outcome.SUCCESS


def test_binding_409_that_shows_it_landed_skips_the_same_binding_queued_behind(
    d: Driver,
) -> None:
    """The pod read after the 409 shows the binding landed: it succeeds, and the same
    binding submitted meanwhile, queued behind it, is judged against that pod: a no-op."""
    p = pod("a")
    first = d.submit(PodBinding.for_pod(p, "n1"))
    s = d.send()
    again = d.submit(PodBinding.for_pod(p, "n1"))  # waits behind the one in flight
    d.done(s, Result.CONFLICT, obj=bound(p, "n1", rv=5), error=ConflictError())
    assert d.outcome(first) is Outcome.SUCCESS
    assert d.outcome(again) is Outcome.SKIPPED


def test_binding_409_that_shows_another_node_fails_fast(d: Driver) -> None:
    p = pod("a")
    fut = d.submit(PodBinding.for_pod(p, "n1"))
    d.done(d.send(), Result.CONFLICT, obj=bound(p, "n2"), error=ConflictError())
    assert d.outcome(fut) is CallConflict


# ============================================================ failures, close, revoke


def test_permanent_failure_fails_only_that_call(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(unsched(p, reason="A"))
    s1 = d.send()
    f2 = d.submit(unsched(p, reason="B"))
    d.done(s1, Result.FAILED, error=InvalidRequestError("422"))
    err = d.error(f1)
    assert isinstance(err, CallFailed) and isinstance(err.cause, InvalidRequestError)
    d.send_succeeds(f2)


def test_send_gate_closed_resolves_with_the_gates_error(d: Driver) -> None:
    fut = d.submit(unsched(pod("a")))
    d.done(d.send(), Result.FAILED, error=LeadershipLost("lease lost"))
    assert d.outcome(fut) is LeadershipLost


def test_close_resolves_pending_and_in_flight(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(unsched(p, reason="A"))
    d.send()
    f2 = d.submit(unsched(p, reason="B"))
    effects = d._take(d.m.close())
    assert d.outcome(f1) is DispatcherClosed and d.outcome(f2) is DispatcherClosed
    assert [e for e in effects if isinstance(e, Retire)] == [Retire(tombstone=False, final=True)]
    assert d.state() is State.RETIRED
    assert d.outcome(d.submit(unsched(p))) is CallCancelled


def test_revoke_resolves_what_is_not_on_the_wire(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(unsched(p, reason="A"))
    s = d.send()
    f2 = d.submit(unsched(p, reason="B"))
    lost = LeadershipLost("lease lost")
    d._take(d.m.revoke(lost))
    assert d.results[f2] is lost and d.outcome(f1) is None
    assert d.state() is State.IN_FLIGHT
    d.done(s)  # the call on the wire finishes and reports as usual
    assert d.outcome(f1) is Outcome.SUCCESS
    assert d.state() is State.IDLE


def test_every_tracked_future_is_listed_for_crash_handling(d: Driver) -> None:
    p = pod("a")
    f1 = d.submit(unsched(p, reason="A"))
    d.send()
    f2 = d.submit(unsched(p, reason="B"))
    assert sorted(d.m.futures()) == sorted([f1, f2])


# ============================================================ regressions found by the ported tests


@pytest.mark.parametrize("exclusive", [False, True], ids=["patch", "preemption"])
@pytest.mark.parametrize("result", [Result.SUCCESS, Result.RETRY])
def test_reread_in_flight_when_the_object_is_deleted_resolves_the_call(
    d: Driver, result: Result, exclusive: bool
) -> None:
    p = pod("a")
    call: Call = PodPreemption.for_pod(p) if exclusive else unsched(p)
    fut = d.submit(call)
    d.done(d.send(), Result.RETRY, error=ServerError())
    read = d.send()
    assert read.read
    d.deleted()
    assert d.state() is State.RETIRING
    obj = pod("a", rv=3) if result is Result.SUCCESS else None
    d.done(read, result, obj=obj, error=None if obj else ServerError())
    assert d.state() is State.RETIRED
    assert d.outcome(fut) is (Outcome.SUCCESS if exclusive else CallCancelled)
    assert d.m.queue == []


def test_informer_event_older_than_a_landed_binding_keeps_the_reread(d: Driver) -> None:
    p = pod("a", rv=2)
    d.submit(PodBinding.for_pod(p, "n1"))
    d.done(d.send())  # the binding is at rv 4 on the server
    d.observed(pod("a", rv=3, conditions=(cond("Ready", "True", ""),)))  # from before it
    d.submit(gate(p))
    assert d.send().read


# --------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    ("new", "cur", "newer", "strictly"),
    [
        ("10", "9", True, True),  # numeric: compared as integers, not as strings
        ("9", "10", False, False),
        ("7", "7", True, False),  # equal: newer only when not strict
        ("b", "a", True, True),  # opaque: the later arrival is newer, unless the same
        ("a", "a", True, False),
        ("7", "a", True, True),
        (None, "7", True, True),  # a missing or empty resourceVersion never holds one back
        ("7", "", True, True),
        ("²", "1", True, True),  # digits that are not decimal: opaque
    ],
)
def test_version_is_newer(new: str | None, cur: str, newer: bool, strictly: bool) -> None:
    def obj(rv: str | None) -> Obj:
        return {"metadata": {"uid": "u1", **({} if rv is None else {"resourceVersion": rv})}}

    assert uid_and_version(obj(new)) == ("u1", new)
    assert uid_and_version(obj(cur)) == ("u1", cur or None)
    assert rv_is_newer(new, cur or None) is newer
    assert rv_is_newer(new, cur or None, strict=True) is strictly
    assert is_newer(obj(new), obj(cur)) is newer
    assert is_newer(obj(new), obj(cur), strict=True) is strictly
    assert is_newer(obj(new), None, strict=True)


def test_the_observed_version_follows_every_observed_object(d: Driver) -> None:
    """The machine's resourceVersion is the one of the object it observes."""
    first = pod("a", rv=5)
    d.m.observed_event(first)
    assert (d.m.observed, d.m.observed_rv) == (first, "5")
    d.m.observed_event(pod("a", rv=4))  # older: ignored
    assert d.m.observed is first
    newer = pod("a", rv=6)
    d.m.observed_event(newer)
    assert (d.m.observed, d.m.observed_rv) == (newer, "6")


@given(
    st.integers(min_value=0, max_value=10**30),
    st.integers(min_value=0, max_value=10**30),
    st.booleans(),
    st.booleans(),
)
def test_decimal_versions_compare_as_integers(a: int, b: int, zeros_a: bool, zeros_b: bool) -> None:
    """Whatever their lengths, and with leading zeros too: as the integers they write."""
    new, cur = ("00" if zeros_a else "") + str(a), ("0" if zeros_b else "") + str(b)
    assert rv_is_newer(new, cur) is (a >= b)
    assert rv_is_newer(new, cur, strict=True) is (a > b)
