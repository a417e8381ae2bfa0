"""Direct turns: an idle actor woken inside a ``DirectTurns`` block takes its turn on the waking
thread (actors/runtime.py), and where the dispatcher uses them: the executor worker that sent a
request handles its result, and ``submit()`` runs the turn with ``RuntimeConfig.caller_turns``."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from kdispatch.actors.config import (
    DispatcherConfig,
    RateLimitConfig,
    RetryConfig,
    RuntimeConfig,
)
from kdispatch.actors.dispatcher import Dispatcher
from kdispatch.actors.errors import InvalidConfigError, Outcome
from kdispatch.actors.pod_calls import PodStatusPatch
from kdispatch.actors.runtime import ActorPool, DirectTurns, PooledActor
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.backends import GatedBackend
from tests.factories import cond

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0  # bound for waits that must succeed; never used to sequence anything


@pytest.fixture
def pool() -> Iterator[ActorPool]:
    p = ActorPool(workers=2, batch=4, name="direct-pool")
    p.start()
    yield p
    p.stop(timeout=WAIT)
    ACTORS.clear()


ACTORS: dict[str, Log] = {}  # by URN: the tests read an actor's record directly


class Log(PooledActor):
    """Records each message with the thread that handled it; counts turns that overlapped."""

    def __init__(self, pool: ActorPool) -> None:
        super().__init__(pool=pool)
        ACTORS[self.actor_urn] = self
        self.seen: list[tuple[Any, str]] = []
        self.running = False
        self.overlaps = 0

    def on_start(self) -> None:
        self.seen.append(("start", threading.current_thread().name))

    def on_receive(self, message: Any) -> Any:
        if self.running:
            self.overlaps += 1
        self.running = True
        try:
            if isinstance(message, tuple) and message[0] == "wait":
                assert message[1].wait(WAIT)
            elif isinstance(message, tuple) and message[0] == "raise":
                raise message[1]
            elif isinstance(message, tuple) and message[0] == "tell":
                with DirectTurns():  # a handler's block: turns never nest
                    message[1].tell("nested")
            self.seen.append((message, threading.current_thread().name))
            return message
        finally:
            self.running = False


def idle_actors(pool: ActorPool, n: int) -> list[Any]:
    """``n`` started actors, each idle (its first turn done, nothing queued)."""
    refs = [Log.start(pool) for _ in range(n)]
    for ref in refs:
        assert ref.ask("ready", timeout=WAIT) == "ready"
    return refs


def actor_of(ref: Any) -> Log:
    """The actor behind ``ref``. Read its record only when no turn of it can be running (right
    after a direct turn on this thread, or after an ``ask`` answered)."""
    return ACTORS[ref.actor_urn]


def test_an_idle_actor_takes_its_turn_on_the_waking_thread(pool: ActorPool) -> None:
    me = threading.current_thread().name
    with DirectTurns():
        ref = Log.start(pool)  # its first turn (on_start) is claimed too
        ref.tell("a")
        ref.tell("b")
        assert actor_of(ref).seen == []  # nothing ran yet: the turn runs when the block exits
    assert actor_of(ref).seen == [("start", me), ("a", me), ("b", me)]
    ref.stop()


def test_only_the_first_woken_actor_is_claimed(pool: ActorPool) -> None:
    me = threading.current_thread().name
    first, second = idle_actors(pool, 2)
    with DirectTurns():
        first.tell("x")
        second.tell("y")
    assert actor_of(first).seen[-1] == ("x", me)
    assert second.ask("after", timeout=WAIT) == "after"
    y = [name for msg, name in actor_of(second).seen if msg == "y"]
    assert y and y[0] != me and y[0].startswith("direct-pool-")
    first.stop()
    second.stop()


def test_a_busy_actor_keeps_its_worker_and_its_order(pool: ActorPool) -> None:
    """An actor already running on the pool is not claimed: the message waits in its inbox and
    is handled after the running one, by the pool, never at the same time."""
    me = threading.current_thread().name
    gate = threading.Event()
    ref = Log.start(pool)
    busy = ref.ask(("wait", gate), block=False)
    ref.ask("queued", block=False)  # not handled before "wait" finishes
    with DirectTurns():
        ref.tell("during")
    assert ("during", me) not in actor_of(ref).seen  # the block ran nothing
    gate.set()
    busy.get(timeout=WAIT)
    assert ref.ask("end", timeout=WAIT) == "end"
    order = [msg for msg, _ in actor_of(ref).seen if msg in ("queued", "during", "end")]
    assert order == ["queued", "during", "end"]
    assert all(name != me for msg, name in actor_of(ref).seen if msg == "during")
    assert actor_of(ref).overlaps == 0
    ref.stop()


def test_a_direct_turn_handles_at_most_a_batch_then_yields_to_the_pool(
    pool: ActorPool,
) -> None:
    me = threading.current_thread().name
    [ref] = idle_actors(pool, 1)
    with DirectTurns():
        for i in range(10):
            ref.tell(i)
    assert ref.ask("end", timeout=WAIT) == "end"
    seen = [(m, n) for m, n in actor_of(ref).seen if isinstance(m, int)]
    assert [m for m, _ in seen] == list(range(10))  # in order, each once
    assert [n for _, n in seen[:4]] == [me] * 4  # pool.batch messages here
    assert all(n != me for _, n in seen[4:])  # the rest on the pool
    ref.stop()


def test_turns_never_nest(pool: ActorPool) -> None:
    """A block opened by a handler (a turn is running on this thread) claims nothing."""
    me = threading.current_thread().name
    outer, inner = idle_actors(pool, 2)
    with DirectTurns():
        outer.tell(("tell", inner))
    assert actor_of(outer).seen[-1][1] == me
    assert inner.ask("end", timeout=WAIT) == "end"
    nested = [name for msg, name in actor_of(inner).seen if msg == "nested"]
    assert nested and nested[0].startswith("direct-pool-")
    with DirectTurns(), DirectTurns():  # an inner block of the same thread opens nothing
        outer.tell("twice")
    assert actor_of(outer).seen[-1] == ("twice", me)
    outer.stop()
    inner.stop()


def test_the_claimed_actor_runs_even_when_the_block_raises(pool: ActorPool) -> None:
    me = threading.current_thread().name
    [ref] = idle_actors(pool, 1)
    with pytest.raises(ValueError, match="after the tell"), DirectTurns():
        ref.tell("kept")
        raise ValueError("after the tell")
    assert actor_of(ref).seen[-1] == ("kept", me)
    ref.stop()


def test_a_handler_error_in_a_direct_turn_fails_only_that_actor(pool: ActorPool) -> None:
    ref, other = idle_actors(pool, 2)
    with DirectTurns():  # the caller's thread does not see the handler's error
        ref.tell(("raise", ValueError("boom")))
    assert not ref.is_alive()
    assert other.ask("still here", timeout=WAIT) == "still here"
    other.stop()


def test_senders_in_blocks_racing_the_pool_lose_and_reorder_nothing(pool: ActorPool) -> None:
    """Four threads tell 8 actors inside blocks while the pool runs them too: every message
    is handled once, each sender's in order, never two turns of one actor at once."""
    refs = [Log.start(pool) for _ in range(8)]
    start = threading.Barrier(4)

    def send(sender: int) -> None:
        start.wait(WAIT)
        for i in range(300):
            for ref in refs:
                with DirectTurns():
                    ref.tell((sender, i))

    threads = [threading.Thread(target=send, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 3)
    ran_here = 0
    for ref in refs:
        assert ref.ask("end", timeout=WAIT) == "end"
        actor = actor_of(ref)
        got = [m for m, _ in actor.seen if isinstance(m, tuple)]
        assert len(got) == 4 * 300
        for sender in range(4):
            assert [i for s, i in got if s == sender] == list(range(300))
        assert actor.overlaps == 0
        ran_here += sum(1 for _, n in actor.seen if not n.startswith("direct-pool-"))
        ref.stop()
    assert ran_here > 0  # the senders did run turns themselves


# --------------------------------------------------------------------------- the dispatcher

FAST = DispatcherConfig(
    rate_limit=RateLimitConfig(qps=math.inf, burst=1),
    retry=RetryConfig(base_backoff=0.0, max_backoff=0.0),
)
CALLER = DispatcherConfig(
    rate_limit=FAST.rate_limit, retry=FAST.retry, runtime=RuntimeConfig(caller_turns=True)
)


def resolved_on(fut: Future[Any]) -> list[str]:
    names: list[str] = []
    fut.add_done_callback(lambda _f: names.append(threading.current_thread().name))
    return names


def server_condition(server: InMemoryApiServer, name: str) -> dict[str, Any]:
    stored = server.get("Pod", "default", name)
    [c] = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    return dict(c)


def test_caller_turns_with_a_non_blocking_backend_finish_inside_submit() -> None:
    server = InMemoryApiServer()
    assert server.non_blocking
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, CALLER) as d:
        fut = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="0/3 nodes")]))
        assert fut.done()  # the whole call ran on this thread
        assert fut.result() is Outcome.SUCCESS
        assert server_condition(server, "p1")["message"] == "0/3 nodes"


@pytest.mark.parametrize("caller_turns", [True, False], ids=["caller_turns", "default"])
def test_an_overwritten_call_resolves_inside_submit_only_with_caller_turns(
    caller_turns: bool,
) -> None:
    """With a request of the pod in flight, a second patch is pending; a third merges into it.
    With caller turns the second resolves ``overwritten`` inside the third's ``submit``, on the
    caller's thread; by default it resolves on an actor-pool thread. Either way the server ends
    with the newest message."""
    server = InMemoryApiServer()
    gated = GatedBackend(server)
    pod = server.create(make_pod("p1"))
    me = threading.current_thread().name
    with Dispatcher(gated, CALLER if caller_turns else FAST) as d:
        gated.gate.clear()
        first = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="a")]))
        gated.wait_calls(1)
        second = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="b")]))
        names = resolved_on(second)
        assert not second.done()
        third = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="c")]))
        if caller_turns:
            assert second.done() and names == [me]
        assert second.result(timeout=WAIT) is Outcome.OVERWRITTEN
        if not caller_turns:
            assert len(names) == 1 and names[0].startswith("kdispatch-pool")
        gated.gate.set()
        assert first.result(timeout=WAIT) is Outcome.SUCCESS
        assert third.result(timeout=WAIT) is Outcome.SUCCESS
    assert server_condition(server, "p1")["message"] == "c"


@pytest.mark.parametrize("config", [FAST, CALLER], ids=["default", "caller_turns"])
def test_a_result_is_handled_on_the_worker_that_sent_the_request(
    config: DispatcherConfig,
) -> None:
    """The request's ``Done`` reaches an idle actor inside a block on the executor worker:
    the future resolves there, with no hand-off to the actor pool."""
    server = InMemoryApiServer()
    gated = GatedBackend(server)  # a blocking backend: requests run on executor workers
    pod = server.create(make_pod("p1"))
    with Dispatcher(gated, config) as d:
        fut = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="x")]))
        names = resolved_on(fut)
        assert fut.result(timeout=WAIT) is Outcome.SUCCESS
        assert len(names) == 1 and names[0].startswith("kdispatch-executor-")
    assert server_condition(server, "p1")["message"] == "x"


def test_caller_turns_from_many_threads_keep_every_promise() -> None:
    """Eight threads submit to 50 pods with caller turns while results come back on the
    executor workers: every future resolves once, and the server holds each pod's newest
    message (every thread's last patch of a pod carries the same message)."""
    server = InMemoryApiServer()
    gated = GatedBackend(server)
    pods = [server.create(make_pod(f"p{i}")) for i in range(50)]
    start = threading.Barrier(8)
    futures: list[list[Future[Any]]] = [[] for _ in range(8)]

    def run(t: int) -> None:
        start.wait(WAIT)
        for round_ in range(5):
            for pod in pods:
                msg = "final" if round_ == 4 else f"t{t} r{round_}"
                futures[t].append(
                    d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message=msg)]))
                )

    with Dispatcher(gated, CALLER) as d:
        threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(WAIT * 3)
        outcomes = [f.result(timeout=WAIT) for fs in futures for f in fs]
    assert len(outcomes) == 8 * 5 * 50
    assert set(outcomes) <= {Outcome.SUCCESS, Outcome.OVERWRITTEN, Outcome.SKIPPED}
    for i in range(50):
        assert server_condition(server, f"p{i}")["message"] == "final"


def test_caller_turns_must_be_a_bool() -> None:
    with pytest.raises(InvalidConfigError, match="caller_turns"):
        RuntimeConfig(caller_turns="yes")  # type: ignore[arg-type]
