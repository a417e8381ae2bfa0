"""Crash isolation: a bug in one object's call code hurts that object's calls only.

A user call type for a custom kind (``Quota``) raises from the method under test. The futures of
that object fail with :class:`CallFailed` whose ``cause`` is the exception, its actor is replaced
by a clean one on the next submit, and every other object's calls — pending before the crash,
submitted after it — go through untouched.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kdispatch.actors.engine.messages import CallFuture
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RetryConfig,
)
from kdispatch.actors.model.errors import CallFailed, Outcome
from kdispatch.actors.model.objects import Obj, ObjectRef, get_path, with_path
from kdispatch.testing.memory import InMemoryApiServer
from tests.backends import GatedBackend, T
from tests.factories import call_types_with

pytestmark = pytest.mark.timeout(30)

ARMED = threading.Event()
"""While set, a ``QuotaUsage`` with ``fail_in`` raises from that method (cleared per test)."""


ELSEWHERE: list[ObjectRef] = []
"""The object a ``QuotaUsage`` with ``fail_in="merge_elsewhere"`` merges into a call for."""


class MergerBug(RuntimeError):
    """The exception a buggy call method raises."""


@dataclass(frozen=True, slots=True)
class QuotaUsage(Call):
    """Set ``status.used`` of a ``Quota`` custom resource; ``fail_in`` names a method that
    raises :class:`MergerBug` while :data:`ARMED` is set."""

    call_type = "quota_usage"
    kind = "Quota"
    relevance = 1

    ref: ObjectRef
    used: int
    fail_in: str = ""
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def _maybe_fail(self, where: str) -> None:
        if self.fail_in == where and ARMED.is_set():
            raise MergerBug(f"bug in {where} of {self.ref.name}")

    def merge(self, older: QuotaUsage) -> QuotaUsage:
        self._maybe_fail("merge")
        if self.fail_in == "merge_elsewhere" and ARMED.is_set():
            return dataclasses.replace(self, ref=ELSEWHERE[0])  # a bug: another object's call
        return self

    def is_noop(self, obj: Obj | None) -> bool:
        self._maybe_fail("is_noop")
        return obj is not None and get_path(obj, "status", "used") == self.used

    def precheck(self, obj: Obj | None) -> str | None:
        self._maybe_fail("precheck")
        return None

    def apply(self, obj: Obj) -> Obj:
        self._maybe_fail("apply")
        return with_path(obj, ("status", "used"), self.used)

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        self._maybe_fail("send")
        ref = self.ref
        return backend.patch_status(
            ref.kind,
            ref.namespace,
            ref.name,
            {"status": {"used": self.used}},
            uid=ref.uid,
            resource_version=None,
            patch_type="merge",
        )


class Env:
    """A server with quotas ``bad`` and ``ok-0..4``, a gated backend and a dispatcher."""

    def __init__(self, workers: int = 1) -> None:
        self.server = InMemoryApiServer()
        self.gated = GatedBackend(self.server)
        self.quotas = {
            name: self.server.create({"kind": "Quota", "metadata": {"name": name}, "status": {}})
            for name in ["bad", "blocker", *(f"ok-{i}" for i in range(5))]
        }
        call_types = call_types_with("Quota")
        call_types.register(QuotaUsage)
        self.metrics = CollectorRegistry()
        self.d = Dispatcher(
            self.gated,
            DispatcherConfig(
                rate_limit=RateLimitConfig(qps=math.inf, burst=1),
                retry=RetryConfig(base_backoff=0.0, max_backoff=0.0),
                executor=ExecutorConfig(workers=workers),
            ),
            call_types=call_types,
            metrics_registry=self.metrics,
        ).start()

    def submit(self, name: str, used: int, fail_in: str = "") -> CallFuture:
        q = self.quotas[name]
        return self.d.submit(QuotaUsage(ObjectRef.of(q), used, fail_in, basis=q))

    def hold_the_worker(self) -> CallFuture:
        """Occupy the only executor worker with a held request, so new calls stay pending."""
        self.gated.gate.clear()
        future = self.submit("blocker", 1)
        self.gated.wait_calls(1)
        return future

    def used(self, name: str) -> Any:
        obj = self.server.get_object("Quota", "default", name)
        assert obj is not None
        return obj["status"].get("used")

    def crashes(self) -> float:
        value = self.metrics.get_sample_value("kdispatch_object_actor_failures_total")
        return value or 0.0


@pytest.fixture
def env() -> Iterator[Env]:
    ARMED.set()
    e = Env()
    try:
        yield e
    finally:
        ARMED.clear()
        e.gated.gate.set()
        e.d.stop(timeout=10)


def _failed_with_bug(future: CallFuture) -> MergerBug:
    exc = future.exception(timeout=10)
    assert isinstance(exc, CallFailed), exc
    assert isinstance(exc.cause, MergerBug)
    assert exc.__cause__ is exc.cause
    assert exc.call_type == "quota_usage"
    return exc.cause


def test_merger_crash_fails_that_objects_futures_and_leaves_the_others_untouched(
    env: Env,
) -> None:
    blocker = env.hold_the_worker()
    before = [env.submit(f"ok-{i}", 10 + i) for i in range(5)]
    pending = env.submit("bad", 1)  # queued behind the blocker
    crashing = env.submit("bad", 2, fail_in="merge")  # merging it with the pending one raises
    # resolved at once, while the executor is still blocked: the crash is handled in the actor
    bug = _failed_with_bug(crashing)
    assert _failed_with_bug(pending) is bug
    after = [env.submit(f"ok-{i}", 20 + i) for i in range(5)]
    env.gated.gate.set()
    assert blocker.result(timeout=10) is Outcome.SUCCESS
    assert {f.result(timeout=10) for f in before} == {Outcome.OVERWRITTEN}
    assert {f.result(timeout=10) for f in after} == {Outcome.SUCCESS}
    assert [env.used(f"ok-{i}") for i in range(5)] == [20, 21, 22, 23, 24]
    assert env.used("bad") is None  # nothing of the crashed actor's calls was sent
    # a clean actor takes over on the next submit
    assert env.submit("bad", 3).result(timeout=10) is Outcome.SUCCESS
    assert env.used("bad") == 3
    assert env.crashes() == 1
    assert env.d.stop(timeout=10) is True  # nothing left outstanding


def test_a_merge_returning_another_objects_call_fails_this_objects_calls(env: Env) -> None:
    """A custom merge that returns a call for another object is a bug of this object's calls:
    they fail with ``CallFailed``, and nothing is written to either object."""
    ELSEWHERE[:] = [ObjectRef.of(env.quotas["ok-0"])]
    blocker = env.hold_the_worker()
    pending = env.submit("bad", 1)
    wrong = env.submit("bad", 2, fail_in="merge_elsewhere")
    for future in (wrong, pending):
        error = future.exception(timeout=10)
        assert isinstance(error, CallFailed) and isinstance(error.cause, TypeError), error
    env.gated.gate.set()
    assert blocker.result(timeout=10) is Outcome.SUCCESS
    assert (env.used("ok-0"), env.used("bad")) == (None, None)
    assert [r.name for r in env.server.request_log] == ["blocker"]


@pytest.mark.parametrize("where", ["is_noop", "precheck"])
def test_crash_while_accepting_a_call(env: Env, where: str) -> None:
    others = [env.submit(f"ok-{i}", i) for i in range(5)]
    _failed_with_bug(env.submit("bad", 1, fail_in=where))
    assert {f.result(timeout=10) for f in others} == {Outcome.SUCCESS}
    assert env.submit("bad", 2).result(timeout=10) is Outcome.SUCCESS
    assert env.used("bad") == 2
    assert env.crashes() == 1


def test_send_raising_fails_the_call_without_crashing_the_actor(env: Env) -> None:
    _failed_with_bug(env.submit("bad", 1, fail_in="send"))
    assert env.submit("bad", 2).result(timeout=10) is Outcome.SUCCESS
    assert env.used("bad") == 2
    assert env.crashes() == 0


def test_view_raising_reaches_the_caller_and_the_actor_keeps_working(env: Env) -> None:
    blocker = env.hold_the_worker()
    pending = env.submit("bad", 1, fail_in="apply")
    uid = env.quotas["bad"]["metadata"]["uid"]
    with pytest.raises(MergerBug):
        env.d.view(uid)
    env.gated.gate.set()
    assert blocker.result(timeout=10) is Outcome.SUCCESS
    assert pending.result(timeout=10) is Outcome.SUCCESS
    assert env.crashes() == 0


def test_crash_while_handling_a_grant_frees_the_executor_slot() -> None:
    """Regression: the crashed actor never answered the Grant, so the only worker slot was
    never freed and every other object waited forever."""
    e = Env(workers=1)
    try:
        blocker = e.hold_the_worker()
        ARMED.clear()
        # The precheck runs at every grant (elision and staleness, being pure, are not
        # re-checked against the same object), so it is where a bug at grant time shows.
        bad = e.submit("bad", 1, fail_in="precheck")  # accepted: not armed yet
        e.d.view(e.quotas["bad"]["metadata"]["uid"])  # a round trip: the submit was handled
        other = e.submit("ok-0", 5)
        ARMED.set()  # the check at grant time raises
        e.gated.gate.set()
        assert blocker.result(timeout=10) is Outcome.SUCCESS
        _failed_with_bug(bad)
        assert other.result(timeout=5) is Outcome.SUCCESS
    finally:
        ARMED.clear()
        e.gated.gate.set()
        e.d.stop(drain=False, timeout=5)


class _HoldFirst(GatedBackend):
    """Holds the first ``patch_status`` of ``bad`` until ``release``; records how many requests
    per object were in flight at once."""

    def __init__(self, inner: InMemoryApiServer) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.overlap: dict[str, int] = {}

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        if op != "patch_status":
            return super().around(op, request, send)
        name = request["name"]
        with self.lock:
            self.active[name] = self.active.get(name, 0) + 1
            self.overlap[name] = max(self.overlap.get(name, 0), self.active[name])
            first = name == "bad" and not self.entered.is_set()
            self.entered.set()
        try:
            if first:
                assert self.release.wait(timeout=20)
            return super().around(op, request, send)
        finally:
            with self.lock:
                self.active[name] -= 1


def test_no_second_request_for_an_object_while_the_crashed_actors_is_in_flight() -> None:
    """Regression: the clean actor once sent at once, concurrently with the crashed actor's
    request, which then landed last and overwrote the newer value."""
    ARMED.set()
    e = Env(workers=2)
    held = _HoldFirst(e.server)
    e.d.stop()
    call_types = call_types_with("Quota")
    call_types.register(QuotaUsage)
    e.d = Dispatcher(held, e.d.config, call_types=call_types).start()
    try:
        e.submit("bad", 1)  # in flight, held
        assert held.entered.wait(timeout=10)
        e.submit("bad", 2)
        _failed_with_bug(e.submit("bad", 3, fail_in="merge"))
        newest = e.submit("bad", 4)
        wait([newest], timeout=0.5)  # time for a wrong second request to show up
        held.release.set()
        assert newest.result(timeout=10) is Outcome.SUCCESS
        assert held.overlap["bad"] == 1
        assert e.used("bad") == 4
    finally:
        ARMED.clear()
        held.release.set()
        e.d.stop(timeout=10)
