"""UID → actor registry: spawn on demand, idle reaping, tombstones for deleted objects.

One :class:`Registry` maps the UIDs of Kubernetes objects to the refs of their actors (normally
:class:`~kdispatch.actors.runtime.PooledActor` refs). It is the only way messages reach an object
actor
(``tell``), which lets it keep three promises:

* **Exactly one actor per live UID, and no message handled by an actor that left.** A spawn
  in ``tell`` registers its pooled actor with one ``dict.setdefault`` (atomic: see
  :mod:`kdispatch.actors._compat`), so many threads racing on one UID register one actor; it
  builds the actor and registers it without the lock (for speed: no sender waits behind a
  spawn); a sender that loses the race stops the actor it built,
  before any message reached it, and routes to the registered one. Routing to a live pooled actor
  (:class:`~kdispatch.actors.runtime.PooledActorRef`) takes no lock: one dict lookup, then the
  ``put``. That is safe because a pooled actor leaves only by closing its inbox while it is
  empty, atomically with every ``put`` (``close_if_empty``): a message either landed before
  (so the actor does not leave, and handles it) or is refused (``tell`` raises
  ``ActorDeadError``) and is routed again under the lock, to a fresh actor. So the messages
  of one sender for one UID arrive in order (except around a crash: what was queued to the
  crashed actor is rerouted after it), and a message never reaches an actor that
  :meth:`~Registry.retire`, :meth:`~Registry.forget` or :meth:`~Registry.release` has removed
  without it being handled or rerouted. Other refs are routed under the lock. (Routing takes
  no lock for speed: the scheduling threads, the informers and the actors' own threads route
  to thousands of objects at once, and a shared lock made them wait for each other.)
* **Idle actors leave without losing messages.** :meth:`~Registry.reap_idle` sends
  :class:`ReapRequest` (carrying the UID's *generation*, bumped before every routed message) to
  actors with no routed message for ``idle_timeout``. The actor decides: if it has nothing in
  flight it calls :meth:`~Registry.release`, which succeeds only if no message was routed since
  that generation and (for a pooled actor) its inbox is empty, which it then closes; the actor
  then stops at the end of that message. A message routed after the request makes ``release``
  fail, so the actor stays and handles it.
* **Deleted objects stay dead.** :meth:`~Registry.retire` and :meth:`~Registry.tombstone` record
  the UID in a TTL cache; messages for it are dropped and counted, and never spawn a new actor,
  until the tombstone expires. (A message that a router had already looked up when the UID was
  retired reaches the retiring actor, which resolves it as for a deleted object. A spawn
  checks the tombstone again after it registered: it takes its actor back if no message
  reached it yet; if a racing sender's message did, the actor stays, marked tombstoned so
  nothing more reaches it, and its calls meet the apiserver's NotFound.)

Rules for callers: ``factory`` must be quick and must not call back into the registry (it runs
under the lock in :meth:`~Registry.get_or_spawn`), and it may run more than once for one UID
when spawns race in :meth:`~Registry.tell`; refs obtained with :meth:`~Registry.get` or
:meth:`~Registry.get_or_spawn` and told directly bypass these guarantees (use
:meth:`~Registry.tell`).
The registry never stops a registered actor except in :meth:`~Registry.stop_all`; ``tell``
stops the actors it built and did not register, and ends one it registered and took back at
once (found tombstoned or over ``max_live``, no message in it) by closing its empty inbox.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pykka
from cachetools import TTLCache
from loguru import logger

from .errors import (
    ActorLimitExceeded,
    InvalidConfigError,
    InvalidInputError,
    KdispatchError,
)
from .runtime import PooledActorRef

__all__ = ["ReapRequest", "Registry", "Tombstoned"]

_TOMBSTONED: Final[object] = object()  # a spawn found the UID tombstoned

Factory = Callable[[], pykka.ActorRef[Any]]


class Tombstoned(KdispatchError):
    """The UID belongs to a deleted object (tombstoned): no actor may be spawned for it."""

    def __init__(self, uid: str) -> None:
        super().__init__(f"uid {uid!r} is tombstoned (its object was deleted)")
        self.uid = uid


@dataclass(frozen=True, slots=True)
class ReapRequest:
    """Sent by :meth:`Registry.reap_idle` to an actor that looks idle.

    The actor answers by calling ``registry.release(uid, self.actor_ref, generation)`` if it has
    nothing pending, and stops itself if that returns True.
    """

    uid: str
    generation: int


class _Entry:
    """A live UID: its ref, the generation (routed messages so far), the last activity (time
    and serial), whether the UID is tombstoned while its actor finishes, and whether the ref
    may be told without the registry lock (a pooled ref, whose closed inbox refuses a tell)."""

    __slots__ = ("fast", "generation", "last", "ref", "serial", "tombstoned")

    def __init__(self, ref: pykka.ActorRef[Any], now: float, serial: int) -> None:
        self.ref = ref
        self.generation = 0
        self.last = now
        self.serial = serial
        self.tombstoned = False
        self.fast = isinstance(ref, PooledActorRef)


def _check_uid(uid: object) -> str:
    if not isinstance(uid, str) or not uid:
        raise InvalidInputError(f"uid must be a non-empty str, got {uid!r}")
    return uid


class Registry:
    """Thread-safe map from UID to actor ref; every method runs on the calling thread. Routing
    to a live pooled actor, dropping a message for a UID with no actor, and spawning a pooled
    actor in ``tell`` take no lock (a spawn takes it only to undo a registration that lost to
    a tombstone or the cap); the rest takes one internal lock for O(1) work (``stop_all``:
    O(live)); ``reap_idle`` is O(live) on a snapshot taken without it."""

    def __init__(
        self,
        *,
        idle_timeout: float | None = 60.0,
        tombstone_ttl: float = 300.0,
        tombstone_max: int = 200_000,
        max_live: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Validate the configuration (raises ``InvalidConfigError``). Any thread."""
        if idle_timeout is not None and not _positive_number(idle_timeout):
            raise InvalidConfigError(f"idle_timeout must be > 0 or None, got {idle_timeout!r}")
        if not _positive_number(tombstone_ttl):
            raise InvalidConfigError(f"tombstone_ttl must be > 0, got {tombstone_ttl!r}")
        if not _positive_int(tombstone_max):
            raise InvalidConfigError(f"tombstone_max must be an int >= 1, got {tombstone_max!r}")
        if max_live is not None and not _positive_int(max_live):
            raise InvalidConfigError(f"max_live must be an int >= 1 or None, got {max_live!r}")
        if not callable(clock):
            raise InvalidConfigError("clock must be callable")
        self._idle_timeout = idle_timeout
        self._max_live = max_live
        self._clock = clock
        self._lock = threading.Lock()
        # Written under the lock, except a spawn's one setdefault; read without it by tell's
        # fast path and reap_idle's snapshot (each atomic: see ._compat).
        self._live: dict[str, _Entry] = {}
        self._activity = itertools.count()  # the activity serials (next(): atomic, ._compat)
        self._tombstones: TTLCache[str, bool] = TTLCache(
            maxsize=tombstone_max, ttl=tombstone_ttl, timer=clock
        )
        self._dropped = 0  # under the lock
        self._reap_due = -math.inf  # reap_idle() finds nobody idle before then
        # dropped on the fast path, per thread: each thread writes only its own key, so its
        # read-modify-write needs no lock
        self._fast_dropped: dict[int, int] = {}

    # ----------------------------------------------------------------- routing

    def tell(self, uid: str, message: object, factory: Factory | None = None) -> bool:
        """Route ``message`` to the live actor of ``uid``, spawning it with ``factory()`` if absent.

        Returns False (and counts the message in :attr:`dropped`) if ``uid`` is tombstoned, or has
        no live actor and no factory was given. A ref found dead (a crashed actor nobody forgot
        yet) is replaced by a fresh one. A spawn builds the actor without the lock; a sender
        that loses the race to register one stops its own, unused, and routes to the winner's.
        Raises ``ActorLimitExceeded`` if spawning would exceed ``max_live`` (checked before the
        build and again after the registration, which takes the actor back unless a racing
        sender's message reached it first; near the cap, racing spawns may all be refused), and
        whatever ``factory`` raises. Any thread.
        """
        _check_uid(uid)
        # Fast path, without the lock: a live pooled actor. Its generation moves before the
        # put, so a release() racing with this fails; a put its closed inbox refuses (the actor
        # left meanwhile) raises, and the locked path below routes the message instead.
        entry = self._live.get(uid)
        if entry is not None and entry.fast and not entry.tombstoned:
            self._routed(entry)
            try:
                entry.ref.tell(message)
            except pykka.ActorDeadError:
                pass
            else:
                return True
        elif entry is None and factory is None:  # no actor to route to, none to spawn: dropped
            me = threading.get_ident()
            self._fast_dropped[me] = self._fast_dropped.get(me, 0) + 1
            return False
        deaths = 0  # refs found dead on the put: a factory handing out dead refs stops at two
        while deaths < 2:
            if factory is not None and uid not in self._live:
                spawned = self._spawn_unlocked(uid, factory)
                if spawned is _TOMBSTONED:
                    with self._lock:
                        self._dropped += 1
                    return False
                if isinstance(spawned, _Entry):
                    self._routed(spawned)  # before the put, as on the fast path
                    try:
                        spawned.ref.tell(message)
                    except pykka.ActorDeadError:
                        with self._lock:
                            self._remove_locked(uid, spawned.ref)
                        deaths += 1
                        continue
                    return True
                # None: another sender registered an actor meanwhile; route to it below
            with self._lock:
                if uid in self._tombstones:
                    self._dropped += 1
                    return False
                entry = self._live.get(uid)
                if entry is not None:
                    try:
                        entry.ref.tell(message)
                    except pykka.ActorDeadError:
                        del self._live[uid]
                        deaths += 1
                        continue
                    self._routed(entry)
                    return True
                if factory is None:
                    self._dropped += 1
                    return False
            # the UID has no actor again (it left meanwhile): spawn one, from the top
        with self._lock:
            self._dropped += 1
        return False

    def get_or_spawn(self, uid: str, factory: Factory) -> pykka.ActorRef[Any]:
        """The live ref of ``uid``, spawning it with ``factory()`` if absent (or found dead).

        Counts as activity: bumps the generation, so a pending :meth:`release` fails. Raises
        :class:`Tombstoned` for a tombstoned UID and ``ActorLimitExceeded`` at ``max_live``.
        Any thread.
        """
        _check_uid(uid)
        with self._lock:
            if uid in self._tombstones:
                raise Tombstoned(uid)
            entry = self._live.get(uid)
            if entry is None or not entry.ref.is_alive():
                if entry is not None:
                    del self._live[uid]
                entry = self._spawn_locked(uid, factory)
            self._routed(entry)
            return entry.ref

    def _routed(self, entry: _Entry) -> None:
        """Count one routed message (or activity) on ``entry``: its generation moves, so a
        pending ``release`` fails, and it is the most recently active. Any thread.

        Without the lock on the fast path and after a spawn, where ``+=`` is not atomic: racing
        routes may bump the generation once between them. No message is lost for it: a pooled
        actor's ``release`` also needs its inbox empty (``close_if_empty``), and other actors
        are routed under the lock except right after their spawn, too young to be reaped."""
        entry.generation += 1
        entry.last = self._clock()
        entry.serial = next(self._activity)

    def get(self, uid: str) -> pykka.ActorRef[Any] | None:
        """The registered ref of ``uid`` or None (no spawn, no activity). Any thread."""
        with self._lock:
            entry = self._live.get(uid)
            return None if entry is None else entry.ref

    def _check_room(self, uid: str, live: int | None = None) -> None:
        """ActorLimitExceeded if ``live`` (default: the live count now, plus the one about to be
        spawned) exceeds ``max_live``. Any thread, with or without the lock."""
        if self._max_live is None:
            return
        count = len(self._live) + 1 if live is None else live
        if count > self._max_live:
            raise ActorLimitExceeded(
                f"cannot spawn an actor for {uid!r}: {count - 1} live (max_live)"
            )

    @staticmethod
    def _built(factory: Factory) -> pykka.ActorRef[Any]:
        """``factory()``, checked. Any thread, with or without the lock."""
        if not callable(factory):
            raise InvalidInputError(f"factory must be callable, got {factory!r}")
        ref = factory()
        if not isinstance(ref, pykka.ActorRef):
            raise InvalidInputError(f"factory must return a pykka.ActorRef, got {ref!r}")
        return ref

    def _spawn_unlocked(self, uid: str, factory: Factory) -> _Entry | object | None:
        """Spawn and register an actor for ``uid`` without the lock; the registered entry,
        ``_TOMBSTONED``, or None when another sender registered one first (this one is then
        stopped, unused). Raises ``ActorLimitExceeded`` and whatever ``factory`` raises.
        Any thread; lock not held.

        For speed, no lock is held while an actor is built and registered (the scheduling
        threads spawn an actor per new pod). A pooled actor is registered with one
        ``dict.setdefault`` (atomic, see :mod:`._compat`: among racing senders exactly one
        registers), and the tombstone and the cap are checked again
        after it. If either fails, the actor is taken back, under the lock, only if its inbox
        can be closed while empty (``close_if_empty``, as in :meth:`release`): a message that
        another sender routed to it meanwhile keeps it, as if it had been registered just
        before the tombstone or the last free place. Other refs register under the lock."""
        if uid in self._tombstones:  # TTLCache.__contains__: one dict lookup and a clock read
            return _TOMBSTONED
        self._check_room(uid)
        ref = self._built(factory)
        if not isinstance(ref, PooledActorRef):
            with self._lock:
                if uid in self._tombstones:
                    won = None
                else:
                    try:
                        self._check_room(uid)
                    except ActorLimitExceeded:
                        ref.stop(block=False)
                        raise
                    won = self._insert_locked(uid, ref)
            if won is not None and won.ref is ref:
                return won
            ref.stop(block=False)  # tombstoned, or another sender's actor is registered
            return _TOMBSTONED if won is None else None
        entry = _Entry(ref, self._clock(), next(self._activity))
        if self._live.setdefault(uid, entry) is not entry:
            ref.stop(block=False)  # another sender's actor is registered: this one is unused
            return None
        tombstoned = uid in self._tombstones
        if not tombstoned and (self._max_live is None or len(self._live) <= self._max_live):
            return entry
        with self._lock:
            taken_back = self._live.get(uid) is entry and ref.actor_inbox.close_if_empty()  # type: ignore[attr-defined]
            if taken_back:
                del self._live[uid]  # its (closed) inbox ends it after its first turn
            elif tombstoned:
                entry.tombstoned = True  # as _tombstone_locked marks a live entry
        if not taken_back:
            return entry  # a message reached it first: it stays, and gets this one too
        if tombstoned:
            return _TOMBSTONED
        self._check_room(uid, len(self._live) + 1)
        return None  # room again meanwhile: try again from the top

    def _spawn_locked(self, uid: str, factory: Factory) -> _Entry:
        self._check_room(uid)
        ref = self._built(factory)
        entry = self._insert_locked(uid, ref)
        if entry.ref is not ref:  # registered without the lock meanwhile: use that one
            ref.stop(block=False)
        return entry

    def _insert_locked(self, uid: str, ref: pykka.ActorRef[Any]) -> _Entry:
        """Register ``ref`` as the live actor of ``uid`` unless one is registered (a spawn
        without the lock may have got there first); the registered entry. Lock held."""
        return self._live.setdefault(uid, _Entry(ref, self._clock(), next(self._activity)))

    # ----------------------------------------------------------------- leaving

    def retire(self, uid: str, ref: pykka.ActorRef[Any]) -> None:
        """The object of ``uid`` was deleted: unregister ``ref`` (if it is still the current one)
        and tombstone ``uid``. The caller (normally the actor itself) stops the actor. Any thread.
        """
        _check_uid(uid)
        with self._lock:
            self._tombstone_locked(uid)
            self._remove_locked(uid, ref)

    def tombstone(self, uid: str) -> None:
        """Tombstone ``uid`` (which may have no actor): later messages for it are dropped. A live
        actor stays registered until it is retired, forgotten or released. Any thread."""
        _check_uid(uid)
        with self._lock:
            self._tombstone_locked(uid)

    def is_tombstoned(self, uid: str) -> bool:
        """True while ``uid`` has an unexpired tombstone. Any thread."""
        with self._lock:
            return uid in self._tombstones

    def forget(self, uid: str, ref: pykka.ActorRef[Any]) -> None:
        """Unregister ``ref`` (if current) without a tombstone, e.g. after the actor crashed:
        the next message for ``uid`` spawns a fresh actor. Any thread."""
        with self._lock:
            self._remove_locked(uid, ref)

    def _tombstone_locked(self, uid: str) -> None:
        """Under the lock: record the tombstone, and mark a live entry so that tell's fast
        path falls back to the locked path (which drops the message)."""
        self._tombstones[uid] = True
        entry = self._live.get(uid)
        if entry is not None:
            entry.tombstoned = True

    def _remove_locked(self, uid: str, ref: pykka.ActorRef[Any]) -> bool:
        entry = self._live.get(uid)
        if entry is None or entry.ref is not ref:
            return False
        del self._live[uid]
        return True

    # ----------------------------------------------------------------- reaping

    def reap_idle(self) -> int:
        """Tell :class:`ReapRequest` to every live actor with no activity (routed message or
        earlier reap request) for ``idle_timeout``, and return how many were asked.

        An asked actor counts as active, so it is asked again only after another
        ``idle_timeout``. A pass also notes when the least recently active actor it left
        alone can be idle at the earliest (activity only moves forward), and the passes
        before then return 0 at once: with a long ``idle_timeout``, the reaper does not walk
        every live actor every ``reap_interval``. A pass's cost is O(live actors), on a
        snapshot of the UIDs taken without
        the lock (``list(live)``: atomic, see :mod:`._compat`, and nothing the garbage
        collector tracks is allocated per actor; routing never waits for it). Refs found dead
        are dropped from the map. Returns 0 when ``idle_timeout`` is None. Any thread
        (typically a timer).
        """
        if self._idle_timeout is None:
            return 0
        asked = 0
        now = self._clock()
        if now < self._reap_due:  # nobody can have been idle that long yet
            return 0
        cutoff = now - self._idle_timeout
        oldest = now  # the least recent activity of the actors left alone
        live = self._live
        for uid in list(live):
            entry = live.get(uid)
            if entry is None:
                continue
            last = entry.last
            if last > cutoff:
                oldest = min(oldest, last)
                continue
            try:
                entry.ref.tell(ReapRequest(uid, entry.generation))
            except pykka.ActorDeadError:
                with self._lock:
                    if self._live.get(uid) is entry:
                        del self._live[uid]
                continue
            entry.last = now
            entry.serial = next(self._activity)
            asked += 1
        self._reap_due = oldest + self._idle_timeout
        return asked

    def release(self, uid: str, ref: pykka.ActorRef[Any], generation: int) -> bool:
        """Unregister ``ref`` iff it is current and no message was routed to ``uid`` since
        ``generation`` (from its :class:`ReapRequest`). True → the caller must stop itself;
        False → it stays registered and has messages coming. Any thread (normally the actor)."""
        with self._lock:
            entry = self._live.get(uid)
            if entry is None or entry.ref is not ref or entry.generation != generation:
                return False
            if entry.fast and not ref.actor_inbox.close_if_empty():  # type: ignore[attr-defined]
                return False  # a message was put meanwhile (tell's fast path): it stays
            del self._live[uid]
            return True

    # ----------------------------------------------------------------- inspection, shutdown

    def live_count(self) -> int:
        """Registered UIDs (live actors). Any thread."""
        return len(self._live)

    def live_refs(self) -> list[pykka.ActorRef[Any]]:
        """A snapshot of the registered refs, least recently active first. Any thread."""
        entries = sorted(list(self._live.values()), key=lambda e: e.serial)
        return [entry.ref for entry in entries]

    @property
    def dropped(self) -> int:
        """Messages dropped because their UID was tombstoned or had no actor and no factory."""
        return self._dropped + sum(list(self._fast_dropped.values()))

    @property
    def idle_timeout(self) -> float | None:
        """Seconds without activity before an actor is asked to leave (None: never)."""
        return self._idle_timeout

    def stop_all(self, timeout: float | None = None) -> None:
        """Stop this registry's actors and clear the map.

        Sends every live actor a stop request (behind its queued messages) without blocking (refs
        of actors already stopped, e.g. by ``ActorPool.abandon``, are only forgotten), then waits
        for them until ``timeout`` seconds have passed in total (None: no limit) and logs the ones
        still running then. Other actors (other registries, other pools) are untouched. Stop
        routing messages first: a ``tell`` racing with this spawns a new actor. Any thread except
        a pooled actor's (it waits on futures).
        """
        with self._lock:
            refs = [entry.ref for entry in self._live.values()]
            self._live.clear()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        futures = [ref.stop(block=False) for ref in refs if ref.is_alive()]
        pending = 0
        for i, future in enumerate(futures):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                future.get(timeout=remaining)
            except pykka.Timeout:
                pending = len(futures) - i
                break
        if pending:
            logger.warning("registry stop_all timed out with up to {} actors stopping", pending)


def _positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
