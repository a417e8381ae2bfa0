"""The shared executor: the only component that talks to the apiserver.

Object actors call it (:meth:`Executor.ready`, :meth:`Executor.job`, :meth:`Executor.refund`);
it answers with ``Grant`` and ``Done`` messages; nobody ever blocks on it. Inside, one lock
guards a scheduler that keeps one FIFO *lane* of object UIDs per relevance (upstream queues
UIDs, not calls; so does this), a heap of objects backing off, and a token bucket; ``workers``
threads send the requests and tell each result (``Done``) to its object actor.

A call travels: ``ready`` (the object has something to send) → a *grant* (a token and a worker
slot reserved for it) → the actor hands over its *current* merged call (``job``), so merges,
no-op elision and cancellations apply until that instant, or ``refund`` if nothing is left → a
worker sends it → ``Done`` to the actor. When nothing waits and a token and a slot are free,
``ready`` grants on the spot and the actor goes on in the same turn (no ``Grant`` message);
otherwise grants are handed out, as messages, by whichever thread frees a slot or brings work,
and a timer thread covers token refills and backoff expiries. With a non-blocking backend (the
in-memory apiserver without latency) ``job`` runs the request on the caller's thread and
returns its ``Done``: the whole call is one actor turn (unless ``ExecutorConfig.inline_sends``
is False, for custom sends that may block). At most ``workers`` grants and jobs exist at once:
parallelism is bounded.

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
waits for one, and Events still flow while the calls' bucket is spent. A best-effort object is
granted a slot the other lanes leave free (those lanes are served first, and stop only when
their bucket is empty or nothing of theirs is sendable), while a second worker stays free for
whatever comes next and fewer than a quarter of the workers (at least one) send best-effort
requests, so a burst of other calls finds most workers free. A best-effort job's follow-up
request (the create after a 404) waits for a token of the Events' bucket, ahead of new
best-effort grants. With ``RateLimitConfig.events_shared`` Events have no bucket of their own:
they are granted only when no other lane and no started job waits and a token of the calls'
bucket is there now, and a follow-up request takes a spare token at once or is dropped.

Events wait in their lane, at most ``ExecutorConfig.events_max_pending`` of them (one per Event
object: repeats merge in its actor); one more is dropped, never one that waits: it gets a grant
that reserves nothing, and its ``job`` answers ``FAILED`` with :class:`~.errors.RequestDropped`
without sending. Drops are counted in ``kdispatch_events_dropped_total{reason}`` (``queue_full``;
``throttled`` for a shared-budget follow-up without a spare token).

Classification: 409 → one GET of the object, then ``CONFLICT`` (the actor re-validates or
rebases); 404 → ``NOT_FOUND``; 429, 5xx, timeouts and connection errors → ``RETRY`` with the
retry policy's delay (Retry-After honoured on 429 and 5xx); anything else → ``FAILED``. A
verifying read (``Send.verify``: the call's retries ran out without an answer) comes back as
read, whatever its UID, for the call to judge. The
optional send gate (leader election) is checked before every request: closed, the request is
not sent and the call resolves with the gate's error.
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

import pykka
from loguru import logger

from .backend import ApiBackend
from .calls import BEST_EFFORT
from .config import ExecutorConfig, RateLimitConfig, RetryConfig
from .errors import (
    ApiConnectionError,
    ApiError,
    BadResponseError,
    ConflictError,
    DispatcherClosed,
    LeadershipLost,
    NotFoundError,
    RequestDropped,
    RequestTimeoutError,
    TooManyRequestsError,
)
from .messages import Grant, Job
from .metrics import Metrics
from .object_state import Done, Result
from .objects import get_path
from .ratelimit import TokenBucket

_Lane = OrderedDict[str, tuple[Any, float]]  # uid -> (actor ref, ready since)
SendGate = Callable[[], bool]
_DROP = -1  # the lane of a grant that drops a best-effort object's call


def _retry_reason(err: ApiError) -> str:
    if isinstance(err, TooManyRequestsError):
        return "429"
    if isinstance(err, RequestTimeoutError):
        return "timeout"
    if isinstance(err, ApiConnectionError):
        return "connection"
    return "5xx"


class _Charged:
    """The backend as one job sees it: every request is counted, takes a token (the grant's
    for the first one) and passes the send gate first. Worker thread (or the actor's thread
    for a non-blocking backend)."""

    __slots__ = ("_backend", "_best_effort", "_call_type", "_executor", "requests")

    def __init__(
        self, executor: Executor, backend: ApiBackend, call_type: str, best_effort: bool = False
    ) -> None:
        self._executor = executor
        self._backend = backend
        self._call_type = call_type
        self._best_effort = best_effort
        self.requests = 0

    def _before(self, verb: str) -> None:
        ex = self._executor
        gate = ex.send_gate
        if gate is not None and not gate():
            raise LeadershipLost("not sent: this replica may not write (leader lease)")
        if self.requests:
            if self._best_effort:
                ex.take_event_followup_token()
            else:
                ex.take_followup_token()
        self.requests += 1
        ex.count_request(self._call_type, verb)

    def get(self, kind: str, namespace: str, name: str) -> Any:
        self._before("get")
        return self._backend.get(kind, namespace, name)

    def patch_status(self, *args: Any, **kwargs: Any) -> Any:
        self._before("patch")
        return self._backend.patch_status(*args, **kwargs)

    def bind(self, *args: Any, **kwargs: Any) -> None:
        self._before("create")
        self._backend.bind(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> None:
        self._before("delete")
        self._backend.delete(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._backend, name)
        if not callable(attr):
            return attr

        def charged(*args: Any, **kwargs: Any) -> Any:
            self._before(name)
            return attr(*args, **kwargs)

        return charged


class Executor:
    """Rate-limited, lane-prioritised, bounded-parallelism request executor.

    Every public method may be called from any thread and never blocks for long (one short
    lock), except :meth:`job` with a non-blocking backend, which sends the request on the
    calling thread. The worker threads and the timer thread are the executor's own.
    """

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
        self._backend = backend
        self._log_calls = log_calls  # also log successful attempts
        # Requests run on the actors' threads only when they can never wait: the backend
        # never blocks, no token is ever waited for, and the calls' own sends do not block
        # either (ExecutorConfig.inline_sends: the user's promise for custom sends).
        self._inline = (
            config.inline_sends
            and getattr(backend, "non_blocking", False) is True
            and rate_limit.qps == float("inf")
        )
        self._retry = retry
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self._rand = rand
        self._name = name
        self.send_gate = send_gate
        self._bucket = TokenBucket(rate_limit.qps, rate_limit.burst, clock)
        # The Events' own bucket (None: they share the calls' bucket, spare tokens only)
        budget = rate_limit.events_budget()
        self._events: TokenBucket | None = (
            None if budget is None else TokenBucket(budget[0], budget[1], clock)
        )
        self._lanes: dict[int, _Lane] = {}
        self._credit: dict[int, float] = {}
        for r in relevances:
            self._add_lane(r)
        self._delayed: list[tuple[float, int, str, Any, int]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._timer_cond = threading.Condition(self._lock)  # the timer waits here
        self._token_cond = threading.Condition(self._lock)  # follow-up requests wait here
        # Jobs for the workers, and one ``None`` per worker once stopping. A ``SimpleQueue``
        # hands a job over without a ``threading.Condition`` (whose wait and notify run about
        # a hundred bytecodes each); it is written under the lock, read without it.
        self._jobs: SimpleQueue[Job | None] = SimpleQueue()
        # Requests being sent, by UID, and objects whose turn came while one of theirs was
        # still being sent (only possible when a crashed actor was replaced): never two
        # requests for one object at once.
        self._sending: set[str] = set()
        self._deferred: dict[str, tuple[Any, int]] = {}
        # Best-effort objects granted only to be dropped (their lane was full): their job
        # answers without a request and without a token or a slot.
        self._dropping: set[str] = set()
        self._overflow: list[tuple[str, Any, float, int]] = []  # drop grants not yet told
        # Best-effort objects granted or being sent (at most a quarter of the workers).
        self._best_effort: set[str] = set()
        self._best_effort_cap = max(1, config.workers // 4)
        self._granted = 0  # grants not yet answered
        self._running = 0  # jobs queued or being sent
        self._followups = 0  # requests of started jobs waiting for a token
        self._event_followups = 0  # the same for best-effort jobs (the Events' bucket)
        self._token_at: float | None = None  # when the bucket will have a token again
        self._event_token_at: float | None = None  # the same for the Events' bucket
        self._threads: list[threading.Thread] = []
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Caller thread. Start the worker threads and the timer thread."""
        workers = 0 if self._inline else self._config.workers
        for i in range(workers):
            t = threading.Thread(target=self._work, name=f"{self._name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._timer, name=f"{self._name}-timer", daemon=True)
        t.start()
        self._threads.append(t)

    def pause_intake(self) -> None:
        """Caller thread. Stop granting; queued jobs are dropped unsent (their actors resolve
        them as closed); requests already being sent finish."""
        with self._lock:
            self._stopping = True
            jobs = self._jobs
            while not jobs.empty():  # queued jobs are dropped unsent
                jobs.get_nowait()
            for _ in range(self._config.workers):
                jobs.put(None)
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

    def ready(self, uid: str, ref: Any, relevance: int, not_before: float) -> bool:
        """Any thread (object actors). The object has a call to send in lane ``relevance``,
        not before ``not_before``. Returns True when it is granted on the spot (nothing else
        waits, a token and a slot are free): the caller then goes on as if it had received a
        ``Grant``. Never blocks on I/O."""
        with self._lock:
            now = self._clock()
            if not_before > now:
                heapq.heappush(self._delayed, (not_before, next(self._seq), uid, ref, relevance))
                self._timer_cond.notify()
                return False
            free = self._config.workers - self._granted - self._running
            if (
                not self._stopping
                and uid not in self._sending
                and free > 0
                and not any(self._lanes.values())
            ):
                if relevance != BEST_EFFORT:
                    if not self._followups and self._bucket.try_take() == 0:
                        self._granted += 1
                        return True
                elif self._spare_slot(free) and self._take_event_token() == 0:
                    self._granted += 1
                    self._best_effort.add(uid)
                    return True
            self._enqueue(uid, ref, relevance)
            grants = self._grant_locked()
        self._send_grants(grants)
        return False

    def job(self, job: Job) -> Done | None:
        """Any thread (object actors): the answer to a grant. With a non-blocking backend the
        request runs here and its ``Done`` is returned; otherwise a worker sends it and the
        ``Done`` arrives as a message (None is returned). Nothing is sent once stopping."""
        uid = job.send.call.ref.uid
        with self._lock:
            if uid in self._dropping:
                self._dropping.discard(uid)
                return self._dropped(job)
            self._granted -= 1
            if self._stopping:
                self._bucket_of(uid).refund()
                self._best_effort.discard(uid)
                return None
            self._running += 1
            self._sending.add(uid)
            if not self._inline:
                self._jobs.put(job)
                return None
        try:
            return self.execute(job)
        finally:
            self._finished(uid)

    def refund(self, uid: str | None = None) -> None:
        """Any thread (object actors): the answer to a grant when there is nothing to send.
        ``uid``: the object's (a grant that only dropped reserved nothing to give back)."""
        with self._lock:
            if uid is not None and uid in self._dropping:
                self._dropping.discard(uid)
                return
            self._bucket_of(uid).refund()
            self._best_effort.discard(uid or "")
            self._granted -= 1
            grants = self._grant_locked()
        self._send_grants(grants)

    def wake(self) -> None:
        """Any thread. Re-check the clock (tests that advance a fake clock call this)."""
        with self._lock:
            grants = self._grant_locked()
            self._timer_cond.notify_all()
            self._token_cond.notify_all()
        self._send_grants(grants)

    def backlog(self) -> int:
        """Any thread. Objects queued or backing off."""
        with self._lock:
            return sum(len(lane) for lane in self._lanes.values()) + len(self._delayed)

    @property
    def tokens_taken(self) -> int:
        """Tokens of the calls' bucket used (taken and not refunded): one per request sent,
        but those of Events with a bucket of their own (:attr:`event_tokens_taken`)."""
        with self._lock:
            return self._bucket.taken

    @property
    def event_tokens_taken(self) -> int:
        """Tokens of the Events' own bucket used (0 when they share the calls' bucket)."""
        with self._lock:
            return 0 if self._events is None else self._events.taken

    @property
    def events_waiting(self) -> int:
        """Best-effort objects (Events) waiting in their lane for a slot and a token."""
        with self._lock:
            lane = self._lanes.get(BEST_EFFORT)
            return len(lane) if lane else 0

    # ------------------------------------------------------------------ requests of a job

    def take_followup_token(self) -> None:
        """Job thread: wait for the token of a job's second (third, ...) request. Such
        requests go before new grants. Raises ``DispatcherClosed`` when stopping."""
        with self._lock:
            self._followups += 1
            try:
                while True:
                    if self._stopping:
                        raise DispatcherClosed("dispatcher stopped during a call")
                    wait = self._bucket.try_take()
                    if wait == 0:
                        return
                    self._token_cond.wait(wait)
            finally:
                self._followups -= 1

    def take_event_followup_token(self) -> None:
        """Job thread: the token of a best-effort job's follow-up request. With the Events'
        own bucket, wait for one (such requests go before new best-effort grants); sharing
        the calls' bucket, only one that is spare now (nothing else waits for one), otherwise
        raise :class:`RequestDropped`. Raises ``DispatcherClosed`` when stopping."""
        with self._lock:
            if self._events is None:
                if self._stopping:
                    raise DispatcherClosed("dispatcher stopped during a call")
                waiting = self._followups or any(
                    lane for r, lane in self._lanes.items() if r != BEST_EFFORT
                )
                if waiting or self._bucket.try_take() > 0:
                    self._metrics.event_dropped("throttled")
                    raise RequestDropped("no spare token for a best-effort follow-up request")
                return
            self._event_followups += 1
            try:
                while True:
                    if self._stopping:
                        raise DispatcherClosed("dispatcher stopped during a call")
                    wait = self._events.try_take()
                    if wait == 0:
                        return
                    self._token_cond.wait(wait)
            finally:
                self._event_followups -= 1

    def _take_event_token(self) -> float:
        """A token for a new best-effort grant: :meth:`TokenBucket.try_take` of the Events'
        bucket, or of the calls' bucket when shared, and only when nothing else waits for
        one. Lock held."""
        if self._events is None:
            if self._followups or any(lane for r, lane in self._lanes.items() if r != BEST_EFFORT):
                return math.inf
            return self._bucket.try_take()
        if self._event_followups:
            return math.inf
        return self._events.try_take()

    def _bucket_of(self, uid: str | None) -> TokenBucket:
        """The bucket the grant of ``uid`` took its token from. Lock held."""
        if self._events is not None and uid is not None and uid in self._best_effort:
            return self._events
        return self._bucket

    def _dropped(self, job: Job) -> Done:
        """A dropping grant's job: answered unsent (lock held; the drop was counted)."""
        call = job.send.call
        err = RequestDropped(
            f"{call.call_type} dropped unsent: {self._config.events_max_pending} Events "
            "already waited for a token"
        )
        return Done(call, Result.FAILED, None, err, 0.0)

    def _spare_slot(self, free: int) -> bool:
        """Whether a best-effort grant leaves a worker free for what comes next and keeps
        best-effort requests under their share of the workers. Lock held."""
        if len(self._best_effort) >= self._best_effort_cap:
            return False
        return free >= 2 or self._config.workers == 1

    def count_request(self, call_type: str, verb: str) -> None:
        """Job thread: one request is about to be sent."""
        self._metrics.request(call_type, verb)

    # ------------------------------------------------------------------ scheduling (under lock)

    def _add_lane(self, relevance: int) -> None:
        lanes = {**self._lanes, relevance: OrderedDict()}
        self._lanes = dict(sorted(lanes.items(), reverse=True))
        self._credit.setdefault(relevance, 0.0)

    def _enqueue(self, uid: str, ref: Any, relevance: int) -> None:
        """Queue ``uid`` in its lane (an object already queued keeps its place). A best-effort
        object that finds its lane full is dropped instead: a grant that reserves nothing,
        told with the next grants (:meth:`_grant_locked`). Lock held."""
        if relevance not in self._lanes:  # a relevance registered after start
            self._add_lane(relevance)
        lane = self._lanes[relevance]
        if uid in lane:
            return
        now = self._clock()
        if relevance == BEST_EFFORT and len(lane) >= self._config.events_max_pending:
            self._dropping.add(uid)
            self._overflow.append((uid, ref, now, _DROP))
            self._metrics.event_dropped("queue_full")
            return
        lane[uid] = (ref, now)

    def _pick_sendable(self, best_effort: bool = False) -> tuple[str, Any, float, int] | None:
        """The next object to grant from the lanes above the best-effort one (or from that
        lane alone), skipping (and deferring) objects with a request still being sent. None
        when no such lane has a sendable object."""
        while True:
            if best_effort:
                nonempty = [BEST_EFFORT] if self._lanes.get(BEST_EFFORT) else []
            else:
                nonempty = [r for r, lane in self._lanes.items() if lane and r != BEST_EFFORT]
            if not nonempty:
                return None
            uid, ref, since, lane = self._pick(nonempty)
            if uid not in self._sending:
                return uid, ref, since, lane
            self._deferred[uid] = (ref, lane)

    def _pick(self, nonempty: list[int]) -> tuple[str, Any, float, int]:
        """Highest lane first; each lower lane with work earns ``lane_min_share`` per grant."""
        chosen = nonempty[0]
        share = self._config.lane_min_share
        if share > 0:
            for r in nonempty[1:]:
                self._credit[r] += share
            for r in reversed(nonempty[1:]):
                if self._credit[r] >= 1.0:
                    self._credit[r] -= 1.0
                    chosen = r
                    break
        uid, (ref, since) = self._lanes[chosen].popitem(last=False)
        return uid, ref, since, chosen

    def _grant_locked(self) -> list[tuple[str, Any, float, int]]:
        """Reserve tokens and slots for as many queued objects as possible: the lanes above
        the best-effort one first, then that lane with the slots they leave (and the drops
        of Events that found their lane full). Lock held."""
        grants: list[tuple[str, Any, float, int]] = []
        if self._stopping:
            return grants
        now = self._clock()
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, _, uid, ref, relevance = heapq.heappop(delayed)
            self._enqueue(uid, ref, relevance)
        slots = self._config.workers - self._granted - self._running
        if self._followups:  # started jobs take the next tokens
            self._token_cond.notify_all()
            slots = 0 if self._events is None else slots
        while slots > 0 and not self._followups:
            if not any(lane for r, lane in self._lanes.items() if r != BEST_EFFORT):
                for r in self._credit:
                    self._credit[r] = 0.0
                break
            wait = self._bucket.try_take()
            if wait > 0:
                self._token_at = now + wait
                self._timer_cond.notify()
                break
            picked = self._pick_sendable()
            if picked is None:
                self._bucket.refund()
                break
            grants.append(picked)
            self._granted += 1
            slots -= 1
        self._grant_best_effort(now, slots, grants)
        if self._overflow:
            grants.extend(self._overflow)
            self._overflow = []
        return grants

    def _grant_best_effort(
        self, now: float, slots: int, grants: list[tuple[str, Any, float, int]]
    ) -> None:
        """Grant best-effort objects the ``slots`` the other lanes left free, keeping one
        free for what comes next and within their share of the workers. Lock held."""
        lane = self._lanes.get(BEST_EFFORT)
        while lane and slots > 0 and self._spare_slot(slots):
            wait = self._take_event_token()
            if wait > 0:
                # inf: something else goes first, and its end grants again; else the timer
                # grants once the bucket has a token
                if math.isfinite(wait):
                    if self._events is None:
                        self._token_at = now + wait
                    else:
                        self._event_token_at = now + wait
                    self._timer_cond.notify()
                return
            picked = self._pick_sendable(best_effort=True)
            if picked is None:
                (self._bucket if self._events is None else self._events).refund()
                return
            grants.append(picked)
            self._granted += 1
            slots -= 1
            self._best_effort.add(picked[0])

    def _send_grants(self, grants: list[tuple[str, Any, float, int]]) -> None:
        """Outside the lock: tell each granted actor (a dead one refunds at once)."""
        if not grants:
            return
        now = self._clock()
        for uid, ref, since, lane in grants:
            if lane != _DROP:
                self._metrics.waited(lane, max(0.0, now - since))
            try:
                ref.tell(Grant(now))
            except pykka.ActorDeadError:
                self.refund(uid)

    def _finished(self, uid: str) -> None:
        """A job ended (any thread): free its slot, release a deferred turn, grant more."""
        with self._lock:
            self._running -= 1
            self._sending.discard(uid)
            self._best_effort.discard(uid)
            deferred = self._deferred.pop(uid, None)
            if deferred is not None:
                self._enqueue(uid, deferred[0], deferred[1])
            grants = self._grant_locked()
        self._send_grants(grants)

    # ------------------------------------------------------------------ threads

    def _timer(self) -> None:
        """Timer thread: grant when tokens refill or backoffs expire."""
        with self._lock:
            while not self._stopping:
                wake_at = [
                    t
                    for t in (
                        self._token_at,
                        self._event_token_at,
                        self._delayed[0][0] if self._delayed else None,
                    )
                    if t is not None
                ]
                timeout = max(0.0, min(wake_at) - self._clock()) if wake_at else None
                self._timer_cond.wait(timeout)
                self._token_at = self._event_token_at = None
                grants = self._grant_locked()
                if grants:
                    self._lock.release()
                    try:
                        self._send_grants(grants)
                    finally:
                        self._lock.acquire()

    def _work(self) -> None:
        """Worker thread: send jobs one at a time."""
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is None or self._stopping:  # a job taken while stopping is dropped unsent
                return
            try:
                done = self.execute(job)
                try:
                    job.ref.tell(done)
                except pykka.ActorDeadError:
                    logger.debug("object actor gone before its result arrived")
            except Exception:  # pragma: no cover - defensive: a worker must never die
                logger.opt(exception=True).error("executor worker error")
            self._finished(job.send.call.ref.uid)

    def execute(self, job: Job) -> Done:
        """Job thread. Send one attempt (or the re-read before it) and classify its result."""
        send = job.send
        call = send.call
        ref = call.ref
        backend = _Charged(self, self._backend, call.call_type, call.best_effort)
        start = time.perf_counter()
        result = Result.SUCCESS
        obj = None
        error: BaseException | None = None
        delay = 0.0
        try:
            if send.read:
                obj = backend.get(ref.kind, ref.namespace, ref.name)
                uid = get_path(obj, "metadata", "uid")
                if not isinstance(uid, str):  # garbage: the read is retried, never a deletion
                    raise BadResponseError(f"re-read of {ref} answered without metadata.uid")
                if uid != ref.uid and not send.verify:  # verify: the call judges (landed)
                    result, obj = Result.NOT_FOUND, None  # same name, another object
            else:
                obj = call.send(backend, send.obj)
        except NotFoundError as exc:
            result, error = Result.NOT_FOUND, exc
        except ConflictError as exc:
            result, error = Result.CONFLICT, exc
            obj = self._reread(backend, call)
            if obj is _GONE:
                result, obj = Result.NOT_FOUND, None
        except (DispatcherClosed, RequestDropped) as exc:
            # the send gate closed, stopping mid-call, or a best-effort follow-up found no
            # spare token
            result, error = Result.FAILED, exc
        except ApiError as exc:
            error = exc
            if exc.retryable or (send.read and isinstance(exc, BadResponseError)):
                result = Result.RETRY
                delay = self._retry.delay(send.attempt or 1, exc.retry_after, self._rand())
                if not send.verify:  # a verifying read is never retried
                    self._metrics.retry(call.call_type, _retry_reason(exc))
            else:
                result = Result.FAILED
        except Exception as exc:  # a bug in a call's send(): fail this call only
            result, error = Result.FAILED, exc
            logger.opt(exception=exc).error("{} send raised", call.call_type)
        if backend.requests == 0:
            with self._lock:  # nothing was sent: the grant's token goes back
                self._bucket_of(ref.uid).refund()
        if not send.read:  # upstream's execution metrics count the call's own attempts
            self._metrics.executed(call.call_type, result.value, time.perf_counter() - start)
        if result is not Result.SUCCESS or self._log_calls:
            logger.debug(
                "{call_type} {uid} attempt {attempt}: {result}",
                uid=ref.uid,
                call_type=call.call_type,
                attempt=send.attempt,
                result=result.value,
                pod=ref.name,
            )
        return Done(call, result, obj, error, delay)

    @staticmethod
    def _reread(backend: _Charged, call: Any) -> Any:
        """The one GET after a 409: the fresh object, ``_GONE`` if the name now holds another
        object (or none), None if the read failed (the actor re-reads later)."""
        ref = call.ref
        try:
            fresh = backend.get(ref.kind, ref.namespace, ref.name)
        except NotFoundError:
            return _GONE
        except (ApiError, DispatcherClosed) as exc:
            logger.debug("re-read after conflict failed: {}", exc)
            return None
        uid = get_path(fresh, "metadata", "uid")
        if not isinstance(uid, str):
            return None  # garbage: retry the conflict without a fresh basis (bounded)
        if uid != ref.uid:
            return _GONE  # same name, another object: ours was deleted and re-created
        return fresh


_GONE: Any = object()
