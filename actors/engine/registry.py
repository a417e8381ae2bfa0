"""UID → actor registry: spawn on demand, idle reaping, tombstones for deleted objects.

:meth:`Registry.tell` is the only way messages reach an object actor, and it keeps three
promises. **One actor per live UID, no message lost to an actor that left**: an actor leaves
only by closing its inbox atomically with every tell, so a message is either handled or refused
and routed again to a fresh actor; racing spawns meet in one ``dict.setdefault``. **Idle actors
leave**: :meth:`Registry.reap_idle` tells ``Reap`` to actors idle for ``idle_timeout``, and one
still idle when it arrives leaves. **Deleted objects stay dead**: a tombstoned UID (a TTL
cache) gets no new actor until the tombstone expires; its messages are dropped and counted.
**What a reaped actor knew outlives it**: what it leaves (:meth:`Registry.remember`) is kept in a
TTL cache, bounded as the tombstones, for the next actor of its UID (:meth:`Registry.recall`).

Every method runs on the calling thread. Routing to a live actor and dropping a message take no
lock; spawning, leaving and tombstoning take one lock for O(1) work.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from cachetools import TTLCache

from kdispatch.actors.model.errors import ActorLimitExceeded, InvalidConfigError
from kdispatch.actors.runtime.pool import Actor

from .messages import Reap

__all__ = ["Registry", "live_pooled_actors"]

Spawn = Callable[[str], Actor]
_REAP = Reap()


class Registry:
    """Thread-safe map from UID to actor (see the module docstring)."""

    def __init__(
        self,
        *,
        idle_timeout: float | None = 60.0,
        tombstone_ttl: float = 300.0,
        tombstone_max: int = 200_000,
        max_live: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Validate the configuration (``InvalidConfigError``). Any thread."""
        if idle_timeout is not None and not _positive(idle_timeout):
            raise InvalidConfigError(f"idle_timeout must be > 0 or None, got {idle_timeout!r}")
        if not _positive(tombstone_ttl):
            raise InvalidConfigError(f"tombstone_ttl must be > 0, got {tombstone_ttl!r}")
        if not _count(tombstone_max):
            raise InvalidConfigError(f"tombstone_max must be an int >= 1, got {tombstone_max!r}")
        if max_live is not None and not _count(max_live):
            raise InvalidConfigError(f"max_live must be an int >= 1 or None, got {max_live!r}")
        self._idle_timeout = idle_timeout
        self._max_live = max_live
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[str, Any] = {}  # written under the lock but for a spawn's setdefault
        self._tombstones: TTLCache[str, bool] = TTLCache(
            maxsize=tombstone_max, ttl=tombstone_ttl, timer=clock
        )
        self._any_tombstone = False  # no lookup in the (Python-level) cache until one exists
        self._legacies: TTLCache[str, Any] = TTLCache(
            maxsize=tombstone_max, ttl=tombstone_ttl, timer=clock
        )
        self.remembers = False
        """Whether :meth:`remember` kept anything yet (no lookup in the cache before)."""
        self._dropped: dict[int, int] = {}  # per thread: each writes only its own key
        self._reap_due = -math.inf  # reap_idle() finds nobody idle before then
        _REGISTRIES.add(self)

    # ----------------------------------------------------------------- routing

    def tell(self, uid: str, message: object, spawn: Spawn | None = None) -> bool:
        """Route ``message`` to the actor of ``uid``, spawned with ``spawn(uid)`` if there is
        none. False (counted as dropped) if ``uid`` is tombstoned, or has no actor and no
        ``spawn``. Raises :class:`ActorLimitExceeded` at ``max_live``. Any thread."""
        live = self._live
        actor = live.get(uid)
        while True:
            if actor is None:
                if spawn is None or (self._any_tombstone and self.is_tombstoned(uid)):
                    self._drop()
                    return False
                actor = self._spawn(uid, spawn)
                if actor is None:  # tombstoned meanwhile
                    self._drop()
                    return False
            if actor.tell(message):
                return True
            # it has left (or is leaving): forget it if nobody did yet, and route again
            with self._lock:
                if live.get(uid) is actor:
                    del live[uid]
            actor = live.get(uid)

    def _spawn(self, uid: str, spawn: Spawn) -> Any:
        """Register a new actor for ``uid`` (or the one another thread registered first); None
        if the UID was tombstoned meanwhile. Any thread, without the lock but for a take-back."""
        live = self._live
        max_live = self._max_live
        if max_live is not None and len(live) >= max_live:
            raise ActorLimitExceeded(
                f"cannot spawn an actor for {uid!r}: {len(live)} live (max_live)"
            )
        fresh = spawn(uid)
        actor = live.setdefault(uid, fresh)
        if actor is not fresh:
            return actor
        over = max_live is not None and len(live) > max_live  # a racing spawn took the place
        if not over and (not self._any_tombstone or uid not in self._tombstones):
            return actor
        with self._lock:  # take it back, unless a racing sender's message reached it first
            taken_back = live.get(uid) is fresh and fresh.close_if_empty()
            if taken_back:
                del live[uid]
        if not taken_back:
            return actor
        if over:
            raise ActorLimitExceeded(
                f"cannot spawn an actor for {uid!r}: {len(live)} live (max_live)"
            )
        return None

    def get(self, uid: str) -> Any:
        """The actor of ``uid``, or None (no spawn). Any thread."""
        return self._live.get(uid)

    # ----------------------------------------------------------------- leaving

    def leave(self, uid: str, actor: Actor, *, tombstone: bool = False) -> None:
        """``actor`` has closed its inbox (retired, reaped or crashed): unregister it if it is
        still the current one; with ``tombstone``, its object is gone. Any thread (the actor)."""
        with self._lock:
            if tombstone:
                self._tombstone_locked(uid)
            if self._live.get(uid) is actor:
                del self._live[uid]

    def tombstone(self, uid: str) -> None:
        """Tombstone ``uid``: no new actor until it expires. A live actor stays until it
        leaves. Any thread."""
        with self._lock:
            self._tombstone_locked(uid)

    def _tombstone_locked(self, uid: str) -> None:
        self._tombstones[uid] = True
        self._any_tombstone = True

    def is_tombstoned(self, uid: str) -> bool:
        """Whether ``uid`` has an unexpired tombstone. Any thread."""
        if not self._any_tombstone:
            return False
        with self._lock:
            return uid in self._tombstones

    def remember(self, uid: str, legacy: Any) -> None:
        """What an actor about to leave idle hands to the next actor of ``uid`` (opaque here;
        None: nothing): kept until that actor spawns, or it expires. Any thread (the
        actor)."""
        if legacy is None:
            return
        with self._lock:
            self._legacies[uid] = legacy
            self.remembers = True

    def recall(self, uid: str) -> Any:
        """What :meth:`remember` kept for ``uid`` (handed over once), or None. Any thread (the
        spawning one)."""
        with self._lock:
            return self._legacies.pop(uid, None)

    def _drop(self) -> None:
        dropped = self._dropped
        me = threading.get_ident()
        dropped[me] = dropped.get(me, 0) + 1

    # ----------------------------------------------------------------- reaping

    def reap_idle(self) -> int:
        """Tell ``Reap`` to every actor idle (``actor.idle_since``) for ``idle_timeout``; how
        many were asked. Passes before the earliest an actor it left alone can be due return 0
        at once. O(live actors) on a snapshot, no lock. Any thread (the housekeeper)."""
        timeout = self._idle_timeout
        if timeout is None:
            return 0
        now = self._clock()
        if now < self._reap_due:
            return 0
        cutoff = now - timeout
        oldest = now
        asked = 0
        for actor in list(self._live.values()):
            since = actor.idle_since
            if since is None:
                continue
            if since > cutoff:
                oldest = min(oldest, since)
                continue
            actor.idle_since = None  # asked: not again before it is idle anew
            if actor.tell(_REAP):
                asked += 1
        self._reap_due = oldest + timeout
        return asked

    # ----------------------------------------------------------------- inspection, shutdown

    def live_count(self) -> int:
        """Registered UIDs (live actors). Any thread."""
        return len(self._live)

    def live_actors(self) -> list[Any]:
        """A snapshot of the registered actors. Any thread."""
        return list(self._live.values())

    @property
    def dropped(self) -> int:
        """Messages dropped: their UID was tombstoned, or had no actor and no spawn."""
        return sum(list(self._dropped.values()))

    @property
    def idle_timeout(self) -> float | None:
        """Seconds idle before an actor is asked to leave (None: never)."""
        return self._idle_timeout

    def abandon_all(self) -> list[tuple[Any, list[Any]]]:
        """Close every registered actor and clear the map; each actor with the messages that
        were still queued to it. Any thread, once no turn can run (the pool is stopped)."""
        with self._lock:
            actors = list(self._live.values())
            self._live.clear()
        return [(actor, actor.abandon()) for actor in actors]


_REGISTRIES: weakref.WeakSet[Registry] = weakref.WeakSet()


def live_pooled_actors() -> int:
    """Object actors registered in any registry of this process, for leak checks. Any thread."""
    return sum(registry.live_count() for registry in list(_REGISTRIES))


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
