"""Tests of the UID registry (actors/registry.py) on top of the pooled runtime."""

from __future__ import annotations

import itertools
import queue
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest

from kdispatch.actors.errors import ActorLimitExceeded, InvalidConfigError, InvalidInputError
from kdispatch.actors.registry import ReapRequest, Registry, Tombstoned
from kdispatch.actors.runtime import ActorPool, PooledActor
from kdispatch.testing.waiting import wait_for
from tests.clocks import ManualClock

WAIT = 5.0


class ObjActor(PooledActor):
    """Counts messages; answers ReapRequest like an object actor with nothing in flight."""

    def __init__(
        self, pool: ActorPool, registry: Registry, uid: str, outcomes: queue.Queue[Any]
    ) -> None:
        super().__init__(pool=pool)
        self.registry = registry
        self.uid = uid
        self.outcomes = outcomes
        self.log: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ReapRequest):
            released = self.registry.release(message.uid, self.actor_ref, message.generation)
            self.outcomes.put((message.uid, "released" if released else "kept"))
            if released:
                self.stop()
            return None
        if isinstance(message, tuple) and message[0] == "wait":
            assert message[1].wait(WAIT)
            return None
        if message == "crash":
            raise RuntimeError("crash")
        self.log.append(message)
        return list(self.log)


class Harness:
    def __init__(self, pool: ActorPool, registry: Registry) -> None:
        self.pool = pool
        self.registry = registry
        self.outcomes: queue.Queue[Any] = queue.Queue()
        self.spawns = itertools.count()
        self.spawned: list[str] = []
        self._lock = threading.Lock()

    def factory(self, uid: str) -> Callable[[], pykka.ActorRef[Any]]:
        def make() -> pykka.ActorRef[Any]:
            with self._lock:
                self.spawned.append(uid)
            return ObjActor.start(self.pool, self.registry, uid, self.outcomes)

        return make

    def tell(self, uid: str, message: object) -> bool:
        return self.registry.tell(uid, message, self.factory(uid))

    def log_of(self, uid: str) -> list[Any]:
        ref = self.registry.get(uid)
        assert ref is not None
        result: list[Any] = ref.ask("sync", block=True, timeout=WAIT)
        return result[:-1]


@pytest.fixture
def pool() -> Iterator[ActorPool]:
    p = ActorPool(workers=2, name="reg-pool")
    p.start()
    yield p
    p.stop(timeout=WAIT)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
def h(pool: ActorPool, clock: ManualClock) -> Iterator[Harness]:
    registry = Registry(idle_timeout=60.0, tombstone_ttl=300.0, clock=clock)
    yield Harness(pool, registry)
    registry.stop_all(timeout=WAIT)


# --------------------------------------------------------------------------- routing


def test_tell_spawns_once_and_routes_in_order(h: Harness) -> None:
    for i in range(10):
        assert h.tell("u1", i)
    assert h.log_of("u1") == list(range(10))
    assert h.spawned == ["u1"]
    assert h.registry.live_count() == 1
    assert h.registry.dropped == 0


def test_tell_without_factory_drops_when_absent(h: Harness) -> None:
    assert h.registry.tell("nobody", "m") is False
    assert h.registry.dropped == 1
    assert h.registry.live_count() == 0
    assert h.tell("u", "a")
    assert h.registry.tell("u", "b") is True  # present: no factory needed
    assert h.log_of("u") == ["a", "b"]


def test_get_and_get_or_spawn(h: Harness) -> None:
    assert h.registry.get("u") is None
    ref = h.registry.get_or_spawn("u", h.factory("u"))
    assert h.registry.get("u") is ref
    assert h.registry.get_or_spawn("u", h.factory("u")) is ref
    assert h.spawned == ["u"]
    other = h.registry.get_or_spawn("v", h.factory("v"))
    assert h.registry.live_refs() == [ref, other]
    assert h.tell("u", "m")  # activity moves "u" to the back
    assert h.registry.live_refs() == [other, ref]


def test_many_threads_many_uids_one_actor_each(h: Harness) -> None:
    """Spawns race (the actor is built without the lock): a sender that loses stops the actor
    it built, unused, and routes to the registered one, so every message reaches the one
    actor registered for its UID."""
    uids = [f"uid-{i}" for i in range(1000)]
    barrier = threading.Barrier(32, timeout=WAIT)
    errors: list[BaseException] = []

    def run(seed: int) -> None:
        order = uids[:]
        random.Random(seed).shuffle(order)
        try:
            barrier.wait()
            for uid in order:
                assert h.tell(uid, seed)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert set(h.spawned) == set(uids)
    assert h.registry.live_count() == 1000
    for uid in uids[::25]:
        assert sorted(h.log_of(uid)) == list(range(32))  # every sender's message, once


@pytest.mark.timeout(30)
def test_a_spawn_in_progress_does_not_hold_up_other_senders(h: Harness) -> None:
    """The registry's lock is not held while an actor is built: one sender stuck in its
    factory leaves the others free to spawn and route."""
    building, release = threading.Event(), threading.Event()

    def slow() -> pykka.ActorRef[Any]:
        building.set()
        assert release.wait(WAIT)
        return h.factory("slow")()

    stuck = threading.Thread(target=lambda: h.registry.tell("slow", "first", slow))
    stuck.start()
    try:
        assert building.wait(WAIT)
        assert h.tell("other", "m")  # would wait for the lock if the factory held it
        assert h.tell("slow", "second")  # spawns too: the first build is not registered yet
        assert h.log_of("other") == ["m"]
    finally:
        release.set()
        stuck.join(WAIT)
    # The stuck sender lost the race: it stopped its actor and routed to the registered one.
    assert sorted(h.log_of("slow")) == ["first", "second"]
    assert h.spawned.count("slow") == 2 and h.registry.live_count() == 2


def test_many_threads_one_uid_spawn_once(h: Harness) -> None:
    barrier = threading.Barrier(32, timeout=WAIT)
    refs: list[pykka.ActorRef[Any]] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        ref = h.registry.get_or_spawn("one", h.factory("one"))
        assert h.tell("one", "m")
        with lock:
            refs.append(ref)

    threads = [threading.Thread(target=run) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert h.spawned == ["one"]
    assert len(refs) == 32 and all(r is refs[0] for r in refs)
    assert h.log_of("one") == ["m"] * 32


def test_dead_actor_is_replaced_and_forget_spawns_fresh(h: Harness) -> None:
    assert h.tell("u", "crash")
    first = h.registry.get("u")
    assert first is not None
    first.actor_stopped.wait(WAIT)  # crashed on the pool
    assert h.tell("u", "after crash")  # dead ref found: a fresh actor gets it
    second = h.registry.get("u")
    assert second is not None and second is not first
    assert h.log_of("u") == ["after crash"]
    h.registry.forget("u", first)  # stale ref: nothing happens
    assert h.registry.get("u") is second
    h.registry.forget("u", second)
    assert h.registry.get("u") is None
    assert not h.registry.is_tombstoned("u")
    assert second.is_alive()  # forget does not stop it
    second.stop()
    assert h.tell("u", "fresh")
    assert h.spawned == ["u", "u", "u"]


def test_factory_errors_propagate_and_register_nothing(h: Harness) -> None:
    def bad() -> pykka.ActorRef[Any]:
        raise RuntimeError("factory failed")

    with pytest.raises(RuntimeError):
        h.registry.tell("u", "m", bad)
    with pytest.raises(InvalidInputError):
        h.registry.tell("u", "m", lambda: "not a ref")  # type: ignore[arg-type,return-value]
    assert h.registry.live_count() == 0


# --------------------------------------------------------------------------- reaping


def test_reap_idle_releases_idle_actor(h: Harness, clock: ManualClock) -> None:
    assert h.tell("a", 1)
    first = h.registry.get("a")
    assert first is not None
    clock.advance(59)
    assert h.registry.reap_idle() == 0
    clock.advance(2)
    assert h.registry.reap_idle() == 1
    assert h.outcomes.get(timeout=WAIT) == ("a", "released")
    assert first.actor_stopped.wait(WAIT)
    assert h.registry.live_count() == 0
    assert h.tell("a", 2)  # not tombstoned: spawns fresh
    assert h.spawned == ["a", "a"]
    assert h.log_of("a") == [2]


def test_reap_only_idle_and_each_once_per_timeout(h: Harness, clock: ManualClock) -> None:
    gate = threading.Event()
    assert h.tell("old", "x")
    old = h.registry.get("old")
    assert old is not None
    old.tell(("wait", gate))  # direct tell: not routed, no activity
    clock.advance(30)
    assert h.tell("young", "y")
    clock.advance(31)
    assert h.registry.reap_idle() == 1  # only "old" (61 s); "young" is 31 s idle
    assert h.registry.reap_idle() == 0  # "old" was asked and moved to the back
    assert h.tell("old", "z")  # routed after the request: release must fail
    gate.set()
    assert h.outcomes.get(timeout=WAIT) == ("old", "kept")
    assert h.log_of("old") == ["x", "z"]
    assert h.registry.get("old") is old
    clock.advance(30)
    assert h.registry.reap_idle() == 1  # "young" now 61 s idle
    assert h.outcomes.get(timeout=WAIT) == ("young", "released")
    clock.advance(31)
    assert h.registry.reap_idle() == 1  # "old": last activity was the routed "z"
    assert h.outcomes.get(timeout=WAIT) == ("old", "released")
    assert old.actor_stopped.wait(WAIT)
    assert h.registry.live_count() == 0
    assert h.spawned == ["old", "young"]


def test_reap_passes_skipped_until_someone_can_be_idle(h: Harness, clock: ManualClock) -> None:
    """A pass notes when the least recently active actor it left alone can be idle at the
    earliest; the passes before then find nobody, and every actor is still asked on time."""
    assert h.tell("a", 1)  # t=0
    clock.advance(40)
    assert h.tell("b", 1)  # t=40
    clock.advance(21)
    assert h.registry.reap_idle() == 1  # t=61: "a"; "b" can be idle at 100 at the earliest
    assert h.outcomes.get(timeout=WAIT) == ("a", "released")
    clock.advance(38)
    assert h.registry.reap_idle() == 0  # t=99
    clock.advance(2)
    assert h.registry.reap_idle() == 1  # t=101: "b"
    assert h.outcomes.get(timeout=WAIT) == ("b", "released")
    assert h.tell("c", 1)  # t=101, after the last pass: its own 60 s count
    clock.advance(59)
    assert h.registry.reap_idle() == 0
    clock.advance(2)
    assert h.registry.reap_idle() == 1
    assert h.outcomes.get(timeout=WAIT) == ("c", "released")


def test_release_checks_ref_and_generation(h: Harness) -> None:
    ref = h.registry.get_or_spawn("u", h.factory("u"))
    other = h.registry.get_or_spawn("v", h.factory("v"))
    assert h.registry.release("u", other, 1) is False
    assert h.registry.release("u", ref, 0) is False
    assert h.registry.release("missing", ref, 1) is False
    assert h.registry.release("u", ref, 1) is True
    assert h.registry.get("u") is None
    ref.stop()


def test_reap_disabled_and_dead_refs_dropped(pool: ActorPool, clock: ManualClock) -> None:
    never = Registry(idle_timeout=None, clock=clock)
    harness = Harness(pool, never)
    assert harness.tell("u", 1)
    clock.advance(10_000)
    assert never.reap_idle() == 0
    never.stop_all(timeout=WAIT)

    reg = Registry(idle_timeout=1.0, clock=clock)
    harness = Harness(pool, reg)
    assert harness.tell("u", "crash")
    ref = reg.get("u")
    assert ref is not None
    assert ref.actor_stopped.wait(WAIT)
    clock.advance(2)
    assert reg.reap_idle() == 0  # dead: removed rather than asked
    assert reg.live_count() == 0


# --------------------------------------------------------------------------- tombstones


def test_retire_tombstones_and_drops(h: Harness, clock: ManualClock) -> None:
    assert h.tell("gone", "a")
    ref = h.registry.get("gone")
    assert ref is not None
    h.registry.retire("gone", ref)
    ref.stop()
    assert h.registry.is_tombstoned("gone")
    assert h.registry.get("gone") is None
    assert h.tell("gone", "b") is False
    assert h.tell("gone", "c") is False
    assert h.registry.dropped == 2
    with pytest.raises(Tombstoned):
        h.registry.get_or_spawn("gone", h.factory("gone"))
    assert h.spawned == ["gone"]  # never resurrected
    clock.advance(299)
    assert h.tell("gone", "d") is False
    clock.advance(2)  # tombstone expired
    assert not h.registry.is_tombstoned("gone")
    assert h.tell("gone", "e")
    assert h.spawned == ["gone", "gone"]
    assert h.log_of("gone") == ["e"]


def test_retire_with_stale_ref_keeps_current_but_tombstones(h: Harness) -> None:
    stale = h.registry.get_or_spawn("u", h.factory("u"))
    assert h.registry.release("u", stale, 1)
    stale.stop()
    current = h.registry.get_or_spawn("u", h.factory("u"))
    h.registry.retire("u", stale)
    assert h.registry.get("u") is current
    assert h.tell("u", "m") is False  # tombstoned all the same


def test_tombstone_without_actor_and_size_bound(pool: ActorPool, clock: ManualClock) -> None:
    reg = Registry(tombstone_max=2, clock=clock)
    harness = Harness(pool, reg)
    reg.tombstone("a")
    assert harness.tell("a", 1) is False
    assert harness.spawned == []
    clock.advance(1)
    reg.tombstone("b")
    clock.advance(1)
    reg.tombstone("c")  # evicts the oldest
    assert [reg.is_tombstoned(u) for u in "abc"] == [False, True, True]
    reg.stop_all(timeout=WAIT)


# --------------------------------------------------------------------------- limits, shutdown


def test_max_live(pool: ActorPool, clock: ManualClock) -> None:
    reg = Registry(max_live=2, clock=clock)
    harness = Harness(pool, reg)
    assert harness.tell("a", 1) and harness.tell("b", 1)
    with pytest.raises(ActorLimitExceeded):
        harness.tell("c", 1)
    with pytest.raises(ActorLimitExceeded):
        reg.get_or_spawn("c", harness.factory("c"))
    assert harness.tell("a", 2)  # existing actors still reachable
    ref = reg.get("a")
    assert ref is not None
    reg.forget("a", ref)
    ref.stop()
    assert harness.tell("c", 1)
    assert reg.live_count() == 2
    reg.stop_all(timeout=WAIT)


def test_stop_all_stops_only_own_actors(pool: ActorPool, clock: ManualClock) -> None:
    reg1, reg2 = Registry(clock=clock), Registry(clock=clock)
    h1, h2 = Harness(pool, reg1), Harness(pool, reg2)
    for i in range(20):
        assert h1.tell(f"u{i}", i)
        assert h2.tell(f"u{i}", i)
    mine = [reg1.get(f"u{i}") for i in range(20)]
    outsider = ObjActor.start(pool, reg1, "outsider", queue.Queue())
    reg1.stop_all(timeout=WAIT)
    assert reg1.live_count() == 0
    assert all(r is not None and not r.is_alive() for r in mine)
    assert outsider.is_alive()
    assert reg2.live_count() == 20
    assert h2.log_of("u3") == [3]
    assert pool.live_count() == 21
    reg2.stop_all(timeout=WAIT)
    outsider.stop()
    assert pool.live_count() == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"idle_timeout": 0},
        {"idle_timeout": -1.0},
        {"idle_timeout": "60"},
        {"tombstone_ttl": 0},
        {"tombstone_max": 0},
        {"tombstone_max": 1.5},
        {"max_live": 0},
        {"max_live": True},
        {"clock": 3.0},
    ],
)
def test_config_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        Registry(**kwargs)


def test_uid_validation(h: Harness) -> None:
    for bad in ("", None, 5):
        with pytest.raises(InvalidInputError):
            h.registry.tell(bad, "m", h.factory("x"))  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            h.registry.tombstone(bad)  # type: ignore[arg-type]
    assert h.spawned == []


# --------------------------------------------------------------------------- lock-free routing


class SeqActor(PooledActor):
    """Records what it handles in a log shared by every actor of the UID; leaves whenever it is
    asked and may (``release``), like an idle object actor."""

    def __init__(self, pool: ActorPool, registry: Registry, shared: SharedLog) -> None:
        super().__init__(pool=pool)
        self.registry = registry
        self.shared = shared

    def on_receive(self, message: Any) -> Any:
        self.shared.enter()
        try:
            if isinstance(message, ReapRequest):
                released = self.registry.release(message.uid, self.actor_ref, message.generation)
                if released:
                    self.stop()
                self.shared.reaped(released)
            else:
                self.shared.record(self.actor_urn, message)
        finally:
            self.shared.exit()


class SharedLog:
    def __init__(self, expected: int) -> None:
        self.lock = threading.Condition()
        self.handled: list[tuple[str, Any]] = []
        self.seen: set[Any] = set()
        self.active = 0
        self.overlaps = 0
        self.asked = 0
        self.left = 0
        self.expected = expected
        self.complete = threading.Event()

    def enter(self) -> None:
        with self.lock:
            self.active += 1
            if self.active > 1:
                self.overlaps += 1  # two actors of one UID at once

    def exit(self) -> None:
        with self.lock:
            self.active -= 1

    def record(self, actor: str, message: Any) -> None:
        with self.lock:
            self.handled.append((actor, message))
            self.seen.add(message)
            self.lock.notify_all()
            if len(self.handled) == self.expected:
                self.complete.set()

    def reaped(self, left: bool) -> None:
        with self.lock:
            self.asked += 1
            self.left += left
            self.lock.notify_all()

    def wait_asked(self, count: int) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: self.asked >= count, WAIT)

    def wait_handled(self, message: Any) -> bool:
        """Until ``message`` was handled (a sender pausing, so its actor drains)."""
        with self.lock:
            return self.lock.wait_for(lambda: message in self.seen, WAIT)


def test_lock_free_routing_races_reaping_without_loss_reorder_or_overlap(pool: ActorPool) -> None:
    """Senders route to one UID without the lock; now and then one of them lets the actor
    drain and asks it to leave while the others keep sending: every message is handled exactly
    once, each sender's in order, never by two actors at once, and the actor did leave (and
    was spawned again) along the way."""
    registry = Registry(idle_timeout=1e-9)  # every actor is idle when asked
    senders, per_sender = 3, 1500
    shared = SharedLog(senders * per_sender)

    def factory() -> pykka.ActorRef[Any]:
        return SeqActor.start(pool, registry, shared)

    start = threading.Barrier(senders)
    drained, asked = threading.Barrier(senders), threading.Barrier(senders)

    def send(tid: int) -> None:
        start.wait()
        for i in range(per_sender):
            assert registry.tell("u", (tid, i), factory)
            if i % 25 == 24:  # all let the actor drain; then one asks it to leave, racing the
                assert shared.wait_handled((tid, i))  # others' next messages
                drained.wait(WAIT)
                if tid == 0:
                    registry.reap_idle()
                asked.wait(WAIT)  # then all send at once, racing the request

    threads = [threading.Thread(target=send, args=(t,)) for t in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert shared.complete.wait(30), f"handled {len(shared.handled)} of {shared.expected}"
    finally:
        registry.stop_all(timeout=WAIT)
    messages = [m for _, m in shared.handled]
    assert sorted(messages) == [(s, i) for s in range(senders) for i in range(per_sender)]
    for sender in range(senders):
        assert [i for tid, i in messages if tid == sender] == list(range(per_sender))
    assert shared.overlaps == 0
    assert shared.left >= 1 and len({a for a, _ in shared.handled}) >= 2  # it left, came back


def test_a_tell_to_a_closed_inbox_is_refused_not_dropped(pool: ActorPool) -> None:
    registry = Registry()
    shared = SharedLog(1)
    ref = registry.tell("u", "first", lambda: SeqActor.start(pool, registry, shared))
    assert ref and shared.complete.wait(WAIT)
    actor_ref = registry.get("u")
    assert actor_ref is not None
    generation = 1  # one message routed

    class Leave:
        pass

    # the actor's own turn is where it leaves: ask it to via a ReapRequest
    actor_ref.tell(ReapRequest("u", generation))
    wait_for(lambda: registry.get("u") is None, 5.0, "the actor to leave the registry")
    assert registry.get("u") is None and shared.left == 1
    with pytest.raises(pykka.ActorDeadError):
        actor_ref.tell("late")  # refused: the sender learns it
    assert registry.dropped == 0
    registry.stop_all(timeout=WAIT)


def test_drops_without_an_actor_are_counted_from_every_thread(h: Harness) -> None:
    per_thread, threads = 2000, 4
    start = threading.Barrier(threads)

    def drop() -> None:
        start.wait()
        for i in range(per_thread):
            assert h.registry.tell(f"nobody-{i}", "m") is False

    workers = [threading.Thread(target=drop) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert h.registry.dropped == per_thread * threads


# --------------------------------------------------------------------------- lock-free spawns
# A spawn registers its actor with one dict.setdefault and checks the tombstone and the cap
# again after it. The races it answers are made deterministic here: the factory (which runs
# between the first checks and the registration) deletes the object or fills the cap, and a
# tombstone cache whose second look-up lets another sender's message in first.


def test_a_spawn_that_meets_a_tombstone_after_registering_takes_its_actor_back(
    h: Harness,
) -> None:
    live = h.pool.live_count()
    build = h.factory("gone")
    made: list[pykka.ActorRef[Any]] = []

    def deleted_while_building() -> pykka.ActorRef[Any]:
        made.append(build())
        h.registry.tombstone("gone")  # another thread retires the object meanwhile
        return made[0]

    assert not h.registry.tell("gone", "hello", deleted_while_building)
    assert h.registry.get("gone") is None and h.registry.dropped == 1
    assert h.registry.live_count() == 0
    assert not h.registry.tell("gone", "again", h.factory("gone"))  # still dead
    assert h.spawned == ["gone"]  # the tombstone stopped the second spawn before its build
    # the actor taken back ends by itself (its inbox was closed while empty), unused
    assert made[0].actor_stopped.wait(WAIT)
    assert h.pool.live_count() == live


class _LetInFirst(dict[str, bool]):
    """A tombstone cache whose second look-up of ``uid`` lets another sender's message reach
    the freshly registered actor (through tell's lock-free path), then reports the tombstone."""

    def __init__(self, registry: Registry, uid: str) -> None:
        super().__init__()
        self.registry, self.uid, self.lookups = registry, uid, 0

    def __contains__(self, key: object) -> bool:
        if key == self.uid:
            self.lookups += 1
            if self.lookups == 2:
                assert self.registry.tell(self.uid, "racer")  # reaches the new actor first
                self[self.uid] = True
        return super().__contains__(key)


def test_a_spawn_whose_actor_got_a_message_first_keeps_it_but_lets_nothing_more_in(
    h: Harness,
) -> None:
    tombstones = _LetInFirst(h.registry, "racy")
    h.registry._tombstones = tombstones  # type: ignore[assignment]
    assert h.registry.tell("racy", "mine", h.factory("racy"))
    assert not h.registry.tell("racy", "later", h.factory("racy"))  # tombstoned: dropped
    assert h.spawned == ["racy"]
    assert h.log_of("racy") == ["racer", "mine"]  # nothing lost, each handled once, in order


def test_a_spawn_over_the_cap_after_registering_takes_its_actor_back(
    pool: ActorPool, clock: ManualClock
) -> None:
    reg = Registry(max_live=1, clock=clock)
    harness = Harness(pool, reg)
    live = pool.live_count()
    build = harness.factory("late")

    def cap_filled_while_building() -> pykka.ActorRef[Any]:
        ref = build()
        assert harness.tell("first", 1)  # another sender takes the last place meanwhile
        return ref

    with pytest.raises(ActorLimitExceeded):
        reg.tell("late", 1, cap_filled_while_building)
    assert reg.get("late") is None and reg.live_count() == 1
    assert harness.log_of("first") == [1]
    reg.stop_all(timeout=WAIT)
    assert pool.live_count() == live
