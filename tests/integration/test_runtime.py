"""Tests of the pooled actor runtime (actors/runtime/pool.py): :class:`Actor`, :class:`ActorPool`.

Synchronisation is by messages: a :class:`Ping` told after other messages is answered once
they were handled (an actor handles its inbox in order), and a :class:`Hold` keeps a worker in
a turn until the test releases it, so that messages told meanwhile wait in their inboxes.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pytest

from kdispatch.actors.model.errors import InvalidConfigError
from kdispatch.actors.runtime.pool import Actor, ActorPool, PoolStateError
from kdispatch.testing.waiting import wait_for

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0  # generous bound for waits that must succeed; never used to sequence anything


# --------------------------------------------------------------------------- test actors


@dataclass(eq=False)
class Hold:
    """Keeps the worker in this turn until ``release`` is set, after setting ``entered`` and
    noting the worker's name in ``worker``."""

    release: threading.Event
    entered: threading.Event = field(default_factory=threading.Event)
    worker: list[str] = field(default_factory=list)


@dataclass(eq=False)
class Raise:
    """``receive`` raises ``error``."""

    error: BaseException


@dataclass(eq=False)
class StopNow:
    """``receive`` calls ``stop()``."""


@dataclass(eq=False)
class TryClose:
    """``receive`` calls ``close_if_empty()`` and notes what it returned."""


@dataclass(eq=False)
class Ping:
    """Answered with the actor's log once every message told before it was handled."""

    reply: Future[list[Any]] = field(default_factory=Future)


@dataclass(eq=False)
class Run:
    """``receive`` runs ``fn`` (on the worker, in this actor's turn)."""

    fn: Callable[[], Any]


class Recorder(Actor):
    """Logs what it handles; reports every hook to ``seen`` as ``(hook, what)``: "received",
    "dropped", "crashed", "closed" (the result of a :class:`TryClose`), "ran" (the result of a
    :class:`Run`, or the exception it raised)."""

    __slots__ = ("log", "seen", "shared", "tag", "threads")

    def __init__(self, pool: ActorPool, shared: list[Any] | None = None, tag: str = "") -> None:
        super().__init__(pool)
        self.log: list[Any] = []
        self.seen: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.shared = shared  # a log several actors append to, as (tag, message)
        self.tag = tag
        self.threads: set[str] = set()

    def __repr__(self) -> str:
        return f"<Recorder {self.tag}>"

    def receive(self, message: Any) -> None:
        self.threads.add(threading.current_thread().name)
        kind = type(message)
        if kind is Hold:
            message.worker.append(threading.current_thread().name)
            message.entered.set()
            assert message.release.wait(WAIT)
        elif kind is Raise:
            raise message.error
        elif kind is StopNow:
            self.stop()
        elif kind is TryClose:
            self.seen.put(("closed", self.close_if_empty()))
        elif kind is Ping:
            message.reply.set_result(list(self.log))
            return
        elif kind is Run:
            try:
                result = message.fn()
            except Exception as exc:
                result = exc
            self.seen.put(("ran", result))
        self.log.append(message)
        if self.shared is not None:
            self.shared.append((self.tag, message))
        self.seen.put(("received", message))

    def dropped(self, message: Any) -> None:
        self.seen.put(("dropped", message))

    def crashed(self, error: BaseException) -> None:
        self.seen.put(("crashed", error))

    def next_seen(self) -> tuple[str, Any]:
        return self.seen.get(timeout=WAIT)

    def ping(self) -> list[Any]:
        """The log once every message told before was handled."""
        ping = Ping()
        assert self.tell(ping), f"{self!r} has stopped"
        return ping.reply.result(WAIT)


class Turns:
    """Turns running now (``now``) and the most ever at once (``most``), across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


class Counted(Recorder):
    """A :class:`Recorder` whose turns count in ``turns``."""

    __slots__ = ("turns",)

    def __init__(self, pool: ActorPool, turns: Turns) -> None:
        super().__init__(pool)
        self.turns = turns

    def receive(self, message: Any) -> None:
        self.turns.enter()
        try:
            super().receive(message)
        finally:
            self.turns.leave()


def hold_worker(pool: ActorPool, holder: Recorder | None = None) -> Hold:
    """Put a turn on one of ``pool``'s workers (``holder``'s, or a new actor's) that lasts
    until ``hold.release`` is set."""
    hold = Hold(threading.Event())
    assert (holder or Recorder(pool, tag="holder")).tell(hold)
    assert hold.entered.wait(WAIT)
    return hold


def run_senders(senders: int, send: Callable[[int], None]) -> None:
    """Run ``send(sender)`` for each of ``senders`` on its own thread; return once all ended."""
    threads = [threading.Thread(target=send, args=(s,)) for s in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)


def assert_in_order_per_sender(log: list[Any], senders: int, per_sender: int) -> None:
    """``log`` holds every ``(sender, i)`` message of each sender, each sender's in order."""
    assert len(log) == senders * per_sender
    for sender in range(senders):
        assert [i for s, i in log if s == sender] == list(range(per_sender))


def tell_while_held(pool: ActorPool, tells: Mapping[Actor, Sequence[Any]]) -> None:
    """Tell each actor its messages while ``pool``'s only worker is held, so that all of them
    are queued before the actors' next turn; then release the worker."""
    hold = hold_worker(pool)
    try:
        for actor, messages in tells.items():
            for message in messages:
                assert actor.tell(message)
    finally:
        hold.release.set()


def _running(workers: int, name: str) -> Iterator[ActorPool]:
    """A started pool (batch 16) for a fixture; stopped after the test, nothing stuck."""
    p = ActorPool(workers=workers, batch=16, name=name)
    p.start()
    yield p
    assert p.stop(timeout=WAIT) == []


@pytest.fixture
def pool() -> Iterator[ActorPool]:
    yield from _running(2, "test-pool")


@pytest.fixture
def single() -> Iterator[ActorPool]:
    """One worker: a held turn leaves every other actor's messages queued."""
    yield from _running(1, "single")


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch every few microseconds rather than every 5 ms, so that the lock-free
    steps (a tell's ``deque.append`` against the turn's ``popleft``) interleave as often as
    possible."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


# --------------------------------------------------------------------------- basics


def test_messages_are_handled_in_order_on_the_pools_workers(pool: ActorPool) -> None:
    actor = Recorder(pool)
    for i in range(500):  # many batches: the actor goes back on the ready queue in between
        assert actor.tell(i)
    assert actor.ping() == list(range(500))
    assert actor.threads and all(name.startswith("test-pool-") for name in actor.threads)
    assert not actor.stopped


def test_order_per_sender_with_many_senders_and_actors(pool: ActorPool) -> None:
    actors = [Recorder(pool) for _ in range(20)]

    def send(sender: int) -> None:
        for i in range(200):
            for actor in actors:
                assert actor.tell((sender, i))

    run_senders(4, send)
    for actor in actors:
        assert_in_order_per_sender(actor.ping(), senders=4, per_sender=200)


def test_pool_properties() -> None:
    p = ActorPool(workers=3, batch=7, name="props")
    assert (p.workers, p.batch, p.name, p.running) == (3, 7, "props", False)
    assert "props" in repr(p) and "new" in repr(p)
    p.start()
    assert p.running
    assert sorted(t.name for t in threading.enumerate() if t.name.startswith("props-")) == [
        "props-0",
        "props-1",
        "props-2",
    ]
    assert p.stop(timeout=WAIT) == []
    assert not p.running and "stopped" in repr(p)
    assert not any(t.name.startswith("props-") for t in threading.enumerate())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workers": 0},
        {"workers": "2"},
        {"workers": True},
        {"workers": 1.5},
        {"batch": 0},
        {"batch": False},
        {"batch": 2.0},
        {"name": ""},
        {"name": None},
    ],
)
def test_invalid_pool_config_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        ActorPool(**kwargs)


# --------------------------------------------------------------------------- scheduling


def test_two_actors_run_concurrently() -> None:
    p = ActorPool(workers=2, name="conc")
    p.start()
    try:
        barrier = threading.Barrier(2, timeout=WAIT)
        a, b = Recorder(p), Recorder(p)
        assert a.tell(Run(barrier.wait))  # breaks (raises) unless both turns run at once
        assert b.tell(Run(barrier.wait))
        assert {a.next_seen()[1], b.next_seen()[1]} == {0, 1}
    finally:
        assert p.stop(timeout=WAIT) == []


def test_concurrency_is_bounded_by_the_workers() -> None:
    p = ActorPool(workers=2, name="bounded")
    p.start()
    turns = Turns()
    hold_a, hold_b = Hold(threading.Event()), Hold(threading.Event())
    try:
        a, b = Counted(p, turns), Counted(p, turns)
        assert a.tell(hold_a) and hold_a.entered.wait(WAIT)
        assert b.tell(hold_b) and hold_b.entered.wait(WAIT)
        assert hold_a.worker != hold_b.worker  # both workers are held
        c = Counted(p, turns)
        assert c.tell(Run(hold_a.release.is_set))  # runs only once a worker is free
        others = [Counted(p, turns) for _ in range(8)]
        for actor in others:
            for i in range(20):
                assert actor.tell(i)
        hold_a.release.set()
        assert c.next_seen() == ("ran", True)
        hold_b.release.set()
        for actor in others:
            assert actor.ping() == list(range(20))
    finally:
        hold_a.release.set()
        hold_b.release.set()
        assert p.stop(timeout=WAIT) == []
    assert turns.most == 2


def test_one_turn_at_a_time_per_actor_with_many_workers_and_senders(
    busy_switching: None,
) -> None:
    """Four workers and four senders flood one actor: its messages are never handled by two
    threads at once, every message is handled once, and each sender's in order (small batches:
    the actor goes back to the ready queue, where any worker may pick it up, every 2
    messages)."""
    p = ActorPool(workers=4, batch=2, name="one-turn")
    p.start()
    turns = Turns()
    actor = Counted(p, turns)
    senders, per_sender = 4, 2000
    start = threading.Barrier(senders)

    def send(sender: int) -> None:
        start.wait(WAIT)
        for i in range(per_sender):
            assert actor.tell((sender, i))

    try:
        run_senders(senders, send)
        log = actor.ping()
    finally:
        assert p.stop(timeout=WAIT) == []
    assert turns.most == 1
    assert_in_order_per_sender(log, senders, per_sender)


def _wake_up_round(pool: ActorPool, actors: int, senders: int, per_sender: int) -> None:
    """One round of :func:`test_no_wake_up_is_lost_between_a_tell_and_a_turn_going_idle`."""
    targets = [Recorder(pool, tag=str(i)) for i in range(actors)]
    start = threading.Barrier(senders)

    def send(sender: int) -> None:
        start.wait(WAIT)
        order = targets[sender * 2 :] + targets[: sender * 2]  # each sender its own order
        for i in range(per_sender):
            for actor in order:
                assert actor.tell((sender, i))

    run_senders(senders, send)
    for actor in targets:
        assert_in_order_per_sender(actor.ping(), senders, per_sender)


def test_no_wake_up_is_lost_between_a_tell_and_a_turn_going_idle(busy_switching: None) -> None:
    """A turn pops messages without the actor's lock (``deque.popleft`` against a tell's
    ``append``, atomic under the interpreter lock) and takes it only to go idle: senders flood
    a few actors with small batches and frequent thread switches, and every message is handled
    once, each sender's in order. A lost wake-up would lose a message, or leave it queued on an
    actor nobody schedules (its ping would never be answered)."""
    p = ActorPool(workers=3, batch=3, name="wakeups")
    p.start()
    try:
        for _ in range(3):
            _wake_up_round(p, actors=8, senders=4, per_sender=1500)
    finally:
        assert p.stop(timeout=WAIT) == []


@pytest.mark.parametrize(("batch", "hot_before_cold"), [(4, 4), (1000, 100)])
def test_a_flooded_actor_does_not_starve_another(batch: int, hot_before_cold: int) -> None:
    """One worker; a hot actor gets 100 messages, then a cold one gets one. The hot actor's
    turn handles ``batch`` of them and goes to the back of the ready queue, behind the cold
    one: the cold message is handled after ``batch`` hot ones, not after all 100."""
    p = ActorPool(workers=1, batch=batch, name="fair")
    p.start()
    shared: list[Any] = []
    hold = hold_worker(p)  # the only worker: hot and cold wait on the ready queue
    try:
        hot = Recorder(p, shared, "hot")
        cold = Recorder(p, shared, "cold")
        for i in range(100):
            assert hot.tell(i)
        assert cold.tell("x")
        hold.release.set()
        assert hot.ping() == list(range(100))
        assert cold.ping() == ["x"]
    finally:
        hold.release.set()
        assert p.stop(timeout=WAIT) == []
    order = [tag for tag, _ in shared if tag != "holder"]
    assert order.index("cold") == hot_before_cold
    assert [m for tag, m in shared if tag == "hot"] == list(range(100))


# --------------------------------------------------------------------------- leaving


def test_a_tell_after_close_if_empty_is_refused_and_queues_nothing(pool: ActorPool) -> None:
    actor = Recorder(pool)
    assert actor.tell("a")
    assert actor.tell(TryClose())  # nothing queued behind it: it closes
    assert actor.next_seen() == ("received", "a")
    assert actor.next_seen() == ("closed", True)
    assert actor.next_seen()[0] == "received"  # the TryClose itself
    assert actor.stopped
    assert actor.tell("late") is False
    assert actor.tell(Ping()) is False
    assert actor.close_if_empty() is False  # already closed
    assert pool.stop(timeout=WAIT) == []
    assert actor.abandon() == []  # the refused tells were never queued
    assert actor.log[0] == "a" and len(actor.log) == 2  # "a" and the TryClose, nothing later
    assert actor.seen.empty()  # nothing dropped either


def test_close_if_empty_keeps_an_actor_with_queued_messages(single: ActorPool) -> None:
    actor = Recorder(single)
    # "after" is queued behind the TryClose: the close must fail
    tell_while_held(single, {actor: (TryClose(), "after")})
    assert actor.next_seen() == ("closed", False)
    actor.next_seen()  # the TryClose itself, received
    assert actor.next_seen() == ("received", "after")
    assert not actor.stopped
    assert actor.tell(TryClose())
    assert actor.next_seen() == ("closed", True)
    assert actor.tell("late") is False


def _closing_round(pool: ActorPool, senders: int, per_sender: int) -> None:
    """One round of :func:`test_close_if_empty_is_atomic_with_racing_tells`."""
    closed = threading.Event()
    handled: list[tuple[int, int]] = []
    after_close: list[Any] = []

    class Closer(Actor):
        __slots__ = ()

        def receive(self, message: Any) -> None:
            if closed.is_set():
                after_close.append(message)
            handled.append(message)
            if len(handled) >= 50 and self.close_if_empty():
                closed.set()

        def dropped(self, message: Any) -> None:
            after_close.append(message)

    actor = Closer(pool)
    accepted: list[list[int]] = [[] for _ in range(senders)]
    refused = [0] * senders
    start = threading.Barrier(senders)

    def send(sender: int) -> None:
        start.wait(WAIT)
        for i in range(per_sender):
            if actor.tell((sender, i)):
                accepted[sender].append(i)
            else:
                refused[sender] += 1

    run_senders(senders, send)
    assert closed.wait(WAIT)  # the last message leaves the inbox empty at the latest
    assert actor.stopped and actor.tell("late") is False
    assert after_close == []
    for sender in range(senders):
        mine = [i for s, i in handled if s == sender]
        assert mine == accepted[sender] == list(range(len(mine)))
        assert len(mine) + refused[sender] == per_sender


def test_close_if_empty_is_atomic_with_racing_tells(busy_switching: None) -> None:
    """Senders flood an actor that closes itself whenever its inbox is empty (after a few
    messages): every message is either handled or refused, never lost, each sender's handled
    ones are a prefix of what it sent, and nothing is handled or dropped after the close."""
    p = ActorPool(workers=2, batch=4, name="closing")
    p.start()
    try:
        for _ in range(20):
            _closing_round(p, senders=3, per_sender=1500)
    finally:
        assert p.stop(timeout=WAIT) == []


def test_stop_from_receive_hands_the_rest_to_dropped(single: ActorPool) -> None:
    actor = Recorder(single)
    stop = StopNow()
    tell_while_held(single, {actor: ("a", stop, "b", "c")})
    seen = [actor.next_seen() for _ in range(4)]
    assert seen == [("received", "a"), ("received", stop), ("dropped", "b"), ("dropped", "c")]
    assert actor.stopped
    assert actor.tell("d") is False
    assert actor.log == ["a", stop]
    other = Recorder(single)  # the worker goes on
    assert other.ping() == []


def test_abandon_after_the_pool_stopped_returns_the_queued_messages() -> None:
    p = ActorPool(workers=1, name="abandon")
    p.start()
    hold = hold_worker(p)
    actor = Recorder(p)
    for i in range(3):
        assert actor.tell(i)
    stuck = p.stop(timeout=0.01)  # the held turn is still running; no new turn starts
    assert stuck == hold.worker
    hold.release.set()
    assert p.stop(timeout=WAIT) == []
    assert actor.log == []  # its turn never started
    assert actor.close_if_empty() is False  # messages are queued
    assert actor.abandon() == [0, 1, 2]
    assert actor.stopped and actor.tell(3) is False
    assert actor.abandon() == []
    assert actor.seen.empty()  # abandoned messages are returned, not dropped


def test_close_if_empty_once_the_pool_stopped() -> None:
    p = ActorPool(workers=1, name="closed-pool")
    p.start()
    idle = Recorder(p)
    assert idle.ping() == []
    assert p.stop(timeout=WAIT) == []
    assert idle.close_if_empty() is True
    assert idle.tell("x") is False


# --------------------------------------------------------------------------- failures


def test_an_exception_in_receive_stops_only_that_actor(single: ActorPool) -> None:
    bad, good = Recorder(single, tag="bad"), Recorder(single, tag="good")
    boom = RuntimeError("boom")
    tell_while_held(single, {bad: ("m1", Raise(boom), "m2", "m3"), good: ("g1",)})
    seen = [bad.next_seen() for _ in range(4)]
    assert seen == [("received", "m1"), ("crashed", boom), ("dropped", "m2"), ("dropped", "m3")]
    assert bad.stopped
    assert bad.tell("late") is False
    assert good.ping() == ["g1"]
    assert Recorder(single).ping() == []  # the only worker survived
    assert bad.seen.empty()


class Fatal(BaseException):
    """Not an Exception: what a ``SystemExit`` or ``KeyboardInterrupt`` in a turn would be."""


def test_a_base_exception_in_receive_stops_only_that_actor(single: ActorPool) -> None:
    bad, good = Recorder(single), Recorder(single)
    fatal = Fatal("fatal")
    assert bad.tell(Raise(fatal))
    assert bad.tell("after")
    assert bad.next_seen() == ("crashed", fatal)
    assert bad.next_seen() == ("dropped", "after")
    assert bad.stopped and bad.tell("late") is False
    assert good.ping() == []  # the worker that ran it survived
    assert single.running


def test_failing_crash_and_drop_hooks_still_stop_the_actor(single: ActorPool) -> None:
    """``crashed`` and ``dropped`` that raise are logged: the actor stops all the same and every
    queued message still reaches ``dropped``."""
    seen: queue.Queue[tuple[str, Any]] = queue.Queue()

    class Clumsy(Actor):
        __slots__ = ()

        def receive(self, message: Any) -> None:
            raise RuntimeError("receive bug")

        def crashed(self, error: BaseException) -> None:
            seen.put(("crashed", error))
            raise RuntimeError("crash handler bug")

        def dropped(self, message: Any) -> None:
            seen.put(("dropped", message))
            raise RuntimeError("drop handler bug")

    actor = Clumsy(single)
    tell_while_held(single, {actor: ("first", "second", "third")})
    got = [seen.get(timeout=WAIT) for _ in range(3)]
    assert got[0][0] == "crashed" and str(got[0][1]) == "receive bug"
    assert got[1:] == [("dropped", "second"), ("dropped", "third")]
    assert actor.stopped
    assert Recorder(single).ping() == []  # the worker goes on


def test_receive_must_be_defined() -> None:
    p = ActorPool(workers=1, name="bare")
    p.start()
    errors: queue.Queue[BaseException] = queue.Queue()

    class Bare(Actor):
        __slots__ = ()

        def crashed(self, error: BaseException) -> None:
            errors.put(error)

    try:
        actor = Bare(p)
        assert actor.tell("x")
        assert isinstance(errors.get(timeout=WAIT), NotImplementedError)
        assert actor.stopped
    finally:
        assert p.stop(timeout=WAIT) == []


# --------------------------------------------------------------------------- pool lifecycle


def test_pool_start_twice_and_restart_after_stop_are_refused() -> None:
    p = ActorPool(workers=1, name="life")
    p.start()
    with pytest.raises(PoolStateError):
        p.start()
    assert [t.name for t in threading.enumerate() if t.name.startswith("life-")] == ["life-0"]
    assert p.stop(timeout=WAIT) == []
    with pytest.raises(PoolStateError):
        p.start()
    assert p.stop(timeout=WAIT) == []  # idempotent
    never = ActorPool(name="never")
    assert never.stop() == []  # stopping a pool never started is fine
    with pytest.raises(PoolStateError):
        never.start()


def test_pool_stop_from_its_own_worker_is_refused(pool: ActorPool) -> None:
    actor = Recorder(pool)
    assert actor.tell(Run(pool.stop))
    kind, result = actor.next_seen()
    assert kind == "ran" and isinstance(result, PoolStateError)
    assert pool.running  # nothing stopped
    assert actor.ping() == [actor.log[0]]


def test_pool_stop_returns_while_a_turn_is_stuck_and_names_its_worker() -> None:
    """A turn stuck in a request does not hold ``stop`` past its timeout: ``stop`` reports the
    worker still in it; the other workers exit; no new turn starts; the stuck worker exits
    once its turn returns."""
    p = ActorPool(workers=2, name="stuck")
    p.start()
    holder = Recorder(p)
    hold = hold_worker(p, holder)
    try:
        assert hold.worker[0] in p.stop(timeout=0.2)
        assert not p.running
        for thread in threading.enumerate():
            if thread.name.startswith("stuck-") and thread.name != hold.worker[0]:
                thread.join(WAIT)  # the idle worker exits
        assert p.stop(timeout=0) == hold.worker  # only the stuck one is left
        later = Recorder(p)
        assert later.tell("never handled")  # the actor is open; the pool runs no turn
    finally:
        hold.release.set()
    assert holder.next_seen() == ("received", hold)  # the stuck turn finished
    assert p.stop(timeout=WAIT) == []
    assert later.abandon() == ["never handled"]


def test_run_or_tell_runs_an_idle_actors_turn_on_the_calling_thread() -> None:
    """An idle actor's message is handled at once, on the caller's thread; a busy one's is
    queued for the pool, in order; a stopped one's is refused."""
    pool = ActorPool(workers=1)
    seen: list[tuple[object, str]] = []
    gate = threading.Event()

    class Recorder(Actor):
        __slots__ = ()

        def receive(self, message: Any) -> None:
            seen.append((message, threading.current_thread().name))
            if message == "block":
                assert gate.wait(5)

    actor = Recorder(pool)
    pool.start()
    try:
        me = threading.current_thread().name
        assert actor.run_or_tell("now")
        assert seen == [("now", me)]
        assert actor.tell("block")  # a turn on the pool, held by the gate
        wait_for(lambda: len(seen) == 2, 5, "the pool's turn began")
        assert actor.run_or_tell("later")  # busy: queued behind, for the pool
        gate.set()
        wait_for(lambda: len(seen) == 3, 5, "the queued message was handled")
        assert seen[2][0] == "later" and seen[2][1] != me
        assert actor.close_if_empty()
        assert not actor.run_or_tell("refused")
    finally:
        gate.set()
        pool.stop(timeout=5)
