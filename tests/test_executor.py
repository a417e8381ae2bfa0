"""The executor alone: lanes, minimum share, token bucket, refunds, backoff, classification.

Object actors are replaced by tiny fake refs that answer ``Grant`` at once with a ``Job`` (or a
``Refund``), so the executor's scheduling can be observed directly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from kdispatch.actors.backend import ApiBackend
from kdispatch.actors.calls import Call
from kdispatch.actors.config import ExecutorConfig, RateLimitConfig, RetryConfig
from kdispatch.actors.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from kdispatch.actors.executor import Executor, backoff_delay
from kdispatch.actors.messages import Done, Grant, Job, Ready, Refund, Result
from kdispatch.actors.metrics import Metrics
from kdispatch.actors.objects import Obj, ObjectRef

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True, slots=True)
class Probe(Call):
    """A call that records its send and can block on an event or raise."""

    call_type: ClassVar[str] = "probe"
    kind: ClassVar[str] = "Pod"
    relevance: ClassVar[int] = 1

    ref: ObjectRef
    log: list[str] = field(compare=False)
    block: threading.Event | None = field(default=None, compare=False)
    raises: BaseException | None = field(default=None, compare=False)
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def is_noop(self, obj: Obj | None) -> bool:
        return False

    def apply(self, obj: Obj) -> Obj:
        return obj

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        self.log.append(self.ref.name)
        if self.block is not None:
            assert self.block.wait(10)
        if self.raises is not None:
            raise self.raises
        return None


class FakeRef:
    """Answers a Grant with a Job for ``call`` (or a Refund when ``call`` is None)."""

    def __init__(self, executor: Executor, call: Call | None) -> None:
        self.executor = executor
        self.call = call
        self.grants = 0
        self.done: list[Done] = []
        self.finished = threading.Event()

    def tell(self, msg: Any) -> None:
        if isinstance(msg, Grant):
            self.grants += 1
            if self.call is None:
                self.executor.tell(Refund(self.call_uid))
            else:
                self.executor.tell(Job(self, self.call, None, 1))
        elif isinstance(msg, Done):
            self.done.append(msg)
            self.finished.set()

    @property
    def call_uid(self) -> str:
        return "refunder"


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
    clock: Clock | None = None,
) -> Executor:
    return Executor(
        NullBackend(),
        relevances=[1, 2, 3],
        rate_limit=RateLimitConfig(qps=qps, burst=burst),
        retry=RetryConfig(base_backoff=0.005, max_backoff=1.0),
        config=ExecutorConfig(workers=workers, lane_min_share=share),
        metrics=Metrics(),
        clock=clock or Clock(),
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
    ex.tell(Ready("uid-blocker", blocker, 1))
    refs = []
    names = [(f"p{i}", 1) for i in range(6)] + [(f"b{i}", 2) for i in range(6)]
    names += [(f"d{i}", 3) for i in range(3)]
    for name, rel in names:
        ref = FakeRef(ex, probe(name, log, rel))
        refs.append(ref)
        ex.tell(Ready(f"uid-{name}", ref, rel))
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


def test_duplicate_ready_keeps_one_place(started: list[Executor]) -> None:
    ex = make(workers=1)  # not started: the first grant's job holds the only slot
    log: list[str] = []
    busy = FakeRef(ex, probe("busy", log))
    ex.tell(Ready("uid-busy", busy, 1))
    ref = FakeRef(ex, probe("a", log))
    ex.tell(Ready("uid-a", ref, 1))
    ex.tell(Ready("uid-a", ref, 1))
    assert ex.backlog() == 1
    assert (busy.grants, ref.grants) == (1, 0)


def test_token_bucket_throttles_and_refills(started: list[Executor]) -> None:
    clock = Clock()
    ex = make(workers=8, qps=10, burst=2, clock=clock)
    refs = [FakeRef(ex, None) for _ in range(5)]  # refunders: tokens come back
    for i, ref in enumerate(refs):
        ex.tell(Ready(f"uid-{i}", ref, 1))
    assert sum(r.grants for r in refs) == 5  # refunds make tokens free again
    assert ex.tokens_taken == 0
    log: list[str] = []
    workers = [FakeRef(ex, probe(f"w{i}", log)) for i in range(5)]
    for i, ref in enumerate(workers):
        ex.tell(Ready(f"uid-w{i}", ref, 1))
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
    for i, ref in enumerate(refs):
        ex.tell(Ready(f"uid-a{i}", ref, 1))
    assert sum(r.grants for r in refs) == 2
    gate.set()
    for ref in refs:
        assert ref.finished.wait(10)
    assert sorted(log) == [f"a{i}" for i in range(5)]


def test_backoff_ready_waits_until_due(started: list[Executor]) -> None:
    clock = Clock()
    ex = make(clock=clock)
    ref = FakeRef(ex, None)
    ex.tell(Ready("uid-a", ref, 1, not_before=5.0))
    assert ref.grants == 0 and ex.backlog() == 1
    clock.now = 4.9
    ex.wake()
    assert ref.grants == 0
    clock.now = 5.0
    ex.wake()
    assert ref.grants == 1


def test_backoff_delay_is_exponential_capped_and_honours_retry_after() -> None:
    retry = RetryConfig(base_backoff=0.005, max_backoff=0.1)
    assert [backoff_delay(retry, n) for n in (1, 2, 3)] == [0.005, 0.01, 0.02]
    assert backoff_delay(retry, 30) == 0.1
    assert backoff_delay(retry, 1, retry_after=3.0) == 3.0


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
    done = ex.execute(Job(None, call, None, 1))
    assert done.result is result
    assert done.error is error
    if isinstance(error, TooManyRequestsError):
        assert done.delay == 2.5
    if isinstance(error, ServerError):
        assert done.delay == 0.005
    if isinstance(error, ConflictError):
        assert done.obj is not None and done.obj["metadata"]["resourceVersion"] == "9"


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
    done = ex.execute(Job(None, probe("a", [], raises=ConflictError()), None, 1))
    assert done.result is Result.NOT_FOUND and done.obj is None
