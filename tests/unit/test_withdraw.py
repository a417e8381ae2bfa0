"""Withdrawing one call by its future (``ObjectState.withdraw``) and naming who overwrote a call
(``Resolve.successor``), on the pure per-object machine, event by event: no threads, no clock.
"""

from __future__ import annotations

from typing import Any

import pytest

from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.effects import Effect, Rebased, Resolve, Result
from kdispatch.actors.model.errors import CallCancelled, Outcome, ServerError
from kdispatch.actors.model.lifecycle import State
from kdispatch.actors.model.objects import Obj
from kdispatch.actors.model.pod_calls import PodBinding
from tests.factories import pod
from tests.unit.test_held_calls import HeldDriver
from tests.unit.test_object_state import gate, label, unsched

pytestmark = pytest.mark.timeout(30)


class WithdrawDriver(HeldDriver):
    """The held-calls driver, plus withdraw and the successors named so far. Test thread."""

    def __init__(self) -> None:
        super().__init__()
        self.successors: dict[str, Any] = {}

    def _take(self, effects: list[Effect]) -> list[Effect]:
        for e in effects:
            if isinstance(e, Resolve) and e.successor is not None:
                self.successors[e.future] = e.successor
        return super()._take(effects)

    def withdraw(self, fut: str) -> list[Effect]:
        return self._take(self.m.withdraw(fut))


@pytest.fixture
def d() -> WithdrawDriver:
    return WithdrawDriver()


def conditions(call: Call, p: Obj) -> set[str]:
    """The condition types ``call`` sets on ``p``."""
    return {c["type"] for c in call.apply(p)["status"]["conditions"]}


def test_a_pending_call_resolves_cancelled_and_nothing_else_does(d: WithdrawDriver) -> None:
    p = pod("a")
    first = d.submit(unsched(p))
    sent = d.send()
    mine = d.submit(gate(p))  # pending behind the one in flight
    d.withdraw(mine)
    assert d.outcome(mine) is CallCancelled and d.outcome(first) is None
    assert d.state() is State.IN_FLIGHT
    d.done(sent)
    assert d.outcome(first) is Outcome.SUCCESS and d.state() is State.IDLE
    d.withdraw(first)  # resolved already: nothing to withdraw
    assert d.state() is State.IDLE


@pytest.mark.parametrize("result", [Result.RETRY, Result.CONFLICT], ids=["retryable", "conflict"])
def test_a_call_withdrawn_in_flight_is_not_sent_again_and_a_later_one_of_its_type_stays(
    d: WithdrawDriver, result: Result
) -> None:
    p = pod("a")
    mine = d.submit(unsched(p))
    sent = d.send()
    d.withdraw(mine)
    assert d.outcome(mine) is None  # on the wire: it cannot be recalled
    theirs = d.submit(gate(p))  # someone else's call of the same type, submitted after
    effects = d.done(
        sent, result, obj=p if result is Result.CONFLICT else None, error=ServerError("x")
    )
    assert d.outcome(mine) is CallCancelled
    assert not any(isinstance(e, Rebased) for e in effects)
    assert d.outcome(theirs) is None
    again = d.request(p)
    assert conditions(again.call, p) == {"QueueGate"}  # theirs alone: mine is not sent again
    d.done_succeeds(again, theirs)


def test_a_call_withdrawn_in_flight_that_lands_succeeds(d: WithdrawDriver) -> None:
    p = pod("a")
    mine = d.submit(unsched(p))
    sent = d.send()
    d.withdraw(mine)
    d.done_succeeds(sent, mine)


def test_a_merged_call_is_sent_whole_while_one_contributor_is_live(d: WithdrawDriver) -> None:
    p = pod("a")
    blocker = d.submit(label(p))
    d.send()  # in flight: what follows waits
    older = d.submit(gate(p))
    newer = d.submit(unsched(p))  # merges the older one in
    assert d.outcome(older) is Outcome.OVERWRITTEN and d.successors[older] == newer
    d.withdraw(older)
    assert d.outcome(newer) is None  # its own intent is live: the merged call stays
    assert d.outcome(blocker) is None
    assert [e.call.call_type for e in d.m.queue] == ["pod_status_patch"]


def test_a_merged_call_is_withdrawn_once_every_contributor_is(d: WithdrawDriver) -> None:
    p = pod("a")
    d.submit(label(p))
    d.send()
    older = d.submit(gate(p))
    newer = d.submit(unsched(p))
    d.withdraw(newer)
    assert d.outcome(newer) is None  # still carries the older call's intent
    d.withdraw(older)
    assert d.outcome(newer) is CallCancelled and d.m.queue == []
    assert d.state() is State.IN_FLIGHT


def test_a_withdrawn_survivor_still_carries_the_older_intent_and_reports_it(
    d: WithdrawDriver,
) -> None:
    p = pod("a")
    first = d.submit(unsched(p, reason="Other"))
    sent = d.send()
    older = d.submit(gate(p))
    newer = d.submit(unsched(p))
    d.withdraw(newer)
    d.done(sent, obj=p)
    assert d.outcome(first) is Outcome.SUCCESS
    merged = d.request(p)
    assert conditions(merged.call, p) == {"QueueGate", "PodScheduled"}  # sent whole
    d.done(merged)
    assert d.outcome(older) is Outcome.OVERWRITTEN and d.outcome(newer) is Outcome.SUCCESS


def test_a_retry_merged_into_a_newer_call_names_it_and_withdrawal_follows(
    d: WithdrawDriver,
) -> None:
    p = pod("a")
    first = d.submit(unsched(p))
    sent = d.send()
    later = d.submit(gate(p))
    d.done(sent, Result.RETRY, error=ServerError("x"))  # put back: merged into `later`
    assert d.outcome(first) is Outcome.OVERWRITTEN and d.successors[first] == later
    d.withdraw(later)
    assert d.outcome(later) is None  # carries `first`, still live
    d.withdraw(first)
    assert d.outcome(later) is CallCancelled and d.state() is State.IDLE


def test_supersession_names_the_superseding_call_which_carries_the_intent(
    d: WithdrawDriver,
) -> None:
    p = pod("a")
    d.submit(unsched(p, reason="Other"))
    d.send()
    status = d.submit(unsched(p))
    binding = d.submit(PodBinding.for_pod(p, "n1"))
    assert d.outcome(status) is Outcome.OVERWRITTEN and d.successors[status] == binding
    d.withdraw(status)  # carried by the binding, whose own intent is live: it stays
    assert d.outcome(binding) is None
    assert [e.call.call_type for e in d.m.queue] == ["pod_binding"]
    d.withdraw(binding)
    assert d.outcome(binding) is CallCancelled and d.m.queue == []
