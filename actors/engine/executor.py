"""The shared executor: the only component that talks to the apiserver.

Object actors call it (:meth:`Executor.ready`, :meth:`Executor.job`, :meth:`Executor.refund`);
it answers with ``Grant`` and ``Done`` messages; nobody ever blocks on it. One lock guards a
scheduler that keeps one FIFO *lane* of object UIDs per relevance (upstream queues UIDs, not
calls; so does this), a heap of objects backing off, and the token buckets; ``workers``
threads send the requests (:class:`~.sender.Sender`) and tell each result (``Done``) to its
object actor.

A call travels: ``ready`` (the object has something to send) → a *grant* (a token and a worker
slot reserved for it) → the actor hands over its *current* merged call (``job``), so merges,
no-op elision and cancellations apply until that instant, or ``refund`` if nothing is left → a
worker sends it → ``Done`` to the actor. When nothing waits and a token and a slot are free,
``ready`` grants on the spot and the actor goes on in the same turn (no ``Grant`` message);
otherwise grants are handed out, as messages, by whichever thread frees a slot or brings work,
and a timer thread covers token refills and backoff expiries. One locked step per request: the
grant (in ``ready``, or in the step that freed a slot), then the worker's end of the request,
which frees its slot and grants the next object in the same step.

*Inline sends*: with a non-blocking backend (the in-memory apiserver without latency) and no
QPS limit, ``job`` sends on the actor's own turn and returns its ``Done``: the whole call is
one turn, there are no worker threads, and the grant is the request's only locked step
(``ExecutorConfig.inline_sends`` turns this off, for custom sends that may block).

Tokens: every request the apiserver sees takes one — the call's own requests, the GET that
follows a 409, the re-read before a retry, the DELETE after a preemption's condition patch —
like client-go's limiter. A grant reserves the first token; a job's further requests wait for
theirs ahead of new grants (a started call finishes first); a job that sent nothing gives its
token back.

Scheduling when tokens or slots are scarce: the highest-relevance non-empty lane goes first
(deletions, then bindings, then status patches), except that each lower lane with work is
guaranteed ``lane_min_share`` of the grants, so nothing starves.

Best effort (Events, lane ``BEST_EFFORT``): the lane below all others for worker slots, with
no guaranteed share. Its tokens come from a bucket of its own (``RateLimitConfig.events_qps``
and ``events_burst``, by default the calls' figures), as kube-scheduler's Events go through a
clientset of their own: an Event never takes a token of the calls' bucket, so a binding never
waits for one. A best-effort object is granted a slot the other lanes leave free, while a
second worker stays free for whatever comes next and fewer than a quarter of the workers (at
least one) send best-effort requests. With ``RateLimitConfig.events_shared`` Events have no
bucket of their own: they are granted only when nothing else waits and a token of the calls'
bucket is there now, and a follow-up request takes a spare token at once or is dropped. Events
wait in their lane, at most ``ExecutorConfig.events_max_pending`` of them; one more is dropped:
it gets a grant that reserves nothing, and its ``job`` answers ``FAILED`` with
:class:`~.errors.RequestDropped` without sending. Drops are counted in
``kdispatch_events_dropped_total{reason}``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from queue import SimpleQueue
from typing import Any

from loguru import logger

from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.calls import BEST_EFFORT
from kdispatch.actors.model.config import ExecutorConfig, RateLimitConfig, RetryConfig
from kdispatch.actors.model.effects import Done, Result, Send
from kdispatch.actors.model.errors import DispatcherClosed, RequestDropped
from kdispatch.actors.runtime.ratelimit import TokenBucket

from .messages import Grant
from .metrics import Metrics
from .sender import Sender

__all__ = ["Executor", "SendGate"]

_Lane = OrderedDict[str, tuple[Any, float]]  # uid -> (actor, ready since)
_GrantTo = tuple[str, Any, float, int]  # uid, actor, ready since, lane (or _DROP)
SendGate = Callable[[], bool]
_DROP = -1  # the lane of a grant that drops a best-effort object's call


class Executor:
    """Rate-limited, lane-prioritised, bounded-parallelism request executor (see the module
    docstring). Every public method may be called from any thread and never blocks for long
    (one short lock), except :meth:`job` with inline sends, which sends the request on the
    calling thread. The worker threads and the timer thread are the executor's own."""

    def __init__(
        self,
        backend: ApiBackend,
        *,
        relevances: Iterable[int],
        rate_limit: RateLimitConfig,
        retry: RetryConfig,
        config: ExecutorConfig,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        name: str = "kdispatch-executor",
        send_gate: SendGate | None = None,
        rand: Callable[[], float] = random.random,
        log_calls: bool = False,
    ) -> None:
        # Requests run on the actors' threads only when they can never wait: the backend never
        # blocks, no token is ever waited for, and the calls' sends do not block either
        # (ExecutorConfig.inline_sends: the user's promise for custom sends).
        self._inline = (
            config.inline_sends
            and getattr(backend, "non_blocking", False) is True
            and rate_limit.qps == math.inf
        )
        self._config = config
        self.metrics = metrics
        self._clock = clock
        self._name = name
        self.send_gate = send_gate
        self.sender = Sender(self, backend, retry, metrics, rand=rand, log_calls=log_calls)
        """Sends one request and classifies how it ended (the worker threads use it)."""
        self._calls = TokenBucket(rate_limit.qps, rate_limit.burst, clock)
        budget = rate_limit.events_budget()  # None: Events share the calls' bucket
        self._events = None if budget is None else TokenBucket(budget[0], budget[1], clock)
        self._lanes: dict[int, _Lane] = {}
        self._credit: dict[int, float] = {}
        for r in relevances:
            self._add_lane(r)
        self._waiting = 0  # objects in the lanes above the best-effort one
        self._delayed: list[tuple[float, int, str, Any, int]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._timer_cond = threading.Condition(self._lock)  # the timer waits here
        self._token_cond = threading.Condition(self._lock)  # follow-up requests wait here
        self._jobs: SimpleQueue[tuple[Any, Send] | None] = SimpleQueue()  # (actor, send)
        # Slots (worker mode): grants and jobs under way, at most ``workers``. Objects granted
        # or being sent, and objects whose turn came meanwhile (a crashed actor replaced):
        # never two requests for one object at once. Inline sends need neither.
        self._slots = math.inf if self._inline else config.workers
        self._busy = 0
        self._sending: set[str] = set()
        self._deferred: dict[str, tuple[Any, int]] = {}
        # Best-effort objects granted only to be dropped (their lane was full), and their
        # grants not yet told; best-effort objects granted or being sent (capped).
        self._dropping: set[str] = set()
        self._overflow: list[_GrantTo] = []
        self._best_effort: set[str] = set()
        self._best_effort_cap = max(1, config.workers // 4)
        self._followups = 0  # requests of started jobs waiting for a token
        self._event_followups = 0  # the same for best-effort jobs (the Events' bucket)
        self._token_at: float | None = None  # when a bucket will have a token again
        self._threads: list[threading.Thread] = []
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Caller thread. Start the worker threads (none for inline sends) and the timer."""
        workers = 0 if self._inline else self._config.workers
        for i in range(workers):
            self._spawn_thread(self._work, f"{self._name}-{i}")
        self._spawn_thread(self._timer, f"{self._name}-timer")

    def _spawn_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def pause_intake(self) -> None:
        """Caller thread. Stop granting; queued jobs are dropped unsent (their actors resolve
        them as closed); requests already being sent finish."""
        with self._lock:
            self._stopping = True
            while not self._jobs.empty():
                self._jobs.get_nowait()
            for _ in range(self._config.workers):
                self._jobs.put(None)
            self._timer_cond.notify_all()
            self._token_cond.notify_all()

    def stop(self, timeout: float | None = None) -> None:
        """Caller thread. :meth:`pause_intake`, then join the threads (a worker sending a
        request finishes it first, bounded by the backend's request timeout)."""
        self.pause_intake()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]
        if self._threads:
            logger.warning("executor threads still running after stop: {}", len(self._threads))

    # ------------------------------------------------------------------ the actor interface

    def ready(self, uid: str, actor: Any, relevance: int, not_before: float) -> bool:
        """Any thread (object actors). The object has a call to send in lane ``relevance``,
        not before ``not_before``. True when it is granted on the spot (nothing else waits, a
        token and a slot are free): the caller then goes on as if told a ``Grant``."""
        with self._lock:
            if not_before and not_before > self._clock():
                heapq.heappush(self._delayed, (not_before, next(self._seq), uid, actor, relevance))
                self._timer_cond.notify()
                return False
            if (
                not self._stopping
                and not self._waiting
                and self._busy < self._slots
                and uid not in self._sending
            ):
                if relevance != BEST_EFFORT:
                    calls = self._calls
                    if calls.unlimited:  # no rate limit (TokenBucket.try_take, spelled out)
                        calls.taken += 1
                        taken = True
                    else:
                        taken = not self._followups and calls.try_take() == 0
                    if taken:
                        if not self._inline:  # a worker slot (inline sends run on the actor)
                            self._busy += 1
                            self._sending.add(uid)
                        return True
                elif (
                    not self._lanes[BEST_EFFORT]
                    and self._spare_slot(self._slots - self._busy)
                    and self._take_event_token() == 0
                ):
                    self._take_slot(uid, True)
                    return True
            self._enqueue(uid, actor, relevance)
            grants = self._grant_locked()
        self._tell_grants(grants)
        return False

    def job(self, actor: Any, send: Send) -> Done | None:
        """Any thread (object actors): ``actor``'s answer to a grant, ``send``. With inline
        sends the request runs here and its ``Done`` is returned; otherwise a worker sends it
        and the ``Done`` arrives as a message (None is returned). Nothing is sent once
        stopping."""
        call = send.call
        if self._dropping:
            uid = call.ref.uid
            if uid in self._dropping:  # set membership and discard: atomic (no lock)
                self._dropping.discard(uid)
                return self._dropped(send)
        if not self._inline:
            self._jobs.put((actor, send))
            return None
        if self._stopping:
            self._refund_token(call.best_effort)
            return None
        done, requests = self.sender.send(send)
        if not requests:  # nothing was sent: the grant's token goes back
            self._refund_token(call.best_effort)
        if call.best_effort:
            self._best_effort.discard(call.ref.uid)  # atomic under the interpreter lock
        return done

    def refund(self, uid: str | None = None) -> None:
        """Any thread (object actors): the answer to a grant when there is nothing to send.
        ``uid``: the object's (a grant that only dropped reserved nothing to give back)."""
        with self._lock:
            if uid is not None and uid in self._dropping:
                self._dropping.discard(uid)
                return
            self._bucket_of(uid).refund()
            self._free_slot(uid or "")
            grants = self._grant_locked()
        self._tell_grants(grants)

    def wake(self) -> None:
        """Any thread. Re-check the clock (tests that advance a fake clock call this)."""
        with self._lock:
            grants = self._grant_locked()
            self._timer_cond.notify_all()
            self._token_cond.notify_all()
        self._tell_grants(grants)

    def backlog(self) -> int:
        """Any thread. Objects queued or backing off."""
        with self._lock:
            return sum(len(lane) for lane in self._lanes.values()) + len(self._delayed)

    @property
    def tokens_taken(self) -> int:
        """Tokens of the calls' bucket used (taken and not refunded): one per request sent,
        but those of Events with a bucket of their own (:attr:`event_tokens_taken`)."""
        with self._lock:
            return self._calls.taken

    @property
    def event_tokens_taken(self) -> int:
        """Tokens of the Events' own bucket used (0 when they share the calls' bucket)."""
        with self._lock:
            return 0 if self._events is None else self._events.taken

    @property
    def events_waiting(self) -> int:
        """Best-effort objects (Events) waiting in their lane for a slot and a token."""
        with self._lock:
            return len(self._lanes[BEST_EFFORT])

    # ------------------------------------------------------------------ a job's requests

    def take_followup_token(self, best_effort: bool = False) -> None:
        """Job thread: wait for the token of a job's second (third, ...) request; such
        requests go before new grants. A best-effort job's comes from the Events' bucket, or,
        when they share the calls' bucket, only if one is spare now (otherwise
        :class:`RequestDropped`). Raises ``DispatcherClosed`` when stopping."""
        with self._lock:
            if best_effort and self._events is None:
                if self._stopping:
                    raise DispatcherClosed("dispatcher stopped during a call")
                if self._followups or self._waiting or self._calls.try_take() > 0:
                    self.metrics.event_dropped("throttled")
                    raise RequestDropped("no spare token for a best-effort follow-up request")
                return
            bucket = self._events if best_effort and self._events is not None else self._calls
            if best_effort:
                self._event_followups += 1
            else:
                self._followups += 1
            try:
                while True:
                    if self._stopping:
                        raise DispatcherClosed("dispatcher stopped during a call")
                    wait = bucket.try_take()
                    if wait == 0:
                        return
                    self._token_cond.wait(wait)
            finally:
                if best_effort:
                    self._event_followups -= 1
                else:
                    self._followups -= 1

    # ------------------------------------------------------------------ scheduling (locked)

    def _take_slot(self, uid: str, best_effort: bool) -> None:
        """A grant: a worker slot and the object's one request under way (inline sends need
        neither: they run on the actor's own turn). Lock held."""
        if best_effort:
            self._best_effort.add(uid)  # which bucket a refund goes back to
        if not self._inline:
            self._busy += 1
            self._sending.add(uid)

    def _free_slot(self, uid: str) -> None:
        """A grant answered without a request, or a request ended. Lock held."""
        self._best_effort.discard(uid)
        if not self._inline:
            self._busy -= 1
            self._sending.discard(uid)
            deferred = self._deferred.pop(uid, None)
            if deferred is not None:
                self._enqueue(uid, deferred[0], deferred[1])

    def _refund_token(self, best_effort: bool) -> None:
        """An inline send's grant that sent nothing: its token goes back. Any thread."""
        with self._lock:  # the set entry goes with the job's end
            if best_effort and self._events is not None:
                self._events.refund()
            else:
                self._calls.refund()

    def _take_event_token(self) -> float:
        """A token for a new best-effort grant: the Events' bucket's, or, shared, the calls'
        bucket's only when nothing else waits for one. Lock held."""
        if self._events is None:
            if self._followups or self._waiting:
                return math.inf
            return self._calls.try_take()
        if self._event_followups:
            return math.inf
        return self._events.try_take()

    def _bucket_of(self, uid: str | None) -> TokenBucket:
        """The bucket the grant of ``uid`` took its token from. Lock held."""
        if self._events is not None and uid is not None and uid in self._best_effort:
            return self._events
        return self._calls

    def _dropped(self, send: Send) -> Done:
        """A dropping grant's job: answered unsent (the drop was counted)."""
        call = send.call
        err = RequestDropped(
            f"{call.call_type} dropped unsent: {self._config.events_max_pending} Events "
            "already waited for a token"
        )
        return Done(call, Result.FAILED, None, err, 0.0)

    def _spare_slot(self, free: float) -> bool:
        """Whether a best-effort grant leaves a worker free for what comes next and keeps
        best-effort requests under their share of the workers (inline sends use no worker).
        Lock held."""
        if self._inline:
            return True
        if len(self._best_effort) >= self._best_effort_cap:
            return False
        return free >= 2 or self._config.workers == 1

    def _add_lane(self, relevance: int) -> None:
        lanes = {**self._lanes, relevance: OrderedDict()}
        lanes.setdefault(BEST_EFFORT, OrderedDict())
        self._lanes = dict(sorted(lanes.items(), reverse=True))
        self._credit.setdefault(relevance, 0.0)

    def _enqueue(self, uid: str, actor: Any, relevance: int) -> None:
        """Queue ``uid`` in its lane; an object already queued keeps its place (with its new
        actor, if the old one crashed). A best-effort object finding its lane full is dropped:
        a grant that reserves nothing, told with the next grants. Lock held."""
        if relevance not in self._lanes:  # a relevance registered after start
            self._add_lane(relevance)
        lane = self._lanes[relevance]
        queued = lane.get(uid)
        if queued is not None:
            if queued[0] is not actor:
                lane[uid] = (actor, queued[1])
            return
        now = self._clock()
        if relevance == BEST_EFFORT:
            if len(lane) >= self._config.events_max_pending:
                self._dropping.add(uid)
                self._overflow.append((uid, actor, now, _DROP))
                self.metrics.event_dropped("queue_full")
                return
        else:
            self._waiting += 1
        lane[uid] = (actor, now)

    def _pick(self, best_effort: bool) -> _GrantTo | None:
        """The next object to grant from the lanes above the best-effort one (or from that
        lane alone): the highest lane first, but each lower lane with work earns
        ``lane_min_share`` per grant. Objects with a request still under way are deferred.
        None when nothing is sendable. Lock held."""
        while True:
            if best_effort:
                nonempty = [BEST_EFFORT] if self._lanes[BEST_EFFORT] else []
            else:
                nonempty = [r for r, lane in self._lanes.items() if lane and r != BEST_EFFORT]
            if not nonempty:
                return None
            chosen = nonempty[0]
            share = self._config.lane_min_share
            if share > 0 and len(nonempty) > 1:
                credit = self._credit
                for r in nonempty[1:]:
                    credit[r] += share
                for r in reversed(nonempty[1:]):
                    if credit[r] >= 1.0:
                        credit[r] -= 1.0
                        chosen = r
                        break
            uid, (actor, since) = self._lanes[chosen].popitem(last=False)
            if chosen != BEST_EFFORT:
                self._waiting -= 1
            if uid not in self._sending:
                return uid, actor, since, chosen
            self._deferred[uid] = (actor, chosen)

    def _grant_locked(self) -> list[_GrantTo]:
        """Reserve tokens and slots for as many queued objects as possible: the lanes above
        the best-effort one first, then that lane with the slots they leave (and the drops of
        Events that found their lane full). Lock held."""
        grants: list[_GrantTo] = []
        delayed = self._delayed
        if self._stopping or not (
            self._waiting
            or delayed
            or self._lanes[BEST_EFFORT]
            or self._overflow
            or self._followups
        ):
            return grants  # nothing to grant (the usual end of a request)
        now = self._clock()
        while delayed and delayed[0][0] <= now:
            _, _, uid, actor, relevance = heapq.heappop(delayed)
            self._enqueue(uid, actor, relevance)
        slots = self._slots - self._busy
        if self._followups:  # started jobs take the next tokens
            self._token_cond.notify_all()
        elif not self._waiting and any(self._credit.values()):
            for r in self._credit:
                self._credit[r] = 0.0
        while slots > 0 and self._waiting and not self._followups:
            wait = self._calls.try_take()
            if wait > 0:
                self._token_at = min(self._token_at or math.inf, now + wait)
                self._timer_cond.notify()
                break
            picked = self._pick(best_effort=False)
            if picked is None:
                self._calls.refund()
                break
            grants.append(picked)
            self._take_slot(picked[0], False)
            slots -= 1
        if self._events is not None or not self._followups:
            self._grant_best_effort(now, slots, grants)
        if self._overflow:
            grants.extend(self._overflow)
            self._overflow = []
        return grants

    def _grant_best_effort(self, now: float, slots: float, grants: list[_GrantTo]) -> None:
        """Grant best-effort objects the ``slots`` the other lanes left free, keeping one free
        for what comes next and within their share of the workers. Lock held."""
        lane = self._lanes[BEST_EFFORT]
        while lane and slots > 0 and self._spare_slot(slots):
            wait = self._take_event_token()
            if wait > 0:
                # inf: something else goes first, and its end grants again; else the timer
                # grants once the bucket has a token
                if math.isfinite(wait):
                    self._token_at = min(self._token_at or math.inf, now + wait)
                    self._timer_cond.notify()
                return
            picked = self._pick(best_effort=True)
            if picked is None:
                (self._calls if self._events is None else self._events).refund()
                return
            grants.append(picked)
            self._take_slot(picked[0], True)
            slots -= 1

    def _tell_grants(self, grants: list[_GrantTo]) -> None:
        """Outside the lock: tell each granted actor (one that has left refunds at once)."""
        if not grants:
            return
        now = self._clock()
        for uid, actor, since, lane in grants:
            if lane != _DROP:
                self.metrics.waited(lane, max(0.0, now - since))
            if not actor.tell(Grant(now)):
                self.refund(uid)

    # ------------------------------------------------------------------ threads

    def _timer(self) -> None:
        """Timer thread: grant when tokens refill or backoffs expire."""
        with self._lock:
            while not self._stopping:
                wake_at = [
                    t
                    for t in (self._token_at, self._delayed[0][0] if self._delayed else None)
                    if t is not None
                ]
                timeout = max(0.0, min(wake_at) - self._clock()) if wake_at else None
                self._timer_cond.wait(timeout)
                self._token_at = None
                grants = self._grant_locked()
                if grants:
                    self._lock.release()
                    try:
                        self._tell_grants(grants)
                    finally:
                        self._lock.acquire()

    def _work(self) -> None:
        """Worker thread: send jobs one at a time; each request's end frees its slot and grants
        the next objects in one locked step."""
        jobs = self._jobs
        sender = self.sender
        while True:
            job = jobs.get()
            if job is None or self._stopping:  # a job taken while stopping is dropped unsent
                return
            actor, send = job
            uid = send.call.ref.uid
            requests = 0
            try:
                done, requests = sender.send(send)
                # the result's turn runs here when the actor is idle: no pool wake-up
                if not actor.run_or_tell(done):
                    logger.debug("object actor gone before its result arrived")
            except Exception:  # pragma: no cover - defensive: a worker must never die
                logger.opt(exception=True).error("executor worker error")
            with self._lock:
                if not requests:  # nothing was sent: the grant's token goes back
                    self._bucket_of(uid).refund()
                self._free_slot(uid)
                grants = self._grant_locked()
            self._tell_grants(grants)
