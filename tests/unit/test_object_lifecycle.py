"""The per-object machine's lifecycle table (``LIFECYCLE``), what it knows of its object and
how far it trusts it (``Knowledge``), its retry bookkeeping (``RetryState``), the page that
shows the table (``docs/behaviour.md``), and error messages that name their object.

Pure tests drive :class:`ObjectState` with the driver of ``test_object_state.py``; one goes
through a real :class:`Dispatcher` and the in-memory apiserver (in
``tests/integration/test_dispatcher.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kdispatch.actors.model.config import RetryConfig
from kdispatch.actors.model.effects import Done, Result, Retire
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallFailed,
    CallStale,
    InvalidRequestError,
    LeadershipLost,
    Outcome,
    ServerError,
)
from kdispatch.actors.model.lifecycle import (
    LIFECYCLE,
    Input,
    InvalidTransition,
    Life,
    State,
    lifecycle_markdown,
)
from kdispatch.actors.model.pod_calls import PodBinding
from kdispatch.actors.model.queue_policy import RetryState
from tests.factories import cond, pod
from tests.unit.test_object_state import Driver, bound, unsched

pytestmark = pytest.mark.timeout(30)

DOC = Path(__file__).resolve().parents[2] / "docs" / "behaviour.md"
BEGIN, END = "<!-- table:begin -->\n", "<!-- table:end -->"


@pytest.fixture
def d() -> Driver:
    return Driver()


def trust_of(d: Driver) -> str:
    """What the machine makes of its object now: ``trusted`` (elision, and requests computed on
    it), ``rv_stale`` (elision; requests re-read first), ``untrusted`` (no elision; requests
    re-read first) or ``untrusted_rv_stale``."""
    m = d.m
    if m.untrusted_rv is not None:
        return "untrusted_rv_stale" if m.rv_stale else "untrusted"
    return "rv_stale" if m.rv_stale else "trusted"


# ============================================================ the lifecycle table


def test_behaviour_page_shows_the_table_of_the_code() -> None:
    text = DOC.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "markers missing in docs/behaviour.md"
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert shown == lifecycle_markdown(), (
        "docs/behaviour.md is out of date: replace what lies between its table markers with "
        "kdispatch.actors.model.lifecycle.lifecycle_markdown()"
    )


def test_retired_is_terminal_and_only_gone_inputs_end_a_life() -> None:
    assert not any(life is Life.RETIRED for life, _ in LIFECYCLE)
    assert {target for (life, _), target in LIFECYCLE.items() if life is Life.RETIRING} == {
        Life.RETIRED
    }
    assert {i for (life, i) in LIFECYCLE if life is Life.LIVE} == {
        Input.DELETED,
        Input.GONE,
        Input.CLOSE,
    }


def test_late_messages_to_a_retired_object(d: Driver) -> None:
    p = pod("a")
    d.submit(unsched(p))
    d.deleted()
    assert d.state() is State.RETIRED
    assert d.observed(pod("a", rv=5)) == [] and d.m.observed is not None
    assert d.m.observed["metadata"]["resourceVersion"] == "1"  # not adopted
    assert d._take(d.m.close()) == []  # no second Retire
    assert d.deleted() == [] and d.cancel() == []
    assert d._take(d.m.revoke(LeadershipLost("lost"))) == []
    assert d._take(d.m.release("t")) == []
    f = d.submit(unsched(p))
    assert d.outcome(f) is CallCancelled
    assert d.grant() is None
    with pytest.raises(InvalidTransition):
        d.m.done(Done(unsched(p), Result.SUCCESS), d.now)
    assert d.state() is State.RETIRED


@pytest.mark.parametrize(
    ("steps", "want"),
    [
        (["patch"], State.PENDING),
        (["patch", "noop-merge"], State.IDLE),  # submit/cleared
        (["patch", "send"], State.IN_FLIGHT),  # grant/send-last
        (["patch", "bind", "send"], State.IN_FLIGHT),  # the binding took the patch's slot
        (["patch", "send", "patch2"], State.IN_FLIGHT_PENDING),
        (["patch", "send", "delete"], State.RETIRING),
        (["patch", "send", "delete", "done"], State.RETIRED),
        (["patch", "cancel"], State.IDLE),  # cancel/cleared
        (["patch", "elided"], State.IDLE),  # observed/cleared
    ],
)
def test_derived_events_reach_the_states_the_table_names(
    d: Driver, steps: list[str], want: State
) -> None:
    p = pod("a", conditions=(cond(reason="A"),))
    sent = None
    for step in steps:
        if step == "patch":
            d.submit(unsched(p, reason="B"))
        elif step == "patch2":
            d.submit(unsched(p, reason="C"))
        elif step == "noop-merge":
            d.submit(unsched(p, reason="A"))
        elif step == "bind":
            d.submit(PodBinding.for_pod(p, "n1"))
        elif step == "send":
            sent = d.send()
        elif step == "delete":
            d.deleted()
        elif step == "done":
            assert sent is not None
            d.done(sent, Result.NOT_FOUND)
        elif step == "cancel":
            d.cancel()
        elif step == "elided":
            d.observed(pod("a", rv=2, conditions=(cond(reason="B"),)))
    assert d.state() is want


# ============================================================ trust


def test_trust_after_a_landed_binding_then_an_informer_update_that_shows_it(d: Driver) -> None:
    p = pod("a")
    d.submit(PodBinding.for_pod(p, "n1"))
    d.done(d.send())  # a binding's reply carries no object
    assert trust_of(d) == "rv_stale" and d.m.landed is not None
    assert d.m.elides and not d.m.trusted
    d.observed(bound(p, rv=2))
    assert trust_of(d) == "trusted" and d.m.landed is None


def test_trust_after_an_ambiguous_failure_and_a_newer_object(d: Driver) -> None:
    p = pod("a")
    d.submit(unsched(p))
    d.done(d.send(), Result.RETRY, error=ServerError())
    assert trust_of(d) == "untrusted" and d.m.untrusted_rv == "1"
    assert not d.m.elides and not d.m.trusted
    d.observed(pod("a", rv=2))
    assert trust_of(d) == "trusted" and d.m.untrusted_rv is None


def test_ambiguous_failure_once_a_newer_object_is_observed_keeps_trust(d: Driver) -> None:
    p = pod("a")
    d.submit(unsched(p))
    s = d.send()
    d.observed(pod("a", rv=2))  # the informer moved on while the request was out
    d.done(s, Result.RETRY, error=ServerError())
    assert trust_of(d) == "trusted"


def test_trust_untrusted_and_rv_stale_at_once(d: Driver) -> None:
    p = pod("a")
    d.submit(unsched(p))
    d.done(d.send(), Result.RETRY, error=ServerError())
    d.submit(PodBinding.for_pod(p, "n1"))  # supersedes the patch, does not read the pod
    d.done(d.send())
    assert trust_of(d) == "untrusted_rv_stale"
    d.observed(pod("a", rv=2))  # newer than the failed patch's base, without the binding
    assert trust_of(d) == "rv_stale" and d.m.landed is not None
    view = d.m.view()
    assert view is not None and view["spec"]["nodeName"] == "n1"


def test_a_conflict_whose_reread_failed_distrusts_and_a_fresh_read_restores(d: Driver) -> None:
    p = pod("a")
    d.submit(unsched(p))
    d.done(d.send(), Result.CONFLICT, obj=None)
    assert trust_of(d) == "untrusted"
    read = d.send()
    assert read.read
    d.done(read, obj=pod("a", rv=3))
    assert trust_of(d) == "trusted"


# ============================================================ retry bookkeeping


def test_merged_retry_state_is_as_far_along_as_the_further_of_the_two() -> None:
    fresh = RetryState()  # a call never sent
    a = RetryState(attempt=2, conflicts=0, failures=1, not_before=5.0, deadline=40.0)
    b = RetryState(attempt=1, conflicts=1, failures=2, not_before=3.0, deadline=30.0)
    assert a.merged(b) == b.merged(a) == RetryState(2, 1, 2, 5.0, 30.0)
    assert a.merged(fresh) == a and fresh.merged(a) == a
    no_deadline = RetryState(attempt=1)
    assert no_deadline.merged(a).deadline == 40.0


def test_sent_counts_every_request_from_the_shared_fresh_state_on() -> None:
    once = RetryState().sent()  # a call's first request (from the shared fresh state: shared)
    assert once == RetryState(attempt=1) and once.sent() == RetryState(attempt=2)
    failed = once.failed(at=4.0, deadline=30.0).sent()
    assert failed == RetryState(attempt=2, failures=1, not_before=4.0, deadline=30.0)


def test_a_merge_keeps_the_retry_state_on_both_merge_paths() -> None:
    d = Driver(RetryConfig(max_attempts=5))
    p = pod("a")
    d.submit(PodBinding.for_pod(p, "n1"))
    first = d.send()
    d.submit(PodBinding.for_pod(p, "n1"))  # arrives while the first is in flight
    d.done(first, Result.RETRY, error=ServerError(), delay=2.0)  # put back: merged
    (entry,) = d.m.queue
    assert entry.retry.attempt == 1 and entry.retry.failures == 1
    assert entry.retry.not_before == d.now + 2.0
    d.submit(PodBinding.for_pod(p, "n1"))  # a new call merged with the pending one
    (entry,) = d.m.queue
    assert entry.retry.attempt == 1 and entry.retry.failures == 1
    d.now += 2.0
    assert d.send().attempt == 2


# ============================================================ errors name their object


def test_errors_of_the_machine_name_the_object(d: Driver) -> None:
    p = pod("a")
    f_cancel = d.submit(unsched(p))
    d.cancel()
    assert "Pod default/a (uid-a)" in str(d.error(f_cancel))
    f_fail = d.submit(unsched(p, reason="B"))
    d.done(d.send(), Result.FAILED, error=InvalidRequestError("bad"))
    err = d.error(f_fail)
    assert isinstance(err, CallFailed) and "bad" in str(err) and "default/a" in str(err)
    f_stale = d.submit(unsched(bound(p)))
    assert isinstance(d.error(f_stale), CallStale)
    assert "Pod default/a (uid-a)" in str(d.error(f_stale))


def test_retire_effects(d: Driver) -> None:
    p = pod("a")
    d.submit(unsched(p))
    s = d.send()
    d.deleted()
    assert d.retires() == [Retire(tombstone=True, final=False)]
    d.done(s, Result.SUCCESS, obj=pod("a", rv=2))
    assert d.retires() == [Retire(tombstone=False, final=True)]
    assert d.outcome("f1") is Outcome.SUCCESS
