"""A call group's ``cancel()`` racing the submit of its steps, on threads, many times: every
future resolves exactly once, and no withdrawn step reaches the in-memory apiserver."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from functools import partial
from typing import Any

import pytest

from kdispatch.actors.engine.groups import CallGroup
from kdispatch.actors.engine.messages import CallFuture, Submit
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.errors import CallCancelled, DependencyFailed, GroupFailed, Outcome
from kdispatch.actors.model.pod_calls import PodBinding
from kdispatch.testing.memory import InMemoryApiServer, make_claim, make_pod
from tests.backends import GatedBackend
from tests.configs import FAST
from tests.integration.test_groups import attempted, outcome, requests, reserve, slow_429

pytestmark = pytest.mark.timeout(120)

ROUNDS = 150


@pytest.fixture
def resolutions(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How many times each ``CallFuture`` (by ``id``) was resolved."""
    counts: Counter[int] = Counter()
    set_result, set_exception = CallFuture.set_result, CallFuture.set_exception

    def counted_result(self: CallFuture, result: Outcome) -> None:
        counts[id(self)] += 1
        set_result(self, result)

    def counted_exception(self: CallFuture, exception: BaseException | None) -> None:
        counts[id(self)] += 1
        set_exception(self, exception)

    monkeypatch.setattr(CallFuture, "set_result", counted_result)
    monkeypatch.setattr(CallFuture, "set_exception", counted_exception)
    return counts


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch every few microseconds, so the race is met in many interleavings."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


def race(first: Any, second: Any) -> None:
    """Run ``first`` and ``second`` on two threads released together; re-raise their errors."""
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(fn: Any) -> None:
        start.wait()
        try:
            fn()
        except BaseException as exc:  # re-raised on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def add_steps(
    group: CallGroup,
    pod: dict[str, Any],
    shared: dict[str, Any],
    on_wire: CallFuture,
    added: list[CallFuture],
) -> None:
    """A claim patch queued behind the one on the wire for ``shared``, and a binding held on
    ``on_wire``."""
    added.append(group.submit(reserve(shared, pod)))
    added.append(group.submit(PodBinding.for_pod(pod, "n1"), after=[on_wire]))


def spin_then_cancel(group: CallGroup, spins: int) -> None:
    """Cancel ``group`` after ``spins`` empty turns of a loop (up to some 100 µs): spread over
    the rounds, the cancellation lands before, during and after the submits it races."""
    for _ in range(spins):
        pass
    group.cancel()


@pytest.mark.usefixtures("busy_switching")
def test_cancel_racing_step_submits_resolves_each_once_and_sends_no_withdrawn_step(
    server: InMemoryApiServer, resolutions: Counter[int]
) -> None:
    """Each round: a claim patch of someone else and a step of the group are on the wire
    (held at the gate). Then one thread adds a step queued behind the first (on the same
    claim) and a binding held on the second, while another cancels the group. Whichever
    wins, both new steps are withdrawn (cancelled before their submit, refused by the group;
    during it, refused by their actor or withdrawn by the cancel; after it, withdrawn by the
    cancel), and once the gate opens
    only the two requests on the wire land."""
    gated = GatedBackend(server)
    futures: list[Future[Any]] = []
    with Dispatcher(gated, FAST) as d:
        for i in range(ROUNDS):
            gated.gate.clear()
            pod = server.create(make_pod(f"p{i}"))
            shared, own = server.create(make_claim(f"a{i}")), server.create(make_claim(f"b{i}"))
            g = d.group(owner=pod)
            other = d.submit(reserve(shared, server.create(make_pod(f"q{i}"))))
            on_wire = g.submit(reserve(own, pod))
            gated.wait_calls(2 * i + 2)
            added: list[CallFuture] = []
            add = partial(add_steps, g, pod, shared, on_wire, added)
            race(add, partial(spin_then_cancel, g, (i * 37) % 3000))
            gated.gate.set()
            assert outcome(other) is Outcome.SUCCESS and outcome(on_wire) is Outcome.SUCCESS
            for step in added:
                assert isinstance(outcome(step), CallCancelled), (i, outcome(step))
            err = outcome(g.future)
            assert isinstance(err, GroupFailed) and err.cancelled == "caller"
            assert err.results == [Outcome.SUCCESS, *(outcome(s) for s in added)]
            futures += [other, on_wire, *added]
    assert d.open_groups == 0 and d.outstanding == 0  # every group resolved and forgotten
    log = server.request_log
    for i in range(ROUNDS):
        assert requests(log, "bind", f"p{i}") == []
        assert len(requests(log, "patch_status", f"a{i}")) == 1  # `other` alone
        assert len(requests(log, "patch_status", f"b{i}")) == 1
    assert [resolutions[id(f)] for f in futures] == [1] * len(futures)


@pytest.mark.parametrize("held", [False, True], ids=["unheld", "held"])
@pytest.mark.parametrize("busy", [False, True], ids=["new_actor", "busy_actor"])
def test_a_step_whose_withdrawal_reaches_its_actor_first_is_refused_there(
    server: InMemoryApiServer, monkeypatch: pytest.MonkeyPatch, held: bool, busy: bool
) -> None:
    """The group is cancelled after a step was registered and before its ``Submit`` was
    told, so the step's ``Withdraw`` reaches its actor first (``busy``: an actor holding
    someone else's call of the same type, in its backoff) and finds nothing to withdraw. The
    actor refuses the ``Submit`` that follows: the step resolves ``CallCancelled`` (held:
    ``DependencyFailed``, caused by the cancellation), is not merged into the other call,
    and never reaches the server."""
    pod, c0, c1 = (server.create(make_pod("p1")), *map(server.create, map(make_claim, "ab")))
    for name in "ab":
        server.script("patch_status", slow_429(), name=name)
    with Dispatcher(server, FAST) as d:
        prereq = d.submit(reserve(c0, server.create(make_pod("q1"))))  # pending: in backoff
        attempted(server, "patch_status", "a")
        if busy:
            other = d.submit(reserve(c1, server.create(make_pod("q2"))))
            attempted(server, "patch_status", "b")
        g = d.group(owner=pod)
        tell = d._registry.tell

        def cancel_then_tell(uid: str, message: object, *rest: Any) -> bool:
            if isinstance(message, Submit) and message.future.group is g:
                g.cancel()  # the step is registered: its Withdraw is told now, first
            return tell(uid, message, *rest)

        monkeypatch.setattr(d._registry, "tell", cancel_then_tell)
        step = g.submit(reserve(c1, pod), after=[prereq] if held else ())
        err = outcome(step)
        if held:
            assert isinstance(err, DependencyFailed) and type(err.cause) is CallCancelled
        else:
            assert type(err) is CallCancelled, err
        group_err = outcome(g.future)
        assert isinstance(group_err, GroupFailed) and group_err.results == [err]
        assert d.open_groups == 0 and d.held_calls == 0
        for claim in (c0, c1):  # the calls left in their backoff
            d.cancel(claim["metadata"]["uid"])
        assert type(outcome(prereq)) is CallCancelled
        if busy:  # withdrawn by its own caller, not overwritten by the step
            assert type(outcome(other)) is CallCancelled
    assert len(requests(server.request_log, "patch_status", "b")) == int(busy)  # other's 429
