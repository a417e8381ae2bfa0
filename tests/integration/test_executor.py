"""The executor alone: lanes, minimum share, token bucket, refunds, backoff, classification.

Object actors are replaced by tiny fake refs that answer ``Grant`` at once with a job (or a
``Refund``), so the executor's scheduling can be observed directly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from kdispatch.actors.engine.executor import Executor
from kdispatch.actors.engine.messages import Grant
from kdispatch.actors.engine.metrics import Metrics
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.config import ExecutorConfig, RateLimitConfig, RetryConfig
from kdispatch.actors.model.effects import Done, Result, Send
from kdispatch.actors.model.errors import (
    ConflictError,
    InvalidRequestError,
    LeadershipLost,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from kdispatch.actors.model.objects import Obj, ObjectRef
from kdispatch.testing.waiting import wait_for
from tests.clocks import ManualClock
from tests.factories import InertCall

pytestmark = pytest.mark.timeout(30)


@dataclass(frozen=True, slots=True)
class Probe(InertCall):
    """A call that records its send and can block on an event or raise."""

    call_type: ClassVar[str] = "probe"
    relevance: ClassVar[int] = 1

    log: list[str] = field(compare=False)
    block: threading.Event | None = field(default=None, compare=False)
    raises: BaseException | None = field(default=None, compare=False)

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        self.log.append(self.ref.name)
        if self.block is not None:
            assert self.block.wait(10)
        if self.raises is not None:
            raise self.raises
        return None


class FakeRef:
    """An object actor reduced to its answers: a Grant gets ``executor.job`` for ``call`` (or
    ``executor.refund()`` when ``call`` is None); a Done is recorded."""

    def __init__(self, executor: Executor, call: Call | None, uid: str = "refunder") -> None:
        self.executor = executor
        self.call = call
        self.uid = call.ref.uid if call is not None else uid
        self.grants = 0
        self.done: list[Done] = []
        self.finished = threading.Event()

    def ready(self, relevance: int = 1, not_before: float = 0.0) -> None:
        """Like the actor: tell the executor, and go on at once if granted on the spot."""
        if self.executor.ready(self.uid, self, relevance, not_before):
            self.on_grant()

    def on_grant(self) -> None:
        self.grants += 1
        if self.call is None:
            self.executor.refund()
            return
        done = self.executor.job(self, Send(self.call, None, 1))
        if done is not None:
            self.tell(done)

    def tell(self, msg: Any) -> bool:
        if isinstance(msg, Grant):
            self.on_grant()
        elif isinstance(msg, Done):
            self.done.append(msg)
            self.finished.set()
        return True

    def run_or_tell(self, msg: Any) -> bool:
        """A worker hands a result over: answered here, like a tell."""
        return self.tell(msg)


class NullBackend:
    def __init__(self) -> None:
        self.gets = 0

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        self.gets += 1
        return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "9"}}

    def patch_status(self, *a: Any, **k: Any) -> Obj:
        raise AssertionError("not used")

    def bind(self, *a: Any, **k: Any) -> None:
        raise AssertionError("not used")

    def delete(self, *a: Any, **k: Any) -> None:
        raise AssertionError("not used")


def make(
    *,
    workers: int = 1,
    share: float = 0.0,
    qps: float = float("inf"),
    burst: int = 1,
    clock: ManualClock | None = None,
    backend: Any = None,
    send_gate: Any = None,
) -> Executor:
    return Executor(
        backend if backend is not None else NullBackend(),
        relevances=[1, 2, 3],
        rate_limit=RateLimitConfig(qps=qps, burst=burst),
        retry=RetryConfig(base_backoff=0.005, max_backoff=1.0),
        config=ExecutorConfig(workers=workers, lane_min_share=share),
        metrics=Metrics(),
        clock=clock or ManualClock(),
        send_gate=send_gate,
        rand=lambda: 0.0,  # no jitter: delays are exact
    )


@pytest.fixture
def started() -> Iterator[list[Executor]]:
    executors: list[Executor] = []
    yield executors
    for e in executors:
        e.stop(timeout=5)


def probe(name: str, log: list[str], relevance: int = 1, **kw: Any) -> Call:
    cls: type[Probe] = {1: Probe, 2: Probe2, 3: Probe3}[relevance]
    return cls(ObjectRef("Pod", "default", name, f"uid-{name}"), log, **kw)


@dataclass(frozen=True, slots=True)
class Probe2(Probe):
    call_type: ClassVar[str] = "probe2"
    relevance: ClassVar[int] = 2


@dataclass(frozen=True, slots=True)
class Probe3(Probe):
    call_type: ClassVar[str] = "probe3"
    relevance: ClassVar[int] = 3


def run_order(share: float, started: list[Executor]) -> list[str]:
    """One worker held busy while 3 deletions, 6 bindings and 6 patches queue up."""
    ex = make(workers=1, share=share)
    ex.start()
    started.append(ex)
    log: list[str] = []
    gate = threading.Event()
    blocker = FakeRef(ex, probe("blocker", log, block=gate))
    blocker.ready(1)
    refs = []
    names = [(f"p{i}", 1) for i in range(6)] + [(f"b{i}", 2) for i in range(6)]
    names += [(f"d{i}", 3) for i in range(3)]
    for name, rel in names:
        ref = FakeRef(ex, probe(name, log, rel))
        refs.append(ref)
        ref.ready(rel)
    gate.set()
    for ref in refs:
        assert ref.finished.wait(10)
    return log[1:]


def test_lanes_deletions_then_bindings_then_patches(started: list[Executor]) -> None:
    order = run_order(0.0, started)
    assert order == ["d0", "d1", "d2", *[f"b{i}" for i in range(6)], *[f"p{i}" for i in range(6)]]


def test_lower_lanes_get_their_minimum_share(started: list[Executor]) -> None:
    order = run_order(0.5, started)
    # with a 50% share, patches are interleaved long before the bindings are exhausted
    assert order.index("p0") < order.index("b5")
    assert order.index("b0") < order.index("d2")
    # FIFO within each lane
    assert [n for n in order if n[0] == "p"] == [f"p{i}" for i in range(6)]
    assert [n for n in order if n[0] == "b"] == [f"b{i}" for i in range(6)]


def held_up(log: list[str]) -> tuple[Executor, FakeRef]:
    """A one-worker executor, not started, whose only slot a first grant holds ("busy"): what
    is ready next waits in its lane."""
    ex = make(workers=1)
    busy = FakeRef(ex, probe("busy", log))
    busy.ready(1)
    return ex, busy


def test_duplicate_ready_keeps_one_place(started: list[Executor]) -> None:
    log: list[str] = []
    ex, busy = held_up(log)
    ref = FakeRef(ex, probe("a", log))
    ref.ready(1)
    ref.ready(1)
    assert ex.backlog() == 1
    assert (busy.grants, ref.grants) == (1, 0)


def test_a_ready_in_a_higher_lane_takes_the_object_out_of_the_lower_one(
    started: list[Executor],
) -> None:
    """A binding replaced a queued status patch: the object's place moves up a lane, and its
    old place goes (granted, it would send nothing and give the token back)."""
    log: list[str] = []
    ex, _ = held_up(log)
    ref = FakeRef(ex, probe("a", log))
    ref.ready(1)
    other = FakeRef(ex, probe("b", log))
    other.ready(1)
    ref.call = probe("a", log, 2)
    ref.ready(2)
    assert ex.backlog() == 2
    ex.start()
    started.append(ex)
    assert ref.finished.wait(10) and other.finished.wait(10)  # b goes last in its lane
    assert log == ["busy", "a", "b"]
    assert (ref.grants, other.grants) == (1, 1)


def test_token_bucket_throttles_and_refills(started: list[Executor]) -> None:
    clock = ManualClock()
    ex = make(workers=8, qps=10, burst=2, clock=clock)
    refs = [FakeRef(ex, None, f"uid-{i}") for i in range(5)]  # refunders: tokens come back
    for ref in refs:
        ref.ready(1)
    assert sum(r.grants for r in refs) == 5  # refunds make tokens free again
    assert ex.tokens_taken == 0
    log: list[str] = []
    workers = [FakeRef(ex, probe(f"w{i}", log)) for i in range(5)]
    for ref in workers:
        ref.ready(1)
    assert sum(r.grants for r in workers) == 2  # burst
    assert ex.backlog() == 3
    clock.now += 0.1
    ex.wake()
    assert sum(r.grants for r in workers) == 3
    clock.now += 0.2
    ex.wake()
    assert sum(r.grants for r in workers) == 5
    assert ex.tokens_taken == 5


def test_parallelism_is_bounded(started: list[Executor]) -> None:
    ex = make(workers=2)
    ex.start()
    started.append(ex)
    log: list[str] = []
    gate = threading.Event()
    refs = [FakeRef(ex, probe(f"a{i}", log, block=gate)) for i in range(5)]
    for ref in refs:
        ref.ready(1)
    assert sum(r.grants for r in refs) == 2
    gate.set()
    for ref in refs:
        assert ref.finished.wait(10)
    assert sorted(log) == [f"a{i}" for i in range(5)]


def test_backoff_ready_waits_until_due(started: list[Executor]) -> None:
    clock = ManualClock()
    ex = make(clock=clock)
    ref = FakeRef(ex, None)
    ref.ready(1, not_before=5.0)
    assert ref.grants == 0 and ex.backlog() == 1
    clock.now = 4.9
    ex.wake()
    assert ref.grants == 0
    clock.now = 5.0
    ex.wake()
    assert ref.grants == 1


def test_retry_delay_is_exponential_capped_jittered_and_honours_retry_after() -> None:
    retry = RetryConfig(base_backoff=0.005, max_backoff=0.1, jitter=0.2, max_retry_after=30.0)
    assert [retry.delay(n) for n in (1, 2, 3)] == [0.005, 0.01, 0.02]
    assert retry.delay(30) == 0.1
    assert retry.delay(1, rand=0.5) == pytest.approx(0.0055)  # up to +20 % jitter
    assert retry.delay(30, rand=0.999) < 0.1 * 1.2
    assert retry.delay(1, retry_after=3.0) == 3.0
    assert retry.delay(1, retry_after=3600.0) == 30.0  # capped


def test_default_budget_rides_out_an_apiserver_restart() -> None:
    assert RetryConfig().budget >= 60.0
    assert RetryConfig().max_attempts is None


@pytest.mark.parametrize(
    ("error", "result"),
    [
        (None, Result.SUCCESS),
        (TooManyRequestsError(retry_after=2.5), Result.RETRY),
        (ServerError(), Result.RETRY),
        (ConflictError(), Result.CONFLICT),
        (NotFoundError(), Result.NOT_FOUND),
        (InvalidRequestError(), Result.FAILED),
        (RuntimeError("bug in send"), Result.FAILED),
    ],
)
def test_execute_classifies_results(error: BaseException | None, result: Result) -> None:
    ex = make()
    call = probe("a", [], raises=error)
    done = ex.sender.send(Send(call, None, 1))[0]
    assert done.result is result
    assert done.error is error
    if isinstance(error, TooManyRequestsError):
        assert done.delay == 2.5
    if isinstance(error, ServerError):
        assert done.delay == 0.005
    if isinstance(error, ConflictError):
        assert done.obj is not None and done.obj["metadata"]["resourceVersion"] == "9"


@pytest.mark.parametrize("read", [False, True])
def test_the_backoff_doubles_with_each_failure_of_the_call_its_rereads_included(
    read: bool,
) -> None:
    """The delay after a 500 is ``base_backoff * 2**failures``: a call whose re-reads keep
    failing (an apiserver restarting) backs off further each time, as one whose own requests
    fail does (it used to wait the first delay before every re-read)."""
    ex = make()  # base_backoff 5 ms, max_backoff 1 s, no jitter
    call = probe("a", [], raises=ServerError("down"))

    class Down(NullBackend):
        def get(self, kind: str, namespace: str, name: str) -> Obj:
            raise ServerError("down")

    ex.sender.backend = Down()
    for failures, delay in ((0, 0.005), (3, 0.04), (20, 1.0)):
        done = ex.sender.send(Send(call, None, 1, read, False, failures))[0]
        assert (done.result, done.delay) == (Result.RETRY, delay)


def test_a_throttled_read_after_a_conflict_is_a_retry_after_its_retry_after() -> None:
    """The GET after a 409 answered 429: the attempt is retried, not taken for a conflict
    without an object, and never sooner than the GET's Retry-After."""

    class Throttled(NullBackend):
        def get(self, kind: str, namespace: str, name: str) -> Obj:
            raise TooManyRequestsError("throttled", retry_after=7.0)

    ex = make(backend=Throttled())
    done, requests = ex.sender.send(Send(probe("a", [], raises=ConflictError()), None, 1))
    assert (done.result, done.delay, requests) == (Result.RETRY, 7.0, 1)  # the GET (the probe
    # answers 409 without a request)
    assert isinstance(done.error, TooManyRequestsError) and done.obj is None


def test_conflict_refetch_of_recreated_object_is_not_found() -> None:
    class Recreated(NullBackend):
        def get(self, kind: str, namespace: str, name: str) -> Obj:
            return {"metadata": {"name": name, "uid": "someone-else", "resourceVersion": "1"}}

    ex = Executor(
        Recreated(),
        relevances=[1],
        rate_limit=RateLimitConfig(),
        retry=RetryConfig(),
        config=ExecutorConfig(),
        metrics=Metrics(),
    )
    done = ex.sender.send(Send(probe("a", [], raises=ConflictError()), None, 1))[0]
    assert done.result is Result.NOT_FOUND and done.obj is None


# --------------------------------------------------------------------------- a token per request


class Server:
    """Records every request (verb, name) and the thread it ran on; the first ``conflicts``
    patches guarded by a resourceVersion answer 409. Worker threads."""

    def __init__(self, conflicts: int = 0, non_blocking: bool = False) -> None:
        self.requests: list[tuple[str, str]] = []
        self.threads: list[str] = []
        self.conflicts = conflicts
        self.non_blocking = non_blocking
        self._lock = threading.Lock()

    def _record(self, verb: str, name: str) -> None:
        with self._lock:
            self.requests.append((verb, name))
            self.threads.append(threading.current_thread().name)

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        self._record("get", name)
        return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "9"}}

    def patch_status(self, kind: str, namespace: str, name: str, *a: Any, **k: Any) -> Obj:
        self._record("patch", name)
        with self._lock:
            if self.conflicts and k.get("resource_version") is not None:
                self.conflicts -= 1
                raise ConflictError()
        return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "10"}}

    def bind(self, namespace: str, name: str, **k: Any) -> None:
        self._record("bind", name)

    def delete(self, kind: str, namespace: str, name: str, **k: Any) -> None:
        self._record("delete", name)


@dataclass(frozen=True, slots=True)
class OnePatch(InertCall):
    """One status patch (the server may answer 409: then the executor GETs once)."""

    call_type: ClassVar[str] = "one_patch"
    relevance: ClassVar[int] = 1
    guard: ClassVar[str | None] = "1"  # the patch's resourceVersion precondition

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        ref = self.ref
        return backend.patch_status(
            ref.kind, ref.namespace, ref.name, {}, uid=ref.uid, resource_version=self.guard
        )


@dataclass(frozen=True, slots=True)
class TwoStep(OnePatch):
    """A preemption-like call: an unguarded condition patch, then a delete (two requests)."""

    call_type: ClassVar[str] = "two_step"
    relevance: ClassVar[int] = 3
    guard: ClassVar[str | None] = None

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        OnePatch.send(self, backend, obj)
        ref = self.ref
        backend.delete(ref.kind, ref.namespace, ref.name, uid=ref.uid)
        return None


def _ref(name: str) -> ObjectRef:
    return ObjectRef("Pod", "default", name, f"uid-{name}")


def _requests_counted(ex: Executor) -> float:
    registry = ex.metrics.registry
    total = 0.0
    for metric in registry.collect():
        if metric.name == "kdispatch_requests":
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return total


def _run(ex: Executor, calls: list[Call]) -> list[FakeRef]:
    refs = [FakeRef(ex, c) for c in calls]
    for ref, call in zip(refs, calls, strict=True):
        ref.ready(call.relevance)
    for ref in refs:
        assert ref.finished.wait(10)
    return refs


@pytest.mark.parametrize(
    ("calls", "conflicts", "requests"),
    [
        ([TwoStep(_ref("a"))], 0, 2),  # patch + delete
        ([OnePatch(_ref("a"))], 1, 2),  # patch (409) + the GET after it
        (
            [TwoStep(_ref(f"d{i}")) for i in range(5)]
            + [OnePatch(_ref(f"p{i}")) for i in range(5)]
            + [Probe(_ref(f"n{i}"), []) for i in range(5)],  # sends nothing
            5,
            20,
        ),
    ],
    ids=["two-requests", "409-and-get", "mixed"],
)
def test_tokens_taken_equal_requests_sent(
    started: list[Executor], calls: list[Call], conflicts: int, requests: int
) -> None:
    server = Server(conflicts=conflicts)
    ex = make(workers=4, qps=1000, burst=1000, backend=server)
    ex.start()
    started.append(ex)
    refs = _run(ex, calls)
    assert len(server.requests) == requests
    assert ex.tokens_taken == requests
    assert _requests_counted(ex) == requests
    if conflicts:
        assert sum(1 for r in refs if r.done[0].result is Result.CONFLICT) == conflicts
        assert server.requests.count(("get", "a")) <= 1  # one GET per 409


def test_a_job_that_sends_nothing_gives_its_token_back(started: list[Executor]) -> None:
    clock = ManualClock()
    ex = make(workers=2, qps=1, burst=1, clock=clock)
    ex.start()
    started.append(ex)
    _run(ex, [probe("a", [])])  # the only token, and no request
    assert ex.tokens_taken == 0
    (b,) = _run(ex, [probe("b", [])])  # the token is there again without any refill
    assert b.grants == 1


def test_followup_requests_take_tokens_before_new_grants(started: list[Executor]) -> None:
    clock = ManualClock()
    server = Server()
    ex = make(workers=2, qps=1, burst=1, clock=clock, backend=server)
    ex.start()
    started.append(ex)
    a = FakeRef(ex, TwoStep(_ref("a")))
    a.ready(3)  # granted on the spot: the only token; its DELETE waits for the next one
    wait_for(lambda: ex._followups == 1, 5.0, "the follow-up request to wait for a token")
    b = FakeRef(ex, OnePatch(_ref("b")))
    b.ready(1)
    assert b.grants == 0
    clock.now += 1.0  # one token refills: the started call gets it
    ex.wake()
    assert a.finished.wait(10)
    assert b.grants == 0
    clock.now += 1.0
    ex.wake()
    assert b.finished.wait(10)
    assert server.requests == [("patch", "a"), ("delete", "a"), ("patch", "b")]
    assert ex.tokens_taken == 3


def test_a_follow_up_the_gate_refuses_after_its_token_wait_gives_its_token_back(
    started: list[Executor],
) -> None:
    """The lease is lost while a call's second request waits for its token: that request is
    not sent, the call fails ``LeadershipLost``, and its token goes back to the bucket, so
    the tokens taken still equal the requests the server saw."""
    clock = ManualClock()
    server = Server()
    lease = threading.Event()
    lease.set()
    ex = make(workers=2, qps=1, burst=1, clock=clock, backend=server, send_gate=lease.is_set)
    ex.start()
    started.append(ex)
    a = FakeRef(ex, TwoStep(_ref("a")))
    a.ready(3)  # granted on the spot: the only token; its DELETE waits for the next one
    wait_for(lambda: ex._followups == 1, 5.0, "the follow-up request to wait for a token")
    lease.clear()
    clock.now += 1.0  # a token refills: the follow-up takes it, then finds the gate closed
    ex.wake()
    assert a.finished.wait(10)
    assert isinstance(a.done[0].error, LeadershipLost)
    assert server.requests == [("patch", "a")]
    assert ex.tokens_taken == 1


@pytest.mark.parametrize(
    "error", [ServerError(retry_after=3.0), TooManyRequestsError(retry_after=3.0)], ids=str
)
def test_retry_after_sets_the_delay_on_5xx_and_429(error: BaseException) -> None:
    ex = make()
    done = ex.sender.send(Send(probe("a", [], raises=error), None, 1))[0]
    assert done.result is Result.RETRY
    assert done.delay >= 3.0


def test_send_gate_closed_fails_with_leadership_lost_and_sends_nothing(
    started: list[Executor],
) -> None:
    server = Server()
    ex = make(workers=1, backend=server, send_gate=lambda: False)
    ex.start()
    started.append(ex)
    (a,) = _run(ex, [OnePatch(_ref("a"))])
    assert a.done[0].result is Result.FAILED
    assert isinstance(a.done[0].error, LeadershipLost)
    assert server.requests == []
    assert ex.tokens_taken == 0


def test_inline_execution_with_a_non_blocking_backend_returns_done_from_job(
    started: list[Executor],
) -> None:
    server = Server(non_blocking=True)
    ex = make(workers=2, backend=server)  # infinite QPS: no token is ever waited for
    ex.start()
    started.append(ex)
    a = FakeRef(ex, OnePatch(_ref("a")))
    a.ready(1)
    assert [d.result for d in a.done] == [Result.SUCCESS]  # returned by job(), on this thread
    assert server.threads == [threading.current_thread().name]


def test_a_blocking_backend_never_runs_inline(started: list[Executor]) -> None:
    server = Server(non_blocking=False)
    ex = make(workers=1, backend=server)
    ex.start()
    started.append(ex)
    (a,) = _run(ex, [OnePatch(_ref("a"))])
    assert [d.result for d in a.done] == [Result.SUCCESS]  # as a message, from a worker
    assert server.threads != [threading.current_thread().name]


def tick(ex: Executor, clock: ManualClock, seconds: float) -> None:
    """Move the clock and let the executor see it (as its timer would)."""
    clock.advance(seconds)
    ex.wake()


def reserved_block(
    size: int, *, burst: int
) -> tuple[Executor, ManualClock, list[str], list[FakeRef]]:
    """An executor (qps 10, never started) with a token block reserved for ``size`` members
    in lane 2, on a manual clock; the members are not ready yet."""
    clock = ManualClock()
    ex = make(workers=8, qps=10, burst=burst, clock=clock)
    log: list[str] = []
    members = [FakeRef(ex, probe(f"m{i}", log, 2)) for i in range(size)]
    ex.reserve_block([m.uid for m in members], 2)
    return ex, clock, log, members


def test_a_block_waits_for_its_turn_in_its_lane_then_takes_its_tokens_at_once(
    started: list[Executor],
) -> None:
    """A gang's members (a block) take one place in their lane; at its turn the block waits
    for all its tokens, then its members are granted together, and no other object takes a
    token meanwhile, whatever its lane."""
    clock = ManualClock()
    ex = make(workers=16, qps=10, burst=4, clock=clock)  # never started: slots stay taken
    log: list[str] = []
    for i in range(4):
        FakeRef(ex, probe(f"early{i}", log)).ready(1)  # the bucket is empty now
    ahead = [FakeRef(ex, probe("deletion", log, 3)), FakeRef(ex, probe("binding", log, 2))]
    for ref, lane in zip(ahead, (3, 2), strict=True):
        ref.ready(lane)
    members = [FakeRef(ex, probe(f"m{i}", log, 2)) for i in range(3)]
    ex.reserve_block([m.uid for m in members], 2)  # behind "binding" in lane 2
    for m in members:
        m.ready(2)
    assert ex.backlog() == 5
    tick(ex, clock, 0.2)
    assert [a.grants for a in ahead] == [1, 1] and [m.grants for m in members] == [0, 0, 0]
    late = FakeRef(ex, probe("late-deletion", log, 3))
    tick(ex, clock, 0.2)  # two tokens: not enough for the block's three, and nobody else takes
    late.ready(3)
    assert [m.grants for m in members] == [0, 0, 0] and late.grants == 0
    tick(ex, clock, 0.1)
    assert [m.grants for m in members] == [1, 1, 1] and late.grants == 0
    tick(ex, clock, 0.15)
    assert late.grants == 1 and ex.backlog() == 0
    assert ex.tokens_taken == 10


def test_a_block_larger_than_the_burst_is_granted_at_the_buckets_rate_uninterrupted(
    started: list[Executor],
) -> None:
    ex, clock, log, members = reserved_block(4, burst=2)
    other = FakeRef(ex, probe("other", log, 2))
    other.ready(2)  # queued behind the block, which took its turn at once
    for m in members:
        m.ready(2)
    assert sum(m.grants for m in members) == 2 and other.grants == 0
    tick(ex, clock, 0.1)
    assert sum(m.grants for m in members) == 3 and other.grants == 0
    tick(ex, clock, 0.1)
    assert sum(m.grants for m in members) == 4 and other.grants == 0
    tick(ex, clock, 0.1)
    assert other.grants == 1


def test_nothing_is_granted_on_the_spot_while_a_block_waits_for_a_member(
    started: list[Executor],
) -> None:
    """A block paid in full but with a member not ready yet holds every other grant, the
    on-the-spot one too: an object ready meanwhile, with a token spare in the bucket and
    nothing else queued, waits until the last member was granted."""
    ex, _, log, members = reserved_block(3, burst=4)
    members[0].ready(2)
    members[1].ready(2)  # the block's turn: its three tokens at once, two members granted
    assert [m.grants for m in members] == [1, 1, 0]
    other = FakeRef(ex, probe("other", log, 1))
    other.ready(1)  # the bucket holds a fourth token, and no one else waits
    assert other.grants == 0
    members[2].ready(2)
    assert [m.grants for m in members] == [1, 1, 1] and other.grants == 1
    assert ex.tokens_taken == 4


def test_a_member_leaving_its_block_gives_its_token_to_the_others(
    started: list[Executor],
) -> None:
    ex, _, log, members = reserved_block(3, burst=3)  # paid at once: the bucket held 3
    members[0].ready(2)
    assert members[0].grants == 1
    ex.leave_block(members[1].uid)  # resolved before its grant (withdrawn, deleted)
    ex.leave_block(members[0].uid)  # granted already: nothing to give back
    other = FakeRef(ex, probe("other", log, 1))
    other.ready(1)
    assert other.grants == 0  # a member is still to come: nothing interleaves
    members[2].ready(2)
    assert members[2].grants == 1
    assert other.grants == 1  # the left member's token
    assert ex.tokens_taken == 3 and ex.backlog() == 0
    late = FakeRef(ex, probe("late", log, 1))
    late.ready(1)  # no block left: the bucket is empty, the object waits as before blocks
    assert late.grants == 0 and ex.backlog() == 1


def test_a_member_queued_before_its_block_moves_to_the_block(started: list[Executor]) -> None:
    clock = ManualClock()
    ex = make(workers=8, qps=10, burst=1, clock=clock)
    log: list[str] = []
    FakeRef(ex, probe("first", log)).ready(1)  # the bucket is empty
    ahead = FakeRef(ex, probe("ahead", log, 2))
    ahead.ready(2)
    members = [FakeRef(ex, probe(f"m{i}", log, 2)) for i in range(2)]
    members[0].ready(2)  # queued behind "ahead" before the block exists
    ex.reserve_block([m.uid for m in members], 2)
    members[1].ready(2)
    assert ex.backlog() == 3
    tick(ex, clock, 0.1)
    assert ahead.grants == 1 and [m.grants for m in members] == [0, 0]
    tick(ex, clock, 0.1)  # the block's turn: larger than the burst, a token at a time
    tick(ex, clock, 0.1)
    assert [m.grants for m in members] == [1, 1] and ex.backlog() == 0


def test_a_member_queued_for_another_call_takes_no_token_of_its_block(
    started: list[Executor],
) -> None:
    """A member queued in another lane when its block is made (its pod's other call, ahead
    of its binding) waits parked: the block's token is for its binding. Its actor's Ready in
    the block's lane takes it; a Ready in another lane (that call is next) takes it out."""
    clock = ManualClock()
    ex = make(workers=8, qps=10, burst=1, clock=clock)
    log: list[str] = []
    FakeRef(ex, probe("first", log)).ready(1)  # the bucket is empty
    members = [FakeRef(ex, probe(f"m{i}", log, 2)) for i in range(3)]
    for m in members[:2]:
        m.ready(1)  # queued for another call of the pod before the block exists
    ex.reserve_block([m.uid for m in members], 2)
    members[0].ready(2)  # the release: its binding is next
    members[1].ready(1, not_before=0.0)  # requeued ahead of its binding (after a 409, say)
    members[2].ready(2)
    tick(ex, clock, 0.1)
    tick(ex, clock, 0.1)
    assert [m.grants for m in members] == [1, 0, 1] and ex.tokens_taken == 3
    tick(ex, clock, 0.1)  # on its own, with a token of its own
    assert members[1].grants == 1 and ex.backlog() == 0


def test_a_member_backing_off_leaves_its_block_so_it_stalls_nothing(
    started: list[Executor],
) -> None:
    ex, clock, log, members = reserved_block(3, burst=2)  # takes the 2 tokens there
    members[0].ready(2)
    members[1].ready(2, not_before=5.0)  # its last try failed: it backs off, out of the block
    other = FakeRef(ex, probe("other", log, 1))
    other.ready(1)
    assert members[0].grants == 1 and other.grants == 0  # m2 is still to come
    members[2].ready(2)
    assert members[2].grants == 1 and other.grants == 0  # m1's token was never taken
    tick(ex, clock, 0.1)
    assert other.grants == 1 and members[1].grants == 0 and ex.backlog() == 1


class TimerWatch(ManualClock):
    """A :class:`ManualClock` that counts the reads of the executor's timer thread."""

    def __init__(self) -> None:
        super().__init__()
        self.timer_reads = 0

    def __call__(self) -> float:
        if threading.current_thread().name.endswith("-timer"):
            self.timer_reads += 1
        return self.now


class Reader(FakeRef):
    """A :class:`FakeRef` whose job reads its object: one request, so its token is spent."""

    def on_grant(self) -> None:
        self.grants += 1
        assert self.call is not None
        done = self.executor.job(self, Send(self.call, None, 1, True))
        if done is not None:
            self.tell(done)


def test_a_token_centuries_away_keeps_the_timer_alive(
    started: list[Executor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a QPS so low that the next token is further off than a lock can wait, the timer waits
    what it can and looks again, rather than dying on the wait (it grants every backoff and
    refill after that)."""
    died: list[object] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    clock = TimerWatch()
    backend = NullBackend()
    ex = make(qps=1e-12, burst=1, clock=clock, backend=backend)  # a token every 31,000 years
    ex.start()
    started.append(ex)
    log: list[str] = []
    first = Reader(ex, probe("first", log))
    first.ready(1)  # takes the one token
    first.finished.wait(5.0)
    reads = clock.timer_reads
    second = Reader(ex, probe("second", log))
    second.ready(1)
    wait_for(lambda: clock.timer_reads > reads, 5.0, "the timer read the next token's time")
    # stop() takes the lock the timer holds until its wait begins (or until it died)
    ex.stop(timeout=5)
    assert died == []
    assert (first.grants, second.grants, backend.gets) == (1, 0, 1)
