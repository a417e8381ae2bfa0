"""Tests of the pooled pykka actor runtime (actors/runtime.py)."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import pykka
import pytest

from kdispatch.actors._compat import Envelope, LazyEvent, ThreadingFuture
from kdispatch.actors.errors import InvalidConfigError, InvalidInputError
from kdispatch.actors.runtime import ActorPool, PooledActor, PoolStateError, live_pooled_actors

WAIT = 5.0  # generous bound for waits that must succeed; never used to sequence anything


@pytest.fixture
def pool() -> Iterator[ActorPool]:
    p = ActorPool(workers=2, batch=16, name="test-pool")
    p.start()
    yield p
    p.stop(timeout=WAIT)


class Recorder(PooledActor):
    """Records what it receives; ``("raise", exc)`` raises, ``("wait", event)`` blocks on it."""

    def __init__(self, pool: ActorPool, log: list[Any] | None = None, tag: str = "") -> None:
        super().__init__(pool=pool)
        self.log: list[Any] = [] if log is None else log
        self.tag = tag
        self.value = 0
        self.events: list[str] = []
        self.dropped: list[object] = []
        self.failed = threading.Event()
        self.stopped_event = threading.Event()
        self.thread_names: list[str] = []

    def on_start(self) -> None:
        self.events.append("start")
        self.thread_names.append(threading.current_thread().name)

    def on_stop(self) -> None:
        self.events.append("stop")
        self.stopped_event.set()

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.events.append(f"failure:{exception_value}")
        self.failed.set()

    def on_dropped(self, message: object) -> None:
        self.dropped.append(message)
        super().on_dropped(message)

    def on_receive(self, message: Any) -> Any:
        self.thread_names.append(threading.current_thread().name)
        if isinstance(message, tuple) and message[0] == "raise":
            raise message[1]
        if isinstance(message, tuple) and message[0] == "wait":
            assert message[1].wait(WAIT)
            return "waited"
        self.log.append((self.tag, message) if self.tag else message)
        return message

    def add(self, x: int) -> int:
        self.value += x
        return self.value


# --------------------------------------------------------------------------- basics


def test_tell_ask_and_ordering(pool: ActorPool) -> None:
    ref = Recorder.start(pool)
    for i in range(500):
        ref.tell(i)
    assert ref.ask("last", timeout=WAIT) == "last"
    log = ref.proxy().log.get(timeout=WAIT)
    assert log == [*range(500), "last"]
    names = ref.proxy().thread_names.get(timeout=WAIT)
    assert names and all(n.startswith("test-pool-") for n in names)
    ref.stop()


def test_ordering_per_sender_with_many_senders_and_actors(pool: ActorPool) -> None:
    refs = [Recorder.start(pool) for _ in range(20)]

    def send(sender: int) -> None:
        for i in range(200):
            for ref in refs:
                ref.tell((sender, i))

    threads = [threading.Thread(target=send, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    for ref in refs:
        log = ref.proxy().log.get(timeout=WAIT)
        assert len(log) == 4 * 200
        for sender in range(4):
            assert [i for s, i in log if s == sender] == list(range(200))


def test_tell_paths_keep_messages_intact(pool: ActorPool) -> None:
    """Bare tells, envelopes put through pykka's own ``tell``, and messages that are envelopes."""
    ref = Recorder.start(pool)
    inner = Envelope("inner")
    ref.tell("bare")
    pykka.ActorRef.tell(ref, "via pykka")  # pykka's path: an Envelope put in the inbox
    ref.tell(inner)
    assert ref.ask("end", timeout=WAIT) == "end"
    log = ref.proxy().log.get(timeout=WAIT)
    assert log == ["bare", "via pykka", inner, "end"]
    ref.stop()


def test_future_nonblocking_and_timeout(pool: ActorPool) -> None:
    gate = threading.Event()
    ref = Recorder.start(pool)
    blocked = ref.ask(("wait", gate), block=False)
    later = ref.ask("x", block=False)
    with pytest.raises(pykka.Timeout):
        later.get(timeout=0.01)
    gate.set()
    assert blocked.get(timeout=WAIT) == "waited"
    assert later.get(timeout=WAIT) == "x"
    assert isinstance(later, ThreadingFuture)
    ref.stop()


def test_proxy_call_get_and_set(pool: ActorPool) -> None:
    ref = Recorder.start(pool)
    proxy = ref.proxy()
    assert proxy.add(3).get(timeout=WAIT) == 3
    assert proxy.add(4).get(timeout=WAIT) == 7
    proxy.value = 100
    assert proxy.value.get(timeout=WAIT) == 100
    ref.stop()


def test_hooks_run_on_pool_in_order(pool: ActorPool) -> None:
    ref = Recorder.start(pool)
    actor = ref.proxy()
    ref.tell("m")
    assert ref.ask("n", timeout=WAIT) == "n"
    names = actor.thread_names.get(timeout=WAIT)
    assert len(names) == 3 and all(n.startswith("test-pool-") for n in names)
    events = actor.events
    assert events.get(timeout=WAIT) == ["start"]
    inner = ref._actor_weakref()
    assert inner is not None
    assert ref.stop(timeout=WAIT) is True
    assert inner.events == ["start", "stop"]
    assert not ref.is_alive()


def test_pooled_actors_are_not_in_pykka_registry(pool: ActorPool) -> None:
    ref = Recorder.start(pool)
    assert ref.ask("x", timeout=WAIT) == "x"
    assert pykka.ActorRegistry.get_all() == []
    assert pykka.ActorRegistry.get_by_urn(ref.actor_urn) is None
    ref.stop()


def test_live_counts(pool: ActorPool) -> None:
    base = live_pooled_actors()
    refs = [Recorder.start(pool) for _ in range(5)]
    assert pool.live_count() == 5
    assert live_pooled_actors() == base + 5
    refs[0].stop()
    assert pool.live_count() == 4
    assert live_pooled_actors() == base + 4


# --------------------------------------------------------------------------- scheduling


def test_two_actors_run_concurrently() -> None:
    p = ActorPool(workers=2, name="conc")
    p.start()
    try:
        barrier = threading.Barrier(2, timeout=WAIT)

        class Meet(PooledActor):
            def on_receive(self, message: Any) -> Any:
                return barrier.wait()  # breaks (raises) unless both handlers run at once

        a, b = Meet.start(pool=p), Meet.start(pool=p)
        fa, fb = a.ask("go", block=False), b.ask("go", block=False)
        assert {fa.get(timeout=WAIT), fb.get(timeout=WAIT)} == {0, 1}
    finally:
        p.stop(timeout=WAIT)


def test_concurrency_bounded_by_workers() -> None:
    p = ActorPool(workers=2, name="bounded")
    p.start()
    try:
        lock = threading.Lock()
        running = [0, 0]  # current, max
        entered = threading.Semaphore(0)
        release = threading.Event()

        class Busy(PooledActor):
            def on_receive(self, message: Any) -> Any:
                with lock:
                    running[0] += 1
                    running[1] = max(running[1], running[0])
                if message == "block":
                    entered.release()
                    assert release.wait(WAIT)
                    result: object = "blocked"
                else:
                    result = release.is_set()  # a third actor only runs once a worker is free
                with lock:
                    running[0] -= 1
                return result

        a, b, c = (Busy.start(pool=p) for _ in range(3))
        fa, fb = a.ask("block", block=False), b.ask("block", block=False)
        assert entered.acquire(timeout=WAIT) and entered.acquire(timeout=WAIT)
        fc = c.ask("probe", block=False)
        release.set()
        assert fc.get(timeout=WAIT) is True
        assert fa.get(timeout=WAIT) == fb.get(timeout=WAIT) == "blocked"

        others = [Busy.start(pool=p) for _ in range(8)]
        futures = [r.ask(i, block=False) for i in range(20) for r in others]
        for f in futures:
            f.get(timeout=WAIT)
        assert running[1] == 2
    finally:
        p.stop(timeout=WAIT)


@pytest.mark.parametrize(("batch", "hot_before_cold"), [(4, 4), (1000, 100)])
def test_fairness_cold_actor_not_starved(batch: int, hot_before_cold: int) -> None:
    p = ActorPool(workers=1, batch=batch, name="fair")
    p.start()
    try:
        log: list[Any] = []
        gate = threading.Event()
        blocker = Recorder.start(p, log)
        hot = Recorder.start(p, log, "hot")
        cold = Recorder.start(p, log, "cold")
        for ref in (blocker, hot, cold):  # all on_start turns done
            assert ref.ask("ready", timeout=WAIT) == "ready"
        log.clear()
        blocked = blocker.ask(("wait", gate), block=False)  # holds the only worker
        for i in range(100):
            hot.tell(i)
        cold.tell("x")
        gate.set()
        assert blocked.get(timeout=WAIT) == "waited"
        assert hot.ask("end", timeout=WAIT) == "end"
        assert cold.ask("end", timeout=WAIT) == "end"
        order = [tag for tag, _ in log]
        assert order.index("cold") == hot_before_cold
        assert [m for tag, m in log if tag == "hot"] == [*range(100), "end"]
    finally:
        p.stop(timeout=WAIT)


# --------------------------------------------------------------------------- failures


def test_exception_in_ask_goes_to_caller_actor_keeps_running(pool: ActorPool) -> None:
    ref = Recorder.start(pool)
    with pytest.raises(ValueError, match="bad"):
        ref.ask(("raise", ValueError("bad")), timeout=WAIT)
    assert ref.is_alive()
    assert ref.ask("after", timeout=WAIT) == "after"
    ref.stop()


def test_exception_in_tell_fails_only_that_actor(pool: ActorPool) -> None:
    bad = Recorder.start(pool)
    good = Recorder.start(pool)
    actor = bad._actor_weakref()
    assert actor is not None
    gate = threading.Event()
    first = bad.ask(("wait", gate), block=False)
    bad.tell(("raise", RuntimeError("boom")))
    pending = bad.ask("pending", block=False)
    bad.tell("dropped-tell")
    gate.set()
    assert first.get(timeout=WAIT) == "waited"
    with pytest.raises(pykka.ActorDeadError):
        pending.get(timeout=WAIT)
    assert actor.failed.is_set()
    assert actor.events == ["start", "failure:boom"]  # on_stop is not called after a failure
    assert actor.dropped == ["dropped-tell"]
    assert not bad.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        bad.tell("late")
    assert good.ask("ok", timeout=WAIT) == "ok"
    assert pool.live_count() == 1


class Fatal(BaseException):
    pass


def test_base_exception_stops_only_that_actor(pool: ActorPool) -> None:
    bad = Recorder.start(pool)
    good = Recorder.start(pool)
    with pytest.raises(pykka.ActorDeadError):
        bad.ask(("raise", Fatal("fatal")), timeout=WAIT)
    assert not bad.is_alive()
    assert good.ask("still", timeout=WAIT) == "still"
    assert pool.live_count() == 1
    other = Recorder.start(pool)  # the worker that ran it survived
    assert other.ask("new", timeout=WAIT) == "new"


def test_on_start_failure_stops_actor_and_fails_queued_asks(pool: ActorPool) -> None:
    class BadStart(PooledActor):
        def on_start(self) -> None:
            raise RuntimeError("no start")

        def on_receive(self, message: Any) -> Any:
            return message

    ref = BadStart.start(pool=pool)
    with pytest.raises(pykka.ActorDeadError):
        ref.ask("x", timeout=WAIT)
    assert not ref.is_alive()
    assert pool.live_count() == 0


def test_on_stop_failure_still_stops(pool: ActorPool) -> None:
    class BadStop(PooledActor):
        def on_stop(self) -> None:
            raise RuntimeError("no stop")

    ref = BadStop.start(pool=pool)
    assert ref.stop(timeout=WAIT) is True
    assert not ref.is_alive()
    assert pool.live_count() == 0


# --------------------------------------------------------------------------- stopping


def test_stop_with_pending_asks_and_tells(pool: ActorPool) -> None:
    ref = Recorder.start(pool)
    actor = ref._actor_weakref()
    assert actor is not None
    gate = threading.Event()
    blocked = ref.ask(("wait", gate), block=False)
    before = ref.ask("before", block=False)
    stopping = ref.stop(block=False)
    second_stop = ref.stop(block=False)
    after = ref.ask("after", block=False)
    ref.tell("tell-after")
    dropped_before = pool.dropped
    gate.set()
    assert blocked.get(timeout=WAIT) == "waited"
    assert before.get(timeout=WAIT) == "before"
    assert stopping.get(timeout=WAIT) is True
    assert second_stop.get(timeout=WAIT) is True  # queued stop: "was being stopped"
    with pytest.raises(pykka.ActorDeadError):
        after.get(timeout=WAIT)
    assert actor.events == ["start", "stop"]
    assert actor.stopped_event.is_set()
    assert actor.dropped == ["tell-after"]
    assert pool.dropped == dropped_before + 1
    assert ref.stop(timeout=WAIT) is False  # already dead
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("x")
    with pytest.raises(pykka.ActorDeadError):
        ref.ask("x", timeout=WAIT)
    with pytest.raises(pykka.ActorDeadError):
        ref.proxy()


def test_put_after_close_is_answered(pool: ActorPool) -> None:
    """A message that slipped past ``is_alive`` while the actor closed is not lost."""
    ref = Recorder.start(pool)
    assert ref.stop(timeout=WAIT) is True
    future: ThreadingFuture[Any] = ThreadingFuture()
    ref.actor_inbox.put(Envelope("late", reply_to=future))
    with pytest.raises(pykka.ActorDeadError):
        future.get(timeout=WAIT)
    ref.actor_inbox.put(Envelope("late tell"))  # counted, no error
    assert ref.actor_inbox.empty()


def _ask_many(
    ref: pykka.ActorRef[Any],
    barrier: threading.Barrier,
    futures: list[pykka.Future[Any]],
    lock: threading.Lock,
) -> None:
    barrier.wait()
    for i in range(200):
        future = ref.ask(i, block=False)
        with lock:
            futures.append(future)


def test_asks_racing_with_stop_all_resolve(pool: ActorPool) -> None:
    """Every ask sent while the actor stops resolves (a reply or ActorDeadError), none hangs."""
    for _ in range(20):
        ref = Recorder.start(pool)
        barrier = threading.Barrier(5, timeout=WAIT)
        futures: list[pykka.Future[Any]] = []
        args = (ref, barrier, futures, threading.Lock())
        threads = [threading.Thread(target=_ask_many, args=args) for _ in range(4)]
        for t in threads:
            t.start()
        barrier.wait()
        ref.stop(block=False)
        for t in threads:
            t.join(WAIT)
        answered = dead = 0
        for future in futures:
            try:
                future.get(timeout=WAIT)
                answered += 1
            except pykka.ActorDeadError:
                dead += 1
        assert answered + dead == 800
        assert not ref.is_alive()


def test_actor_object_freed_after_stop() -> None:
    p = ActorPool(workers=1, name="free")
    p.start()
    ref = Recorder.start(p)
    assert ref.stop(timeout=WAIT) is True
    p.stop(timeout=WAIT)  # joins the worker, which may still hold the actor in its last turn
    gc.collect()
    assert ref._actor_weakref() is None  # the ref (and its inbox) do not keep it alive


def test_pool_stop_stops_live_actors_after_queued_messages() -> None:
    p = ActorPool(workers=2, name="stopper")
    p.start()
    base = live_pooled_actors()
    refs = [Recorder.start(p) for _ in range(10)]
    actors = [r._actor_weakref() for r in refs]
    for r in refs:
        for i in range(50):
            r.tell(i)
    assert live_pooled_actors() == base + 10
    p.stop(timeout=WAIT)
    assert p.live_count() == 0
    assert live_pooled_actors() == base
    for a in actors:
        assert a is not None
        assert a.log == list(range(50))
        assert a.events == ["start", "stop"]
    assert not any(t.name.startswith("stopper-") for t in threading.enumerate())
    p.stop()  # second stop is a no-op


def test_actors_starting_while_the_pool_stops_are_stopped_or_refused() -> None:
    """Starting an actor takes no lock shared with ``stop()``: four threads keep starting
    actors while the pool stops. Each start either raises ``PoolStateError`` (and the actor
    never runs) or yields an actor the pool stops; none is left live, none counted twice."""
    p = ActorPool(workers=2, name="racing")
    p.start()
    base = live_pooled_actors()
    started: list[list[Any]] = [[] for _ in range(4)]
    refused = [0] * 4
    go = threading.Barrier(5)
    warm = threading.Event()  # every starter has started some actors

    def starter(t: int) -> None:
        go.wait(WAIT)
        while True:
            try:
                started[t].append(Recorder.start(p))
            except PoolStateError:
                refused[t] += 1
                return
            # the last starter to reach 50 sees every other one there already
            if len(started[t]) == 50 and all(len(s) >= 50 for s in started):
                warm.set()

    threads = [threading.Thread(target=starter, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    go.wait(WAIT)
    assert warm.wait(WAIT)
    p.stop(timeout=WAIT)
    for th in threads:
        th.join(WAIT)
    assert refused == [1, 1, 1, 1]  # each starter saw the pool stop once, then gave up
    refs = [r for s in started for r in s]
    assert all(not r.is_alive() for r in refs)
    assert p.live_count() == 0
    assert live_pooled_actors() == base


def test_pool_lifecycle_errors() -> None:
    p = ActorPool(workers=1, name="life")
    with pytest.raises(PoolStateError):
        Recorder.start(p)  # not started yet
    p.start()
    p.start()  # idempotent
    assert [t.name for t in threading.enumerate() if t.name.startswith("life-")] == ["life-0"]
    p.stop(timeout=WAIT)
    with pytest.raises(PoolStateError):
        p.start()
    with pytest.raises(PoolStateError):
        Recorder.start(p)
    never = ActorPool()
    never.stop()  # stopping a never-started pool is fine


def test_pool_stop_from_worker_is_rejected(pool: ActorPool) -> None:
    class Stopper(PooledActor):
        def on_receive(self, message: Any) -> Any:
            pool.stop()

    ref = Stopper.start(pool=pool)
    with pytest.raises(PoolStateError):
        ref.ask("stop it", timeout=WAIT)


@pytest.mark.parametrize(
    "kwargs",
    [{"workers": 0}, {"workers": "2"}, {"workers": True}, {"batch": 0}, {"name": ""}],
)
def test_pool_config_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        ActorPool(**kwargs)


def test_actor_requires_pool() -> None:
    with pytest.raises(InvalidInputError):
        Recorder.start(object())

    class Forgetful(PooledActor):
        def __init__(self) -> None:
            pass

    with pytest.raises(InvalidInputError):
        Forgetful.start()


def test_pool_properties() -> None:
    p = ActorPool(workers=3, batch=7, name="props")
    assert (p.workers, p.batch, p.name, p.live_count(), p.dropped) == (3, 7, "props", 0, 0)
    p.stop()


# --------------------------------------------------------------------------- the stop flag


def test_lazy_event_wait_and_set() -> None:
    ev = LazyEvent()
    assert not ev.is_set()
    assert ev.wait(0.001) is False
    started = threading.Event()
    results: list[bool] = []

    def waiter() -> None:
        started.set()
        results.append(ev.wait(WAIT))

    t = threading.Thread(target=waiter)
    t.start()
    assert started.wait(WAIT)
    ev.set()
    t.join(WAIT)
    assert results == [True]
    assert ev.is_set() and ev.wait() is True
    ev.clear()
    assert not ev.is_set()


# --------------------------------------------------------------------------- benchmark smoke


@pytest.mark.timeout(60)
def test_benchmark_main_writes_report(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import actor_runtime

    out = tmp_path / "bench.json"
    argv = ["--actors", "200", "--msgs-per-actor", "2", "--threading-max-msgs", "200"]
    assert actor_runtime.main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [run["runtime"] for run in report["runs"]] == ["pooled", "threading"]
    for run in report["runs"]:
        assert run["actors"] == 200
        for figure in actor_runtime.FIGURES:
            assert isinstance(run[figure], float)
    assert set(report["ratios"]) == set(actor_runtime.FIGURES)
    assert isinstance(report["targets"]["all_met"], bool)
    assert "tell_msgs_per_s" in capsys.readouterr().out
