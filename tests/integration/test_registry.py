"""Tests of the UID registry (actors/engine/registry.py).

Two stand-ins for object actors: :class:`UidActor`, a real pooled actor that logs what it
handles and leaves on ``Reap`` when its inbox is empty (as an idle object actor does), for the
races; and :class:`Mailbox`, a synchronous one whose inbox the test reads, for the rules that
need no thread (tombstones, reaping, limits) and a :class:`~tests.clocks.ManualClock`.
"""

from __future__ import annotations

import queue
import random
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, TypeVar, cast

import pytest

from kdispatch.actors.engine.messages import Reap
from kdispatch.actors.engine.registry import Registry, Spawn, live_pooled_actors
from kdispatch.actors.model.errors import ActorLimitExceeded, InvalidConfigError
from kdispatch.actors.runtime.pool import Actor, ActorPool
from tests.clocks import ManualClock

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0  # generous bound for waits that must succeed; never used to sequence anything


# --------------------------------------------------------------------------- stand-ins


@dataclass(eq=False)
class Ping:
    """Answered with the actor's log once every message told before it was handled."""

    reply: Future[list[Any]] = field(default_factory=Future)


@dataclass(eq=False)
class Hold:
    """Keeps the actor's worker until ``release`` is set, after setting ``entered``."""

    release: threading.Event
    entered: threading.Event = field(default_factory=threading.Event)


class UidActor(Actor):
    """Logs what it handles and notes when it became idle; on ``Reap``, leaves if its inbox is
    empty (atomically with every tell) and notes it in ``world.left``."""

    __slots__ = ("idle_since", "log", "uid", "world")

    def __init__(self, world: World, uid: str) -> None:
        super().__init__(world.pool)
        self.world = world
        self.uid = uid
        self.log: list[Any] = []
        self.idle_since: float | None = None

    def __repr__(self) -> str:
        return f"<UidActor {self.uid}>"

    def receive(self, message: Any) -> None:
        kind = type(message)
        if kind is Reap:
            if self.close_if_empty():
                self.world.registry.leave(self.uid, self)
                self.world.left.put(self)
            return
        if kind is Ping:
            message.reply.set_result(list(self.log))
            return
        if kind is Hold:
            message.entered.set()
            assert message.release.wait(WAIT)
        self.log.append(message)
        self.idle_since = self.world.clock()


StandIn = TypeVar("StandIn")


class StandIns(Generic[StandIn]):
    """A registry on a manual clock that spawns ``kind`` stand-ins, made by ``make(uid)``, and
    the stand-ins it spawned."""

    def __init__(
        self, kind: type[StandIn], make: Callable[[str], StandIn], **registry: Any
    ) -> None:
        self.kind = kind
        self.make = make
        self.clock = ManualClock(1000.0)
        self.registry = Registry(clock=self.clock, **registry)
        self.spawned: list[StandIn] = []

    def spawn(self, uid: str) -> StandIn:
        made = self.make(uid)
        self.spawned.append(made)  # list.append: atomic under the interpreter lock
        return made

    def tell(self, uid: str, message: object) -> bool:
        return self.registry.tell(uid, message, cast(Spawn, self.spawn))

    def registered(self, uid: str) -> StandIn:
        """The registered stand-in of ``uid`` (there must be one)."""
        found = self.registry.get(uid)
        assert isinstance(found, self.kind), f"no actor for {uid}"
        return found


class World(StandIns[UidActor]):
    """A pool, a registry on a manual clock, and the :class:`UidActor` each spawn made."""

    def __init__(self, pool: ActorPool, **registry: Any) -> None:
        self.pool = pool
        super().__init__(UidActor, partial(UidActor, self), **registry)
        self.left: queue.Queue[UidActor] = queue.Queue()  # actors that left, in order

    def log_of(self, uid: str) -> list[Any]:
        """What the actor of ``uid`` handled, once everything told before was handled."""
        ping = Ping()
        assert self.registered(uid).tell(ping)
        return ping.reply.result(WAIT)

    def spawns_of(self, uid: str) -> list[UidActor]:
        return [a for a in self.spawned if a.uid == uid]


class Mailbox:
    """A synchronous stand-in for an actor: what it is told stays in ``inbox``; it closes as
    an actor does (a closed one refuses tells)."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.inbox: list[Any] = []
        self.closed = False
        self.idle_since: float | None = None

    def __repr__(self) -> str:
        return f"<Mailbox {self.uid}>"

    def tell(self, message: object) -> bool:
        if self.closed:
            return False
        self.inbox.append(message)
        return True

    def close_if_empty(self) -> bool:
        if self.inbox or self.closed:
            return False
        self.closed = True
        return True

    def abandon(self) -> list[Any]:
        self.closed = True
        left, self.inbox = self.inbox, []
        return left


class Mailboxes(StandIns[Mailbox]):
    """A registry of :class:`Mailbox` actors on a manual clock."""

    def __init__(self, **registry: Any) -> None:
        super().__init__(Mailbox, Mailbox, **registry)

    def leave(self, uid: str, box: Mailbox, *, tombstone: bool = False) -> None:
        """``box`` leaves the registry (which only compares it with the registered one)."""
        self.registry.leave(uid, cast(Actor, box), tombstone=tombstone)

    def idle(self, uid: str, since: float) -> Mailbox:
        """A registered mailbox for ``uid``, idle since ``since``."""
        assert self.tell(uid, "spawn")
        box = self.registered(uid)
        box.inbox.clear()
        box.idle_since = since
        return box


@pytest.fixture
def pool() -> Iterator[ActorPool]:
    p = ActorPool(workers=2, name="reg-pool")
    p.start()
    yield p
    assert p.stop(timeout=WAIT) == []


@pytest.fixture
def world(pool: ActorPool) -> Iterator[World]:
    w = World(pool, idle_timeout=60.0, tombstone_ttl=300.0)
    yield w
    pool.stop(timeout=WAIT)
    w.registry.abandon_all()


@pytest.fixture
def boxes() -> Iterator[Mailboxes]:
    b = Mailboxes(idle_timeout=60.0, tombstone_ttl=300.0)
    yield b
    b.registry.abandon_all()


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch every microsecond rather than every 5 ms, so that the lock-free steps
    (a spawn's ``dict.setdefault``, routing's ``dict.get``) interleave as often as possible."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


# --------------------------------------------------------------------------- routing


def test_tell_spawns_once_and_routes_in_order(world: World) -> None:
    for i in range(10):
        assert world.tell("u1", i)
    assert world.log_of("u1") == list(range(10))
    assert [a.uid for a in world.spawned] == ["u1"]
    assert world.registry.get("u1") is world.spawned[0]
    assert world.registry.live_count() == 1
    assert world.registry.live_actors() == world.spawned
    assert world.registry.dropped == 0


def test_without_spawn_a_uid_with_no_actor_drops_and_counts(boxes: Mailboxes) -> None:
    assert boxes.registry.tell("nobody", "m") is False
    assert boxes.registry.dropped == 1
    assert boxes.registry.live_count() == 0 and boxes.registry.get("nobody") is None
    assert boxes.tell("u", "a")
    assert boxes.registry.tell("u", "b") is True  # registered: no spawn needed
    assert boxes.registered("u").inbox == ["a", "b"]
    assert boxes.registry.dropped == 1


def test_spawn_errors_propagate_and_register_nothing(boxes: Mailboxes) -> None:
    def broken(uid: str) -> Any:
        raise RuntimeError(f"cannot build {uid}")

    with pytest.raises(RuntimeError, match="cannot build u"):
        boxes.registry.tell("u", "m", broken)
    assert boxes.registry.live_count() == 0
    assert boxes.tell("u", "m")  # a later spawn is not hindered


def test_a_message_to_an_actor_that_closed_goes_to_a_fresh_actor(boxes: Mailboxes) -> None:
    """An actor that closed (reaped, retired, crashed) but is still registered refuses the
    tell; the registry forgets it and routes the message to a fresh actor: never lost."""
    assert boxes.tell("u", "first")
    old = boxes.registered("u")
    old.inbox.clear()
    assert old.close_if_empty()  # it left, and has not unregistered yet
    assert boxes.tell("u", "second")
    new = boxes.registered("u")
    assert new is not old and new.inbox == ["second"] and old.inbox == []
    assert boxes.registry.live_count() == 1 and boxes.registry.dropped == 0
    boxes.leave("u", old)  # its late leave does not unregister the fresh one
    assert boxes.registry.get("u") is new


def test_a_message_queued_behind_a_reap_keeps_the_actor(world: World) -> None:
    """The actor leaves only if its inbox is empty when the ``Reap`` is handled, atomically
    with every tell: a message routed after the ``Reap`` but before it was handled keeps it."""
    assert world.tell("u", "first")
    old = world.registered("u")
    hold = Hold(threading.Event())
    assert old.tell(hold)
    assert hold.entered.wait(WAIT)  # the actor's turn is held: what follows is queued
    try:
        assert old.tell(Reap())
        assert world.tell("u", "second")
    finally:
        hold.release.set()
    assert world.log_of("u") == ["first", hold, "second"]
    assert world.registered("u") is old and not old.stopped and world.left.empty()
    assert len(world.spawned) == 1 and world.registry.dropped == 0


def test_a_spawn_in_progress_does_not_hold_up_other_senders(world: World) -> None:
    """A spawn takes no lock: one sender stuck building an actor leaves the others free to
    spawn and route, even for the same UID; the stuck one then loses the race and routes its
    message to the registered actor (its own, never told anything, is dropped)."""
    building, release = threading.Event(), threading.Event()

    def slow(uid: str) -> UidActor:
        building.set()
        assert release.wait(WAIT)
        return world.spawn(uid)

    stuck = threading.Thread(target=lambda: world.registry.tell("slow", "first", slow))
    stuck.start()
    try:
        assert building.wait(WAIT)
        assert world.tell("other", "m")
        assert world.tell("slow", "second")  # spawns: the first build is not registered yet
        assert world.log_of("other") == ["m"]
    finally:
        release.set()
        stuck.join(WAIT)
    registered = world.registered("slow")
    assert world.log_of("slow") == ["second", "first"]
    loser = [a for a in world.spawns_of("slow") if a is not registered]
    assert len(loser) == 1 and loser[0].log == []
    assert world.registry.live_count() == 2


def test_racing_spawns_register_exactly_one_actor_per_uid(
    world: World, busy_switching: None
) -> None:
    """Many threads route to the same fresh UIDs, most in the same order (so that they reach
    each UID together) and some shuffled: spawns race through one ``dict.setdefault`` (atomic
    under the interpreter lock), exactly one actor is registered per UID, every message
    reaches it, and a losing spawn's actor is never told anything."""
    uids = [f"uid-{i}" for i in range(1000)]
    senders = 16
    barrier = threading.Barrier(senders, timeout=WAIT)
    errors: list[BaseException] = []

    def run(seed: int) -> None:
        order = uids[:]
        if seed % 4 == 0:
            random.Random(seed).shuffle(order)
        try:
            barrier.wait()
            for uid in order:
                assert world.tell(uid, seed)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not errors
    assert world.registry.live_count() == len(uids)
    registered = {uid: world.registered(uid) for uid in uids}
    for uid in uids:
        assert sorted(world.log_of(uid)) == list(range(senders))  # every sender's, once
    losers = [a for a in world.spawned if registered[a.uid] is not a]
    world.pool.stop(timeout=WAIT)
    assert all(loser.abandon() == [] for loser in losers)  # never told anything


def test_racing_spawns_of_one_uid(world: World, busy_switching: None) -> None:
    """Round after round, every sender routes to the same new UID at once."""
    senders, rounds = 8, 100
    barrier = threading.Barrier(senders, timeout=WAIT)

    def run(i: int) -> None:
        for r in range(rounds):
            barrier.wait()
            assert world.tell(f"one-{r}", i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert world.registry.live_count() == rounds
    for r in range(rounds):
        assert sorted(world.log_of(f"one-{r}")) == list(range(senders))


def test_drops_without_an_actor_are_counted_from_every_thread(boxes: Mailboxes) -> None:
    per_thread, threads = 2000, 4
    start = threading.Barrier(threads)

    def drop() -> None:
        start.wait(WAIT)
        for i in range(per_thread):
            assert boxes.registry.tell(f"nobody-{i}", "m") is False

    workers = [threading.Thread(target=drop) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(WAIT)
    assert boxes.registry.dropped == per_thread * threads


# --------------------------------------------------------------------------- lock-free routing


class SharedLog:
    """What every actor of one UID handled, and whether two of them ever did at once."""

    def __init__(self, expected: int) -> None:
        self.lock = threading.Condition()
        self.handled: list[tuple[int, Any]] = []  # (id of the actor, message)
        self.seen: set[Any] = set()
        self.active = 0
        self.overlaps = 0
        self.left = 0
        self.expected = expected
        self.complete = threading.Event()

    def record(self, actor: object, message: Any) -> None:
        with self.lock:
            self.active += 1
            if self.active > 1:
                self.overlaps += 1  # two actors of one UID handling messages at once
        with self.lock:
            self.handled.append((id(actor), message))
            self.seen.add(message)
            self.active -= 1
            self.lock.notify_all()
            if len(self.handled) == self.expected:
                self.complete.set()

    def wait_handled(self, message: Any) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: message in self.seen, WAIT)


class SeqActor(Actor):
    """Records what it handles in a log shared by every actor of its UID; leaves when reaped
    with an empty inbox, like an idle object actor."""

    __slots__ = ("clock", "idle_since", "registry", "shared")

    def __init__(
        self, pool: ActorPool, registry: Registry, shared: SharedLog, clock: ManualClock
    ) -> None:
        super().__init__(pool)
        self.registry, self.shared, self.clock = registry, shared, clock
        self.idle_since: float | None = None

    def receive(self, message: Any) -> None:
        if type(message) is Reap:
            if self.close_if_empty():
                self.registry.leave("u", self)
                with self.shared.lock:
                    self.shared.left += 1
                return
            self.idle_since = self.clock()  # kept: a message was queued meanwhile
        else:
            self.idle_since = self.clock()  # first: a sender that saw it handled may reap
            self.shared.record(self, message)


def test_lock_free_routing_races_reaping_without_loss_reorder_or_overlap(
    pool: ActorPool, busy_switching: None
) -> None:
    """Senders route to one UID without a lock; every 25 messages they let the actor drain,
    then one reaps it while the others send again at once: every message is handled exactly
    once, each sender's in order, never by two actors at once, and the actor did leave (and
    was spawned again) along the way."""
    clock = ManualClock(0.0)
    registry = Registry(idle_timeout=0.5, clock=clock)
    senders, per_sender = 3, 1500
    shared = SharedLog(senders * per_sender)

    def spawn(uid: str) -> SeqActor:
        return SeqActor(pool, registry, shared, clock)

    start = threading.Barrier(senders)
    drained, asked = threading.Barrier(senders), threading.Barrier(senders)

    def send(tid: int) -> None:
        start.wait(WAIT)
        for i in range(per_sender):
            assert registry.tell("u", (tid, i), spawn)
            if i % 25 == 24:
                assert shared.wait_handled((tid, i))
                drained.wait(WAIT)
                if tid == 0:
                    clock.advance(1.0)  # every actor is idle for longer than the timeout
                    assert registry.reap_idle() == 1
                asked.wait(WAIT)  # then all send at once, racing the Reap

    threads = [threading.Thread(target=send, args=(t,)) for t in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    try:
        assert shared.complete.wait(WAIT), f"handled {len(shared.handled)} of {shared.expected}"
    finally:
        pool.stop(timeout=WAIT)
        registry.abandon_all()
    messages = [m for _, m in shared.handled]
    assert sorted(messages) == [(s, i) for s in range(senders) for i in range(per_sender)]
    for sender in range(senders):
        assert [i for tid, i in messages if tid == sender] == list(range(per_sender))
    assert shared.overlaps == 0
    assert shared.left >= 1 and len({a for a, _ in shared.handled}) >= 2  # it left, came back
    assert registry.dropped == 0


# --------------------------------------------------------------------------- tombstones


def test_a_tombstoned_uid_drops_and_counts_messages_and_never_spawns(boxes: Mailboxes) -> None:
    assert boxes.tell("gone", "a")
    actor = boxes.registered("gone")
    actor.inbox.clear()
    assert actor.close_if_empty()
    boxes.leave("gone", actor, tombstone=True)  # retired: its object was deleted
    assert boxes.registry.is_tombstoned("gone")
    assert boxes.registry.get("gone") is None
    assert boxes.tell("gone", "b") is False
    assert boxes.tell("gone", "c") is False
    assert boxes.registry.dropped == 2
    assert len(boxes.spawned) == 1  # never resurrected
    boxes.clock.advance(299)
    assert boxes.tell("gone", "d") is False
    boxes.clock.advance(2)  # the tombstone expired
    assert not boxes.registry.is_tombstoned("gone")
    assert boxes.tell("gone", "e")
    assert len(boxes.spawned) == 2 and boxes.registered("gone").inbox == ["e"]
    assert boxes.registry.dropped == 3


def test_a_closed_actor_of_a_tombstoned_uid_is_not_replaced(boxes: Mailboxes) -> None:
    assert boxes.tell("gone", "a")
    actor = boxes.registered("gone")
    boxes.registry.tombstone("gone")  # its object was deleted; it has not left yet
    assert boxes.tell("gone", "b")  # a live actor stays until it leaves
    actor.inbox.clear()
    assert actor.close_if_empty()
    assert boxes.tell("gone", "c") is False  # refused by it, and no fresh actor
    assert boxes.registry.get("gone") is None
    assert len(boxes.spawned) == 1 and boxes.registry.dropped == 1


def test_leave_with_a_stale_actor_keeps_the_current_one_but_tombstones(
    boxes: Mailboxes,
) -> None:
    assert boxes.tell("u", "a")
    stale = boxes.registered("u")
    boxes.leave("u", stale)
    assert boxes.registry.get("u") is None and not boxes.registry.is_tombstoned("u")
    assert boxes.tell("u", "b")
    current = boxes.registered("u")
    assert current is not stale
    boxes.leave("u", stale, tombstone=True)
    assert boxes.registry.get("u") is current
    assert boxes.registry.is_tombstoned("u")


def test_tombstone_without_an_actor_and_the_size_bound() -> None:
    boxes = Mailboxes(tombstone_max=2)
    try:
        boxes.registry.tombstone("a")
        assert boxes.tell("a", 1) is False
        assert boxes.spawned == []
        boxes.clock.advance(1)
        boxes.registry.tombstone("b")
        boxes.clock.advance(1)
        boxes.registry.tombstone("c")  # evicts the oldest
        assert [boxes.registry.is_tombstoned(u) for u in "abc"] == [False, True, True]
    finally:
        boxes.registry.abandon_all()


def test_a_spawn_that_meets_a_tombstone_after_registering_takes_its_actor_back(
    boxes: Mailboxes,
) -> None:
    """The object is deleted while a sender builds its actor: the spawn sees the tombstone
    after registering, closes its actor (nothing reached it) and unregisters it; the message
    is dropped and counted."""
    built: list[Mailbox] = []

    def deleted_while_building(uid: str) -> Any:
        built.append(boxes.spawn(uid))
        boxes.registry.tombstone(uid)  # another thread retires the object meanwhile
        return built[0]

    assert boxes.registry.tell("gone", "hello", deleted_while_building) is False
    assert boxes.registry.get("gone") is None and boxes.registry.live_count() == 0
    assert boxes.registry.dropped == 1
    assert built[0].closed and built[0].inbox == []
    assert boxes.tell("gone", "again") is False  # still dead, and not even built
    assert len(boxes.spawned) == 1


def test_a_spawn_whose_actor_got_a_message_first_keeps_it(boxes: Mailboxes) -> None:
    """Had another sender's message reached the fresh actor before the tombstone was seen,
    the actor cannot close (its inbox is not empty): it stays, and both messages are kept."""

    def reached_while_building(uid: str) -> Any:
        box = boxes.spawn(uid)
        assert box.tell("racer")  # a racing sender found it first
        boxes.registry.tombstone(uid)
        return box

    assert boxes.registry.tell("racy", "mine", reached_while_building)
    assert boxes.registered("racy").inbox == ["racer", "mine"]
    assert boxes.registry.dropped == 0


# --------------------------------------------------------------------------- limits


def test_max_live_raises_and_spawns_nothing() -> None:
    boxes = Mailboxes(max_live=2)
    try:
        assert boxes.tell("a", 1) and boxes.tell("b", 1)
        with pytest.raises(ActorLimitExceeded):
            boxes.tell("c", 1)
        assert len(boxes.spawned) == 2  # refused before building
        assert boxes.tell("a", 2)  # existing actors are still reachable
        assert boxes.registered("a").inbox == [1, 2]
        boxes.leave("a", boxes.registered("a"))
        assert boxes.tell("c", 1)
        assert boxes.registry.live_count() == 2
    finally:
        boxes.registry.abandon_all()


def test_a_spawn_over_the_cap_after_registering_takes_its_actor_back() -> None:
    """Another sender takes the last place while this one builds its actor: exceeding
    ``max_live`` raises ``ActorLimitExceeded`` (as RegistryConfig and docs/configuration.md
    say), the actor built is closed and unregistered, and the cap holds."""
    boxes = Mailboxes(max_live=1)
    try:

        def cap_filled_while_building(uid: str) -> Any:
            box = boxes.spawn(uid)
            assert boxes.tell("first", 1)
            return box

        with pytest.raises(ActorLimitExceeded):
            boxes.registry.tell("late", 1, cap_filled_while_building)
        assert boxes.registry.live_count() == 1 and boxes.registry.get("late") is None
        late = [box for box in boxes.spawned if box.uid == "late"]
        assert len(late) == 1 and late[0].closed and late[0].inbox == []
        assert boxes.registered("first").inbox == [1]
    finally:
        boxes.registry.abandon_all()


# --------------------------------------------------------------------------- reaping


def test_reap_idle_asks_only_actors_idle_for_the_timeout(boxes: Mailboxes) -> None:
    t0 = boxes.clock.now
    old = boxes.idle("old", t0)
    young = boxes.idle("young", t0 + 30)
    busy = boxes.idle("busy", t0)
    busy.idle_since = None  # something pending or in flight
    boxes.clock.now = t0 + 59
    assert boxes.registry.reap_idle() == 0
    boxes.clock.now = t0 + 61
    assert boxes.registry.reap_idle() == 1
    assert old.inbox == [Reap()] and young.inbox == [] and busy.inbox == []
    assert old.idle_since is None  # asked: not again before it is idle anew
    boxes.clock.now = t0 + 91
    assert boxes.registry.reap_idle() == 1  # "young": idle for 61 s
    assert young.inbox == [Reap()] and old.inbox == [Reap()] and busy.inbox == []
    assert boxes.registry.live_count() == 3  # asking is all the registry does


def test_reap_passes_before_the_earliest_due_time_are_skipped(boxes: Mailboxes) -> None:
    """A pass notes when the least recently idle actor it left alone can be due at the
    earliest; the passes before then return 0 at once, and every actor is still asked on
    time."""
    t0 = boxes.clock.now
    a = boxes.idle("a", t0)
    b = boxes.idle("b", t0 + 40)
    boxes.clock.now = t0 + 61
    assert boxes.registry.reap_idle() == 1  # "a"; "b" is due at t0 + 100
    assert a.inbox == [Reap()]
    late = boxes.idle("late", t0)  # idle as long as "a" was, but after the pass looked
    boxes.clock.now = t0 + 99
    assert boxes.registry.reap_idle() == 0  # skipped: nobody was due before t0 + 100
    assert late.inbox == []
    boxes.clock.now = t0 + 101
    assert boxes.registry.reap_idle() == 2
    assert b.inbox == [Reap()] and late.inbox == [Reap()]
    c = boxes.idle("c", t0 + 101)  # after the last pass: its own 60 s count
    boxes.clock.now = t0 + 160
    assert boxes.registry.reap_idle() == 0
    boxes.clock.now = t0 + 162
    assert boxes.registry.reap_idle() == 1
    assert c.inbox == [Reap()]


def test_reap_idle_does_not_count_closed_actors_and_can_be_disabled(boxes: Mailboxes) -> None:
    gone = boxes.idle("gone", boxes.clock.now)
    assert gone.close_if_empty()  # left, not unregistered yet
    boxes.clock.advance(61)
    assert boxes.registry.reap_idle() == 0
    never = Mailboxes(idle_timeout=None)
    try:
        never.idle("u", never.clock.now)
        never.clock.advance(10_000)
        assert never.registry.reap_idle() == 0
        assert never.registry.idle_timeout is None
    finally:
        never.registry.abandon_all()


def test_an_idle_actor_reaped_leaves_and_a_later_message_spawns_afresh(world: World) -> None:
    assert world.tell("a", 1)
    assert world.log_of("a") == [1]
    first = world.registered("a")
    world.clock.advance(61)
    assert world.registry.reap_idle() == 1
    assert world.left.get(timeout=WAIT) is first
    assert first.stopped and world.registry.get("a") is None
    assert world.tell("a", 2)
    assert world.registered("a") is not first
    assert world.log_of("a") == [2]


# --------------------------------------------------------------------------- shutdown, counts


def test_abandon_all_returns_each_actor_with_its_queued_messages() -> None:
    never_started = ActorPool(name="never")  # no turn can run: the inboxes keep everything
    world = World(never_started)
    for uid in ("a", "b"):
        for i in range(3):
            assert world.tell(uid, (uid, i))
    left = dict(world.registry.abandon_all())
    assert left == {
        world.spawns_of("a")[0]: [("a", 0), ("a", 1), ("a", 2)],
        world.spawns_of("b")[0]: [("b", 0), ("b", 1), ("b", 2)],
    }
    assert world.registry.live_count() == 0
    assert all(actor.stopped for actor in left)
    assert world.registry.abandon_all() == []
    never_started.stop()


def test_live_pooled_actors_counts_registered_actors_across_registries() -> None:
    base = live_pooled_actors()
    one, two = Mailboxes(), Mailboxes()
    try:
        for uid in ("a", "b", "c"):
            assert one.tell(uid, 1)
        for uid in ("a", "b"):
            assert two.tell(uid, 1)
        assert live_pooled_actors() == base + 5
        two.leave("a", two.registered("a"))
        assert live_pooled_actors() == base + 4
        assert len(one.registry.abandon_all()) == 3
        assert live_pooled_actors() == base + 1
    finally:
        one.registry.abandon_all()
        two.registry.abandon_all()
    assert live_pooled_actors() == base


@pytest.mark.parametrize(
    "kwargs",
    [
        {"idle_timeout": 0},
        {"idle_timeout": -1.0},
        {"idle_timeout": "60"},
        {"idle_timeout": True},
        {"tombstone_ttl": 0},
        {"tombstone_ttl": None},
        {"tombstone_max": 0},
        {"tombstone_max": 1.5},
        {"tombstone_max": True},
        {"max_live": 0},
        {"max_live": True},
        {"max_live": 2.0},
    ],
)
def test_config_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        Registry(**kwargs)


def test_a_reaped_actors_version_is_handed_over_once_until_it_expires() -> None:
    clock = ManualClock(0.0)
    registry = Registry(tombstone_ttl=300.0, tombstone_max=2, clock=clock)
    assert not registry.remembers
    registry.remember("a", None)  # it saw no object: nothing to hand over
    assert not registry.remembers and registry.recall("a") is None
    registry.remember("a", "7")
    assert registry.remembers
    assert registry.recall("a") == "7"
    assert registry.recall("a") is None  # the next actor took it
    registry.remember("b", "8")
    clock.advance(301.0)
    assert registry.recall("b") is None  # expired
    for uid in ("c", "d", "e"):
        registry.remember(uid, "9")
    assert [registry.recall(uid) for uid in ("c", "d", "e")].count("9") == 2  # at most 2 kept
