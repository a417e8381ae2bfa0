"""The rules of an object's queue, situation by situation (docs/concepts.md, "Every situation,
in one table"; docs/behaviour.md, "The queue"), checked on what the in-memory apiserver stored
and the requests it saw.

Calls stay pending in two ways: behind a request of their object held on the wire
(``GatedBackend``), or behind a rate limit whose one token another pod's call took, on a clock
that stands still until the test gives the next token (the ``throttled`` fixture).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import RateLimitConfig
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallConflict,
    CallFailed,
    ForbiddenError,
    Outcome,
)
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.backends import GatedBackend, nominate
from tests.clocks import ManualClock
from tests.configs import FAST

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
def throttled(server: InMemoryApiServer, clock: ManualClock) -> Iterator[Dispatcher]:
    """A started dispatcher with one token a second on ``clock``, that token spent on pod
    ``spent``: the calls submitted now stay pending until :func:`next_token`."""
    config = dataclasses.replace(FAST, rate_limit=RateLimitConfig(qps=1.0, burst=1))
    d = Dispatcher(server, config, clock=clock).start()
    spent = server.create(make_pod("spent"))
    assert d.submit(PodBinding.for_pod(spent, "n0")).result(10) is Outcome.SUCCESS
    yield d
    d.stop(drain=False, timeout=10)


def next_token(d: Dispatcher, clock: ManualClock, pod: Mapping[str, Any]) -> None:
    """Once ``pod``'s actor handled what it was told (a view is answered after it), one more
    token: a call admitted after the token came could be granted on the spot."""
    d.view(pod["metadata"]["uid"])
    clock.advance(1.0)
    d._executor.wake()  # the executor waits in real time: tell it the clock moved


def sent(server: InMemoryApiServer, name: str) -> list[tuple[str, str]]:
    return [(r.op, r.outcome) for r in server.request_log if r.name == name]


def stored(server: InMemoryApiServer, name: str) -> dict[str, Any]:
    obj = server.get_object("Pod", "default", name)
    assert obj is not None
    return obj


def cond(ctype: str, status: str) -> dict[str, str]:
    return {"type": ctype, "status": status, "reason": "R", "message": "m"}


# --------------------------------------------------------------------------- no-ops and merges


def test_a_no_op_against_the_call_in_flight_is_skipped_and_nothing_more_is_sent(
    server: InMemoryApiServer,
) -> None:
    """The same value again while the first patch is on the wire: ``SKIPPED``, one request."""
    gated = GatedBackend(server, hold="p1")
    pod = server.create(make_pod("p1", nominated_node_name="n0"))
    with Dispatcher(gated, FAST) as d:
        first = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        gated.wait_calls(1)
        again = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        gated.gate.set()
        assert first.result(10) is Outcome.SUCCESS
        assert again.result(10) is Outcome.SKIPPED
    assert sent(server, "p1") == [("patch_status", "ok")]


def test_restoring_the_observed_value_while_another_is_in_flight_is_sent(
    server: InMemoryApiServer,
) -> None:
    """A no-op on the object observed, but not on the newest one (with the call in flight
    applied): it waits for that call, then is sent."""
    gated = GatedBackend(server, hold="p1")
    pod = server.create(make_pod("p1", nominated_node_name="n0"))
    with Dispatcher(gated, FAST) as d:
        first = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        gated.wait_calls(1)
        back = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n0"))
        gated.gate.set()
        assert first.result(10) is back.result(10) is Outcome.SUCCESS
    assert sent(server, "p1") == [("patch_status", "ok")] * 2
    assert stored(server, "p1")["status"]["nominatedNodeName"] == "n0"


def test_pending_patches_merge_by_condition_type_into_one_request(
    server: InMemoryApiServer, throttled: Dispatcher, clock: ManualClock
) -> None:
    """Newer values win, older ones fill the gaps: A from the first patch, B from the second."""
    pod = server.create(make_pod("p1"))
    older = PodStatusPatch.for_pod(
        pod, conditions=[cond("ex.io/A", "True"), cond("ex.io/B", "True")]
    )
    first = throttled.submit(older)
    second = throttled.submit(PodStatusPatch.for_pod(pod, conditions=[cond("ex.io/B", "False")]))
    next_token(throttled, clock, pod)
    assert first.result(10) is Outcome.OVERWRITTEN
    assert second.result(10) is Outcome.SUCCESS
    assert sent(server, "p1") == [("patch_status", "ok")]
    conditions = {c["type"]: c["status"] for c in stored(server, "p1")["status"]["conditions"]}
    assert (conditions["ex.io/A"], conditions["ex.io/B"]) == ("True", "False")


def test_a_merge_that_becomes_a_no_op_sends_nothing(
    server: InMemoryApiServer, throttled: Dispatcher
) -> None:
    """n0 → n1, then back to n0 before anything was sent: new ``SKIPPED``, pending
    ``OVERWRITTEN``, no request."""
    pod = server.create(make_pod("p1", nominated_node_name="n0"))
    first = throttled.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
    back = throttled.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n0"))
    assert first.result(10) is Outcome.OVERWRITTEN
    assert back.result(10) is Outcome.SKIPPED
    assert sent(server, "p1") == []


def test_a_status_patch_while_a_binding_is_in_flight_is_skipped(
    server: InMemoryApiServer,
) -> None:
    """A type superseded by a tracked call (here on the wire) is ``SKIPPED``, never sent."""
    gated = GatedBackend(server, hold="p1")
    pod = server.create(make_pod("p1"))
    with Dispatcher(gated, FAST) as d:
        binding = d.submit(PodBinding.for_pod(pod, "n1"))
        gated.wait_calls(1)
        patch = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n2"))
        assert patch.result(10) is Outcome.SKIPPED
        gated.gate.set()
        assert binding.result(10) is Outcome.SUCCESS
    assert sent(server, "p1") == [("bind", "ok")]
    assert "nominatedNodeName" not in stored(server, "p1")["status"]


# --------------------------------------------------------------------------- informer events


def test_an_informer_update_older_than_the_basis_is_not_adopted(
    server: InMemoryApiServer, throttled: Dispatcher, clock: ManualClock
) -> None:
    """behaviour.md: only a strictly newer object is adopted. The older one shows n0, which
    would make the pending patch back to n0 look like a no-op."""
    old = server.create(make_pod("p1", nominated_node_name="n0"))
    new = nominate(server, "p1", "n1", uid=old["metadata"]["uid"])
    assert new is not None
    back = throttled.submit(PodStatusPatch.for_pod(new, nominated_node_name="n0"))
    throttled.on_update(old)
    next_token(throttled, clock, new)
    assert back.result(10) is Outcome.SUCCESS
    assert stored(server, "p1")["status"]["nominatedNodeName"] == "n0"


def test_an_informer_delete_resolves_a_pending_deletion_success_and_cancels_other_calls(
    server: InMemoryApiServer, throttled: Dispatcher
) -> None:
    victim, other = server.create(make_pod("p1")), server.create(make_pod("p2"))
    deletion = throttled.preempt(victim, add_condition=False)
    patch = throttled.submit(PodStatusPatch.for_pod(other, nominated_node_name="n1"))
    throttled.on_delete(victim)
    throttled.on_delete(other)
    assert deletion.result(10) is Outcome.SUCCESS
    assert isinstance(patch.exception(10), CallCancelled)
    assert sent(server, "p1") == sent(server, "p2") == []


# --------------------------------------------------------------------------- exclusive calls


def test_a_preemption_cancels_what_is_pending_and_admits_nothing_behind_it(
    server: InMemoryApiServer, throttled: Dispatcher, clock: ManualClock
) -> None:
    pod = server.create(make_pod("p1"))
    before = throttled.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
    victim = throttled.preempt(pod, add_condition=False)
    behind = [
        throttled.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n2")),
        throttled.submit(PodBinding.for_pod(pod, "n2")),
    ]
    assert all(isinstance(f.exception(10), CallCancelled) for f in (before, *behind))
    next_token(throttled, clock, pod)
    assert victim.result(10) is Outcome.SUCCESS
    assert sent(server, "p1") == [("delete", "ok")]
    assert server.get_object("Pod", "default", "p1") is None


def test_a_preemption_waits_for_the_call_in_flight_and_is_sent_when_it_fails(
    server: InMemoryApiServer,
) -> None:
    """'preemption while one is in flight': waits behind it, sent itself if the first fails
    (here for good: a 403)."""
    gated = GatedBackend(server, hold="p1")
    pod = server.create(make_pod("p1"))
    server.script("patch_status", ForbiddenError("no"), name="p1")
    with Dispatcher(gated, FAST) as d:
        patch = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        gated.wait_calls(1)
        victim = d.preempt(pod, add_condition=False)
        gated.gate.set()
        assert isinstance(patch.exception(10), CallFailed)
        assert victim.result(10) is Outcome.SUCCESS
    assert sent(server, "p1") == [("patch_status", "Forbidden"), ("delete", "ok")]
    assert server.get_object("Pod", "default", "p1") is None


@pytest.mark.parametrize(
    "pod", [{"node": "n2"}, {"terminating": True}], ids=["bound", "terminating"]
)
def test_a_binding_for_a_bound_or_terminating_pod_is_a_conflict_at_once(
    server: InMemoryApiServer, dispatcher: Dispatcher, pod: dict[str, Any]
) -> None:
    basis = server.create(make_pod("p1", **pod))
    assert isinstance(
        dispatcher.submit(PodBinding.for_pod(basis, "n1")).exception(10), CallConflict
    )
    assert sent(server, "p1") == []
