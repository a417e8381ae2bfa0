"""Gangs (``Dispatcher.group(owner=podgroup, gang=min_count)``) end to end on the in-memory
apiserver: every test checks which bindings reached the server, and when."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import pytest

from kdispatch import (
    CallCancelled,
    CallConflict,
    CallFailed,
    ClaimStatusPatch,
    DependencyFailed,
    Dispatcher,
    DispatcherClosed,
    DispatcherConfig,
    EventRecorder,
    ExecutorConfig,
    ForbiddenError,
    Gang,
    GangPartiallyBound,
    GroupFailed,
    InvalidCallError,
    InvalidInputError,
    InvalidPrerequisiteError,
    InvalidRequestError,
    LeadershipLost,
    ObjectRef,
    Outcome,
    PodBinding,
    PodGroupStatusPatch,
    PodStatusPatch,
    RateLimitConfig,
    RetryConfig,
    TooManyRequestsError,
    default_call_types,
)
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.objects import Obj
from kdispatch.testing import FaultPlan, InMemoryApiServer, make_claim, make_pod, make_podgroup
from kdispatch.testing.waiting import wait_for
from tests.backends import GatedBackend
from tests.clocks import ManualClock
from tests.factories import InertRules
from tests.integration.test_groups import groups_cancelled

pytestmark = pytest.mark.timeout(60)


def members(server: InMemoryApiServer, n: int, prefix: str = "m") -> list[dict[str, Any]]:
    return [server.create(make_pod(f"{prefix}{i}")) for i in range(n)]


def open_gang(
    server: InMemoryApiServer, dispatcher: Dispatcher, size: int
) -> tuple[list[dict[str, Any]], Gang]:
    """``size`` member pods and the open gang of ``size`` owned by the "trainers" PodGroup."""
    group = server.create(make_podgroup("trainers", min_count=size))
    return members(server, size), dispatcher.group(owner=group, gang=size)


def binds(server: InMemoryApiServer) -> list[tuple[str, str]]:
    """The binding requests the server answered: (pod name, outcome)."""
    return [(r.name, r.outcome) for r in server.request_log if r.op == "bind"]


def node_of(server: InMemoryApiServer, name: str) -> str | None:
    pod = server.get_object("Pod", "default", name) or {}
    node: str | None = pod.get("spec", {}).get("nodeName")
    return node


def error(fut: Future[Any]) -> BaseException | None:
    return fut.exception(timeout=30)


def test_members_are_held_until_min_count_then_sent_together(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pods, gang = open_gang(server, dispatcher, 3)
    assert isinstance(gang, Gang) and gang.min_count == 3
    first = [gang.submit(PodBinding.for_pod(p, "n1")) for p in pods[:2]]
    assert dispatcher.held_calls == 2 and not gang.released
    assert not any(f.done() for f in first) and binds(server) == []
    gang.submit(PodBinding.for_pod(pods[2], "n1"))  # the min_count-th member: due
    wait_for(lambda: gang.released, 30, "the gate open once the members' actors confirmed")
    gang.seal()
    assert gang.future.result(timeout=30) == [Outcome.SUCCESS] * 3
    assert sorted(binds(server)) == [("m0", "ok"), ("m1", "ok"), ("m2", "ok")]
    assert all(node_of(server, p["metadata"]["name"]) == "n1" for p in pods)


def test_sealing_releases_the_members_submitted(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    group = server.create(make_podgroup("trainers", min_count=4))
    with dispatcher.group(owner=group, gang=4) as gang:
        futures = [gang.submit(PodBinding.for_pod(p, "n1")) for p in members(server, 2)]
        assert not gang.released
    assert [f.result(timeout=30) for f in futures] == [Outcome.SUCCESS] * 2


def test_a_member_deleted_before_the_release_withdraws_every_member(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pods, gang = open_gang(server, dispatcher, 3)
    futures = [gang.submit(PodBinding.for_pod(p, "n1")) for p in pods[:2]]
    dispatcher.on_delete(pods[1])  # a member goes while the gang is incomplete
    wait_for(lambda: gang.cancelled == "member_failed", 30, "the gang withdrawn")
    late = gang.submit(PodBinding.for_pod(pods[2], "n1"))  # refused: the gang was withdrawn
    gang.seal()
    failed = error(gang.future)
    assert isinstance(failed, GroupFailed) and not isinstance(failed, GangPartiallyBound)
    assert failed.cancelled == "member_failed"
    assert isinstance(error(futures[0]), DependencyFailed)
    assert error(late) is not None
    assert dispatcher.held_calls == 0
    assert binds(server) == []  # all or nothing: nothing was sent
    assert groups_cancelled(dispatcher, "member_failed") == 1


def test_a_member_refused_before_the_release_withdraws_every_member(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """A member the rules refuse (a binding for a pod bound elsewhere meanwhile) fails the
    gang before its release: the other members are withdrawn, nothing is sent."""
    pods, gang = open_gang(server, dispatcher, 3)
    held = gang.submit(PodBinding.for_pod(pods[0], "n1"))
    server.bind("default", "m1", uid=pods[1]["metadata"]["uid"], node="n2")
    elsewhere = server.get_object("Pod", "default", "m1")  # what the caller decided on
    refused = gang.submit(PodBinding.for_pod(elsewhere, "n1"))
    assert error(refused) is not None
    failed = error(gang.future)
    assert isinstance(failed, GroupFailed) and failed.cancelled == "member_failed"
    assert isinstance(error(held), DependencyFailed)
    assert dispatcher.held_calls == 0
    assert binds(server) == [("m1", "ok")]  # the test's own binding: none of the gang's
    assert node_of(server, "m0") is None


def test_cancel_before_the_release_withdraws_every_member(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pods, gang = open_gang(server, dispatcher, 3)
    held = [gang.submit(PodBinding.for_pod(p, "n1")) for p in pods[:2]]
    assert gang.cancel()
    failed = error(gang.future)
    assert isinstance(failed, GroupFailed) and failed.cancelled == "caller"
    assert all(isinstance(error(f), DependencyFailed) for f in held)
    assert dispatcher.held_calls == 0
    assert binds(server) == []
    assert [node_of(server, p["metadata"]["name"]) for p in pods] == [None] * 3


def test_the_owner_deleted_before_the_release_sends_nothing(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    group = server.create(make_podgroup("trainers", min_count=2))
    gang = dispatcher.group(owner=group, gang=2)
    held = gang.submit(PodBinding.for_pod(members(server, 1)[0], "n1"))
    dispatcher.on_delete(group)
    assert isinstance(error(held), DependencyFailed)
    failed = error(gang.future)
    assert isinstance(failed, GroupFailed) and failed.cancelled == "owner_deleted"
    assert binds(server) == []


def test_a_member_failing_after_the_release_leaves_the_gang_partially_bound(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    group = server.create(make_podgroup("trainers", min_count=3))
    pods = members(server, 3)
    server.script("bind", ForbiddenError("no binding for m1"), name="m1")
    with dispatcher.group(owner=group, gang=3) as gang:
        for p in pods:
            gang.submit(PodBinding.for_pod(p, "n1"))
    partial = error(gang.future)
    assert isinstance(partial, GangPartiallyBound)
    assert [r.name for r in partial.bound] == ["m0", "m2"]
    assert [r.name for r in partial.failed] == ["m1"]
    assert isinstance(partial.error, CallFailed)
    assert node_of(server, "m0") == node_of(server, "m2") == "n1"
    assert node_of(server, "m1") is None


def test_a_member_deleted_after_its_block_paid_gives_its_token_back(
    server: InMemoryApiServer,
) -> None:
    """docs/gangs.md: a member that resolves before its grant gives its token back. Four
    tokens that never refill, two workers, every request held on the wire: a binding takes one
    token and a worker, the gang of three the three others; one member takes the second worker,
    another is deleted while it waits for one. Its token is the one a later call gets."""
    gated = GatedBackend(server)
    gated.gate.clear()
    blocker = server.create(make_pod("blocker"))
    group = server.create(make_podgroup("trainers", min_count=3))
    pods = members(server, 3)
    late = server.create(make_pod("late"))
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=1.0, burst=4), executor=ExecutorConfig(workers=2)
    )
    with Dispatcher(gated, config, clock=ManualClock(1000.0)) as d:
        first = d.submit(PodBinding.for_pod(blocker, "n0"))
        gated.wait_calls(1)
        with d.group(owner=group, gang=3) as gang:
            steps = [gang.submit(PodBinding.for_pod(p, "n1")) for p in pods]
        on_the_wire = gated.wait_calls(2)[1][1]
        victim = next(i for i, p in enumerate(pods) if p["metadata"]["name"] != on_the_wire)
        d.on_delete(server.remove("Pod", "default", f"m{victim}"))
        assert isinstance(error(steps[victim]), CallCancelled)
        gated.gate.set()
        partial = error(gang.future)
        assert isinstance(partial, GangPartiallyBound)
        assert [r.name for r in partial.failed] == [f"m{victim}"]
        assert first.result(timeout=30) is Outcome.SUCCESS
        assert d.submit(PodBinding.for_pod(late, "n2")).result(timeout=30) is Outcome.SUCCESS
        assert d.tokens_taken == 4
    assert sorted(name for name, _ in binds(server)) == sorted(
        ["blocker", "late", *(f"m{i}" for i in range(3) if i != victim)]
    )


def test_cancelling_a_released_gang_withdraws_the_members_still_waiting_for_tokens(
    server: InMemoryApiServer,
) -> None:
    """A gang of four, a bucket of two on a clock that stands still: two members are bound,
    two wait for their tokens. ``gang.cancel()`` withdraws those two (``CallCancelled``), the
    gang is partially bound, and its block no longer holds the next token."""
    clock = ManualClock(1000.0)
    group = server.create(make_podgroup("trainers", min_count=4))
    pods = members(server, 4)
    late = server.create(make_pod("late"))
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=1.0, burst=2), executor=ExecutorConfig(workers=1)
    )
    with Dispatcher(server, config, clock=clock) as d:
        with d.group(owner=group, gang=4) as gang:
            steps = [gang.submit(PodBinding.for_pod(p, "n1")) for p in pods]
        wait_for(lambda: sum(s.done() for s in steps) == 2, 10, "two members bound")
        assert gang.released and gang.cancel()
        partial = error(gang.future)
        outcomes = {p["metadata"]["name"]: error(s) for p, s in zip(pods, steps, strict=True)}
        landed = [name for name, failed in outcomes.items() if failed is None]
        withdrawn = [name for name, failed in outcomes.items() if failed is not None]
        assert len(landed) == 2
        assert all(type(outcomes[name]) is CallCancelled for name in withdrawn)
        assert isinstance(partial, GangPartiallyBound) and partial.cancelled == "caller"
        assert [r.name for r in partial.bound] == landed
        assert [r.name for r in partial.failed] == withdrawn
        after = d.submit(PodBinding.for_pod(late, "n2"))
        clock.advance(1.0)  # one more token
        d._executor.wake()
        assert after.result(timeout=10) is Outcome.SUCCESS
    *gang_binds, last = [name for name, _ in binds(server)]
    assert (sorted(gang_binds), last) == (landed, "late")


def test_a_member_withdrawn_after_a_lost_reply_is_failed_whatever_the_server_applied(
    server: InMemoryApiServer,
) -> None:
    """docs/gangs.md: ``failed`` lists the members by their futures. m1's binding landed but
    its reply was lost; withdrawn while it waits to retry (its PodGroup deleted), it resolves
    CallCancelled and is in ``failed``, though its pod is bound: the pod's watch event tells."""
    group = server.create(make_podgroup("trainers", min_count=3))
    pods = members(server, 3)
    server.script("bind", "apply_then_fail", name="m1")
    config = DispatcherConfig(retry=RetryConfig(base_backoff=20.0, max_backoff=20.0))
    with Dispatcher(server, config) as dispatcher:
        with dispatcher.group(owner=group, gang=3) as gang:
            steps = [gang.submit(PodBinding.for_pod(p, "n1")) for p in pods]
        server.wait_for_request("bind", name="m1")  # applied, reply lost: m1 backs off
        assert steps[0].result(timeout=30) is steps[2].result(timeout=30) is Outcome.SUCCESS
        dispatcher.on_delete(server.remove("PodGroup", "default", "trainers"))
        partial = error(gang.future)
        assert type(error(steps[1])) is CallCancelled
    assert isinstance(partial, GangPartiallyBound) and partial.cancelled == "owner_deleted"
    assert [r.name for r in partial.bound] == ["m0", "m2"]
    assert [r.name for r in partial.failed] == ["m1"]
    assert [node_of(server, f"m{i}") for i in range(3)] == ["n1"] * 3
    assert sorted(binds(server)) == [("m0", "ok"), ("m1", "apply_then_fail"), ("m2", "ok")]


def test_another_step_failing_before_the_release_withdraws_no_member(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """docs/gangs.md: a gang's other steps are a call group's steps. A claim's reservation
    that fails before the release withdraws no member (none waits for it): the members are
    bound, and gang.future raises GroupFailed (not cancelled) whose results say so."""
    pods, gang = open_gang(server, dispatcher, 2)
    claim = server.create(make_claim("gpu"))
    server.script("patch_status", InvalidRequestError("refused"), name="gpu")
    meta = pods[0]["metadata"]
    consumer = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
    reserved = gang.submit(ClaimStatusPatch.for_claim(claim, reserve=[consumer]))
    assert isinstance(error(reserved), CallFailed) and not gang.released
    members_ = [gang.submit(PodBinding.for_pod(p, "n1")) for p in pods]
    gang.seal()
    failed = error(gang.future)
    assert isinstance(failed, GroupFailed) and not isinstance(failed, GangPartiallyBound)
    assert failed.cancelled is None and failed.error is error(reserved)
    assert failed.results == [error(reserved), Outcome.SUCCESS, Outcome.SUCCESS]
    assert [f.result(timeout=30) for f in members_] == [Outcome.SUCCESS] * 2
    assert sorted(binds(server)) == [("m0", "ok"), ("m1", "ok")]


def test_the_group_status_waits_for_the_gang_without_blocking(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    group = server.create(make_podgroup("trainers", min_count=2))
    with dispatcher.group(owner=group, gang=2) as gang:
        for p in members(server, 2):
            gang.submit(PodBinding.for_pod(p, "n1"))
    status = dispatcher.submit(
        PodGroupStatusPatch.initially_scheduled(group, True, reason="Scheduled"),
        after=[gang.future],
    )
    assert status.result(timeout=30) is Outcome.SUCCESS
    log = [(r.op, r.name) for r in server.request_log if r.outcome == "ok"]
    assert log.index(("patch_status", "trainers")) > max(
        log.index(("bind", "m0")), log.index(("bind", "m1"))
    )


def test_stop_withdraws_a_gang_still_held(server: InMemoryApiServer) -> None:
    group = server.create(make_podgroup("trainers", min_count=2))
    d = Dispatcher(server).start()
    gang = d.group(owner=group, gang=2)
    held = gang.submit(PodBinding.for_pod(members(server, 1)[0], "n1"))
    d.stop(timeout=10)
    assert isinstance(error(held), DependencyFailed)
    failed = error(gang.future)
    assert isinstance(failed, GroupFailed) and failed.cancelled == "stopped"
    assert binds(server) == []
    assert groups_cancelled(d, "stopped") == 1


def test_stop_without_drain_withdraws_a_complete_gang_not_yet_released(
    server: InMemoryApiServer,
) -> None:
    """``stop(drain=False)`` drains nothing, so a gang complete but not released when it began
    is withdrawn as one still incomplete is: ``cancelled == "stopped"`` (counted so, never as a
    member failing), and nothing of it is sent."""
    group = server.create(make_podgroup("trainers", min_count=3))
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=5, burst=2))
    d = Dispatcher(server, config).start()
    gang = d.group(owner=group, gang=3)
    held = [gang.submit(PodBinding.for_pod(p, "n1")) for p in members(server, 3)]
    d.stop(drain=False, timeout=10)
    failed = error(gang.future)
    assert isinstance(failed, GroupFailed) and not isinstance(failed, GangPartiallyBound)
    assert failed.cancelled == "stopped" and gang.cancelled == "stopped"
    assert all(isinstance(error(f), DependencyFailed | DispatcherClosed) for f in held)
    assert not gang.released and binds(server) == []
    assert groups_cancelled(d, "stopped") == 1 and groups_cancelled(d, "member_failed") == 0


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3"])
def test_a_gang_size_is_a_positive_int(
    server: InMemoryApiServer, dispatcher: Dispatcher, bad: object
) -> None:
    group = server.create(make_podgroup("trainers", min_count=2))
    with pytest.raises(InvalidInputError, match="gang must be a member count"):
        dispatcher.group(owner=group, gang=bad)  # type: ignore[call-overload]
    assert dispatcher.open_groups == 0


@pytest.mark.parametrize("case", ["not-a-call", "after-one-future", "after-a-str", "after-[5]"])
def test_a_gang_refuses_what_a_call_group_refuses_and_holds_nothing_of_it(
    server: InMemoryApiServer, dispatcher: Dispatcher, case: str
) -> None:
    """Gang.submit read call.call_type and unpacked after before any check: a bare
    AttributeError or TypeError where CallGroup.submit raises the library's errors."""
    pods, gang = open_gang(server, dispatcher, 2)
    nomination = dispatcher.submit(PodStatusPatch.for_pod(pods[0], nominated_node_name="n1"))
    group = dispatcher.group(owner=pods[0])
    binding = PodBinding.for_pod(pods[1], "n1")
    after: Any = {"after-one-future": nomination, "after-a-str": "f", "after-[5]": [5]}.get(case)
    for g in (group, gang):
        if case == "not-a-call":
            with pytest.raises(InvalidCallError):
                g.submit(None)  # type: ignore[arg-type]
        else:
            with pytest.raises(InvalidPrerequisiteError):
                g.submit(binding, after=after)
    assert nomination.result(timeout=30) is Outcome.SUCCESS
    assert dispatcher.held_calls == 0 and not gang.released
    gang.submit(PodBinding.for_pod(pods[0], "n1"))
    assert not gang.released  # the refused submits counted no member
    gang.submit(PodBinding.for_pod(pods[1], "n1"))
    wait_for(lambda: gang.released, 30, "the gate open")
    gang.seal()
    assert gang.future.result(timeout=30) == [Outcome.SUCCESS] * 2
    assert sorted(binds(server)) == [("m0", "ok"), ("m1", "ok")]
    group.cancel()


def test_a_gang_takes_after_none_as_a_call_group_does(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pods, gang = open_gang(server, dispatcher, 1)
    step = gang.submit(PodBinding.for_pod(pods[0], "n1"), after=None)  # type: ignore[arg-type]
    assert step.result(timeout=30) is Outcome.SUCCESS and gang.released


def test_the_group_status_is_not_held_behind_a_backlog_of_pod_status_patches(
    server: InMemoryApiServer,
) -> None:
    """#135900 for PodGroups: the status rides the bindings' lane, ahead of the pods' patches."""
    group = server.create(make_podgroup("trainers", min_count=2))
    unfit = [server.create(make_pod(f"unfit-{i}")) for i in range(30)]
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=50, burst=1))
    with Dispatcher(server, config) as dispatcher:
        patches = [
            dispatcher.submit(PodStatusPatch.for_pod(p, nominated_node_name="n1")) for p in unfit
        ]
        with dispatcher.group(owner=group, gang=2) as gang:
            for p in members(server, 2):
                gang.submit(PodBinding.for_pod(p, "n1"))
        scheduled = PodGroupStatusPatch.initially_scheduled(group, True, reason="Scheduled")
        status = dispatcher.submit(scheduled, after=[gang.future])
        assert status.result(timeout=30) is Outcome.SUCCESS
        assert all(f.result(timeout=30) is Outcome.SUCCESS for f in patches)
    order = [r.name for r in server.request_log if r.op in ("patch_status", "bind")]
    assert order.index("trainers") < order.index("unfit-29") - 10, order


@pytest.mark.parametrize("burst", [10, 2])
def test_a_gangs_bindings_go_out_as_one_block_amid_other_calls(
    server: InMemoryApiServer, burst: int
) -> None:
    """The gang's tokens are taken as one block (all at once within the burst, else at the
    bucket's rate): no other request reaches the server between its first and last member,
    not even the pod status patches that earn a share of the grants ahead of bindings."""
    group = server.create(make_podgroup("trainers", min_count=6))
    singles = [server.create(make_pod(f"single-{i}")) for i in range(40)]
    gang_pods = members(server, 6)
    config = DispatcherConfig(  # one worker: the server sees requests in the grants' order
        rate_limit=RateLimitConfig(qps=200, burst=burst),
        executor=ExecutorConfig(workers=1, lane_min_share=0.5),  # patches: every other grant
    )
    with Dispatcher(server, config) as dispatcher:
        futures = [dispatcher.submit(PodBinding.for_pod(p, "n1")) for p in singles[:20]]
        futures += [
            dispatcher.submit(PodStatusPatch.for_pod(p, nominated_node_name="n1"))
            for p in singles[20:]
        ]
        with dispatcher.group(owner=group, gang=6) as gang:
            for p in gang_pods:
                gang.submit(PodBinding.for_pod(p, "n2"))
        assert gang.future.result(timeout=30) == [Outcome.SUCCESS] * 6
        assert all(f.result(timeout=30) is Outcome.SUCCESS for f in futures)
    order = [r.name for r in server.request_log if r.op in ("bind", "patch_status")]
    at = sorted(order.index(f"m{i}") for i in range(6))
    assert at == list(range(at[0], at[0] + 6)), order
    assert len(order) == 46


@pytest.mark.parametrize(
    "rate_limit",
    [
        RateLimitConfig(qps=100, burst=2, events_qps=100, events_burst=2),
        RateLimitConfig(qps=100, burst=2, events_shared=True),
    ],
    ids=["own-bucket", "shared-bucket"],
)
def test_no_event_reaches_the_server_between_a_gangs_bindings(
    server: InMemoryApiServer, rate_limit: RateLimitConfig
) -> None:
    """Events, with a bucket of their own (the default) or taking the calls' spare tokens,
    wait for the gang's block as every call does: 200 Events queued before a gang larger than
    the burst is released, and none is created between its first and last binding. One
    worker: the server sees the requests in the grants' order (with more, an Event granted
    before the gang's turn may still be under way when its first binding lands, as
    docs/gangs.md says)."""
    group = server.create(make_podgroup("trainers", min_count=6))
    noisy = [server.create(make_pod(f"noisy-{i}")) for i in range(200)]
    gang_pods = members(server, 6)
    config = DispatcherConfig(rate_limit=rate_limit, executor=ExecutorConfig(workers=1))
    with Dispatcher(server, config) as dispatcher:
        recorder = EventRecorder(dispatcher, controller="gangs")
        events = [recorder.event(p, reason="Scheduled", action="Binding", note="n") for p in noisy]
        with dispatcher.group(owner=group, gang=6) as gang:
            for p in gang_pods:
                gang.submit(PodBinding.for_pod(p, "n1"))
        assert gang.future.result(timeout=30) == [Outcome.SUCCESS] * 6
        assert all(f is not None and f.result(timeout=30) is Outcome.SUCCESS for f in events)
    log = server.request_log
    at = [i for i, r in enumerate(log) if r.op == "bind"]
    assert len(at) == 6
    between = [(r.op, r.kind) for r in log[at[0] : at[-1] + 1] if r.op != "bind"]
    assert between == []
    assert sum(r.op == "create" and r.kind == "Event" for r in log) == 200


def test_a_member_also_waiting_for_its_claim_stays_out_of_the_block(
    server: InMemoryApiServer,
) -> None:
    """A member whose binding also waits for its ResourceClaim's reservation is not in the
    token block: the block would wait for it while the claim's patch waits for a token the
    block holds back. The gang still binds whole, that member after its claim."""
    group = server.create(make_podgroup("trainers", min_count=3))
    claim = server.create(make_claim("gpu-claim"))
    first = [server.create(make_pod(f"first-{i}")) for i in range(2)]
    gang_pods = members(server, 3)
    meta = gang_pods[2]["metadata"]
    consumer = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=20, burst=2))
    with Dispatcher(server, config) as dispatcher:
        early = [dispatcher.submit(PodBinding.for_pod(p, "n1")) for p in first]  # the burst
        with dispatcher.group(owner=group, gang=3) as gang:
            reserved = gang.submit(ClaimStatusPatch.for_claim(claim, reserve=[consumer]))
            gang.submit(PodBinding.for_pod(gang_pods[0], "n2"))
            gang.submit(PodBinding.for_pod(gang_pods[1], "n2"))
            gang.submit(PodBinding.for_pod(gang_pods[2], "n2"), after=[reserved])
        assert gang.future.result(timeout=30) == [Outcome.SUCCESS] * 4
        assert all(f.result(timeout=30) is Outcome.SUCCESS for f in early)
    order = [r.name for r in server.request_log if r.op in ("bind", "patch_status")]
    assert order.index("gpu-claim") < order.index("m2")
    assert sorted(binds(server))[-3:] == [("m0", "ok"), ("m1", "ok"), ("m2", "ok")]
    stored = server.get_object("ResourceClaim", "default", "gpu-claim") or {}
    assert [c["uid"] for c in stored["status"]["reservedFor"]] == [meta["uid"]]


def test_a_member_backing_off_at_the_release_goes_on_its_own(
    server: InMemoryApiServer,
) -> None:
    """A member whose pod waits out a Retry-After when the gang is released stays out of the
    token block: the other members and the calls after them are not held back for it."""
    group = server.create(make_podgroup("trainers", min_count=3))
    gang_pods = members(server, 3)
    later = server.create(make_pod("later"))
    server.script("patch_status", TooManyRequestsError("later", retry_after=20.0), name="m1")
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=50, burst=10))
    with Dispatcher(server, config) as dispatcher:
        dispatcher.submit(PodStatusPatch.for_pod(gang_pods[1], nominated_node_name="n1"))
        server.wait_for_request("patch_status", name="m1")  # its 429: m1 backs off for 20 s
        with dispatcher.group(owner=group, gang=3) as gang:
            steps = [gang.submit(PodBinding.for_pod(p, "n1")) for p in gang_pods]
        assert steps[0].result(timeout=30) is Outcome.SUCCESS
        assert steps[2].result(timeout=30) is Outcome.SUCCESS
        after = dispatcher.submit(PodBinding.for_pod(later, "n2"))
        assert after.result(timeout=30) is Outcome.SUCCESS
        assert not steps[1].done()  # still backing off: nothing waited for it
        dispatcher.cancel(gang_pods[1]["metadata"]["uid"])
        partial = error(gang.future)
    assert isinstance(partial, GangPartiallyBound)
    assert [r.name for r in partial.failed] == ["m1"]
    assert sorted(binds(server)) == [("later", "ok"), ("m0", "ok"), ("m2", "ok")]
    assert node_of(server, "m1") is None


@dataclass(frozen=True, slots=True)
class PodNote(InertRules):
    """A user call type on Pods (an annotation patch) that a binding does not supersede."""

    call_type: ClassVar[str] = "pod_note"
    relevance: ClassVar[int] = 1

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        ref = self.ref
        note = {"status": {"message": "noted"}}
        return backend.patch_status(
            "Pod", ref.namespace, ref.name, note, uid=ref.uid, resource_version=None
        )


def _at_least(requests: Callable[[], list[tuple[str, str]]], n: int) -> bool:
    return len(requests()) >= n


def test_a_member_with_another_call_queued_ahead_of_its_binding_takes_no_block_token(
    server: InMemoryApiServer,
) -> None:
    """A member whose pod has another call waiting for a token at the release (one its
    binding does not supersede) goes on its own: that call never takes a token of the gang's
    block, so the block's first tokens are bindings. Every request takes one token."""
    group = server.create(make_podgroup("trainers", min_count=2))
    m0, m1 = members(server, 2)
    fillers = members(server, 2, prefix="f")
    later = server.create(make_pod("later"))
    clock = ManualClock(1000.0)
    call_types = default_call_types()
    call_types.register(PodNote)
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=0.1, burst=2),  # a token per 10 s of the fake clock
        executor=ExecutorConfig(workers=1),
    )
    with Dispatcher(server, config, call_types=call_types, clock=clock) as d:
        ex = d._executor
        for pod in fillers:  # the burst: nothing more until the clock moves
            d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n9")).result(timeout=30)
        note = d.submit(PodNote(ObjectRef.of(m0)))
        wait_for(lambda: ex.backlog() == 1, timeout=30, what="the note waits for a token")
        with d.group(owner=group, gang=2) as gang:
            steps = [gang.submit(PodBinding.for_pod(p, "n1")) for p in (m0, m1)]
        wait_for(lambda: d.held_calls == 0, timeout=30, what="the release")
        for pod in (m0, m1):
            d.view(pod["metadata"]["uid"])  # each member's actor has handled the release
        after = d.submit(PodBinding.for_pod(later, "n2"))
        wait_for(lambda: ex.backlog() >= 3, timeout=30, what="everything queued")

        def sent() -> list[tuple[str, str]]:
            """The requests after the set-up's burst (the fillers' patches)."""
            return [(r.op, r.name) for r in server.request_log if r.name[0] != "f"]

        for step in (2, 4):  # two tokens a step: the first two, then the last two
            clock.advance(20.0)
            ex.wake()
            wait_for(partial(_at_least, sent, step), timeout=30, what=f"{step} requests")
        for future in [note, *steps, after]:
            assert future.result(timeout=30) is Outcome.SUCCESS
        assert ("patch_status", "m0") not in sent()[:2]  # the block's tokens went to bindings
        assert ex.tokens_taken == len(server.request_log)


def test_a_member_deleted_just_before_the_gang_is_complete_withdraws_every_member(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """docs/gangs.md's example, with the last member submitted right after the informer's
    delete event: the gate opens only once every member's actor confirmed it, after the
    deletion it was told first, so nothing is sent."""
    pods, gang = open_gang(server, dispatcher, 3)
    held = [gang.submit(PodBinding.for_pod(p, f"n{i}")) for i, p in enumerate(pods[:2])]
    dispatcher.on_delete(server.remove("Pod", "default", "m1"))  # the informer's event
    held.append(gang.submit(PodBinding.for_pod(pods[2], "n2")))  # the gang is complete
    gang.seal()
    failed = error(gang.future)
    assert isinstance(failed, GroupFailed) and not isinstance(failed, GangPartiallyBound)
    assert failed.cancelled == "member_failed"
    assert all(isinstance(error(f), CallCancelled) for f in held)
    assert isinstance(error(held[0]), DependencyFailed)
    assert not gang.released and dispatcher.held_calls == 0
    assert binds(server) == []
    assert [node_of(server, n) for n in ("m0", "m2")] == [None, None]


@pytest.mark.parametrize("refused", [0, 2])
def test_a_member_refused_by_its_actor_withdraws_every_member_first_or_last(
    server: InMemoryApiServer, dispatcher: Dispatcher, refused: int
) -> None:
    """A member its actor refuses (its pod was bound elsewhere meanwhile), submitted first or
    as the min_count-th, fails the gang before the release: nothing is bound."""
    pods, gang = open_gang(server, dispatcher, 3)
    bound = dict(pods[refused])
    bound["spec"] = {**bound["spec"], "nodeName": "elsewhere"}
    pods[refused] = server.update(bound)  # what the caller decided on
    futures = [gang.submit(PodBinding.for_pod(p, "n1")) for p in pods]
    gang.seal()
    failed = error(gang.future)
    assert isinstance(failed, GroupFailed) and not isinstance(failed, GangPartiallyBound)
    assert failed.cancelled == "member_failed"
    assert isinstance(error(futures[refused]), CallConflict)
    others = [f for i, f in enumerate(futures) if i != refused]
    assert all(isinstance(error(f), CallCancelled) for f in others)
    assert not gang.released and dispatcher.held_calls == 0
    assert binds(server) == []
    assert [node_of(server, f"m{i}") for i in range(3)] == [
        "elsewhere" if i == refused else None for i in range(3)
    ]


def test_a_member_merged_with_another_callers_held_binding_does_not_stall_the_block() -> None:
    """Another caller's binding of m0 waits for a claim's patch that met a 429; the gang's
    binding of m0 merges with it and holds its hold too. The gate's release leaves it held,
    so it leaves the token block: m1 and m2 are bound, the claim's retry gets its token, m0
    follows it, and a binding submitted afterwards lands too (no deadlock)."""
    server = InMemoryApiServer(faults=FaultPlan(retry_after=0.2))
    group = server.create(make_podgroup("trainers", min_count=3))
    pods = members(server, 3)
    bystander = server.create(make_pod("bystander"))
    claim = server.create(make_claim("gpu-claim"))
    consumer = {"resource": "pods", "name": "m0", "uid": pods[0]["metadata"]["uid"]}
    server.script("patch_status", "429", name="gpu-claim")
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=100, burst=10))
    with Dispatcher(server, config) as dispatcher:
        reserved = dispatcher.submit(ClaimStatusPatch.for_claim(claim, reserve=[consumer]))
        server.wait_for_request("patch_status", name="gpu-claim")  # met its 429
        other = dispatcher.submit(PodBinding.for_pod(pods[0], "n0"), after=[reserved])
        with dispatcher.group(owner=group, gang=3) as gang:
            steps = [gang.submit(PodBinding.for_pod(p, f"n{i}")) for i, p in enumerate(pods)]
        assert steps[1].result(timeout=10) is Outcome.SUCCESS
        assert steps[2].result(timeout=10) is Outcome.SUCCESS
        later = dispatcher.submit(PodBinding.for_pod(bystander, "n9"))
        assert later.result(timeout=10) is Outcome.SUCCESS
        assert reserved.result(timeout=10) is Outcome.SUCCESS
        assert gang.future.result(timeout=10) == [Outcome.SUCCESS] * 3
        assert other.result(timeout=10) is Outcome.OVERWRITTEN  # carried by the member
        assert dispatcher.held_calls == 0
    log = [(r.op, r.name, r.outcome) for r in server.request_log]
    assert log.index(("patch_status", "gpu-claim", "ok")) < log.index(("bind", "m0", "ok"))
    assert sorted(binds(server)) == [("bystander", "ok"), ("m0", "ok"), ("m1", "ok"), ("m2", "ok")]
    assert [node_of(server, n) for n in ("m0", "m1", "m2", "bystander")] == ["n0", "n1", "n2", "n9"]
    stored = server.get_object("ResourceClaim", "default", "gpu-claim") or {}
    assert [c["uid"] for c in stored["status"]["reservedFor"]] == [consumer["uid"]]


def test_stop_drains_a_gang_due_for_release(server: InMemoryApiServer) -> None:
    """A gang complete when ``stop()`` starts, its members' confirmations perhaps still on
    their way, is released and drained as any other call, not withdrawn."""
    group = server.create(make_podgroup("trainers", min_count=2))
    d = Dispatcher(server).start()
    gang = d.group(owner=group, gang=2)
    futures = [gang.submit(PodBinding.for_pod(p, "n1")) for p in members(server, 2)]
    assert d.stop(timeout=10)
    assert [f.result(timeout=10) for f in futures] == [Outcome.SUCCESS] * 2
    assert gang.future.result(timeout=10) == [Outcome.SUCCESS] * 2
    assert sorted(binds(server)) == [("m0", "ok"), ("m1", "ok")]


def test_revoke_resolves_the_members_of_a_gang_still_held_with_its_error(
    server: InMemoryApiServer,
) -> None:
    """docs/groups.md: revoke resolves every step not yet on the wire with its error, held
    steps included; a gang's members too, and nothing of them is sent."""
    group = server.create(make_podgroup("trainers", min_count=3))
    with Dispatcher(server) as d:
        gang = d.group(owner=group, gang=3)
        held = [gang.submit(PodBinding.for_pod(p, "n1")) for p in members(server, 2)]
        d.revoke(LeadershipLost("lease lost"))
        assert all(isinstance(error(f), LeadershipLost) for f in held)
        failed = error(gang.future)
        assert isinstance(failed, GroupFailed) and isinstance(failed.error, LeadershipLost)
        assert failed.cancelled is None and not gang.released
        assert d.held_calls == 0
    assert binds(server) == []
